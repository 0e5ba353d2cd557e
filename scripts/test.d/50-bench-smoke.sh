#!/usr/bin/env bash
# Benchmark smoke run, so the benchmarks cannot rot: builds and runs the comparison driver in
# --smoke mode (16 MiB file, one round, ~3 s of measuring) and builds the package-benchmark suite.
# No timing assertions: a run that completes (and reads its data back intact) passes.
# Cost: ~3 min on a fresh clone (measured on a loaded 2-core machine: the C API driver with the
# engine in release 78 s, then the package-benchmark suite 85 s), ~40 s when mostly built.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
export SWIFT_BACKTRACE="${SWIFT_BACKTRACE:-enable=no}"
"$root/Benchmarks/compare.sh" --smoke
echo "bench-smoke: building the package-benchmark suite" >&2
swift build --package-path "$root/Benchmarks" --scratch-path "${SWIFT_SCRATCH_PATH:-$root/Benchmarks/.build}" \
  -c release --product SecureFileBenchmarks >&2
echo "bench-smoke: ok" >&2
