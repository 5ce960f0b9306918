#!/usr/bin/env bash
# The integration environment: real servers on loopback only, started and stopped by PID.
#
#   Scripts/env/testenv.sh start    generate the test CA and certificates (once), write configs, start servers
#   Scripts/env/testenv.sh stop     stop every server this script started
#   Scripts/env/testenv.sh status   show what is running
#
# Everything lives in .testenv/ (git-ignored). Idempotent: start on a running environment restarts it.
#
# Servers (all on loopback, all names under .test, RFC 6761):
#   doh-a.test  BIND 9.18 named, DoH on 127.0.0.1:18443 and [::1]:18443, plain DNS 127.0.0.1:18053,
#               DoT 127.0.0.1:18853
#   doh-b.test  BIND 9.18 named, DoH on 127.0.0.1:18444, plain DNS 127.0.0.1:18054 (same zone data)
#               (named binds only addresses assigned to an interface, and lo has just 127.0.0.1)
#   unbound     a validating recursive resolver (the DNSSEC peer, and a DoH upstream that follows
#               CNAMEs across zones): DoH 127.0.0.1:18446 (doh-v.test), plain DNS 127.0.0.1:18056,
#               DoT 127.0.0.1:18857,
#               iterating to doh-a's plain DNS for sig.test and hd.test only, with sig.test's anchor
#   nginx       127.0.0.3:18443: hostile.test (broken resolvers: HTML, 500, wrong type, oversized,
#               truncated, mismatched, garbage; the default server, so any other SNI gets its
#               certificate: a name mismatch), doh-untrusted.test (certificate from an unknown CA),
#               and json.test (the JSON API over the same zone data)
#   dnsmasq     127.0.0.1:18055, the "system" (plain, hijackable) DNS: forwards hd.test honestly to
#               doh-a's plain port, lies for hijacked.hd.test (127.0.0.66), bank.hd.test (the
#               impostor 127.0.0.8), shop.hd.test (127.0.0.5, another name's certificate),
#               cdn.hd.test (127.0.0.10, another genuine node), sinkhole.hd.test (127.0.0.7, dead),
#               blocked.hd.test (NXDOMAIN), dual.hd.test (AAAA only), any name under
#               nxrewrite.hd.test, and answers system-only.hd.test itself; no other upstream
#               (no-resolv), so nothing leaves loopback
#   impostor    nginx on 127.0.0.8: certificates for the hijacked names from another CA
#   vendor      Tests/Fakes/vendor_httpdns.py: fakes of the Alibaba, Tencent and Baidu HTTPDNS APIs
#               over the same zone (asked from doh-a's plain DNS): HTTPS 127.0.0.1:18700 and plain
#               HTTP 127.0.0.1:18701; 127.0.0.21:18700 answers ServiceLevelDeny/503, 127.0.0.23:18700
#               runs two hours ahead; account secrets in .testenv/vendor/
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
env_dir="$root/.testenv"
ca_dir="$env_dir/ca"

# shellcheck source=Scripts/lib.sh
. "$root/Scripts/lib.sh"

zone_names() {
    # The test zone, as "name type value ttl" lines; the zone file, the JSON API files and the
    # tests all derive from this one list.
    cat <<'EOF'
www.hd.test A 198.18.0.10 300
www.hd.test AAAA 2001:2::10 300
alias.hd.test CNAME alias2.hd.test 120
alias2.hd.test CNAME www.hd.test 60
short.hd.test A 198.18.0.20 1
short.hd.test AAAA 2001:2::20 2
v6only.hd.test AAAA 2001:2::30 300
v4only.hd.test A 198.18.0.40 300
private.hd.test A 10.0.0.1 300
loopback.hd.test A 127.0.0.1 300
mixed.hd.test A 10.0.0.2 300
mixed.hd.test A 198.18.0.50 300
origin.hd.test A 127.0.0.4 300
origin2.hd.test A 127.0.0.4 300
failover.hd.test AAAA ::1 300
failover.hd.test A 127.0.0.4 300
mismatch.hd.test A 127.0.0.5 300
untrusted.hd.test A 127.0.0.6 300
dead.hd.test A 127.0.0.7 300
bank.hd.test A 127.0.0.4 300
shop.hd.test A 127.0.0.4 300
cdn.hd.test A 127.0.0.4 300
sinkhole.hd.test A 127.0.0.4 300
blocked.hd.test A 127.0.0.4 300
dual.hd.test A 127.0.0.4 300
dual.hd.test AAAA ::1 300
nodes.hd.test A 127.0.0.4 300
nodes.hd.test A 127.0.0.10 300
EOF
    for i in $(seq 1 16); do echo "many.hd.test A 198.18.1.$i 300"; done
    for i in $(seq 1 4); do echo "many.hd.test AAAA 2001:2::1:$i 300"; done
}

# Names the genuine origin's certificate covers; a change here re-issues the certificates.
origin_sans="$(printf 'DNS:%s.hd.test,' origin2 failover bank shop cdn sinkhole blocked dual nodes)DNS:*.cmp.hd.test"

make_ca() {
    [ -f "$ca_dir/ca.pem" ] && [ -f "$ca_dir/doh-a.test.pin" ] && [ -f "$ca_dir/impostor.pem" ] && [ -f "$ca_dir/daemon.test.pem" ] && [ -f "$ca_dir/vendor.test.pem" ] && [ -f "$ca_dir/doh-v.test.pem" ] && [ "$(cat "$ca_dir/origin.sans" 2>/dev/null)" = "$origin_sans" ] && return 0
    mkdir -p "$ca_dir"
    cd "$ca_dir"
    # The project's test CA, and a second unrelated CA for "untrusted" cases.
    for ca in ca other-ca; do
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 \
            -keyout "$ca.key" -out "$ca.pem" -subj "/CN=swift-httpdns $ca" \
            -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
    done
    # name → signing CA; subjectAltName = the name (and the loopback IPs for the DoH servers).
    issue() { # name ca extra-sans
        local name=$1 ca=$2 sans="DNS:$1${3:+,$3}"
        openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$name.key" \
            -out "$name.csr" -subj "/CN=$name" 2>/dev/null
        openssl x509 -req -in "$name.csr" -CA "$ca.pem" -CAkey "$ca.key" -CAcreateserial -days 3650 \
            -out "$name.pem" -extfile <(printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\n' "$sans") 2>/dev/null
        rm -f "$name.csr"
    }
    issue doh-a.test ca "IP:127.0.0.1,IP:::1"
    issue doh-b.test ca "IP:127.0.0.1"
    issue doh-v.test ca "IP:127.0.0.1"
    issue hostile.test ca
    issue json.test ca
    # resolve daemon's HTTPS listener in the tests and the demo (DoH clients connect by IP).
    issue daemon.test ca "DNS:localhost,IP:127.0.0.1"
    issue doh-untrusted.test other-ca
    # The vendor fakes' service IPs (the client checks tls_name, or the IP it connects to).
    issue vendor.test ca "IP:127.0.0.1,IP:127.0.0.21,IP:127.0.0.23"
    # HTTPS origins for the interceptor.
    issue origin.hd.test ca "$origin_sans"
    echo "$origin_sans" >origin.sans
    issue origin2.hd.test ca
    issue untrusted.hd.test other-ca
    # The hijacker's origin: certificates for the hijacked names, from a CA nobody trusts.
    issue bank.hd.test other-ca "DNS:dual.hd.test,DNS:*.nxrewrite.hd.test"
    mv bank.hd.test.pem impostor.pem && mv bank.hd.test.key impostor.key
    # SPKI pin of doh-a.test's key, as CURLOPT_PINNEDPUBLICKEY takes it.
    printf 'sha256//%s' "$(openssl pkey -in doh-a.test.key -pubout -outform DER 2>/dev/null \
        | openssl dgst -sha256 -binary | openssl base64 -A)" >doh-a.test.pin
    cd "$root"
}

write_zone() {
    local file=$1
    {
        echo '$TTL 300'
        echo '@ 300 IN SOA ns.hd.test. admin.hd.test. 1 3600 600 86400 60'
        echo '@ 300 IN NS ns.hd.test.'
        echo 'ns 300 IN A 127.0.0.1'
        zone_names | while read -r name type value ttl; do
            [ "$type" = CNAME ] && value="$value."
            echo "$name. $ttl IN $type $value"
        done
        # Benchmark names: any label under bench.hd.test answers; any under cmp.hd.test is the
        # genuine origin (the system side answers them with another genuine address).
        echo '*.bench 300 IN A 198.18.2.1'
        echo '*.cmp 300 IN A 127.0.0.4'
        # Types the engine does not answer (the daemon forwards them), and an answer too big for
        # a 512-byte UDP response (the daemon's DNS stub truncates it).
        echo 'www 300 IN TXT "hd-test-txt"'
        # Service bindings (RFC 9460): every SvcParam the decoder knows, alias mode, a CNAME to
        # them, SVCB with a port prefix, and a hint the trusted A records do not hold.
        echo 'www 300 IN HTTPS 1 . alpn="h2,http/1.1" port=8443 ipv4hint=198.18.0.10 ipv6hint=2001:2::10 ech=AEj+DQBEAQAgACAdd+scUi0IYFsXnUIU7ko2Nd9+F8M26pAGZVpz/KrWPgAEAAEAAWQVZWNoLXNpdGVzLmV4YW1wbGUubmV0AAA='
        echo 'svc 300 IN HTTPS 0 www.hd.test.'
        echo 'svcalias 120 IN CNAME www.hd.test.'
        echo 'hinted 300 IN A 127.0.0.4'
        echo 'hinted 300 IN HTTPS 1 . alpn=h2 ipv4hint=203.0.113.9,127.0.0.4 mandatory=alpn'
        echo '_8443._foo.api 300 IN SVCB 2 api.hd.test. alpn=h3 port=8443 no-default-alpn'
        echo 'forged 300 IN A 127.0.0.4'
        echo 'hd.test. 300 IN MX 10 mx.hd.test.'
        for i in $(seq 1 40); do echo "big 300 IN A 198.18.3.$i"; done
        # For the differential conformance corpus: a TXT of more than 255 bytes (two strings) and an SRV.
        echo "long 300 IN TXT \"$(printf 'a%.0s' $(seq 1 200))\" \"$(printf 'b%.0s' $(seq 1 200))\""
        echo '_sip._tcp 300 IN SRV 10 5 5060 www.hd.test.'
        # 100 addresses (~1,650 bytes): more than 1,232 bytes, less than BIND's 4,096 over UDP.
        for i in $(seq 1 100); do echo "wide 300 IN A 198.18.4.$i"; done
        echo 'chain1 300 IN CNAME chain2.hd.test.'
        echo 'chain2 300 IN CNAME chain3.hd.test.'
        echo 'chain3 300 IN CNAME www.hd.test.'
    } >"$file"
}

write_named_conf() { # dir doh-port dns-port listen-v6 cert sig-zone-dir [dot-port]
    local dir=$1 doh_port=$2 dns_port=$3 doh_v6=$4 cert=$5 sig_dir=$6 dot_port=${7:-}
    mkdir -p "$dir"
    write_zone "$dir/hd.test.zone"
    printf '$TTL 300\n@ IN SOA ns.hd.test. admin.hd.test. 1 3600 600 86400 60\n@ IN NS ns.hd.test.\n10 IN PTR www.hd.test.\n' >"$dir/reverse.zone"
    write_signed_zones "$dir"
    cat >"$dir/named.conf" <<EOF
tls local-tls { cert-file "$ca_dir/$cert.pem"; key-file "$ca_dir/$cert.key"; };
http local-http { endpoints { "/dns-query"; }; listener-clients 4096; streams-per-connection 1024; };
controls { };
options {
    directory "$dir";
    pid-file "$dir/named.pid";
    session-keyfile "$dir/session.key";
    listen-on port $dns_port { 127.0.0.1; };
    listen-on port $doh_port tls local-tls http local-http { 127.0.0.1; };
    listen-on-v6 port $doh_port tls local-tls http local-http { $doh_v6; };
$([ -n "$dot_port" ] && echo "    listen-on port $dot_port tls local-tls { 127.0.0.1; };")
    recursion no;
    dnssec-validation no;
    minimal-responses yes;
    max-udp-size 4096;
    querylog no;
};
logging { channel default_log { file "$dir/named.log" versions 1 size 5m; severity info; }; category default { default_log; }; };
zone "hd.test" { type primary; file "$dir/hd.test.zone"; };
zone "0.18.198.in-addr.arpa" { type primary; file "$dir/reverse.zone"; };
# Signed zones (DNSSEC): BIND signs them at start (inline signing, its own keys per instance), one
# per algorithm family, for the validator's interoperability tests.
dnssec-policy "rsa" { keys { csk lifetime unlimited algorithm rsasha256 2048; }; };
dnssec-policy "ed" { keys { csk lifetime unlimited algorithm ed25519; }; };
zone "ecdsa.sec.test" { type primary; file "$dir/ecdsa.sec.test.zone"; dnssec-policy default; inline-signing yes; key-directory "$dir/keys"; };
zone "rsa.sec.test" { type primary; file "$dir/rsa.sec.test.zone"; dnssec-policy "rsa"; inline-signing yes; key-directory "$dir/keys"; };
zone "ed.sec.test" { type primary; file "$dir/ed.sec.test.zone"; dnssec-policy "ed"; inline-signing yes; key-directory "$dir/keys"; };
$(sig_zones "$sig_dir")
EOF
}

write_signed_zones() { # dir: the unsigned sources of the signed zones (BIND keeps the signed copies)
    local dir=$1 zone
    mkdir -p "$dir/keys"
    for zone in ecdsa rsa ed; do
        cat >"$dir/$zone.sec.test.zone" <<EOF
\$TTL 300
@ IN SOA ns.hd.test. admin.hd.test. 1 3600 600 86400 60
@ IN NS ns.hd.test.
www IN A 192.0.2.1
www IN A 192.0.2.2
www IN TXT "signed by BIND"
*.wild IN A 192.0.2.9
EOF
    done
}

# The signed tree under sig.test (DNSSEC §4), signed offline with dnssec-signzone so that each
# failure is made on purpose: one trust anchor (sig.test's DS, in $env_dir/sig.test.anchors) and
#   sig.test            ECDSA P-256, NSEC: www, *.wild and real.wild, alias → www.rsa.sig.test (CNAME into a child),
#                       out → www.hd.test (out of the anchor's tree), dn DNAME → rsa.sig.test,
#                       forged (the system side forges it); delegations below
#   rsa.sig.test        RSA/SHA-256, NSEC, secure delegation; back → www.sig.test (CNAME up)
#   n3.sig.test         Ed25519, NSEC3 with opt-out; *.wild; unsigned.n3.sig.test opted out (unsigned)
#   insecure.sig.test   unsigned, delegated without DS (proven by the parent's NSEC)
#   badsig.sig.test     www's A signature altered after signing
#   expired.sig.test    every signature expired a week ago
#   nokey.sig.test      the parent's DS names a key the zone does not hold
# named-b serves a tampered copy: www.sig.test's address changed, the signatures kept.
sign_tree() {
    local dir="$env_dir/sig" keys="$env_dir/sig/keys" zone
    rm -rf "$dir" && mkdir -p "$keys"
    sig_keygen() { dnssec-keygen -q -K "$keys" -a "$2" -f KSK "$1"; }
    sig_sign() { # zone [options…]: $dir/$zone.zone → $dir/$zone.signed
        local zone=$1; shift
        dnssec-signzone -q -z -S -K "$keys" -d "$dir" -O full -o "$zone" -f "$dir/$zone.signed" "$@" "$dir/$zone.zone" >/dev/null
    }
    zone_head() { printf '$TTL 300\n@ IN SOA ns.hd.test. admin.hd.test. 1 3600 600 86400 60\n@ IN NS ns.hd.test.\n'; }
    for zone in rsa n3 badsig expired nokey; do
        case $zone in rsa) alg=RSASHA256 ;; n3) alg=ED25519 ;; *) alg=ECDSAP256SHA256 ;; esac
        sig_keygen "$zone.sig.test" "$alg" >"$dir/$zone.key"
    done
    sig_keygen sig.test ECDSAP256SHA256 >"$dir/sig.key"
    sig_keygen spare.sig.test ECDSAP256SHA256 >"$dir/spare.key"   # nokey's DS names this key
    { zone_head; echo 'www IN A 192.0.2.21'; echo 'back IN CNAME www.sig.test.'; } >"$dir/rsa.sig.test.zone"
    { zone_head; echo 'www IN A 192.0.2.31'; echo '*.wild IN A 192.0.2.39'; echo 'unsigned IN NS ns.hd.test.'; } >"$dir/n3.sig.test.zone"
    { zone_head; echo 'www IN A 192.0.2.41'; } >"$dir/unsigned.n3.sig.test.zone"
    { zone_head; echo 'www IN A 192.0.2.51'; } >"$dir/insecure.sig.test.zone"
    for zone in badsig expired nokey; do { zone_head; echo 'www IN A 192.0.2.61'; } >"$dir/$zone.sig.test.zone"; done
    sig_sign rsa.sig.test
    sig_sign n3.sig.test -3 - -A -H 0
    sig_sign badsig.sig.test
    sig_sign nokey.sig.test
    sig_sign expired.sig.test -P -s "$(date -u -d '-20 days' +%Y%m%d%H%M%S)" -e "$(date -u -d '-7 days' +%Y%m%d%H%M%S)"
    # badsig: alter the first base64 character of www's A signature.
    sed -i -E '/^www\.badsig\.sig\.test\.[[:space:]].*RRSIG[[:space:]]+A /{s/(badsig\.sig\.test\. )([A-Za-z0-9+\/])/\1#\2/;s/#A/B/;s/#[^A]/A/}' \
        "$dir/badsig.sig.test.signed"
    cp "$dir/unsigned.n3.sig.test.zone" "$dir/unsigned.n3.sig.test.signed"
    cp "$dir/insecure.sig.test.zone" "$dir/insecure.sig.test.signed"
    {
        zone_head
        echo 'www IN A 192.0.2.11'
        echo '*.wild IN A 192.0.2.19'
        echo 'real.wild IN A 192.0.2.18'   # an existing name under the wildcard (replay target)
        echo 'alias IN CNAME www.rsa.sig.test.'
        echo 'forged IN A 127.0.0.77'
        echo 'out IN CNAME www.hd.test.'
        echo 'dn IN DNAME rsa.sig.test.'
        for zone in rsa n3 insecure badsig expired nokey; do echo "$zone IN NS ns.hd.test."; done
        for zone in rsa n3 badsig expired; do dnssec-dsfromkey -2 "$keys/$(cat "$dir/$zone.key").key"; done
        dnssec-dsfromkey -2 "$keys/$(cat "$dir/spare.key").key" | sed 's/^spare\./nokey./'
    } >"$dir/sig.test.zone"
    sig_sign sig.test
    dnssec-dsfromkey -2 "$keys/$(cat "$dir/sig.key").key" >"$env_dir/sig.test.anchors"
    # The tampered copy for named-b.
    mkdir -p "$dir/tampered"
    cp "$dir"/*.signed "$dir/tampered/"
    sed -i -E 's/^(www\.sig\.test\.[[:space:]].*IN[[:space:]]+A[[:space:]]+)192\.0\.2\.11$/\1198.51.100.66/' "$dir/tampered/sig.test.signed"
    grep -q 198.51.100.66 "$dir/tampered/sig.test.signed" || { echo "testenv: tampering sig.test failed" >&2; exit 1; }
    grep -q '^www\.badsig.*RRSIG' "$dir/badsig.sig.test.signed" || { echo "testenv: badsig has no signature" >&2; exit 1; }
}

sig_zones() { # dir of signed files: the named.conf zone statements of the tree
    local zone
    for zone in sig rsa.sig n3.sig unsigned.n3.sig insecure.sig badsig.sig expired.sig nokey.sig; do
        echo "zone \"$zone.test\" { type primary; file \"$1/$zone.test.signed\"; };"
    done
}

write_unbound() { # the validating peer: iterates only to named-a; "." goes nowhere (port 9), nothing leaves loopback
    local dir="$env_dir/unbound"
    mkdir -p "$dir"
    cat >"$dir/unbound.conf" <<EOF
server:
    interface: 127.0.0.1@$VALIDATOR_DOH_PORT
    interface: 127.0.0.1@$VALIDATOR_DNS_PORT
    interface: 127.0.0.1@$VALIDATOR_DOT_PORT
    https-port: $VALIDATOR_DOH_PORT
    tls-port: $VALIDATOR_DOT_PORT
    tls-service-key: "$ca_dir/doh-v.test.key"
    tls-service-pem: "$ca_dir/doh-v.test.pem"
    http-endpoint: "/dns-query"
    num-threads: 1
    do-daemonize: yes
    username: ""
    chroot: ""
    directory: "$dir"
    pidfile: "$dir/unbound.pid"
    use-syslog: no
    logfile: "$dir/unbound.log"
    verbosity: 1
    access-control: 127.0.0.0/8 allow
    do-not-query-localhost: no
    module-config: "validator iterator"
    trust-anchor-file: "$env_dir/sig.test.anchors"
    val-log-level: 2
    qname-minimisation: no
    cache-max-ttl: 30
    cache-max-negative-ttl: 30
    local-zone: "test." nodefault
$(for zone in hd sig rsa.sig n3.sig unsigned.n3.sig insecure.sig badsig.sig expired.sig nokey.sig; do
    printf 'stub-zone:\n    name: "%s.test"\n    stub-addr: 127.0.0.1@%s\n' "$zone" "$DNS_PORT"; done)
forward-zone:
    name: "."
    forward-addr: 127.0.0.1@9
remote-control:
    control-enable: no
EOF
}

write_hostile() {
    local dir="$env_dir/nginx"
    mkdir -p "$dir/www/json" "$dir/logs"
    python3 "$root/Scripts/env/make_fixtures.py" "$dir/www" <(zone_names)
    write_upload_location "$dir"
    cat >"$dir/nginx.conf" <<EOF
worker_processes 1;
pid $dir/nginx.pid;
error_log $dir/logs/error.log warn;
daemon on;
events { worker_connections 1024; }
http {
    access_log $dir/logs/access.log;
    client_body_temp_path $dir/tmp;
    proxy_temp_path $dir/tmp;
    fastcgi_temp_path $dir/tmp;
    uwsgi_temp_path $dir/tmp;
    scgi_temp_path $dir/tmp;
    types { }
    default_type application/octet-stream;
    server {
        listen 127.0.0.3:$DOH_PORT ssl http2;
        server_name hostile.test;
        ssl_certificate $ca_dir/hostile.test.pem;
        ssl_certificate_key $ca_dir/hostile.test.key;
        root $dir/www;
        location = /html { default_type text/html; return 200 "<html><body>Welcome to your ISP</body></html>\n"; }
        location = /status500 { return 500; }
        location = /wrong-type { default_type text/plain; alias $dir/www/valid.bin; }
        location = /oversized { default_type application/dns-message; alias $dir/www/oversized.bin; }
        location = /truncated { default_type application/dns-message; alias $dir/www/truncated.bin; }
        location = /mismatched { default_type application/dns-message; alias $dir/www/mismatched.bin; }
        location = /garbage { default_type application/dns-message; alias $dir/www/garbage.bin; }
        location = /query-echo { default_type application/dns-message; alias $dir/www/query.bin; }
        location = /json-garbage { default_type application/dns-json; return 200 "{\"Status\": \"zero\""; }
    }
    server {
        # A resolver whose certificate comes from a CA nobody trusts.
        listen 127.0.0.3:$DOH_PORT ssl http2;
        server_name doh-untrusted.test;
        ssl_certificate $ca_dir/doh-untrusted.test.pem;
        ssl_certificate_key $ca_dir/doh-untrusted.test.key;
        root $dir/www;
        location = /dns-query { default_type application/dns-message; alias $dir/www/valid.bin; }
    }
$(origin_servers "$dir")
    server {
        listen 127.0.0.3:$DOH_PORT ssl http2;
        server_name json.test;
        ssl_certificate $ca_dir/json.test.pem;
        ssl_certificate_key $ca_dir/json.test.key;
        root $dir/www;
        # The JSON API (application/dns-json) over the same zone data: one file per name and type.
        location = /resolve {
            default_type application/dns-json;
            try_files /json/\$arg_name.\$arg_type.json /json/nxdomain.\$arg_type.json =404;
        }
    }
}
EOF
}

write_upload_location() { # the /upload-file location both HTTPS origins include
    local dir=$1
    mkdir -p "$dir/bodies"
    cat >"$dir/upload-file.conf" <<CONF
location = /upload-file {
    # The body is kept in a file whose path is reported, so a test can compare every byte.
    client_body_in_file_only on;
    client_body_temp_path $dir/bodies;
    proxy_pass_request_body off;
    proxy_set_header Content-Length "";
    proxy_pass http://127.0.0.4:$ORIGIN_PLAIN_PORT/ok;
    add_header X-Request-Body-File \$request_body_file always;
    add_header X-Content-Length \$content_length always;
    add_header X-Transfer-Encoding \$http_transfer_encoding always;
}
CONF
}

origin_servers() { # nginx server blocks of the HTTPS origins the interceptor tests talk to
    local dir=$1
    # 64 MiB for streaming downloads (sparse: no disk is used).
    [ -f "$dir/www/big.bin" ] || truncate -s 64M "$dir/www/big.bin"
    # ~290 KB of numbered lines: gzip-compressed on the fly, hence sent chunked over HTTP/1.1.
    [ -f "$dir/www/lines.txt" ] || seq -f "line %06g of the chunked response" 1 8000 >"$dir/www/lines.txt"
    cat <<EOF
    # origin.hd.test and origin2.hd.test (127.0.0.4): what arrived, as the server saw it.
    server {
        listen 127.0.0.4:$ORIGIN_PORT ssl http2;
        # A second genuine address (a CDN's other node): what cdn.hd.test and *.cmp.hd.test get
        # from the system DNS.
        listen 127.0.0.10:$ORIGIN_PORT ssl http2;
        server_name origin.hd.test origin2.hd.test;
        ssl_certificate $ca_dir/origin.hd.test.pem;
        ssl_certificate_key $ca_dir/origin.hd.test.key;
        root $dir/www;
        client_max_body_size 100m;
        client_body_buffer_size 1m;
        location = /echo { default_type text/plain; return 200 "sni=\$ssl_server_name host=\$host method=\$request_method proto=\$server_protocol cookie=\$http_cookie\n"; }
        location = /upload {
            # The body is read here and reported in headers; the backend only says ok.
            proxy_pass http://127.0.0.4:$ORIGIN_PLAIN_PORT/ok;
            add_header X-Request-Method \$request_method always;
            add_header X-Request-Body \$request_body always;
            add_header X-Request-Length \$request_length always;
            add_header X-Content-Length \$content_length always;
        }
        location = /redirect-301 { return 301 https://origin2.hd.test:$ORIGIN_PORT/upload; }
        location = /redirect-302 { return 302 https://origin2.hd.test:$ORIGIN_PORT/upload; }
        location = /redirect-303 { return 303 https://origin2.hd.test:$ORIGIN_PORT/upload; }
        location = /redirect-307 { return 307 https://origin2.hd.test:$ORIGIN_PORT/upload; }
        location = /redirect-308 { return 308 https://origin2.hd.test:$ORIGIN_PORT/upload; }
        location = /redirect-relative { return 302 /echo; }
        location = /redirect-loop { return 302 /redirect-loop; }
        location = /redirect-to-mismatch { return 302 https://mismatch.hd.test:$ORIGIN_PORT/echo; }
        # The same host on another port, and in clear: credentials must not follow (another origin).
        location = /redirect-other-port { return 302 https://origin.hd.test:$ORIGIN_H1_PORT/echo-credentials; }
        location = /redirect-to-plain { return 302 http://origin.hd.test:$ORIGIN_PLAIN_PORT/echo-credentials; }
        location = /redirect-same-origin { return 302 /echo-credentials; }
        location = /echo-credentials { default_type text/plain; return 200 "authorization=\$http_authorization cookie=\$http_cookie\n"; }
        location = /set-cookie { add_header Set-Cookie "session=s3cr3t; Path=/; Secure; HttpOnly"; default_type text/plain; return 200 "set\n"; }
        location = /not-found { default_type text/plain; return 404 "no such page\n"; }
        # Closes the connection after the response: each request a new connection (or tunnel), for
        # the proxy benchmark's browser client, whose fetch() cannot ask for that itself.
        location = /echo-close { keepalive_timeout 0; default_type text/plain; return 200 "closed after this response\n"; }
        location = /close { return 444; }
        location = /big { alias $dir/www/big.bin; limit_rate 48m; }   # spread over ~1.5 s: tests share 2 cores
        location = /big-fast { alias $dir/www/big.bin; }   # unthrottled, for the proxy benchmark
        location = /slow { alias $dir/www/big.bin; limit_rate 256k; }
        include $dir/upload-file.conf;
        location = /auth-basic {
            add_header WWW-Authenticate 'Basic realm="hd"' always;
            default_type text/plain;
            return 401 "basic credentials required\n";
        }
        location = /auth-bearer {
            # No realm: corelibs' own challenge handling would crash on this header.
            add_header WWW-Authenticate 'Bearer error="invalid_token"' always;
            default_type text/plain;
            return 401 "bearer token required\n";
        }
    }
    # The same origin over HTTP/1.1 only: chunked transfer coding, keep-alive.
    server {
        listen 127.0.0.4:$ORIGIN_H1_PORT ssl;
        server_name origin.hd.test;
        ssl_certificate $ca_dir/origin.hd.test.pem;
        ssl_certificate_key $ca_dir/origin.hd.test.key;
        client_max_body_size 100m;
        include $dir/upload-file.conf;
        location = /chunked { alias $dir/www/lines.txt; default_type text/plain; gzip on; gzip_types text/plain; gzip_min_length 1; }
        location = /echo { default_type text/plain; return 200 "sni=\$ssl_server_name host=\$host method=\$request_method proto=\$server_protocol\n"; }
        location = /echo-credentials { default_type text/plain; return 200 "authorization=\$http_authorization cookie=\$http_cookie\n"; }
    }
    # mismatch.hd.test resolves here, where only origin2.hd.test's certificate is presented.
    server {
        listen 127.0.0.5:$ORIGIN_PORT ssl http2;
        server_name origin2.hd.test;
        ssl_certificate $ca_dir/origin2.hd.test.pem;
        ssl_certificate_key $ca_dir/origin2.hd.test.key;
        location / { default_type text/plain; return 200 "secret body that must not reach the caller\n"; }
    }
    # untrusted.hd.test: a certificate for the right name from a CA nobody trusts.
    server {
        listen 127.0.0.6:$ORIGIN_PORT ssl http2;
        server_name untrusted.hd.test;
        ssl_certificate $ca_dir/untrusted.hd.test.pem;
        ssl_certificate_key $ca_dir/untrusted.hd.test.key;
        location / { default_type text/plain; return 200 "secret body that must not reach the caller\n"; }
    }
    # The impostor the lying system DNS sends bank.hd.test (and dual.hd.test's AAAA) to: the right
    # names on a certificate from another CA. Plain HTTP on the side, without the genuine marker.
    server {
        listen 127.0.0.8:$ORIGIN_PORT ssl http2;
        server_name bank.hd.test;
        ssl_certificate $ca_dir/impostor.pem;
        ssl_certificate_key $ca_dir/impostor.key;
        location / { default_type text/plain; return 200 "please enter your password\n"; }
    }
    server {
        listen 127.0.0.8:$ORIGIN_PLAIN_PORT;
        location / { default_type text/plain; return 200 "please enter your password\n"; }
    }
    server {
        listen 127.0.0.4:$ORIGIN_PLAIN_PORT;
        listen 127.0.0.10:$ORIGIN_PLAIN_PORT;
        location = /ok { default_type text/plain; return 200 "ok\n"; }
        location = /big { alias $dir/www/big.bin; }
        client_max_body_size 256m;
        include $dir/upload-file.conf;
        location = /echo-credentials { default_type text/plain; return 200 "authorization=\$http_authorization cookie=\$http_cookie\n"; }
        # The genuine site's marker, for plain-HTTP probes.
        location / { add_header X-Genuine-Origin "hd-origin-7f3a" always; default_type text/plain; return 200 "genuine origin\n"; }
    }
EOF
}

write_dnsmasq() {
    local dir="$env_dir/dnsmasq"
    mkdir -p "$dir"
    cat >"$dir/dnsmasq.conf" <<EOF
port=$SYSTEM_DNS_PORT
listen-address=127.0.0.1
bind-interfaces
no-resolv
no-hosts
no-poll
user=root
# Tests send 200 queries at once; past dns-forward-max (default 150) in flight to BIND, dnsmasq
# answers REFUSED (seen on CI when the start-up burst slowed BIND).
dns-forward-max=1000
pid-file=$dir/dnsmasq.pid
log-facility=$dir/dnsmasq.log
server=/hd.test/127.0.0.1#$DNS_PORT
# Every address a lie gives that something may dial (compare's and the watcher's probes) is a
# loopback one where nothing listens: the probe stays on this machine and is refused at once
# (documentation and benchmarking ranges such as 198.18/15 or 192.0.2/24 can be routed off the
# machine, or be its own subnet).
# system-only.hd.test's is only ever resolved — the system-fallback tests need an address that the
# special-purpose filter admits — and never dialled.
address=/hijacked.hd.test/127.0.0.66
address=/system-only.hd.test/198.18.77.77
# Hijack detection (resolve compare): impostor, wrong certificate, another genuine node, a dead
# sinkhole, a blocked name, a different AAAA only, absent names rewritten, benchmark names.
address=/bank.hd.test/127.0.0.8
address=/shop.hd.test/127.0.0.5
address=/cdn.hd.test/127.0.0.10
address=/sinkhole.hd.test/127.0.0.7
address=/blocked.hd.test/
host-record=dual.hd.test,127.0.0.4,::ffff:127.0.0.8
address=/nxrewrite.hd.test/127.0.0.8
address=/cmp.hd.test/127.0.0.10
# A forged HTTPS record (1 . alpn=h2 ipv4hint=203.0.113.66) for a name whose A answer is honest.
dns-rr=forged.hd.test,65,00:01:00:00:01:00:03:02:68:32:00:04:00:04:cb:00:71:42
# The signed tree, honestly (RRSIGs passed through to clients that set DO), but for one name
# whose signed address is 127.0.0.77: the system side forges it (without signatures).
server=/sig.test/127.0.0.1#$DNS_PORT
address=/forged.sig.test/127.0.0.66
EOF
}

write_vendor_secrets() { # the fake vendor accounts' keys: test values, made here, never real ones
    local dir="$env_dir/vendor"
    mkdir -p "$dir"
    printf '0123456789abcdef0123456789abcdef\n' >"$dir/alibaba.secret"
    printf '00112233445566778899aabbccddeeff\n' >"$dir/alibaba.aes"
    printf 'dnspodpass123456\n' >"$dir/tencent.key"
    printf '7c1a9e5d3b\n' >"$dir/tencent.token"
    printf 'baidu-test-secret\n' >"$dir/baidu.secret"
    printf 'wrong-secret\n' >"$dir/wrong.secret"
    printf 'ffeeddccbbaa99887766554433221100\n' >"$dir/wrong.aes"
    printf 'notthekey1234567\n' >"$dir/wrong.key"
    chmod 600 "$dir"/*
}

start_vendor_fake() {
    setsid /usr/bin/python3 "$root/Tests/Fakes/vendor_httpdns.py" --dir "$env_dir/vendor" --dns "127.0.0.1:$DNS_PORT" \
        --cert "$ca_dir/vendor.test.pem" --key "$ca_dir/vendor.test.key" \
        --https-port "$VENDOR_PORT" --http-port "$VENDOR_PLAIN_PORT" --pidfile "$env_dir/vendor/vendor.pid" \
        >"$env_dir/vendor/fake.log" 2>&1 &
}

start() {
    need_testenv_packages
    stop >/dev/null 2>&1 || true
    mkdir -p "$env_dir"
    make_ca
    sign_tree
    write_named_conf "$env_dir/named-a" "$DOH_PORT" "$DNS_PORT" "::1" doh-a.test "$env_dir/sig" "$DOT_PORT"
    write_named_conf "$env_dir/named-b" "$DOH_PORT_B" "$DNS_PORT_B" "none" doh-b.test "$env_dir/sig/tampered"
    write_hostile
    write_dnsmasq
    write_unbound
    local named_bin
    named_bin=$(command -v named || echo /usr/sbin/named)
    for server in named-a named-b; do
        "$named_bin" -c "$env_dir/$server/named.conf" -u root -n 2 2>"$env_dir/$server/stderr.log" \
            || { cat "$env_dir/$server/stderr.log" "$env_dir/$server/named.log" 2>/dev/null; exit 1; }
    done
    local nginx_bin
    nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
    "$nginx_bin" -c "$env_dir/nginx/nginx.conf" -p "$env_dir/nginx" -e "$env_dir/nginx/logs/error.log"
    local dnsmasq_bin
    dnsmasq_bin=$(command -v dnsmasq || echo /usr/sbin/dnsmasq)
    "$dnsmasq_bin" --conf-file="$env_dir/dnsmasq/dnsmasq.conf"
    local unbound_bin
    unbound_bin=$(command -v unbound || echo /usr/sbin/unbound)
    "$unbound_bin" -c "$env_dir/unbound/unbound.conf" 2>"$env_dir/unbound/stderr.log" \
        || { cat "$env_dir/unbound/stderr.log" "$env_dir/unbound/unbound.log" 2>/dev/null; exit 1; }
    write_vendor_secrets
    start_vendor_fake
    wait_for_port 127.0.0.1 "$DOH_PORT"
    wait_for_port 127.0.0.1 "$DOH_PORT_B"
    wait_for_port 127.0.0.3 "$DOH_PORT"
    wait_for_port 127.0.0.1 "$DNS_PORT"       # named's plain DNS, which dnsmasq forwards hd.test to
    wait_for_port 127.0.0.1 "$SYSTEM_DNS_PORT"
    wait_for_port 127.0.0.1 "$VALIDATOR_DOH_PORT" || { cat "$env_dir/unbound/unbound.log"; exit 1; }
    wait_for_port 127.0.0.1 "$VENDOR_PORT" || { cat "$env_dir/vendor/fake.log"; exit 1; }
    wait_for_port 127.0.0.1 "$VENDOR_PLAIN_PORT"
    touch "$env_dir/ready"
    echo "testenv: DoH doh-a.test 127.0.0.1/[::1]:$DOH_PORT, doh-b.test 127.0.0.1:$DOH_PORT_B;" \
         "nginx hostile.test/json.test on 127.0.0.3:$DOH_PORT; CA $ca_dir/ca.pem"
}

stop() {
    rm -f "$env_dir/ready"
    for pidfile in "$env_dir"/named-a/named.pid "$env_dir"/named-b/named.pid "$env_dir"/nginx/nginx.pid "$env_dir"/dnsmasq/dnsmasq.pid "$env_dir"/unbound/unbound.pid "$env_dir"/vendor/vendor.pid; do
        stop_pidfile "$pidfile"
    done
    echo "testenv: stopped"
}

status() { # exit 0 only when every server runs
    local all=0
    for pidfile in "$env_dir"/named-a/named.pid "$env_dir"/named-b/named.pid "$env_dir"/nginx/nginx.pid "$env_dir"/dnsmasq/dnsmasq.pid "$env_dir"/unbound/unbound.pid "$env_dir"/vendor/vendor.pid; do
        if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
            echo "running  $(basename "$(dirname "$pidfile")") pid $(cat "$pidfile")"
        else
            echo "stopped  $(basename "$(dirname "$pidfile")")"
            all=1
        fi
    done
    return $all
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
