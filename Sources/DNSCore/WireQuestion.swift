/// Reading a message's question straight from its bytes, without decoding the message: for the
/// places that only need to skip names or compare a question (the upstream pipeline's check of
/// every answer, the query log's walk of the answer section). Bounds-checked on every byte.
package enum WireQuestion {
    /// The offset just past the name that starts at `start` — its root label, or its compression
    /// pointer — or nil when the name runs past the bytes or holds a label type that is not a
    /// length or a pointer.
    package static func skipName(_ bytes: UnsafeRawBufferPointer, from start: Int) -> Int? {
        skip(bytes, from: start, pointers: true)
    }

    private static func skip(_ bytes: UnsafeRawBufferPointer, from start: Int, pointers: Bool) -> Int? {
        var index = start
        while index >= 0, index < bytes.count {
            let length = Int(bytes[index])
            if length == 0 { return index + 1 }
            if pointers, length & 0xc0 == 0xc0 { return index + 2 <= bytes.count ? index + 2 : nil }
            guard length < 64 else { return nil }
            index += length + 1
        }
        return nil
    }

    /// Whether `answer` echoes the question of `query` (RFC 5452 §9.1: name, case aside, type and
    /// class): an answer to another question is no answer, however it got there. An answer without
    /// a question passes only as an error (RFC 1035 allows a FORMERR or NOTIMP to omit it). A
    /// query that is not one uncompressed question, and bytes that are not a response holding a
    /// whole question, are not judged here: the decoder names what is wrong with them.
    package static func echoes(_ answer: [UInt8], questionOf query: [UInt8]) -> Bool {
        guard query.count > 12, query[4] == 0, query[5] == 1 else { return true }
        // The query's name is uncompressed: nothing precedes it for a pointer to name.
        let nameEnd = query.withUnsafeBytes { skip($0, from: 12, pointers: false) }
        guard let nameEnd, nameEnd + 4 <= query.count else { return true }
        guard answer.count >= 12, answer[2] & 0x80 != 0 else { return true }
        if answer[4] == 0, answer[5] == 0 { return answer[3] & 0x0f != 0 }
        guard answer.count >= nameEnd + 4 else { return true }
        for index in 12..<nameEnd where DomainName.lowercase(answer[index]) != DomainName.lowercase(query[index]) {
            return false
        }
        return answer[nameEnd..<nameEnd + 4] == query[nameEnd..<nameEnd + 4]
    }
}
