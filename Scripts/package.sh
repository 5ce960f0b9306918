#!/usr/bin/env bash
# Builds the Debian package of `resolve`: .build/deb/swift-httpdns_<version>_<arch>.deb
#
#   bash Scripts/package.sh            # build it and run lintian on it
#
# The binary is a release build with the Swift standard library and Foundation linked in
# (--static-swift-stdlib), so the package depends only on Debian's runtime libraries (computed by
# dpkg-shlibdeps: libc6, libcurl4, libc-ares2, libstdc++6, ...) and runs where no Swift toolchain is.
# It holds the systemd unit (dist/systemd), the default configuration as a conffile
# (/etc/resolve/daemon.yaml, from dist/daemon.yaml), a manual page made by swift-argument-parser's
# generate-manual from the binary itself, and the documentation.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
. Scripts/lib.sh

need_build_packages
need_packages dpkg-dev lintian binutils
started=$SECONDS

swift build -c release --static-swift-stdlib --product resolve
bin="$(swift build -c release --show-bin-path)/resolve"
version="$("$bin" --version)"
# Not a native Debian package: the Debian revision follows the upstream version.
debian_version="$version-1"
arch="$(dpkg --print-architecture)"
name=swift-httpdns
out="$root/.build/deb"
stage="$out/stage"
deb="$out/${name}_${debian_version}_${arch}.deb"
rm -rf "$stage" "$deb"
mkdir -p "$stage/DEBIAN"

install -D -m 0755 "$bin" "$stage/usr/bin/resolve"
strip --strip-unneeded --remove-section=.comment --remove-section=.note "$stage/usr/bin/resolve"
install -D -m 0644 dist/systemd/resolve-daemon.service "$stage/lib/systemd/system/resolve-daemon.service"
install -D -m 0644 dist/daemon.yaml "$stage/etc/resolve/daemon.yaml"

# The manual page, from the binary's own help (swift-argument-parser's generate-manual tool, built
# from the checkout SwiftPM already has, as a root package of its own).
parser="$(swift package show-dependencies --format json | /usr/bin/python3 -c '
import json, sys
def walk(node):
    for dependency in node.get("dependencies", []):
        if dependency["identity"] == "swift-argument-parser":
            print(dependency["path"]); sys.exit()
        walk(dependency)
walk(json.load(sys.stdin))')"
swift build --package-path "$parser" --scratch-path "$root/.build/argument-parser-tools" --product generate-manual >/dev/null
manual="$out/manual"
rm -rf "$manual" && mkdir -p "$manual"
"$root/.build/argument-parser-tools/debug/generate-manual" "$bin" --output-directory "$manual" \
    --date "$(date -u -d "@$(git log -1 --format=%ct 2>/dev/null || date +%s)" +%Y-%m-%d)" \
    --authors "swift-httpdns developers" >/dev/null
install -d "$stage/usr/share/man/man1"
gzip -9n <"$manual/resolve.1" >"$stage/usr/share/man/man1/resolve.1.gz"
chmod 0644 "$stage/usr/share/man/man1/resolve.1.gz"

docs="$stage/usr/share/doc/$name"
install -d "$docs"
install -m 0644 README.md docs/*.md "$docs/"
cat >"$docs/copyright" <<EOF
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: swift-httpdns
Comment: The project has not chosen a license yet; this package is for the project's own
 deployments and tests until it does. The binary links the Swift runtime and Foundation
 (Apache-2.0 with Runtime Library Exception), SwiftNIO, swift-nio-ssl with BoringSSL,
 swift-crypto, swift-certificates, swift-log, swift-metrics, swift-service-lifecycle and
 swift-argument-parser (Apache-2.0), Yams and libyaml (MIT).

Files: *
Copyright: 2025-2026 swift-httpdns developers
License: unspecified
 No license has been granted yet.
EOF
printf '%s (%s) unstable; urgency=medium\n\n  * Package built from commit %s.\n\n -- swift-httpdns developers <packages@swift-httpdns.invalid>  %s\n' \
    "$name" "$debian_version" "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" "$(date -R -u)" \
    | gzip -9n >"$docs/changelog.Debian.gz"
chmod 0644 "$docs/changelog.Debian.gz"

# Runtime dependencies from the binary's ELF needs (dpkg-shlibdeps wants a debian/control to read).
shlib="$out/shlibdeps"
rm -rf "$shlib" && mkdir -p "$shlib/debian"
printf 'Source: %s\n\nPackage: %s\nArchitecture: any\n' "$name" "$name" >"$shlib/debian/control"
depends="$(cd "$shlib" && dpkg-shlibdeps -O "$stage/usr/bin/resolve" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')"
[ -n "$depends" ] || { echo "package.sh: dpkg-shlibdeps found no dependencies" >&2; exit 1; }

cat >"$stage/DEBIAN/control" <<EOF
Package: $name
Version: $debian_version
Architecture: $arch
Maintainer: swift-httpdns developers <packages@swift-httpdns.invalid>
Installed-Size: $(du -sk --exclude=DEBIAN "$stage" | cut -f1)
Depends: $depends, ca-certificates
Section: net
Priority: optional
Homepage: https://swift-httpdns.invalid/
Description: DNS anti-hijacking resolver: trusted DoH upstreams, DNS stub, DoH server
 resolve looks names up through trusted DNS-over-HTTPS resolvers reached at
 bootstrap addresses, compares them with the system's DNS to detect hijacking,
 and validates DNSSEC where zones are signed. resolve daemon serves the trusted
 cache to a host or a network: an HTTP API, a DoH endpoint (HTTP/2), a
 plain-DNS stub, a local HTTP(S) proxy and Prometheus metrics, with hijack
 verdicts for watched names. It runs as a systemd service (resolve-daemon).
EOF
echo /etc/resolve/daemon.yaml >"$stage/DEBIAN/conffiles"

# The unit: enabled and started on install where systemd runs, stopped on removal (what
# dh_installsystemd would write).
cat >"$stage/DEBIAN/postinst" <<'EOF'
#!/bin/sh
set -e
if [ "$1" = "configure" ] || [ "$1" = "abort-upgrade" ] || [ "$1" = "abort-deconfigure" ] || [ "$1" = "abort-remove" ]; then
    if command -v deb-systemd-helper >/dev/null 2>&1; then
        deb-systemd-helper unmask 'resolve-daemon.service' >/dev/null || true
        if deb-systemd-helper --quiet was-enabled 'resolve-daemon.service'; then
            deb-systemd-helper enable 'resolve-daemon.service' >/dev/null || true
        else
            deb-systemd-helper update-state 'resolve-daemon.service' >/dev/null || true
        fi
    fi
    if [ -d /run/systemd/system ]; then
        systemctl --system daemon-reload >/dev/null || true
        if [ -n "$2" ]; then
            deb-systemd-invoke try-restart 'resolve-daemon.service' >/dev/null || true
        else
            deb-systemd-invoke start 'resolve-daemon.service' >/dev/null || true
        fi
    fi
fi
EOF
cat >"$stage/DEBIAN/prerm" <<'EOF'
#!/bin/sh
set -e
if [ -d /run/systemd/system ] && [ "$1" = remove ]; then
    deb-systemd-invoke stop 'resolve-daemon.service' >/dev/null || true
fi
EOF
cat >"$stage/DEBIAN/postrm" <<'EOF'
#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then
    systemctl --system daemon-reload >/dev/null || true
fi
if [ "$1" = "remove" ] && [ -x "/usr/bin/deb-systemd-helper" ]; then
    deb-systemd-helper mask 'resolve-daemon.service' >/dev/null || true
fi
if [ "$1" = "purge" ] && [ -x "/usr/bin/deb-systemd-helper" ]; then
    deb-systemd-helper purge 'resolve-daemon.service' >/dev/null || true
    deb-systemd-helper unmask 'resolve-daemon.service' >/dev/null || true
    rm -rf /var/lib/private/resolve /var/lib/resolve
fi
EOF
chmod 0755 "$stage/DEBIAN/postinst" "$stage/DEBIAN/prerm" "$stage/DEBIAN/postrm"
(cd "$stage" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z | xargs -0 md5sum >DEBIAN/md5sums)
chmod 0644 "$stage/DEBIAN/md5sums"

dpkg-deb --root-owner-group -Zxz --build "$stage" "$deb" >/dev/null
echo "package.sh: $deb ($(du -h "$deb" | cut -f1), built in $((SECONDS - started)) s)"
echo "package.sh: Depends: $depends, ca-certificates"

# lintian: the tags it gives are listed and explained in docs/operations.md; any other fails.
expected_tags="$root/dist/lintian-expected.txt"
found="$(lintian --tag-display-limit 0 "$deb" 2>/dev/null | sed -nE 's/^[EWIPXCO]: [^ ]+( [^ :]+)?: //p' | sort -u || true)"
unexpected="$(comm -23 <(printf '%s\n' "$found" | sed '/^$/d' | cut -d' ' -f1 | sort -u) <(grep -v '^#' "$expected_tags" | sed '/^$/d' | cut -d' ' -f1 | sort -u))"
echo "package.sh: lintian:"
printf '%s\n' "$found" | sed '/^$/d; s/^/  /'
if [ -n "$unexpected" ]; then
    echo "package.sh: lintian tags not explained in dist/lintian-expected.txt: $unexpected" >&2
    exit 1
fi
