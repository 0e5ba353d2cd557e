#!/usr/bin/env bash
# The project's test command (README, CI): installs the system packages it needs, builds, and runs
# every suite: the Swift tests, then each extra suite in scripts/test.d/ (C API, CLI, fuzz and
# benchmark smoke runs), in name order. Exits non-zero on the first failing suite.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
export SWIFT_BACKTRACE="${SWIFT_BACKTRACE:-enable=no}"
echo "== swift build"
swift build --build-tests
echo "== swift test"
swift test --skip-build
suites=1
for suite in scripts/test.d/*.sh; do
  [ -e "$suite" ] || continue
  echo "== $suite"
  bash "$suite"
  suites=$((suites + 1))
done
# set -e stops at the first failing suite, so reaching here means every suite passed.
echo "suites: $suites passed, 0 failed"
