// Compiled, not run: the examples name hosts under example.com, and tests talk to loopback only.
import HTTPDNS

if CommandLine.arguments.contains("--run-nothing") {
    print(library, vendor, cache, interceptor, hijackDetection, connectThroughHTTPDNS, quickStart, dnssecFromTheLibrary)
}
