#!/usr/bin/env bash
# Makes the minimal Debian 12 root the package test installs the .deb into: debootstrap's minbase
# (no Swift, no compiler) plus the Debian runtime packages the .deb depends on, fetched from the apt
# mirror now, while the network can be reached. The test itself (Tests/Package/package-test.sh) runs
# inside the test command's network namespace and installs the .deb with dpkg alone.
#
#   bash Scripts/package-root.sh       # -> .build/pkgroot/root (kept; rerun with --fresh to remake)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
. Scripts/lib.sh

need_packages debootstrap
target="$root/.build/pkgroot/root"
[ "${1:-}" = --fresh ] && rm -rf "$target"
if [ -f "$target/.ready" ]; then echo "package-root.sh: $target is ready"; exit 0; fi
rm -rf "$target"
mkdir -p "$(dirname "$target")"
started=$SECONDS
mirror="$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)"
mirror="${mirror:-http://deb.debian.org/debian}"
debootstrap --variant=minbase bookworm "$target" "$mirror" >"$target.log" 2>&1 \
    || { tail -20 "$target.log" >&2; exit 1; }
# The package's runtime dependencies (what dpkg-shlibdeps finds for the binary, and the CA bundle).
chroot "$target" apt-get install -y -qq --no-install-recommends libcurl4 libc-ares2 libhiredis0.14 ca-certificates >>"$target.log" 2>&1 \
    || { tail -20 "$target.log" >&2; exit 1; }
chroot "$target" apt-get clean
touch "$target/.ready"
echo "package-root.sh: Debian 12 minbase with the runtime dependencies in $target ($(du -sh "$target" | cut -f1), $((SECONDS - started)) s)"
