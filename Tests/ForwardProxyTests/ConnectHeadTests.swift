import TestSupport
import Testing

@testable import ForwardProxy

/// The relay's CONNECT scan: what it serves itself, and what it leaves to the full HTTP parser.
@Suite struct ConnectHeadTests {
    private func scan(_ text: String) -> ConnectHead { ConnectHead.scan(Array(text.utf8)) }

    @Test func aCleanConnectHeadIsServedWithItsAuthorizationAndLength() {
        let head = "CONNECT origin.hd.test:443 HTTP/1.1\r\nHost: origin.hd.test:443\r\nProxy-Authorization:  Basic YWxpY2U6eA== \r\n\r\n"
        #expect(
            scan(head + "\u{16}\u{03}\u{01}")
                == .connect(authority: "origin.hd.test:443", proxyAuthorization: "Basic YWxpY2U6eA==", length: head.utf8.count))
        #expect(scan("CONNECT [::1]:8443 HTTP/1.0\r\n\r\n") == .connect(authority: "[::1]:8443", proxyAuthorization: nil, length: 31))
        // `Content-Length: 0` says what a CONNECT has anyway; any other length, or a transfer
        // coding, is body framing (below).
        let zero = "CONNECT a.test:443 HTTP/1.1\r\nContent-Length: 0\r\n\r\n"
        #expect(scan(zero) == .connect(authority: "a.test:443", proxyAuthorization: nil, length: zero.utf8.count))
    }

    @Test func aHeadIsIncompleteUntilItsBlankLine() {
        let head = "CONNECT origin.hd.test:443 HTTP/1.1\r\nHost: x\r\n\r\n"
        for cut in 0..<head.utf8.count {
            #expect(ConnectHead.scan(Array(head.utf8.prefix(cut))) == .incomplete, "\(cut) bytes")
        }
    }

    @Test func anythingElseGoesToTheFullParser() {
        for other in [
            "GET http://origin.hd.test/ HTTP/1.1\r\n\r\n", "connect a:1 HTTP/1.1\r\n\r\n", "GARBAGE\r\n\r\n", "CONNECX",
            "CONNECT a:1 HTTP/2.0\r\n\r\n", "CONNECT a:1 HTTP/1.1 x\r\n\r\n", "CONNECT  a:1 HTTP/1.1\r\n\r\n", "CONNECT a:1\r\n\r\n",
            "CONNECT a:1 HTTP/1.1\r\nX: y\r\n z\r\n\r\n",  // obs-fold
            "CONNECT a:1 HTTP/1.1\r\nNo colon\r\n\r\n", "CONNECT a:1 HTTP/1.1\r\n: empty name\r\n\r\n", "CONNECT a:1 HTTP/1.1\r\nBad Name: v\r\n\r\n",
            "CONNECT a:1 HTTP/1.1\rX: y\r\n\r\n", "CONNECT a:1 HTTP/1.1\r\nX: a\nb\r\n\r\n", "CONNECT a:1 HTTP/1.1\r\nX: \u{7f}\r\n\r\n",
            "CONNECT a:1 HTTP/1.1\r\nContent-Length: 5\r\n\r\n", "CONNECT a:1 HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            "CONNECT a:1 HTTP/1.1\r\nContent-Length: 00\r\n\r\n",
            "CONNECT a:1 HTTP/1.1\r\nProxy-Authorization: a\r\nProxy-Authorization: b\r\n\r\n",
            "CONNECT " + String(repeating: "a", count: 2000) + ":443 HTTP/1.1\r\n\r\n",
        ] {
            #expect(scan(other) == .other, "\(other.prefix(60).debugDescription)")
        }
    }

    @Test func theFuzzSeedsAndCrashersScanWithoutATrap() {
        let inputs = FuzzCorpus.inputs(["corpus-connect", "crashers/connect"])
        #expect(inputs.count >= 4)
        for input in inputs {
            if case let .connect(_, _, length) = ConnectHead.scan(input) {
                #expect(input[(length - 4)..<length].elementsEqual([13, 10, 13, 10]))
            }
        }
    }

    /// A head trickled in byte by byte is scanned from where the last scan stopped: the same
    /// answers as scanning it whole, and each byte looked at a bounded number of times (docs/threat-model.md
    /// F11: 17 KB heads cost 0.25 s of relay CPU each with the rescan).
    @Test func aTrickledHeadIsScannedOnceNotOverAndOver() {
        let filler = (0..<300).map { "X-Filler-\($0): " + String(repeating: "v", count: 40) + "\r\n" }.joined()
        let head = Array(("CONNECT origin.hd.test:443 HTTP/1.1\r\n" + filler + "\r\n").utf8)
        var bytes: [UInt8] = []
        var result = ConnectHead.incomplete
        for byte in head {
            let scanned = bytes.count
            bytes.append(byte)
            result = ConnectHead.scan(bytes, searchFrom: scanned)
            if result != .incomplete { break }
        }
        #expect(result == .connect(authority: "origin.hd.test:443", proxyAuthorization: nil, length: head.count))
        #expect(result == ConnectHead.scan(head))
        // A terminator split across two reads is found in the second.
        let split = Array("CONNECT a.test:443 HTTP/1.1\r\n\r\n".utf8)
        #expect(
            ConnectHead.scan(split, searchFrom: split.count - 2) == .connect(authority: "a.test:443", proxyAuthorization: nil, length: split.count))
        // Time: 16 KB trickled one byte at a time, 16,000 scans, well under what the rescan took.
        let big = Array(("CONNECT a.test:443 HTTP/1.1\r\n" + String(repeating: "X-A: b\r\n", count: 2_000)).utf8)
        let started = ContinuousClock.now
        var partial: [UInt8] = []
        partial.reserveCapacity(big.count)
        for byte in big {
            let scanned = partial.count
            partial.append(byte)
            _ = ConnectHead.scan(partial, searchFrom: scanned)
        }
        let elapsed = ContinuousClock.now - started
        #expect(elapsed < .seconds(1), "\(elapsed) for \(big.count) bytes")
    }
}
