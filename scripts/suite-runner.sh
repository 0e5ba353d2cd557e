# Sourced by scripts/test.sh (and scripts/test.d/10-suite-runner.sh, which tests it): runs one test
# suite at a time with its output in a log, and says what it is doing while it runs.
#
#   run_suite NAME SUMMARY-PATTERN COMMAND...
#
# Prints a line when the suite starts; then, while it runs, a heartbeat at least every
# $ACSECURE_HEARTBEAT_SECONDS (default 20) seconds: the elapsed time, the tests done so far when the
# log has XCTest's "Test Case '...' passed" lines or `swift test --parallel`'s "[n/N] Testing" ones
# (out of $suite_total_tests when the caller knows it), and the log's last line. On a terminal the heartbeat is one progress line rewritten in place
# (every second); otherwise (CI, a file) plain lines. At the end: "ok    NAME (Ns): SUMMARY" (the
# log's last line matching SUMMARY-PATTERN), or, on failure, the whole log, "FAIL  NAME ..." and
# "suites: P passed, 1 failed", and the shell exits 1. VERBOSE=1 streams the suite's output instead.
#
# Uses: suite_logs (the log directory), suite_passed (a counter the caller starts at 0),
# suite_total_tests (optional, reset after each suite).

suite_heartbeat="${ACSECURE_HEARTBEAT_SECONDS:-20}"
suite_passed="${suite_passed:-0}"
suite_total_tests=""
suite_pid=""
# A suite runs in the background in its own process group (so the runner can print while it runs);
# one still running when the runner exits (Ctrl-C on the terminal reaches only the runner's group,
# an error) is stopped with everything it started.
trap '[ -z "$suite_pid" ] || kill -TERM -- "-$suite_pid" 2>/dev/null' EXIT

# suite_status LOG SECONDS: the heartbeat's text.
suite_status() {
  local log="$1" seconds="$2" done_tests last
  local text="${seconds}s"
  done_tests="$(grep -cE "^Test Case '.*' (passed|failed|skipped)" "$log" 2>/dev/null || true)"
  if [ "${done_tests:-0}" = 0 ]; then
    # `swift test --parallel` prints "[n/N] Testing <test>" per test instead.
    done_tests="$(grep -oE '^\[[0-9]+/[0-9]+\] Testing' "$log" 2>/dev/null | tail -1 | sed -E 's/^\[([0-9]+)\/.*/\1/' || true)"
  fi
  if [ "${done_tests:-0}" -gt 0 ]; then
    text+=", ${done_tests}${suite_total_tests:+/$suite_total_tests} tests"
  fi
  last="$(tail -c 4000 "$log" 2>/dev/null | tr '\r' '\n' | grep -v '^[[:space:]]*$' | tail -1 | tr -d '\033' | cut -c1-70 || true)"
  [ -z "$last" ] || text+=": $last"
  printf '%s' "$text"
}

run_suite() {
  local name="$1" pattern="$2"; shift 2
  local log="$suite_logs/$name.log" start=$SECONDS status=0
  local tty=0
  [ -t 1 ] && [ "${TERM:-dumb}" != dumb ] && tty=1
  echo "..    $name: started$([ -n "$suite_total_tests" ] && echo " ($suite_total_tests tests)")"
  if [ "${VERBOSE:-0}" = 1 ]; then
    "$@" 2>&1 | tee "$log"
    status=${PIPESTATUS[0]}
  else
    set -m  # job control for this one launch: the suite gets a process group of its own
    "$@" </dev/null >"$log" 2>&1 &
    suite_pid=$!
    set +m
    local last_beat=$SECONDS last_tick=$SECONDS
    # Checked 5 times a second (a suite's end is seen at once), printed at most once a second.
    while kill -0 "$suite_pid" 2>/dev/null; do
      sleep 0.2
      kill -0 "$suite_pid" 2>/dev/null || break
      [ "$SECONDS" != "$last_tick" ] || continue
      last_tick=$SECONDS
      if [ "$tty" = 1 ]; then
        printf '\r\033[K..    %s: %s' "$name" "$(suite_status "$log" $((SECONDS - start)))"
      elif [ $((SECONDS - last_beat)) -ge "$suite_heartbeat" ]; then
        echo "..    $name: $(suite_status "$log" $((SECONDS - start)))"
        last_beat=$SECONDS
      fi
    done
    wait "$suite_pid" || status=$?
    suite_pid=""
    [ "$tty" = 0 ] || printf '\r\033[K'
  fi
  local took=$((SECONDS - start))
  suite_total_tests=""
  if [ "$status" != 0 ]; then
    [ "${VERBOSE:-0}" = 1 ] || cat "$log"
    echo "FAIL  $name (exit $status after ${took}s; log: $log)"
    echo "suites: $suite_passed passed, 1 failed"
    exit 1
  fi
  local summary=""
  [ -n "$pattern" ] && summary="$(grep -E "$pattern" "$log" | tail -1 | sed 's/^[[:space:]]*//' || true)"
  echo "ok    $name (${took}s)${summary:+: $summary}"
  suite_passed=$((suite_passed + 1))
}
