/// How the listeners batch what they write.
package enum WriteBatching {
    /// Answers written in one read before they are flushed, without waiting for the read to end
    /// (HTTP/2 streams, DNS over TCP and TLS). One flush for a whole read made client and server take
    /// turns: the client got 64 answers at once, then sent 64 queries at once, each side idle while the
    /// other worked (h2load: 35,000 answers a second with one flush per read, 61,000 with a flush every
    /// 16; BENCHMARKS.md).
    package static let flushEvery = 16
}
