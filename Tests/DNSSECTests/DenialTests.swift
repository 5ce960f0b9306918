import DNSCore
import Testing

@testable import DNSSEC

/// Authenticated denial without a server: the RFC's own vectors and hand-made NSEC chains.
@Suite struct DenialTests {
    /// Any labels (a leading `*` included), lower-cased as names are kept.
    func name(_ text: String) throws -> DomainName {
        DomainName(uncheckedWire: text.split(separator: ".").flatMap { [UInt8($0.utf8.count)] + Array($0.lowercased().utf8) } + [0])
    }

    /// RFC 5155 Appendix A: salt aabbccdd, 12 iterations.
    @Test func nsec3HashesMatchRFC5155AppendixA() throws {
        let salt: [UInt8] = [0xaa, 0xbb, 0xcc, 0xdd]
        for (owner, hash) in [
            ("example", "0p9mhaveqvm6t7vbl5lop2u3t2rp3tom"), ("a.example", "35mthgpgcu1qg68fab165klnsnk3dpvl"),
            ("ai.example", "gjeqe526plbf1g8mklp59enfd789njgi"), ("*.w.example", "r53bq7cc2uvmubfu5ocmm6pers9tk9en"),
        ] {
            #expect(NSEC3Record.hash(try name(owner), salt: salt, iterations: 12) == Base32Hex.decode(Array(hash.utf8)), "\(owner)")
        }
        #expect(Base32Hex.decode(Array("0P9MHAVEQVM6T7VBL5LOP2U3T2RP3TOM".utf8)) == Base32Hex.decode(Array("0p9mhaveqvm6t7vbl5lop2u3t2rp3tom".utf8)))
        #expect(Base32Hex.decode(Array("0w".utf8)) == nil, "w is not base32hex")
    }

    /// RFC 4034 §6.1's example, in canonical order.
    @Test func canonicalOrderIsRFC4034s() throws {
        let ordered = try ["example", "a.example", "yljkjljk.a.example", "Z.a.example", "zABC.a.EXAMPLE", "z.example", "*.z.example"].map(name)
        for (lower, higher) in zip(ordered, ordered.dropFirst()) {
            #expect(CanonicalOrder.less(lower, higher) && !CanonicalOrder.less(higher, lower), "\(lower) < \(higher)")
        }
    }

    /// RFC 4034 §4.3: `host.example.com. NSEC A MX RRSIG NSEC TYPE1234`.
    @Test func typeBitmapsDecodeAndBadOnesAreRefused() throws {
        var rdata = [UInt8](try name("host.example.com").wire)
        rdata += [0x00, 0x06, 0x40, 0x01, 0x00, 0x00, 0x00, 0x03, 0x04, 0x1b] + [UInt8](repeating: 0, count: 26) + [0x20]
        let record = try NSECRecord(owner: try name("alfa.example.com"), rdata: rdata)
        #expect(record.types == [1, 15, 46, 47, 1234])
        #expect(throws: DNSSECFailure.self) { try TypeBitmap.decode([0x00, 0x00], from: 0) }
        #expect(throws: DNSSECFailure.self) { try TypeBitmap.decode([0x01, 0x01, 0x80, 0x00, 0x01, 0x80], from: 0) }  // out of order
        #expect(throws: DNSSECFailure.self) { try TypeBitmap.decode([0x00, 0x21] + [UInt8](repeating: 0, count: 33), from: 0) }
    }

    func nsec(_ owner: String, _ next: String, _ types: [UInt16]) throws -> NSECRecord {
        var bitmap = [UInt8](repeating: 0, count: 32)
        for type in types where type < 256 { bitmap[Int(type) / 8] |= 0x80 >> (type % 8) }
        while bitmap.last == 0 { bitmap.removeLast() }
        return try NSECRecord(owner: try name(owner), rdata: try name(next).wire + [0, UInt8(bitmap.count)] + bitmap)
    }

    @Test func nsecProvesNXDOMAINNODATAAndEmptyNonTerminalsAndRefusesTheRest() throws {
        // Zone z.test: apex, b.z.test, *.w.z.test (so w.z.test is an empty non-terminal), x.y.z.test.
        let apex = try nsec("z.test", "b.z.test", [2, 6, 46, 47, 48])
        let b = try nsec("b.z.test", "*.w.z.test", [1, 46, 47])
        let wildcard = try nsec("*.w.z.test", "x.y.z.test", [1, 46, 47])
        let last = try nsec("x.y.z.test", "z.test", [1, 46, 47])
        let all = [apex, b, wildcard, last]
        #expect(try Denial.prove(name("b.z.test"), type: .aaaa, nsec: all, nsec3: []) == .noData(delegation: false))
        #expect(try Denial.prove(name("c.z.test"), type: .a, nsec: [b, apex], nsec3: []) == .nameError, "c sorts after b; *.z.test before b")
        #expect(try Denial.prove(name("y.z.test"), type: .a, nsec: all, nsec3: []) == .noData(delegation: false), "an empty non-terminal")
        #expect(try Denial.prove(name("zz.z.test"), type: .a, nsec: [last, apex], nsec3: []) == .nameError, "the last NSEC wraps to the apex")
        // A proof of A's absence where the bitmap has A: refused.
        #expect(throws: DNSSECFailure.self) { try Denial.prove(name("b.z.test"), type: .a, nsec: all, nsec3: []) }
        // The name covered but not the wildcard that could answer it: unproven.
        #expect(throws: DNSSECFailure.self) { try Denial.prove(name("c.z.test"), type: .a, nsec: [b], nsec3: []) }
        // Under a wildcard: the wildcard's NSEC shows A, so there is no denial of A below w.
        #expect(throws: DNSSECFailure.self) { try Denial.prove(name("q.w.z.test"), type: .a, nsec: [wildcard, b, apex], nsec3: []) }
        // An NSEC at a delegation proves nothing below it.
        let cut = try nsec("d.z.test", "z.test", [2, 47])
        #expect(throws: DNSSECFailure.self) { try Denial.prove(name("e.d.z.test"), type: .a, nsec: [cut, apex], nsec3: []) }
        #expect(try Denial.prove(name("d.z.test"), type: .ds, nsec: [cut], nsec3: []) == .noData(delegation: true))
        // Wildcard expansion: x.w.z.test from *.w.z.test needs x.w.z.test covered (*.w < x.w < x.y).
        #expect(try Denial.proveExpansion(of: name("x.w.z.test"), sourceLabels: 3, nsec: [wildcard], nsec3: []) == false)
        #expect(throws: DNSSECFailure.self) { try Denial.proveExpansion(of: name("x.w.z.test"), sourceLabels: 3, nsec: [apex], nsec3: []) }
    }

    @Test func nsec3IterationsAboveRFC9276sLimitAreTooCostly() throws {
        let hash = NSEC3Record.hash(try name("z.test"), salt: [], iterations: 0)
        let label = Array("00000000000000000000000000000000".utf8)
        func record(iterations: UInt16) throws -> NSEC3Record {
            try NSEC3Record(
                owner: DomainName(uncheckedWire: [32] + label + (try name("z.test")).wire),
                rdata: [1, 0, UInt8(iterations >> 8), UInt8(iterations & 0xff), 0, 20] + hash + [0, 1, 0x40])
        }
        #expect(throws: DNSSECFailure.tooCostly("NSEC3 with 500 iterations (at most 150, RFC 9276)")) {
            try Denial.prove(name("a.z.test"), type: .a, nsec: [], nsec3: [try record(iterations: 500)])
        }
        #expect(throws: DNSSECFailure.self) { try NSEC3Record(owner: name("notbase32w.z.test"), rdata: [1, 0, 0, 0, 0, 20] + hash) }
    }
}
