import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The loopback servers that Scripts/env/testenv.sh starts, and helpers to reach them.
public enum TestEnvironment {
    /// The package root, found from this file's path.
    public static let root: String = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path

    public static let caFile = root + "/.testenv/ca/ca.pem"
    public static let otherCAFile = root + "/.testenv/ca/other-ca.pem"

    /// Scripts/env/ports.env, the one list of the environment's ports (Scripts/lib.sh sources it).
    static let ports: [String: Int] = {
        let text = (try? String(contentsOfFile: root + "/Scripts/env/ports.env", encoding: .utf8)) ?? ""
        var ports: [String: Int] = [:]
        for line in text.split(separator: "\n") where !line.hasPrefix("#") {
            let parts = line.split(separator: "=", maxSplits: 1)
            if parts.count == 2, let port = Int(parts[1]) { ports[String(parts[0])] = port }
        }
        return ports
    }()

    static func port(_ name: String) -> Int {
        guard let port = ports[name] else { fatalError("Scripts/env/ports.env has no \(name)") }
        return port
    }

    public static let dohPort = port("DOH_PORT")
    public static let dohPortB = port("DOH_PORT_B")
    public static let dnsPort = port("DNS_PORT")
    /// doh-a's DNS over TLS (BIND 9.18).
    public static let dotPort = port("DOT_PORT")
    /// doh-b's plain DNS (the same zones, signed with its own keys).
    public static let dnsPortB = port("DNS_PORT_B")
    /// dnsmasq, the "system" DNS: honest for hd.test, lying for hijacked.hd.test.
    public static let systemDNSPort = port("SYSTEM_DNS_PORT")

    public static let dohA = "https://doh-a.test:\(dohPort)/dns-query"
    /// unbound, validating and recursive over doh-a's zones (follows CNAMEs across zones): DoH and plain DNS.
    public static let validatorDoH = "https://doh-v.test:\(port("VALIDATOR_DOH_PORT"))/dns-query"
    public static let validatorDNSPort = port("VALIDATOR_DNS_PORT")
    /// unbound's DNS over TLS (doh-v.test).
    public static let validatorDotPort = port("VALIDATOR_DOT_PORT")
    /// The trust anchor of the signed tree under sig.test (its DS, written by testenv at start).
    public static let sigTreeAnchors = root + "/.testenv/sig.test.anchors"
    public static let dohB = "https://doh-b.test:\(dohPortB)/dns-query"
    public static let jsonAPI = "https://json.test:\(dohPort)/resolve"
    /// nginx's broken-resolver endpoints: `hostile(path)` with bootstrap 127.0.0.3.
    public static func hostile(_ path: String) -> String { "https://hostile.test:\(dohPort)/\(path)" }
    public static let hostileAddress = "127.0.0.3"
    public static let untrusted = "https://doh-untrusted.test:\(dohPort)/dns-query"

    /// nginx HTTPS origins (interceptor tests): origin/origin2.hd.test on 127.0.0.4, mismatch.hd.test
    /// on 127.0.0.5 (presents origin2's certificate), untrusted.hd.test on 127.0.0.6 (another CA),
    /// dead.hd.test on 127.0.0.7 (nothing listens), failover.hd.test (AAAA ::1 refused, A 127.0.0.4).
    public static let originPort = port("ORIGIN_PORT")
    /// Plain HTTP on the origin's addresses: the genuine site answers with the marker below in a
    /// header, the impostor (127.0.0.8) without it.
    public static let originPlainPort = port("ORIGIN_PLAIN_PORT")
    public static let genuineMarker = "hd-origin-7f3a"
    /// The impostor the lying system DNS sends bank.hd.test to: same name, another CA's certificate.
    public static let impostorAddress = "127.0.0.8"
    /// A second genuine node (cdn.hd.test and *.cmp.hd.test on the system side).
    public static let secondOriginAddress = "127.0.0.10"
    /// The origin over HTTP/1.1 only (chunked responses).
    public static let originH1Port = port("ORIGIN_H1_PORT")
    /// Where nginx keeps request bodies of `/upload-file`.
    public static let bodiesDirectory = root + "/.testenv/nginx/bodies"
    public static func origin(_ path: String, host: String = "origin.hd.test") -> String {
        "https://\(host):\(originPort)\(path)"
    }

    /// The fake vendor HTTPDNS APIs (Tests/Fakes/vendor_httpdns.py): HTTPS on 127.0.0.1 (and the
    /// ServiceLevelDeny IP 127.0.0.21, the two-hours-ahead IP 127.0.0.23), plain HTTP on 127.0.0.1.
    public static let vendorPort = port("VENDOR_PORT")
    public static let vendorPlainPort = port("VENDOR_PLAIN_PORT")
    /// The fake accounts' key files (alibaba.secret, alibaba.aes, tencent.key, tencent.token,
    /// baidu.secret, and wrong.* for the refusals).
    public static let vendorSecrets = root + "/.testenv/vendor"

    /// Fails with a clear message when the environment is not running.
    public static func requireRunning() throws {
        guard FileManager.default.fileExists(atPath: root + "/.testenv/ready") else {
            throw EnvironmentMissing()
        }
    }

    public struct EnvironmentMissing: Error, CustomStringConvertible {
        public var description: String {
            "the integration environment is not running: start it with `bash Scripts/env/testenv.sh start` (Scripts/test.sh does)"
        }
    }
}

/// Binds a socket of `type` to 127.0.0.1 on a free port; returns the descriptor and the port.
func bindLoopback(_ type: Int32) throws -> (descriptor: Int32, port: Int) {
    let fd = socket(AF_INET, type, 0)
    guard fd >= 0 else { throw POSIXError(.EIO) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    let bound = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    guard bound == 0 else {
        close(fd)
        throw POSIXError(.EADDRINUSE)
    }
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    _ = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
    }
    return (fd, Int(UInt16(bigEndian: address.sin_port)))
}

/// A TCP listener on 127.0.0.1 that never accepts: connections complete in the kernel, then hang,
/// which is what a blackholed resolver looks like to a client.
public final class BlackholeListener: @unchecked Sendable {
    // Safety: the descriptor is written once in init and closed once in deinit.
    public let port: Int
    private let descriptor: Int32

    public init() throws {
        let (fd, port) = try bindLoopback(Int32(SOCK_STREAM.rawValue))
        guard listen(fd, 64) == 0 else {
            close(fd)
            throw POSIXError(.EADDRINUSE)
        }
        descriptor = fd
        self.port = port
    }

    deinit { close(descriptor) }
}

/// A loopback port with nothing listening: connecting is refused.
public func unusedLoopbackPort() -> Int {
    guard let (fd, port) = try? bindLoopback(Int32(SOCK_STREAM.rawValue)) else { return 9 }
    close(fd)
    return port
}

/// A UDP socket on 127.0.0.1 that receives and never answers: a DNS server that has gone silent.
public final class SilentUDPListener: @unchecked Sendable {
    // Safety: the descriptor is written once in init and closed once in deinit.
    public let port: Int
    private let descriptor: Int32

    public init() throws {
        (descriptor, port) = try bindLoopback(Int32(SOCK_DGRAM.rawValue))
    }

    /// The next datagram sent to it, read within `milliseconds` (nil if none came): what a client
    /// put on the wire, never answered.
    public func receive(withinMilliseconds milliseconds: Int32) -> [UInt8]? {
        var entry = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        guard poll(&entry, 1, milliseconds) == 1 else { return nil }
        var buffer = [UInt8](repeating: 0, count: 65_536)
        let count = recv(descriptor, &buffer, buffer.count, 0)
        return count > 0 ? Array(buffer[..<count]) : nil
    }

    deinit { close(descriptor) }
}
