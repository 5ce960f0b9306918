// swift-tools-version: 6.1
// A package that depends on swift-httpdns by path, as a user's would, and compiles the library
// examples of the README and docs/ against every library product. Built by Scripts/test.sh, so that
// API the documentation shows but a dependent package cannot use (not a product, not public) fails the tests.
import PackageDescription

let package = Package(
    name: "ExternalUser",
    dependencies: [
        .package(name: "swift-httpdns", path: "../.."),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
    ],
    targets: [
        .executableTarget(
            name: "ReadmeExamples",
            dependencies: [
                .product(name: "HTTPDNS", package: "swift-httpdns"),
                .product(name: "DNSCore", package: "swift-httpdns"),
                .product(name: "DNSSEC", package: "swift-httpdns"),
                .product(name: "DNSInterceptor", package: "swift-httpdns"),
                .product(name: "SystemResolver", package: "swift-httpdns"),
                .product(name: "AddressProbing", package: "swift-httpdns"),
                .product(name: "HijackDetection", package: "swift-httpdns"),
                .product(name: "HTTPDNSNIO", package: "swift-httpdns"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ])
    ]
)
