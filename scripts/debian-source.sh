#!/usr/bin/env bash
# Downloads the Debian source package PACKAGE (`apt-get source --download-only`) into DIR, unless
# DIR already holds its upstream tarball, and prints that tarball's path. Adds a deb-src entry for
# bookworm under /etc/apt/sources.list.d when the machine has none (root or sudo). Used for test and
# benchmark programs that Debian ships only in sources: SQLite's speedtest1.c, CPython's
# test_sqlite3.
#
#   scripts/debian-source.sh PACKAGE DIR
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 PACKAGE DIR" >&2; exit 2; }
package="$1"
dir="$2"
mkdir -p "$dir"
orig() { ls "$dir/${package}_"*.orig.tar.* 2>/dev/null | head -n 1; }
if [ -z "$(orig)" ]; then
    sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    if ! grep -rqs '^\(deb-src\|Types:.*deb-src\)' /etc/apt/sources.list /etc/apt/sources.list.d/; then
        echo "debian-source: adding a deb-src entry for bookworm (/etc/apt/sources.list.d/acsecure-deb-src.sources)" >&2
        printf 'Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
            | $sudo tee /etc/apt/sources.list.d/acsecure-deb-src.sources >/dev/null
        $sudo apt-get update -qq
    fi
    (cd "$dir" && apt-get source --download-only "$package" >&2 2>/dev/null) \
        || (cd "$dir" && { $sudo apt-get update -qq; apt-get source --download-only "$package" >&2; })
fi
[ -n "$(orig)" ] || { echo "debian-source: no upstream tarball of $package in $dir" >&2; exit 1; }
orig
