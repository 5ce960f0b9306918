import Testing

@testable import DNSCore

/// Skipping names and comparing questions on raw bytes: every read inside the buffer, at its edges.
@Suite struct WireQuestionTests {
    static func skip(_ bytes: [UInt8], from start: Int = 0) -> Int? {
        bytes.withUnsafeBytes { WireQuestion.skipName($0, from: start) }
    }

    @Test func namesEndAfterTheirRootOrTheirPointer() {
        #expect(Self.skip([0]) == 1)
        #expect(Self.skip([1, 0x61, 0]) == 3)
        #expect(Self.skip([1, 0x61, 0xc0, 0x0c]) == 4, "a pointer ends the name, wherever it points")
        #expect(Self.skip([9, 9, 3, 0x61, 0x62, 0x63, 0], from: 2) == 7)
    }

    @Test func aNameThatRunsPastTheBytesHasNoEnd() {
        #expect(Self.skip([]) == nil)
        #expect(Self.skip([1, 0x61]) == nil, "the root label is missing")
        #expect(Self.skip([3, 0x61]) == nil, "the label runs past the end")
        #expect(Self.skip([1, 0x61, 0xc0]) == nil, "half a pointer in the last byte")
        #expect(Self.skip([0], from: 1) == nil, "a start at the end")
        #expect(Self.skip([0], from: -1) == nil, "a start before the bytes")
        #expect(Self.skip([0x40, 0]) == nil, "label type 01 (RFC 6891 retired it)")
        #expect(Self.skip([0x80, 0]) == nil, "label type 10")
        // The longest label, exactly filling the buffer, then one byte short.
        let longest = [UInt8(63)] + [UInt8](repeating: 0x61, count: 63) + [0]
        #expect(Self.skip(longest) == longest.count)
        #expect(Self.skip(Array(longest.dropLast())) == nil)
    }

    @Test func theQuestionIsComparedCaseAsideAndTypeAndClassExactly() throws {
        var query = DNSMessage.query(name: try DomainName("www.wire.test"), type: .a, id: 7)
        var answer = query
        answer[2] |= 0x80
        #expect(WireQuestion.echoes(answer, questionOf: query))
        answer[13] = UInt8(ascii: "W")
        #expect(WireQuestion.echoes(answer, questionOf: query), "0x20: the case of letters may differ")
        answer[14] = UInt8(ascii: "x")
        #expect(!WireQuestion.echoes(answer, questionOf: query))
        // A query whose name is a pointer is not one this client writes: not judged.
        query[12] = 0xc0
        query[13] = 0x0c
        #expect(WireQuestion.echoes(answer, questionOf: query))
    }
}
