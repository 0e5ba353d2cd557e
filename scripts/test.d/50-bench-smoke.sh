#!/usr/bin/env bash
# Benchmark smoke run, so the benchmarks cannot rot: builds and runs the comparison driver in
# --smoke mode (16 MiB file, one round, ~3 s of measuring) and builds the package-benchmark suite.
# No timing assertions: a run that completes (and reads its data back intact) passes.
# Cost on a fresh clone: ~2-3 min, mostly release-building the engine and package-benchmark;
# ~15 s when already built.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
export SWIFT_BACKTRACE="${SWIFT_BACKTRACE:-enable=no}"
"$root/Benchmarks/compare.sh" --smoke
echo "bench-smoke: building the package-benchmark suite" >&2
swift build --package-path "$root/Benchmarks" --scratch-path "${SWIFT_SCRATCH_PATH:-$root/Benchmarks/.build}" \
  -c release --product SecureFileBenchmarks >&2
echo "bench-smoke: ok" >&2
