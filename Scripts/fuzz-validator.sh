#!/usr/bin/env bash
# The DNSSEC validator's structure-aware forgery fuzzer (Fuzz/ValidatorForgery/main.swift): genuine
# signed answers of the test tree, mutated as a forger without keys can, RUNS inputs or SECONDS,
# whichever ends first. Fails (exit 1) on a counterexample: a `secure` that is not the genuine RRset
# or denial of that very name; each is printed as SEED:ITERATION, replayable with --replay.
#
#   Scripts/fuzz-validator.sh [RUNS] [SECONDS] [SEED]     defaults 10000000, 7200, 1
#
# Release build (BoringSSL's signature checks at -O0 would be the whole cost); the test environment
# is started if it is not running (BIND on loopback answers the warm-up; the run itself is offline).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
. Scripts/lib.sh
runs=${1:-10000000}
seconds=${2:-7200}
seed=${3:-1}

need_build_packages
need_testenv_packages
isolate_network "${BASH_SOURCE[0]}" "$@"   # only loopback from here on (Scripts/lib.sh)
swift build -c release --product ValidatorForgeryFuzzer 2>&1 | grep -E "error|warning: " || true
bin="$(swift build -c release --show-bin-path)"
use_testenv
"$bin/ValidatorForgeryFuzzer" --doh "https://doh-a.test:$DOH_PORT/dns-query" --ca "$root/.testenv/ca/ca.pem" \
    --anchors "$root/.testenv/sig.test.anchors" --runs "$runs" --seconds "$seconds" --seed "$seed"
