// libFuzzer entry point: a DoH server's bytes through the client's HTTP/2 session and HPACK decoder
// (Sources/HTTPDNS/DoHSession.swift on Sources/HTTP2Wire). The first byte chooses: even, the bytes are a
// header block for the decoder alone; odd, they are what a server sends after the client's preface
// and three requests (a SETTINGS frame put first half of the time, so frames past it are reached).
// Properties: no crash; events name only streams the client opened, each at most once; an answer is
// never larger than the cap; what stays buffered is less than one frame; and the bytes fed in two
// pieces, split anywhere, give the same events as fed at once.

import HTTP2Wire

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    guard let mode = bytes.first else { return 0 }
    if mode & 1 == 0 {
        var decoder = HPACKDecoder()
        let fields = try? decoder.decode(bytes.dropFirst())
        if let fields { precondition(fields.allSatisfy { $0.name.utf8.count + $0.value.utf8.count < 65_536 }) }
        return 0
    }
    var server = Array(bytes.dropFirst())
    if mode & 2 == 0 { server = [0, 0, 0, 4, 0, 0, 0, 0, 0] + server }
    let cut = server.isEmpty ? 0 : Int(mode >> 2) % (server.count + 1)
    let whole = run([server])
    let split = run([Array(server[..<cut]), Array(server[cut...])])
    precondition(whole == split, "split at \(cut) of \(server.count): \(whole) vs \(split)")
    return 0
}

private let maxResponseBytes = 512

private func run(_ pieces: [[UInt8]]) -> [PipelineEvent] {
    var session = DoHSession(
        target: .init(authority: Array("doh.test".utf8), path: Array("/dns-query".utf8), method: .post), maxResponseBytes: maxResponseBytes)
    var output: [UInt8] = []
    session.start(into: &output)
    var opened: Set<UInt32> = []
    let query: [UInt8] = [0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0x61, 0, 0, 1, 0, 1]
    for _ in 0..<3 { opened.insert(session.send(query, into: &output) { _ in false }) }
    var events: [PipelineEvent] = []
    var input: [UInt8] = []
    for piece in pieces {
        input += piece
        session.receive(&input, into: &output, events: &events)
        precondition(input.count < 9 + DoHSession.maxFrameSize, "\(input.count) bytes left buffered")
        // The worker closes a connection that broke or was refused: nothing after that is read.
        if events.contains(where: ends) { break }
    }
    var seen: Set<UInt32> = []
    for event in events {
        switch event {
        case .answer(let key, let body):
            precondition(body.count <= maxResponseBytes, "an answer of \(body.count) bytes")
            precondition(opened.contains(key) && seen.insert(key).inserted, "stream \(key)")
        case .failed(let key, _), .unprocessed(let key):
            precondition(opened.contains(key) && seen.insert(key).inserted, "stream \(key)")
        case .late(let key):
            preconditionFailure("a late end of stream \(key), which was never given up on")
        case .broken, .refused: break
        }
    }
    return events
}

private func ends(_ event: PipelineEvent) -> Bool {
    switch event {
    case .broken, .refused: return true
    case .answer, .failed, .unprocessed, .late: return false
    }
}
