#!/usr/bin/env bash
# The README's main command: builds `resolve` (debug) and shows it resolving names through a real trusted
# DoH resolver. Works with no internet: it starts the project's own DoH servers (BIND 9.18) on
# loopback with a test CA, and sends nothing anywhere else.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
. Scripts/lib.sh

need_build_packages
need_packages bind9-dnsutils knot-dnsutils curl   # the real clients that query the daemon below
need_testenv_packages
isolate_network "${BASH_SOURCE[0]}" "$@"   # only loopback from here on (Scripts/lib.sh)
trap 'bash Scripts/env/testenv.sh stop >/dev/null 2>&1 || true' EXIT
# The servers start while resolve builds: their set-up (a CA, signed zones) overlaps the compile.
echo "== starting the local trusted resolvers (loopback only), in the background"
mkdir -p .testenv
bash Scripts/env/testenv.sh start >.testenv/demo-start.log 2>&1 &
testenv_pid=$!
# A debug build of the one product the demo runs, with the tests' flags (Scripts/lib.sh), so the test
# command reuses it. The first build compiles SwiftNIO and two copies of BoringSSL: about four
# minutes on 2 cores; every later run starts at once.
echo "== building resolve (debug; the first build takes a few minutes, later ones seconds)"
started=$SECONDS
swift build "${SWIFT_DEBUG_FLAGS[@]}" --product resolve 2>&1 | grep -E "error|warning: |Compiling resolve|Build of product" || true
bin="$(swift build "${SWIFT_DEBUG_FLAGS[@]}" --show-bin-path)/resolve"
[ -x "$bin" ] || { echo "build failed" >&2; exit 1; }
echo "(built in $((SECONDS - started)) s)"
if ! wait $testenv_pid; then
    cat .testenv/demo-start.log >&2
    echo "the test environment did not start (above)" >&2
    exit 1
fi
grep -v "^$" .testenv/demo-start.log | tail -3

ca=.testenv/ca/ca.pem
a="--doh https://doh-a.test:$DOH_PORT/dns-query --bootstrap doh-a.test=127.0.0.1"
b="--doh https://doh-b.test:$DOH_PORT_B/dns-query --bootstrap doh-b.test=127.0.0.1"
run() { echo; echo "\$ resolve $*"; "$bin" "$@" || echo "(exit $?)"; }

run $a --ca-file $ca www.hd.test alias.hd.test v6only.hd.test does-not-exist.hd.test
run $a --ca-file $ca --json www.hd.test many.hd.test does-not-exist.hd.test
echo; echo "# The first resolver is down (nothing listens on port 1): the second answers."
run --doh https://doh-a.test:1/dns-query --bootstrap doh-a.test=127.0.0.1 $b --ca-file $ca --json www.hd.test
echo; echo "# The rebinding guard drops private answers unless --allow-private is given."
run $a --ca-file $ca private.hd.test
run $a --ca-file $ca --allow-private private.hd.test
echo; echo "# The JSON API (application/dns-json) works the same way."
run --json-api https://json.test:$DOH_PORT/resolve --bootstrap json.test=127.0.0.3 --ca-file $ca alias.hd.test
echo; echo "# fetch: the origin's name is resolved by the trusted resolver and only the socket goes to"
echo "# that address; SNI, Host and the certificate check keep the name (nginx echoes what it saw)."
run fetch $a --ca-file $ca --allow-private -v https://origin.hd.test:$ORIGIN_PORT/echo
echo; echo "# fetch --json describes the exchange (the body stays out of it; -o keeps it)."
run fetch $a --ca-file $ca --allow-private --json https://origin.hd.test:$ORIGIN_PORT/echo
echo; echo "# An address presenting a certificate for another name is refused (exit 5); no body is printed."
run fetch $a --ca-file $ca --allow-private https://mismatch.hd.test:$ORIGIN_PORT/
echo; echo "# compare: the trusted resolver vs a lying \"system\" DNS (dnsmasq on 127.0.0.1:$SYSTEM_DNS_PORT)."
echo "# Where the answers differ, TLS probes decide: an impostor's certificate proves the hijack, a"
echo "# second genuine node proves itself; the canary catches a resolver inventing absent names (exit 3)."
run compare $a --ca-file $ca --allow-private --system-dns 127.0.0.1:$SYSTEM_DNS_PORT --probe-port $ORIGIN_PORT \
    --canary-zone nxrewrite.hd.test origin.hd.test cdn.hd.test bank.hd.test blocked.hd.test

echo; echo "# A commercial HTTPDNS account as the trusted upstream (examples/vendor.yaml: Alibaba's v2 API with"
echo "# AES-GCM, then Tencent's DES over plain HTTP - which is said on stderr and in the JSON). Several"
echo "# names go out as one signed batch request."
run lookup --config examples/vendor.yaml --json www.hd.test bank.hd.test v6only.hd.test

echo; echo "# daemon: examples/daemon.yaml serves the trusted cache over HTTPS with HTTP/2 (DoH and the"
echo "# JSON API, bearer token), as a plain-DNS stub, and watches origin.hd.test and bank.hd.test."
"$bin" daemon --config examples/daemon.yaml --log-level notice 2>.testenv/demo-daemon.log &
daemon=$!
trap 'kill $daemon 2>/dev/null || true; bash Scripts/env/testenv.sh stop >/dev/null 2>&1 || true' EXIT
for _ in $(seq 1 100); do curl -sf --cacert $ca https://127.0.0.1:8053/healthz >/dev/null 2>&1 && break; sleep 0.1; done
sleep 2   # the first watch round
token="Authorization: Bearer example-token-change-me"
show() { echo; echo "\$ $*"; "$@" || echo "(exit $?)"; }
show curl -s --cacert $ca -H "$token" "https://127.0.0.1:8053/v1/resolve?host=alias.hd.test"
show curl -s --cacert $ca -H "$token" https://127.0.0.1:8053/v1/status
show curl -s --cacert $ca -H "$token" https://127.0.0.1:8053/readyz
show kdig @127.0.0.1 -p 8053 +https=/dns-query +tls-ca=$ca +tls-hostname=localhost +short www.hd.test TXT
show curl -s --cacert $ca --doh-url https://127.0.0.1:8053/dns-query https://origin.hd.test:$ORIGIN_PORT/echo
show dig @127.0.0.1 -p 8054 +tries=1 +short www.hd.test
echo; echo "# The local proxy (proxy_listen: 127.0.0.1:8118): the lying DNS sends bank.hd.test to an impostor;"
echo "# through the proxy curl reaches the genuine origin, over a CONNECT tunnel (TLS end to end) and over"
echo "# plain http:// (the genuine site's X-Genuine-Origin header)."
show curl -s --cacert $ca -x http://127.0.0.1:8118 https://bank.hd.test:$ORIGIN_PORT/echo
show sh -c "curl -s -i -x http://127.0.0.1:8118 http://bank.hd.test:$ORIGIN_PLAIN_PORT/ | grep -iE '^(HTTP|x-genuine|via)|origin'"
echo; echo "# The stub echoes the question's letter case and answers EDNS with OPT (BADVERS for version 1)."
show sh -c "dig @127.0.0.1 -p 8054 +tries=1 WwW.Hd.TeSt | grep -A1 'QUESTION SECTION'"
show sh -c "dig @127.0.0.1 -p 8054 +tries=1 +edns=1 www.hd.test | grep -E 'status|EDNS'"
show sh -c "curl -s --cacert $ca -H '$token' https://127.0.0.1:8053/metrics | grep -E '^httpdns_watch_verdict|^httpdns_cache_(hits|misses)'"
kill -TERM $daemon; wait $daemon && echo "(daemon stopped on SIGTERM, exit 0)"
