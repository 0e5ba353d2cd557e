#!/usr/bin/env bash
# Benchmark smoke run, so the benchmarks cannot rot: builds and runs the comparison driver in
# --smoke mode (16 MiB file, one round, ~3 s of measuring) and builds the package-benchmark suite.
# No timing assertions: a run that completes (and reads its data back intact) passes.
# Both builds use the root package's scratch path (.build), so the engine modules the earlier suites
# built (release for the C library, debug for the tests) are reused rather than compiled again: only
# the drivers and package-benchmark's own dependencies are new. The package-benchmark suite is
# built in debug here (a compile check); `swift package benchmark` builds it in release when run.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
export SWIFT_BACKTRACE="${SWIFT_BACKTRACE:-enable=no}"
scratch="${SWIFT_SCRATCH_PATH:-$root/.build}"
SWIFT_SCRATCH_PATH="$scratch" "$root/Benchmarks/compare.sh" --smoke
echo "bench-smoke: building the package-benchmark suite" >&2
swift build --package-path "$root/Benchmarks" --scratch-path "$scratch" --product SecureFileBenchmarks >&2
echo "bench-smoke: ok" >&2
