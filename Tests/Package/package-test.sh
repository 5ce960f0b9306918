#!/usr/bin/env bash
# The Debian package in a Debian 12 root without Swift: installed with dpkg, `resolve lookup` and
# `resolve daemon` run in it against the loopback test environment, then removed and purged.
#
#   bash Scripts/package-root.sh && bash Scripts/package.sh && bash Tests/Package/package-test.sh
#
# Needs the test environment (Scripts/env/testenv.sh start) and root (chroot, mount).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
. Scripts/lib.sh

prepared="$root/.build/pkgroot/root"
[ -f "$prepared/.ready" ] || { echo "package-test.sh: run Scripts/package-root.sh first" >&2; exit 1; }
deb="$(ls -t "$root"/.build/deb/swift-httpdns_*.deb 2>/dev/null | head -1)"
[ -n "$deb" ] || { echo "package-test.sh: run Scripts/package.sh first" >&2; exit 1; }
started=$SECONDS
work="$(mktemp -d /tmp/pkgtest.XXXXXX)"
chroot_dir="$work/root"
cleanup() {
    [ -n "${daemon:-}" ] && kill "$daemon" 2>/dev/null || true
    umount "$chroot_dir/proc" 2>/dev/null || true
    umount "$chroot_dir/dev" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
cp -a "$prepared" "$chroot_dir"
mount --bind /dev "$chroot_dir/dev"
mount -t proc proc "$chroot_dir/proc"
in_root() { chroot "$chroot_dir" "$@"; }
failures=0
check() { # description command...
    local description=$1
    shift
    if "$@"; then echo "ok   $description"; else echo "FAIL $description"; failures=$((failures + 1)); fi
}

check "the root has no Swift" bash -c "! chroot '$chroot_dir' sh -c 'command -v swift || ls /usr/lib/swift' >/dev/null 2>&1"
cp "$deb" "$chroot_dir/tmp/package.deb"
check "dpkg -i installs it with only the root's packages" in_root dpkg -i /tmp/package.deb
version="$(dpkg-deb -f "$deb" Version)"
check "resolve --version is ${version%-*} (the package's upstream version)" test "$(in_root resolve --version)" = "${version%-*}"
check "the binary needs no Swift library" bash -c "! chroot '$chroot_dir' ldd /usr/bin/resolve | grep -i swift"
check "the default config is a conffile" bash -c "chroot '$chroot_dir' dpkg-query -W -f='\${Conffiles}' swift-httpdns | grep -q /etc/resolve/daemon.yaml"
check "the unit is installed" test -f "$chroot_dir/lib/systemd/system/resolve-daemon.service"
check "the manual page is installed (mdoc, with the daemon)" \
    bash -c "zcat '$chroot_dir/usr/share/man/man1/resolve.1.gz' | grep -q '^\.Dt RESOLVE 1' && zcat '$chroot_dir/usr/share/man/man1/resolve.1.gz' | grep -q 'It Em daemon'"

# A lookup through the loopback DoH server, its name reached by a bootstrap address.
cp "$root/.testenv/ca/ca.pem" "$chroot_dir/tmp/ca.pem"
lookup="$(in_root resolve lookup --doh "https://doh-a.test:$DOH_PORT/dns-query" --bootstrap doh-a.test=127.0.0.1 \
    --ca-file /tmp/ca.pem --system-dns "127.0.0.1:$SYSTEM_DNS_PORT" www.hd.test 2>&1 || true)"
check "resolve lookup answers 198.18.0.10 ($lookup)" grep -q "198.18.0.10" <<<"$lookup"

# The daemon: its stub answers, SIGTERM stops it with exit 0 and the cache written.
dns_port=18690
cat >"$chroot_dir/tmp/daemon.yaml" <<CONF
upstreams:
  - {doh: "https://doh-a.test:$DOH_PORT/dns-query", bootstrap: [127.0.0.1]}
ca_file: /tmp/ca.pem
allow_private: true
system_dns: ["127.0.0.1:$SYSTEM_DNS_PORT"]
listen: "127.0.0.1:18691"
dns_listen: "127.0.0.1:$dns_port"
cache: {persist: /tmp/cache.bin}
CONF
chroot "$chroot_dir" resolve daemon --config /tmp/daemon.yaml 2>"$work/daemon.log" &
daemon=$!
wait_for_port 127.0.0.1 18691 10 || true
answer="$(dig @127.0.0.1 -p $dns_port +short +tries=1 +time=3 www.hd.test A 2>&1 || true)"
check "the daemon's stub answers 198.18.0.10 ($answer)" test "$answer" = "198.18.0.10"
kill -TERM "$daemon"
status=0
wait "$daemon" || status=$?
daemon=""
check "the daemon exits 0 on SIGTERM" test "$status" -eq 0
check "the daemon wrote its cache" test -s "$chroot_dir/tmp/cache.bin"

check "dpkg -r removes it" in_root dpkg -r swift-httpdns
check "the conffile stays after remove" test -f "$chroot_dir/etc/resolve/daemon.yaml"
check "dpkg --purge removes the conffile" bash -c "chroot '$chroot_dir' dpkg --purge swift-httpdns >/dev/null && ! test -e '$chroot_dir/etc/resolve/daemon.yaml'"

echo "package-test.sh: $failures failed ($((SECONDS - started)) s)"
[ "$failures" -eq 0 ] || { cat "$work/daemon.log" >&2; exit 1; }
