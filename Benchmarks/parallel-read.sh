#!/usr/bin/env bash
# Scaling of random 4 KiB reads with threads (issue 26), in one sitting: the machine's load
# (`uptime`, before and after), what its cores give AES-256-GCM (`openssl speed -multi N -evp
# aes-256-gcm -bytes 4096`, N = 1, 2, 4: the reference for what a second core can give), then
# Benchmarks/c/parallel-read.c against the installed C library: plain pread and the engine at 1, 2
# and 4 threads, a descriptor per thread, then one shared descriptor. docs/BENCHMARKS.md quotes it.
#
#   Benchmarks/parallel-read.sh [ROUNDS [CALLS [FILE_MIB]]]     (defaults 3, 200000, 128)
# environment: ACBENCH_DIR (default a new /tmp dir; the library is installed under it)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
rounds="${1:-3}"; calls="${2:-200000}"; mib="${3:-128}"
dir="${ACBENCH_DIR:-$(mktemp -d /tmp/acsecure-parallel.XXXXXX)}"
"$root/scripts/install-deps.sh" >/dev/null
"$root/scripts/install-c-library.sh" "$dir/prefix" >"$dir/install.log" 2>&1 || { cat "$dir/install.log"; exit 1; }
export PKG_CONFIG_PATH="$dir/prefix/lib/pkgconfig"
read -r -a flags <<<"$(pkg-config --cflags --libs acsecurefile)"
cc -O2 -pthread "$here/c/parallel-read.c" "${flags[@]}" -o "$dir/parallel-read"
export ACSECURE_HOME="$dir/store" ACSECURE_CREATE_STORE=1 ACSECURE_APP_ID=com.example.parallel-read
echo "load before: $(uptime)"
echo "openssl speed -evp aes-256-gcm -bytes 4096 (1000s of bytes per second, all processes together):"
for n in 1 2 4; do
  rate="$(openssl speed -multi "$n" -seconds 3 -bytes 4096 -evp aes-256-gcm 2>/dev/null | awk '/^evp|^aes-256-gcm|^AES-256-GCM/ {v=$NF} END {sub(/k$/, "", v); print v}')"
  echo "  -multi $n: ${rate}k"
done
"$dir/parallel-read" "$dir" "$rounds" "$calls" "$mib" 4
"$dir/parallel-read" "$dir" "$rounds" "$calls" "$mib" 4 shared
echo "load after: $(uptime)"
