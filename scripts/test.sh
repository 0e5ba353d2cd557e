#!/usr/bin/env bash
# The project's test command (README, CI): installs the system packages it needs, builds, and runs
# every suite: the Swift tests, then each extra suite in scripts/test.d/ (C API, CLI, fuzz and
# benchmark smoke runs), in name order. Prints one line per suite; a failing suite's output is shown
# in full and stops the run. Every suite's full output is kept in $ACSECURE_TEST_LOGS (default
# .build/test-logs/). VERBOSE=1 streams everything instead.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
export SWIFT_BACKTRACE="${SWIFT_BACKTRACE:-enable=no}"
logs="${ACSECURE_TEST_LOGS:-.build/test-logs}"
mkdir -p "$logs"
passed=0

# run NAME SUMMARY-PATTERN COMMAND...: runs a suite with its output in $logs/NAME.log; prints one
# line (the last line matching SUMMARY-PATTERN, if any) on success, the whole log on failure.
run() {
  local name="$1" pattern="$2"; shift 2
  local log="$logs/$name.log" start=$SECONDS
  if [ "${VERBOSE:-0}" = 1 ]; then
    "$@" 2>&1 | tee "$log"
    local status=${PIPESTATUS[0]}
  else
    local status=0
    "$@" >"$log" 2>&1 || status=$?
  fi
  local took=$((SECONDS - start))
  if [ "$status" != 0 ]; then
    [ "${VERBOSE:-0}" = 1 ] || cat "$log"
    echo "FAIL  $name (exit $status after ${took}s; log: $log)"
    echo "suites: $passed passed, 1 failed"
    exit 1
  fi
  local summary=""
  [ -n "$pattern" ] && summary="$(grep -E "$pattern" "$log" | tail -1 | sed 's/^[[:space:]]*//')"
  echo "ok    $name (${took}s)${summary:+: $summary}"
  passed=$((passed + 1))
}

# Warnings are errors in the project's own sources and tests (not in dependencies).
check_warnings() {
  swift build --build-tests 2>&1 | tee "$logs/build-output.log"
  if grep -E "^/.*(Sources|Tests|Examples|fuzz)/.*: warning:" "$logs/build-output.log" | sort -u >"$logs/warnings.txt" && [ -s "$logs/warnings.txt" ]; then
    echo "compiler warnings in the project's code:"; cat "$logs/warnings.txt"
    return 1
  fi
}

run build "Compiling|Build complete" check_warnings
run swift-test "Executed [0-9]+ tests" swift test --skip-build
for suite in scripts/test.d/*.sh; do
  [ -e "$suite" ] || continue
  run "$(basename "$suite" .sh)" "passed|ok|done|: [0-9]+ passed" bash "$suite"
done
# set -e and run() stop at the first failing suite, so reaching here means every suite passed.
echo "suites: $passed passed, 0 failed"
