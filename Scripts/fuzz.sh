#!/usr/bin/env bash
# Fuzzes the DNS message decoder with libFuzzer for a bounded number of runs or seconds.
#
#   Scripts/fuzz.sh [RUNS] [SECONDS]     default: 1000000 runs, at most 600 s
#
# Built apart from the package (swiftc -sanitize=fuzzer,address over DNSCore's sources and
# Fuzz/DecoderFuzzer.swift). Seeds: Fuzz/corpus (real BIND responses). A crash leaves its input in
# Fuzz/crashers/, which DNSCoreTests replays on every test run.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
runs=${1:-1000000}
seconds=${2:-600}
out=.build-fuzz
mkdir -p "$out" Fuzz/crashers "$out/corpus"
swiftc -sanitize=fuzzer,address -parse-as-library -O -package-name swift_httpdns -module-name DNSCoreFuzz \
    Sources/DNSCore/*.swift Fuzz/DecoderFuzzer.swift -o "$out/decoder-fuzzer" 2>&1 \
    | { grep -v "Cannot export local symbol" || true; }
cp -n Fuzz/corpus/* "$out/corpus/" 2>/dev/null || true
# The working corpus grows in .build-fuzz; the committed seeds stay small.
"$out/decoder-fuzzer" "$out/corpus" -runs="$runs" -max_total_time="$seconds" -max_len=4096 \
    -artifact_prefix=Fuzz/crashers/ -print_final_stats=1 2>&1 | tee "$out/last-run.log" | grep -E "^(#|stat::|==|INFO: Done|SUMMARY)" | tail -20
