#!/usr/bin/env bash
# The project's test command (README, CI): installs the system packages it needs, builds, and runs
# every suite: the Swift tests, then each extra suite in scripts/test.d/ (C API, CLI, README, fuzz
# and benchmark smoke runs), in name order. Prints a line when each suite starts, a heartbeat while
# it runs (at least every 20 s: elapsed time, tests done / total for the Swift tests, the log's last
# line; a progress line rewritten in place on a terminal, plain lines otherwise) and one line when
# it ends (scripts/suite-runner.sh); a failing suite's output is shown in full and stops the run.
# Every suite's full output is kept in $ACSECURE_TEST_LOGS (default .build/test-logs/). VERBOSE=1
# streams everything instead. ACSECURE_HEARTBEAT_SECONDS changes the heartbeat's interval.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
export SWIFT_BACKTRACE="${SWIFT_BACKTRACE:-enable=no}"
logs="${ACSECURE_TEST_LOGS:-.build/test-logs}"
mkdir -p "$logs"
suite_logs="$logs"
suite_passed=0
# shellcheck source=scripts/suite-runner.sh
. scripts/suite-runner.sh
run_start=$SECONDS

# Warnings are errors in the project's own sources and tests (not in dependencies).
check_warnings() {
  swift build --build-tests 2>&1 | tee "$logs/build-output.log"
  if grep -E "^/.*(Sources|Tests|Examples|fuzz)/.*: warning:" "$logs/build-output.log" | sort -u >"$logs/warnings.txt" && [ -s "$logs/warnings.txt" ]; then
    echo "compiler warnings in the project's code:"; cat "$logs/warnings.txt"
    return 1
  fi
}

run_suite build "Compiling|Build complete" check_warnings
# The C library and its SQLite VFS are installed once, by the C API suite (scripts/test-c.sh, which
# tests scripts/install-c-library.sh), into this prefix; the SQLite and CPython suites use that install.
export ACSECURE_TEST_C_PREFIX="$PWD/.build/test-c-prefix"
rm -rf "$ACSECURE_TEST_C_PREFIX"
# The sanitizer builds of the fuzz smoke and TSan suites (their own scratch paths, fuzz/.build and
# .build-tsan), in the background at the lowest priority while the Swift tests and the next suites
# run: those keep about one of the machine's cores busy. Each of the two suites waits for this build,
# then runs its own `swift build` (a no-op when this one succeeded; it reports a failure itself).
# Output: $logs/prebuild.log. The builds see the environment the suites will see (a subshell, as the
# suites are; ACSECURE_PREBUILD_PID and ACSECURE_TEST_C_PREFIX set): SwiftPM evaluates a manifest
# again when the environment differs, and a new build plan of the fuzz package orders its -sanitize
# flags anew, which compiles everything again (~30 s).
set -m
(
  export ACSECURE_PREBUILD_PID=$BASHPID
  renice -n 19 -p "$BASHPID" >/dev/null || true
  bash scripts/test.d/40-fuzz-smoke.sh --build-only || true
  bash scripts/test.d/45-tsan.sh --build-only || true
) </dev/null >"$logs/prebuild.log" 2>&1 &
prebuild_pid=$!
set +m
export ACSECURE_PREBUILD_PID="$prebuild_pid"
# Stopped with everything it started if the run ends first (a failing suite, an interrupt), as is a running suite.
# The run's own status is kept: a kill of a group that has already ended fails, which under set -e
# ended the trap, and the script, with status 1 (a run whose 12 suites all passed exited 1).
trap 'status=$?; kill -TERM -- "-$prebuild_pid" 2>/dev/null || true; [ -z "$suite_pid" ] || kill -TERM -- "-$suite_pid" 2>/dev/null || true; exit $status' EXIT
# The heartbeat counts the Swift tests done out of this total.
suite_total_tests="$(swift test list --skip-build 2>/dev/null | grep -c . || true)"
[ "$suite_total_tests" != 0 ] || suite_total_tests=""
# The Swift tests run as many at a time as the machine has cores (`swift test --parallel`: each
# test in a process of its own; most of them use one core, and the crash sweeps wait on their child
# processes). stdbuf: the lines reach the log as they are printed (not in 4 KiB blocks), so the
# heartbeat's count is current.
swift_tests() {
  local workers
  workers="$(nproc 2>/dev/null || echo 2)"
  stdbuf -oL -eL swift test --skip-build --parallel --num-workers "$workers" || return
  echo "swift-test: ${suite_total_tests:-all} tests passed, $workers at a time"
}
run_suite swift-test "swift-test: .* tests passed" swift_tests
for suite in scripts/test.d/*.sh; do
  [ -e "$suite" ] || continue
  run_suite "$(basename "$suite" .sh)" "passed|ok|done|: [0-9]+ passed" bash "$suite"
done
# set -e and run_suite stop at the first failing suite, so reaching here means every suite passed.
echo "total: $((SECONDS - run_start)) s"
echo "suites: $suite_passed passed, 0 failed"
