// libFuzzer entry point: the per-thread hit table (Sources/DNSCore/ThreadHits.swift), the one place
// in the cache-hit path that reads and writes memory through raw pointers — 8-byte unaligned loads
// of the host at offsets from its length, slots initialized in place in calloc'd memory, and their
// deinitialization by a pthread key destructor when a thread ends. Built with AddressSanitizer
// (Scripts/fuzz.sh threadhits): a load past a host's bytes, a slot past the table, or a slot
// released twice or never initialized is ASan's report.
//
// Input: hosts separated by 0 bytes (any bytes, so any length from 0, and UTF-8 that is not ASCII);
// byte 0 picks the stamp and the type. Each host is kept and read back on this thread, and the same
// run repeats on a new thread that ends (its table discarded) before the input does. Properties: a
// kept resolution is read back for its own host, stamp and type only, never for another host that
// shares its slot, nor after its validUntil.

#if canImport(Glibc)
import Glibc
#endif

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let input = Array(UnsafeBufferPointer(start: data, count: size))
    guard let first = input.first else { return 0 }
    let hosts = input.dropFirst().split(separator: 0, omittingEmptySubsequences: false).prefix(64).map {
        String(decoding: $0, as: UTF8.self)
    }
    let type: AddressQuery = first & 1 == 0 ? .a : .aaaa
    let round = Round(hosts: hosts, type: type, stamp: ThreadHits.newStamp())
    round.run()
    // The same on a thread that ends here: its table is freed by the key's destructor, with every
    // slot it initialized released.
    var thread = pthread_t()
    let box = Unmanaged.passRetained(round)
    let created = pthread_create(
        &thread, nil,
        { argument in
            Unmanaged<Round>.fromOpaque(argument!).takeRetainedValue().run()
            return nil
        }, box.toOpaque())
    guard created == 0 else {
        box.release()
        return 0
    }
    pthread_join(thread, nil)
    return 0
}

final class Round: @unchecked Sendable {
    let hosts: [String]
    let type: AddressQuery
    let stamp: UInt64

    init(hosts: [String], type: AddressQuery, stamp: UInt64) {
        self.hosts = hosts
        self.type = type
        self.stamp = stamp
    }

    func run() {
        let now = ResolverInstant(offset: .seconds(100))
        let validUntil = ResolverInstant(offset: .seconds(101))
        for host in hosts {
            let resolution = Resolution(
                host: host, addresses: [], source: .doh, upstream: nil, elapsed: .zero, expiresAt: validUntil)
            ThreadHits.keep(resolution, stamp: stamp, type: type, validUntil: validUntil)
            precondition(ThreadHits.resolution(stamp: stamp, host: host, type: type, now: now)?.host == host, "kept, not read back")
            precondition(ThreadHits.resolution(stamp: stamp, host: host, type: type, now: validUntil) == nil, "read after validUntil")
            precondition(ThreadHits.resolution(stamp: stamp &+ 1, host: host, type: type, now: now) == nil, "read for another stamp")
            precondition(ThreadHits.resolution(stamp: stamp, host: host, type: type == .a ? .aaaa : .a, now: now) == nil, "another type")
        }
        // Every host reads back its own resolution or nothing (a later host took the slot).
        for host in hosts {
            if let found = ThreadHits.resolution(stamp: stamp, host: host, type: type, now: now) {
                precondition(found.host == host, "a slot's resolution given to another host")
            }
        }
    }
}
