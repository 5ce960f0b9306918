#!/usr/bin/env bash
# Fuzzes with libFuzzer (+ AddressSanitizer) for a bounded number of runs or seconds per target.
#
#   Scripts/fuzz.sh [RUNS] [SECONDS] [TARGET...]   default: 1000000 runs, at most 600 s, every target
#
# Targets, each built apart from the package with swiftc -sanitize=fuzzer,address over DNSCore's
# wire codec (and, for the daemon's, its DNS and DoH request files) plus one harness in Fuzz/:
#   decoder   the DNS message decoder (Fuzz/DecoderFuzzer.swift; seeds: real BIND responses)
#   stub      one datagram to the daemon's DNS stub (Fuzz/StubDatagramFuzzer.swift)
#   doh       a DoH GET target or POST media type and body (Fuzz/DoHRequestFuzzer.swift)
#   vendor    the vendor HTTPDNS answer decoders (Fuzz/VendorAnswerFuzzer.swift; AES stubbed, DES real)
#   dnssec    the DNSKEY, RRSIG, DS, NSEC and NSEC3 decoders (Fuzz/DNSSECRecordFuzzer.swift)
#   connect   the proxy relay's CONNECT head scan (Fuzz/ConnectHeadFuzzer.swift)
#   h2client  a DoH server's HTTP/2 frames and HPACK blocks to the client (Fuzz/H2ClientFuzzer.swift)
#   h2frames  a peer's frames through the shared HTTP/2 wire code: frame headers, padding and
#             priority as both sides cut them, the client's HPACK decoder (Fuzz/H2FramesFuzzer.swift)
#   hpack     the daemon's HPACK literal writer in exactly the room its bound promises, decoded back by
#             the shared decoder (Fuzz/HPACKWriterFuzzer.swift)
#   querylog  the query log's line formatter on any relayed response, into a nearly full buffer
#             (Fuzz/QueryLogFuzzer.swift; seeds: compressed-CNAME answers of F19)
#   proxyheader  a trusted proxy's PROXY protocol v2 header (Fuzz/ProxyHeaderFuzzer.swift)
#   threadhits  the per-thread hit table's unaligned host loads, in-place slots and their release
#             when a thread ends (Fuzz/ThreadHitsFuzzer.swift)
# A crash leaves its input in Fuzz/crashers/TARGET/ (decoder: Fuzz/crashers/), which the test
# suites replay on every run. The working corpora grow in .build-fuzz; the committed seeds stay small.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
runs=${1:-1000000}
seconds=${2:-600}
shift $(( $# < 2 ? $# : 2 ))
targets=("${@:-decoder stub doh vendor dnssec connect h2client h2frames querylog hpack threadhits proxyheader}")
# shellcheck disable=SC2206
targets=(${targets[*]})
out=.build-fuzz
codec="Sources/DNSCore/DoHWire.swift Sources/DNSCore/AddressAnswer.swift Sources/DNSCore/DNSError.swift Sources/DNSCore/DomainName.swift
       Sources/DNSCore/IPAddress.swift Sources/DNSCore/Message.swift Sources/DNSCore/RecordType.swift Sources/DNSCore/Resolution.swift
       Sources/DNSCore/ResolverClock.swift Sources/DNSCore/ServiceBinding.swift Sources/DNSCore/DNSSECStatus.swift
       Sources/DNSCore/LocalZone.swift Sources/DNSCore/NameSet.swift Sources/DNSCore/HostPattern.swift Sources/DNSCore/WireQuestion.swift
       Sources/DNSCore/NegativeAuthority.swift Sources/DNSCore/EDNSPadding.swift"
daemon="Sources/DNSWire/DNSQuery.swift Sources/DNSWire/DNSResponseWriter.swift
        Sources/DNSWire/DNSAnswers.swift Sources/DNSCore/ResolverDiscovery.swift Sources/ResolverDaemon/HTTP/DoHRequest.swift Fuzz/DaemonFuzzCheck.swift"
vendor="Sources/HTTPDNS/CommercialAPIs/VendorWire.swift Sources/HTTPDNS/CommercialAPIs/AlibabaWire.swift Sources/HTTPDNS/CommercialAPIs/TencentWire.swift
        Sources/HTTPDNS/CommercialAPIs/VendorCipherText.swift Fuzz/VendorCryptoStub.swift"
# The HTTP/2 wire code is a module of its own (its users import it), built once, instrumented the
# same way, and linked into the targets that use it.
wire="-I $out/modules $out/modules/HTTP2Wire.o"
case " ${targets[*]} " in
    *" h2client "* | *" h2frames "* | *" hpack "*)
        mkdir -p "$out/modules"
        swiftc -sanitize=fuzzer,address -parse-as-library -O -package-name swift_httpdns -module-name HTTP2Wire -wmo -c Sources/HTTP2Wire/*.swift \
            -emit-module -emit-module-path "$out/modules/HTTP2Wire.swiftmodule" -o "$out/modules/HTTP2Wire.o" ;;
esac
status=0
for target in "${targets[@]}"; do
    case "$target" in
        decoder) sources="$codec Fuzz/DecoderFuzzer.swift"; seeds=Fuzz/corpus; crashers=Fuzz/crashers; max_len=4096 ;;
        stub) sources="$codec $daemon Sources/DNSStubServer/StubDatagram.swift Fuzz/StubDatagramFuzzer.swift"; seeds=Fuzz/corpus-stub; crashers=Fuzz/crashers/stub; max_len=1500 ;;
        doh) sources="$codec $daemon Fuzz/DoHRequestFuzzer.swift"; seeds=Fuzz/corpus-doh; crashers=Fuzz/crashers/doh; max_len=2048 ;;
        vendor) sources="$codec $vendor Fuzz/VendorAnswerFuzzer.swift"; seeds=Fuzz/corpus-vendor; crashers=Fuzz/crashers/vendor; max_len=2048 ;;
        dnssec) sources="$codec Sources/DNSSEC/DNSSECRecords.swift Sources/DNSSEC/DenialRecords.swift Sources/DNSSEC/NameLabels.swift Fuzz/DNSSECRecordFuzzer.swift"; seeds=Fuzz/corpus-dnssec; crashers=Fuzz/crashers/dnssec; max_len=1024 ;;
        connect) sources="Sources/ForwardProxy/ConnectHead.swift Sources/DaemonHTTP/HTTPSyntax.swift Fuzz/ConnectHeadFuzzer.swift"; seeds=Fuzz/corpus-connect; crashers=Fuzz/crashers/connect; max_len=2048 ;;
        h2client) sources="$codec Sources/HTTPDNS/PipelineFraming.swift Sources/HTTPDNS/DoHSession.swift Fuzz/H2ClientFuzzer.swift $wire"; seeds=Fuzz/corpus-h2client; crashers=Fuzz/crashers/h2client; max_len=4096 ;;
        h2frames) sources="Fuzz/H2FramesFuzzer.swift $wire"; seeds=Fuzz/corpus-h2frames; crashers=Fuzz/crashers/h2frames; max_len=4096 ;;
        querylog) sources="$codec Sources/ResolverDaemon/QueryLogFormat.swift Fuzz/QueryLogFuzzer.swift"; seeds=Fuzz/corpus-querylog; crashers=Fuzz/crashers/querylog; max_len=1300 ;;
        hpack) sources="Fuzz/HPACKWriterFuzzer.swift $wire"; seeds=Fuzz/corpus-hpack; crashers=Fuzz/crashers/hpack; max_len=4096 ;;
        threadhits) sources="$codec Sources/DNSCore/ThreadHits.swift Fuzz/ThreadHitsFuzzer.swift"; seeds=Fuzz/corpus-threadhits; crashers=Fuzz/crashers/threadhits; max_len=2048 ;;
        proxyheader) sources="Sources/DaemonListening/ProxyHeaderWire.swift Fuzz/ProxyHeaderFuzzer.swift"; seeds=Fuzz/corpus-proxyheader; crashers=Fuzz/crashers/proxyheader; max_len=1200 ;;
        *) echo "unknown target '$target' (decoder, stub, doh, vendor, dnssec, connect, h2client, h2frames, querylog, hpack, threadhits, proxyheader)" >&2; exit 2 ;;
    esac
    mkdir -p "$out/corpus-$target" "$crashers"
    # One module named after what the files import (DNSCore; DaemonHTTP for the CONNECT scan), so
    # that import is of their own module.
    module=DNSCore
    [ "$target" = connect ] && module=DaemonHTTP
    [ "$target" = proxyheader ] && module=DaemonListening
    # shellcheck disable=SC2086
    swiftc -sanitize=fuzzer,address -parse-as-library -O -package-name swift_httpdns -module-name "$module" \
        $sources -o "$out/$target-fuzzer" 2>&1 | { grep -vE "Cannot export local symbol|ignoring import|is part of module|^ *[0-9]* \||^ *\|" || true; }
    cp -n "$seeds"/* "$out/corpus-$target/" 2>/dev/null || true
    echo "== $target"
    # Every input that ever crashed this target runs again first (they were fixed; they stay fixed).
    mapfile -t kept < <(find "$crashers" -maxdepth 1 -type f | sort)
    if [ "${#kept[@]}" -gt 0 ]; then
        "$out/$target-fuzzer" "${kept[@]}" >"$out/replay-$target.log" 2>&1 || { echo "a kept crash input of $target fails again:"; tail -20 "$out/replay-$target.log"; status=1; }
    fi
    "$out/$target-fuzzer" "$out/corpus-$target" -runs="$runs" -max_total_time="$seconds" -max_len="$max_len" \
        -artifact_prefix="$crashers/" -print_final_stats=1 >"$out/last-run-$target.log" 2>&1 || status=1
    grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb|==.*ERROR|SUMMARY|INFO: Done)" "$out/last-run-$target.log" | tail -5
done
exit $status
