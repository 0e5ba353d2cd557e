#!/usr/bin/env bash
# The suite runner of scripts/test.sh (scripts/suite-runner.sh) on short fake suites: a line when a
# suite starts, a heartbeat at least every ACSECURE_HEARTBEAT_SECONDS (tests done / total, elapsed
# seconds) as plain lines when the output is not a terminal and as a progress line rewritten in
# place on a terminal (script(1) gives it one), counted from XCTest's lines or `swift test
# --parallel`'s "[n/N] Testing" ones, one line at the end, and a failing suite's log, FAIL
# line and "suites: N passed, 1 failed" with exit 1; an interrupt stops the running suite and its
# children. Also: the default interval is at most 30 s, and test.sh runs every suite through it.
#
#   scripts/test.d/10-suite-runner.sh      (prints "suite-runner: N passed, M failed")
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/acsecure-suite-runner.XXXXXX")"
trap 'rm -rf "$work"' EXIT

passed=0
failed=0
ok()   { passed=$((passed + 1)); echo "  ok    $1"; }
fail() { failed=$((failed + 1)); echo "  FAIL  $1" >&2; [ -z "${2:-}" ] || sed 's/^/        /' "$2" | tail -12 >&2; }
expect() { local name="$1" file="$2"; shift 2; if "$@"; then ok "$name"; else fail "$name" "$file"; fi; }

# A fake Swift test run: 4 tests, one a second.
cat >"$work/fake.sh" <<'EOF'
for i in 1 2 3 4; do echo "Test Case 'Fake.test$i' passed (1.000 seconds)"; sleep 1; done
echo "Executed 4 tests, with 0 failures"
EOF
# runner NAME SCRIPT: a shell that sources the runner (logs in $work/logs-NAME) and runs SCRIPT's lines.
runner() {
  mkdir -p "$work/logs-$1"
  printf 'set -euo pipefail\nsuite_logs=%q\nsuite_passed=0\n. %q\n%s\n' "$work/logs-$1" "$root/scripts/suite-runner.sh" "$2" >"$work/runner-$1.sh"
  echo "$work/runner-$1.sh"
}

# --- a terminal (script(1) gives it one), started first: it runs beside the plain run below (both
# mostly wait on the fake suite's sleeps), its checks come after that
tty_pid=""
if command -v script >/dev/null 2>&1; then
  TERM=xterm ACSECURE_HEARTBEAT_SECONDS=1 script -qec "bash $(runner tty "suite_total_tests=4; run_suite fake 'Executed [0-9]+ tests' bash $work/fake.sh")" /dev/null \
    </dev/null >"$work/tty.out" 2>&1 &
  tty_pid=$!
fi

# --- not a terminal: plain lines
ACSECURE_HEARTBEAT_SECONDS=1 bash "$(runner plain "suite_total_tests=4; run_suite fake 'Executed [0-9]+ tests' bash $work/fake.sh")" >"$work/plain.out" 2>&1
status=$?
expect "a passing suite exits 0" "$work/plain.out" test "$status" = 0
expect "a line when the suite starts, with the number of tests" "$work/plain.out" test "$(head -1 "$work/plain.out")" = "..    fake: started (4 tests)"
beats="$(grep -cE '^\.\.    fake: [0-9]+s, [0-9]/4 tests: ' "$work/plain.out")"
expect "plain heartbeat lines with tests done / total ($beats)" "$work/plain.out" test "$beats" -ge 2
expect "heartbeats count up to the tests done" "$work/plain.out" grep -qE '^\.\.    fake: [0-9]+s, [34]/4 tests' "$work/plain.out"
expect "no carriage return when not on a terminal" "$work/plain.out" bash -c "! grep -q $'\r' '$work/plain.out'"
expect "one line at the end with the summary" "$work/plain.out" grep -qE '^ok    fake \([0-9]+s\): Executed 4 tests, with 0 failures$' "$work/plain.out"
expect "the suite's output is in its log" "$work/plain.out" grep -q "Fake.test4" "$work/logs-plain/fake.log"

# --- `swift test --parallel`'s lines ("[n/N] Testing <test>") count as tests done too
cat >"$work/fake-parallel.sh" <<'EOF'
for i in 1 2 3 4; do echo "[$i/4] Testing Fake.test$i"; sleep 1; done
echo "swift-test: 4 tests passed, 2 at a time"
EOF
ACSECURE_HEARTBEAT_SECONDS=1 bash "$(runner parallel "suite_total_tests=4; run_suite fakep 'tests passed' bash $work/fake-parallel.sh")" >"$work/parallel.out" 2>&1
expect "parallel runs: heartbeats count the [n/N] lines" "$work/parallel.out" grep -qE '^\.\.    fakep: [0-9]+s, [34]/4 tests' "$work/parallel.out"
expect "parallel runs: the summary line" "$work/parallel.out" grep -qE '^ok    fakep \([0-9]+s\): swift-test: 4 tests passed, 2 at a time$' "$work/parallel.out"

# --- a failing suite
bash "$(runner fail "run_suite good '' true; run_suite bad '' bash -c 'echo boom-output; exit 3'; echo not-reached")" >"$work/fail.out" 2>&1
status=$?
expect "a failing suite stops the run with exit 1" "$work/fail.out" test "$status" = 1
expect "the failing suite's output is shown" "$work/fail.out" grep -q "^boom-output$" "$work/fail.out"
expect "FAIL names the suite and its exit status" "$work/fail.out" grep -qE '^FAIL  bad \(exit 3 after [0-9]+s; log: ' "$work/fail.out"
expect "the closing line counts the suites" "$work/fail.out" grep -q '^suites: 1 passed, 1 failed$' "$work/fail.out"
expect "nothing runs after the failing suite" "$work/fail.out" bash -c "! grep -q not-reached '$work/fail.out'"

# --- a terminal: one progress line rewritten in place
if [ -n "$tty_pid" ]; then
  wait "$tty_pid"
  expect "on a terminal the heartbeat is a progress line rewritten in place" "$work/tty.out" \
    grep -qE $'\r\033\\[K\\.\\.    fake: [0-9]+s, [0-9]/4 tests' "$work/tty.out"
  expect "on a terminal the suite still ends with its ok line" "$work/tty.out" grep -qE '^ok    fake \([0-9]+s\)' <(tr '\r' '\n' <"$work/tty.out" | sed $'s/\033\\[K//g')
else
  echo "  skip  terminal progress line (no script(1))"
fi

# --- an interrupt (Ctrl-C: SIGINT to the terminal's foreground process group, here the runner's
# own process group) stops the running suite and what it started
cat >"$work/slow.sh" <<EOF
sleep 60 &
echo \$! >"$work/slow.pid"
wait
EOF
# Job control for this launch: the runner gets its own process group, and SIGINT is not ignored
# in it (as it is in a non-interactive shell's background commands).
set -m
bash "$(runner slow "run_suite slow '' bash $work/slow.sh")" >"$work/int.out" 2>&1 &
session=$!
set +m
for _ in $(seq 1 50); do [ -s "$work/slow.pid" ] && break; sleep 0.1; done
sleep 1.5  # the runner is in its heartbeat loop
kill -INT -- "-$session" 2>/dev/null
for _ in $(seq 1 50); do kill -0 "$session" 2>/dev/null || break; sleep 0.1; done
sleep_pid="$(cat "$work/slow.pid" 2>/dev/null)"
for _ in $(seq 1 30); do [ -n "$sleep_pid" ] && kill -0 "$sleep_pid" 2>/dev/null || break; sleep 0.1; done
expect "the runner ends on an interrupt" "$work/int.out" bash -c "! kill -0 $session 2>/dev/null"
if [ -n "$sleep_pid" ] && kill -0 "$sleep_pid" 2>/dev/null; then
  fail "an interrupt stops the suite's own children too (pid $sleep_pid still runs)" "$work/int.out"
  kill "$sleep_pid" 2>/dev/null
else
  ok "an interrupt stops the suite's own children too"
fi

# --- the defaults, and test.sh using the runner
default="$(env -u ACSECURE_HEARTBEAT_SECONDS bash -c ". '$root/scripts/suite-runner.sh'; echo \$suite_heartbeat")"
expect "the default heartbeat interval is at most 30 s ($default s)" /dev/null test "$default" -ge 1 -a "$default" -le 30
expect "test.sh runs the build, the Swift tests and every test.d suite through run_suite" /dev/null \
  bash -c "grep -q '^\. scripts/suite-runner.sh' '$root/scripts/test.sh' && [ \"\$(grep -c '^ *run_suite ' '$root/scripts/test.sh')\" = 3 ] && ! grep -qE '^ *run ' '$root/scripts/test.sh'"

echo "suite-runner: $passed passed, $failed failed"
[ "$failed" = 0 ]
