#!/usr/bin/env bash
# Side-by-side comparison, in one run on the same data: plain POSIX I/O, `openssl speed -evp
# aes-256-gcm` at 4 KiB and 64 KiB, this engine (through the C API, libACSecureFile.so; through
# the Swift API only if the C library does not build), and gocryptfs when it can be mounted.
# Every figure is a median over interleaved rounds and is reported as a ratio to its same-run
# baseline. See docs/BENCHMARKS.md.
#
#   Benchmarks/compare.sh [--smoke] [--reps N] [--size-mib N] [--out DIR] [--no-gocryptfs]
#
#   --smoke        16 MiB file, one round, tiny time slices: checks that everything runs (seconds);
#                  writes nothing to docs/ unless --out is given, installs nothing beyond the
#                  build dependencies, uses gocryptfs only if it is already installed.
#   --reps N       rounds (default 5)
#   --size-mib N   file size (default 1024)
#   --out DIR      where results.md, ratios.dat and ratios.png go (default docs/benchmarks)
# environment: SWIFT_SCRATCH_PATH (default Benchmarks/.build), ACBENCH_DIR (default a new /tmp dir)
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
smoke=0; reps=5; size=1024; out=""; use_gocryptfs=1
while [ $# -gt 0 ]; do
  case "$1" in
    --smoke) smoke=1 ;;
    --reps) reps="$2"; shift ;;
    --size-mib) size="$2"; shift ;;
    --out) out="$2"; shift ;;
    --no-gocryptfs) use_gocryptfs=0 ;;
    *) echo "usage: $0 [--smoke] [--reps N] [--size-mib N] [--out DIR] [--no-gocryptfs]" >&2; exit 2 ;;
  esac
  shift
done
[ -z "$out" ] && [ "$smoke" = 0 ] && out="$root/docs/benchmarks"

sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
"$root/scripts/install-deps.sh"
if [ "$smoke" = 0 ]; then
  need=()
  if [ "$use_gocryptfs" = 1 ]; then
    command -v gocryptfs >/dev/null || need+=(gocryptfs)
    command -v fusermount3 >/dev/null || command -v fusermount >/dev/null || need+=(fuse3)
  fi
  command -v gnuplot >/dev/null || need+=(gnuplot-nox)
  if [ "${#need[@]}" -gt 0 ]; then
    echo "compare: installing ${need[*]}" >&2
    $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null \
      || echo "compare: could not install ${need[*]}; continuing without" >&2
  fi
fi

# Release build of the driver: the C API one (the functions a C program calls). A build failure
# fails the run: falling back to another API would measure something else under the same name.
# ACBENCH_DRIVER=ac-compare-swift measures the Swift API instead, on purpose.
scratch="${SWIFT_SCRATCH_PATH:-$here/.build}"
build() { swift build --package-path "$here" --scratch-path "$scratch" -c release --product "$1" >&2; }
driver="${ACBENCH_DRIVER:-ac-compare}"
if ! build "$driver"; then
  echo "compare: FAILED to build the $driver driver" >&2
  exit 1
fi
bin="$(swift build --package-path "$here" --scratch-path "$scratch" -c release --show-bin-path)/$driver"

work="${ACBENCH_DIR:-$(mktemp -d /tmp/acbench.XXXXXX)}"
mkdir -p "$work"
mounted=""
cleanup() {
  if [ -n "$mounted" ]; then
    fusermount3 -u "$mounted" 2>/dev/null || fusermount -u "$mounted" 2>/dev/null || umount "$mounted" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

args=(--dir "$work")
[ "$smoke" = 1 ] && args+=(--smoke) || args+=(--reps "$reps" --size-mib "$size")
if [ "$use_gocryptfs" = 1 ] && command -v gocryptfs >/dev/null && [ -c /dev/fuse ]; then
  mkdir -p "$work/gocryptfs.cipher" "$work/gocryptfs.mnt"
  # Default settings (AES-256-GCM, 4 KiB blocks), except a cheap scrypt cost for the password.
  if gocryptfs -q -init -scryptn 10 -extpass "echo acbench" "$work/gocryptfs.cipher" >/dev/null \
     && gocryptfs -q -nosyslog -extpass "echo acbench" "$work/gocryptfs.cipher" "$work/gocryptfs.mnt"; then
    mounted="$work/gocryptfs.mnt"
    args+=(--gocryptfs "$mounted")
  else
    echo "compare: gocryptfs did not mount; comparing without it" >&2
  fi
else
  echo "compare: gocryptfs or /dev/fuse unavailable; comparing without it" >&2
fi

results="${out:-$work/out}"
args+=(--out "$results")
"$bin" "${args[@]}"

if command -v gnuplot >/dev/null; then
  gnuplot <<GNUPLOT
set terminal pngcairo size 1100,560 font "DejaVu Sans,10"
set output "$results/ratios.png"
set title "Secure file engine vs. baselines, same run (ratio; higher is better; log scale)"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set logscale y
set yrange [0.1:*]
set ylabel "engine ÷ baseline"
set grid ytics
set key top left
set xtics rotate by -30 left font ",8"
set bmargin 7
plot "$results/ratios.dat" using 2:xtic(1) title "measured" lc rgb "#2b6cb0", \
     "" using 3 title "target" lc rgb "#c0c0c0"
GNUPLOT
  echo "compare: chart $results/ratios.png" >&2
fi
[ -n "$out" ] && echo "compare: results in $out/results.md" >&2
exit 0
