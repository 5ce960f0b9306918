#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, starts the loopback integration
# environment, runs every test, and always stops the environment. Exits non-zero on any failure.
#
#   bash Scripts/test.sh                      every stage, in order (what CI runs)
#   bash Scripts/test.sh --filter NAME …      the Swift tests only, with swift test's arguments
#   bash Scripts/test.sh --stage forgery …    the named stages only (after the install, the namespace,
#                                             the environment and the build, which they all need)
#
# Stages, in order: lint build docs external unit adversarial pool package forgery differential failover
# validator-fuzz fuzz.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
. Scripts/lib.sh

need_build_packages
# The real clients the daemon's tests query it with: dig, kdig (DoH over HTTP/2), curl (--doh-url),
# and for the adversarial suite Debian's python3-h2 (hyperframe, hpack) and python3-dnspython.
need_packages bind9-dnsutils knot-dnsutils curl python3-h2 python3-dnspython iproute2
# The proxy's browser test: headless Chromium, with the test CA in an NSS database (certutil).
need_packages chromium libnss3-tools
# systemd-analyze checks the service unit (dist/systemd); nothing here boots systemd.
need_packages systemd
# The pool test: dnsdist 1.7 in front of three daemons under dnsperf load.
need_packages dnsdist dnsperf
# DNS over TLS served to Debian's stubby (a real DoT stub); it is started only by the test, with its
# own config naming our loopback daemon as its one upstream.
need_packages stubby
# The shared cache (cache.shared) against a real Redis.
need_packages redis-server
# The failover test's router: iptables drops and resets between network namespaces (no sch_netem here);
# the lossy-link test adds drops by iptables' statistic match and delay by NFQUEUE (Tests/Failover/lossy.py).
need_packages iptables
need_testenv_packages
# dnspython 2.7's DDR client (Resolver.try_ddr), the peer of the daemon's resolver.arpa answers.
need_python_peers
# The Debian package and its test: built with dpkg-deb, checked by lintian, installed into a Debian 12
# root that debootstrap fetches from the apt mirror now, before the network is cut.
need_packages dpkg-dev lintian binutils debootstrap
arguments=("$@")
stages_all=(lint build docs external unit adversarial pool package forgery differential failover validator-fuzz fuzz)
stages=()
unit_arguments=()
if [ "${1:-}" = --stage ]; then
    shift
    [ $# -gt 0 ] || { echo "test.sh: --stage needs stage names: ${stages_all[*]}" >&2; exit 2; }
    for stage in "$@"; do
        [[ " ${stages_all[*]} " == *" $stage "* ]] || { echo "test.sh: no stage '$stage' (${stages_all[*]})" >&2; exit 2; }
    done
    stages=(build "$@")
elif [ $# -gt 0 ]; then
    stages=(lint build unit)
    unit_arguments=("$@")
else
    stages=("${stages_all[@]}")
fi
wants() { [[ " ${stages[*]} " == *" $1 "* ]]; }

# The package's Debian root is fetched from the apt mirror before the network is cut.
if [ "${HTTPDNS_NETNS:-}" != inside ] && wants package; then bash Scripts/package-root.sh; fi
# Everything from here on runs in a network namespace with only loopback: no packet can leave.
isolate_network "${BASH_SOURCE[0]}" "${arguments[@]}"

stage_lint() {
    # The code's layout is swift-format's (the toolchain's own), with the project's .swift-format.
    swift-format lint --strict --recursive --parallel Sources Tests Benchmarks Fuzz Package.swift
}

stage_build() {
    # Swift 6 mode with complete checking: a warning in our own code fails the run (dependencies' are theirs).
    local build_log
    build_log="$(mktemp)"
    swift build "${SWIFT_DEBUG_FLAGS[@]}" --build-tests 2>&1 | tee "$build_log"
    if grep -E "^$root/(Sources|Tests|Fuzz)/[^:]+:[0-9]+:[0-9]+: warning:" "$build_log"; then
        echo "test.sh: the build warns in our own code (above)" >&2
        exit 1
    fi
    rm -f "$build_log"
}

stage_docs() {
    # The DocC documentation of every library product, DocC's warnings as errors.
    bash Scripts/docs.sh
}

stage_external() {
    # A package that depends on this one by path compiles the library examples of the README and docs/
    # against every documented product: documented-but-unusable API fails here.
    swift build --package-path Tests/ExternalPackage --scratch-path .build-external
}

stage_unit() {
    # One test at a time: run in parallel on 2 cores, the CPU-bound property tests (bit flips, HTTP/2
    # mutations, codec round trips) held the cooperative pool at the start of the run and timed tests
    # (a 400 ms query timeout, a 500 ms probe) measured 5-7 s of starvation instead of their timeouts,
    # in about every second run. Serial: ~100 s instead of ~40 s, and the timings measure the code.
    swift test "${SWIFT_DEBUG_FLAGS[@]}" --skip-build --no-parallel "${unit_arguments[@]}"
}

bin() { swift build "${SWIFT_DEBUG_FLAGS[@]}" --show-bin-path; }

stage_adversarial() {
    # The adversarial suite: hostile clients and failing upstreams against a running daemon.
    /usr/bin/python3 -W ignore Tests/Adversarial/adversarial.py "$(bin)/resolve"
}

stage_pool() {
    # A pool of three daemons behind dnsdist (examples/dnsdist-pool.conf): SIGTERM loses nothing, kill -9 little.
    /usr/bin/python3 -W ignore Tests/Pool/pool.py "$(bin)/resolve"
}

stage_package() {
    # The .deb (a release build with the Swift runtime linked in) installed and run in a root without Swift.
    bash Scripts/package.sh
    bash Tests/Package/package-test.sh
}

stage_forgery() {
    # The forgery matrix: an on-path forger against every answer path, DNSSEC rows checked with delv.
    /usr/bin/python3 -W ignore Tests/Forgery/forgery.py "$(bin)/resolve"
}

stage_differential() {
    # Differential conformance: the stub and DoH against BIND 9.18 over a generated query corpus.
    /usr/bin/python3 -W ignore Tests/Conformance/differential.py "$(bin)/resolve"
}

stage_failover() {
    # Failover on a hostile network: namespaces joined by veth, a router that drops, resets or blocks 853.
    /usr/bin/python3 -W ignore Tests/Failover/failover.py "$(bin)/resolve"
    # A lossy, slow link (10 % loss, 80 ms each way; iptables statistic and an NFQUEUE delayer) to a
    # DoT upstream: every name answered and a median p99 over three rounds no worse than unbound's as a DoT forwarder.
    /usr/bin/python3 -W ignore Tests/Failover/lossy.py "$(bin)/resolve" --rounds 3 --check
}

stage_validator-fuzz() {
    # A short run of the validator's forgery fuzzer (the long ones: Scripts/fuzz-validator.sh).
    "$(bin)/ValidatorForgeryFuzzer" --doh "https://doh-a.test:$DOH_PORT/dns-query" --ca "$root/.testenv/ca/ca.pem" \
        --anchors "$root/.testenv/sig.test.anchors" --runs 20000 --seconds 60 --seed "$(date +%s)"
}

stage_fuzz() {
    # The byte parsers' libFuzzer harnesses (wire decoder, stub datagrams, DoH requests, vendor
    # answers, DNSSEC records, CONNECT heads), built and run briefly so that none can rot unbuilt
    # (the long runs: Scripts/fuzz.sh with no arguments). Crashers found go to Fuzz/crashers/.
    bash Scripts/fuzz.sh 10000 15
}

trap 'bash Scripts/env/testenv.sh stop >/dev/null 2>&1 || true' EXIT
bash Scripts/env/testenv.sh start
for stage in "${stages_all[@]}"; do
    if wants "$stage"; then
        echo "test.sh: stage $stage" >&2
        "stage_$stage"
    fi
done
