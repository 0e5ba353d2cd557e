#!/usr/bin/env bash
# Installs the system libraries this package links (OpenSSL libcrypto, libsodium, SQLite) and the
# tools its tests use (binutils: objdump for the fuzz build check; python3: CPython's sqlite3 suite), when they are missing. Safe to run again; needs root or sudo.
set -euo pipefail
need=()
for pkg in libssl-dev libsodium-dev libsqlite3-dev sqlite3 pkg-config openssl binutils python3; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
[ "${#need[@]}" -eq 0 ] && exit 0
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
echo "install-deps: installing ${need[*]}" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
