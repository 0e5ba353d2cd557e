#!/usr/bin/env bash
# Prints the package's version (MAJOR.MINOR.PATCH), read from the one place it is set:
# Sources/ACSecureFoundation/Version.swift (ACSecureFileKitVersion, also what `acsecure --version`
# says). scripts/install-c-library.sh names the C libraries, their SONAMEs and the .pc files'
# Version: after it. `scripts/version.sh --major` prints MAJOR only.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
source="$root/Sources/ACSecureFoundation/Version.swift"
version="$(sed -n 's/^public let ACSecureFileKitVersion = "\([0-9][0-9]*\.[0-9][0-9]*\.[0-9][0-9]*\)"$/\1/p' "$source")"
if [ "$(printf '%s\n' "$version" | grep -c .)" != 1 ]; then
    echo "version.sh: no single 'public let ACSecureFileKitVersion = \"MAJOR.MINOR.PATCH\"' line in $source" >&2
    exit 1
fi
case "${1:-}" in
    "") echo "$version" ;;
    --major) echo "${version%%.*}" ;;
    *) echo "usage: $0 [--major]" >&2; exit 2 ;;
esac
