import DNSCore
import HijackDetection
import Testing

/// The HTTPS-record evidence of `resolve compare --https-records`, without a network.
@Suite struct ServiceBindingComparisonTests {
    /// `1 . alpn=h2 ipv4hint=…` as RDATA.
    static func record(hints: [[UInt8]]) throws -> ServiceBinding {
        var rdata: [UInt8] = [0, 1, 0, 0, 1, 0, 3, 2, 0x68, 0x32]
        rdata += [0, 4, 0, UInt8(4 * hints.count)] + hints.flatMap { $0 }
        return try ServiceBinding(rdata: rdata)
    }

    @Test func systemHintsOutsideTheTrustedAddressesAreNamedOnce() throws {
        let trusted = [IPAddress("127.0.0.4")!]
        let forged = try Self.record(hints: [[203, 0, 113, 66], [127, 0, 0, 4]])
        let comparison = ServiceBindingComparison(
            trusted: .failure(DNSError(.nodata, "none")), system: .success([forged, forged]), trustedAddresses: trusted)
        #expect(comparison.foreignHints == [IPAddress("203.0.113.66")!])
        #expect(!comparison.agree)
        #expect(comparison.evidence == "the system's HTTPS record hints 203.0.113.66, which the trusted addresses do not hold")
    }

    @Test func sameRecordsAgreeAndSayNothing() throws {
        let honest = try Self.record(hints: [[198, 18, 0, 10]])
        let comparison = ServiceBindingComparison(
            trusted: .success([honest]), system: .success([honest]), trustedAddresses: [IPAddress("198.18.0.10")!])
        #expect(comparison.agree)
        #expect(comparison.foreignHints.isEmpty)
        #expect(comparison.evidence == nil)
        let bothAbsent = ServiceBindingComparison(
            trusted: .failure(DNSError(.nodata, "")), system: .failure(DNSError(.nodata, "")), trustedAddresses: [])
        #expect(bothAbsent.agree)
        #expect(bothAbsent.evidence == nil)
    }

    @Test func recordsOnlyTheSystemHasAreEvidenceEvenWithoutHints() throws {
        let hintless = try ServiceBinding(rdata: [0, 1, 0, 0, 1, 0, 3, 2, 0x68, 0x32])
        let comparison = ServiceBindingComparison(trusted: .failure(DNSError(.nodata, "")), system: .success([hintless]), trustedAddresses: [])
        #expect(comparison.foreignHints.isEmpty)
        #expect(comparison.evidence == "the system answers HTTPS records the trusted resolvers do not have")
        // A failing system side is not evidence.
        let failing = ServiceBindingComparison(trusted: .success([hintless]), system: .failure(DNSError(.timeout, "")), trustedAddresses: [])
        #expect(failing.evidence == nil)
        #expect(!failing.agree)
    }
}
