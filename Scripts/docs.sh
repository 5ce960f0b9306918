#!/usr/bin/env bash
# Builds the DocC documentation of every library product (the catalogs in Sources/*/*.docc and the
# doc comments) as one combined archive, and fails on any DocC warning: a broken symbol link, a
# parameter that does not exist, an article no one can reach. Links to another product's symbols
# are written with a leading slash (``/DNSCore/DNSError``), which only a combined build resolves.
# Output: .build/docs/swift-httpdns.doccarchive (open it with `docc preview`, or serve it as a
# static site after `--transform-for-static-hosting`).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
. Scripts/lib.sh

need_build_packages
targets=()
for product in DNSCore DNSSEC SystemResolver HTTPDNS AddressProbing DNSInterceptor HijackDetection HTTPDNSNIO; do
    targets+=(--target "$product")
done
log="$(mktemp)"
# Flags after the plugin's name go to docc itself (--warnings-as-errors is docc's).
if ! swift package --allow-writing-to-directory .build/docs generate-documentation --enable-experimental-combined-documentation \
    "${targets[@]}" --output-path .build/docs/swift-httpdns.doccarchive --warnings-as-errors >"$log" 2>&1; then
    grep -v "^\[[0-9]*/[0-9]*\]" "$log" >&2
    echo "docs.sh: DocC failed or warned (above)" >&2
    exit 1
fi
rm -f "$log"
echo "docs: every library product -> .build/docs/swift-httpdns.doccarchive (no DocC warnings)"
