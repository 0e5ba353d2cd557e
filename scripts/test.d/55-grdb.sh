#!/usr/bin/env bash
# A real client on encrypted SQLite: GRDB.swift 7.10.0 (Tests/GRDBClient, XCTest) with the acsecure VFS
# made SQLite's default VFS in the test process (ACSecureVFS.makeDefault: ACSecureSQLiteRegister(1),
# in every test's setUp, before GRDB opens anything), checked for what an app relies on:
#   - DatabaseQueue: migrations (DatabaseMigrator, a failing migration rolled back), records and
#     queries (Codable records, an association, a 1 MiB blob), transactions, savepoints and rollback
#     (a 6 MB transaction rolled back), ValueObservation, and crash recovery: a child process
#     (grdb-crash-child) SIGKILLed 10 times, half of them inside a transaction that has overwritten
#     every row with a hot journal on disk; after each kill the database passes
#     PRAGMA integrity_check and holds every committed transaction whole, and nothing else;
#   - DatabasePool: the same, plus concurrent reads during writes and WAL checkpoints; these run
#     only when the acsecure VFS accepts PRAGMA journal_mode=WAL (tried at run time on a scratch
#     database), else they are skipped and a test checks that DatabasePool fails cleanly;
#   - after every test, no file next to its databases holds plaintext or a plain SQLite header.
# Also builds and runs Examples/swift/grdb (grdb-notes: two notes, the database encrypted) and, once
# README.md shows its code, checks that the README's ```swift block importing GRDB is its main.swift.
# The packages are built in the root's scratch path (.build), so the engine modules the earlier suites
# built are reused: only GRDB and the tests are new. Warnings in their own code fail the suite.
# Prints one line, "grdb: ...; N passed" (and the XCTest log on failure).
# environment: SWIFT_SCRATCH_PATH (default .build), KEEP=1 keeps the temp dir, GRDB_CLIENT_SEED replays
#   a crash-recovery run (its seed is in the failure's message), GRDB_CLIENT_CRASH_ROUNDS (default 10).
# (GRDB_CLIENT_VFS=unix runs the test binary on plain SQLite, to check the tests themselves: see
# docs/TESTING.md.)
set -euo pipefail

root="$(cd -P "$(dirname "$0")/../.." && pwd)"
scratch="${SWIFT_SCRATCH_PATH:-$root/.build}"
package="$root/Tests/GRDBClient"
example="$root/Examples/swift/grdb"
export SWIFT_BACKTRACE="${SWIFT_BACKTRACE:-enable=no}"
work="$(mktemp -d "${TMPDIR:-/tmp}/acsecure-grdb.XXXXXX")"
if [ "${KEEP:-0}" = 1 ]; then echo "grdb: keeping $work" >&2; else trap 'rm -rf "$work"' EXIT; fi

# build PACKAGE-DIR LOG [ARGS...]: builds, and fails on its errors or on warnings in its own code.
build() {
    local dir="$1" log="$2"; shift 2
    if ! swift build --package-path "$dir" --scratch-path "$scratch" "$@" >"$log" 2>&1; then
        cat "$log" >&2
        echo "grdb: FAIL: ${dir#"$root/"} did not build" >&2
        exit 1
    fi
    if grep -E "^$dir/.*: warning:" "$log" | sort -u >"$work/warnings.txt" && [ -s "$work/warnings.txt" ]; then
        echo "grdb: FAIL: compiler warnings in ${dir#"$root/"}:" >&2
        cat "$work/warnings.txt" >&2
        exit 1
    fi
}
build "$package" "$work/build.log" --build-tests
build "$example" "$work/example-build.log"
bin="$(swift build --package-path "$package" --scratch-path "$scratch" --show-bin-path)"

# The example (Examples/swift/grdb, the README's GRDB code): two notes, an encrypted database.
mkdir "$work/example"
if ! (cd "$work/example" && env -u ACSECURE_APP_ID -u ACSECURE_CREATE_STORE ACSECURE_HOME="$work/example/store" \
        "$bin/grdb-notes" notes.db "buy milk" && env -u ACSECURE_APP_ID -u ACSECURE_CREATE_STORE ACSECURE_HOME="$work/example/store" \
        "$bin/grdb-notes" notes.db "call mom") >"$work/example.out" 2>&1 \
    || [ "$(cat "$work/example.out")" != "$(printf '1: buy milk\n1: buy milk\n2: call mom')" ]; then
    cat "$work/example.out" >&2
    echo "grdb: FAIL: grdb-notes did not print its notes" >&2
    exit 1
fi
if head -c 16 "$work/example/notes.db" | grep -q "SQLite format 3" || grep -q -e "buy milk" -e "call mom" "$work/example/notes.db"; then
    echo "grdb: FAIL: grdb-notes's notes.db is not encrypted" >&2
    exit 1
fi
# Once README.md shows the example's code (a ```swift block that imports GRDB), it is the example's, verbatim.
readme_code="$(awk '/^```/ { if (inside) { inside = 0; if (grdb) printf "%s", block; block = ""; grdb = 0 } else if ($0 ~ /^```swift/) inside = 1; next }
    inside { block = block $0 "\n"; if ($0 == "import GRDB") grdb = 1 }' "$root/README.md")"
if [ -n "$readme_code" ] && [ "$readme_code" != "$(cat "$example/Sources/grdb-notes/main.swift")" ]; then
    echo "grdb: FAIL: README.md's GRDB code differs from Examples/swift/grdb/Sources/grdb-notes/main.swift:" >&2
    diff <(printf '%s\n' "$readme_code") "$example/Sources/grdb-notes/main.swift" >&2 || true
    exit 1
fi

mkdir "$work/tmp"
status=0
(cd "$work" && env ACSECURE_HOME="$work/store" ACSECURE_APP_ID="test-grdb" ACSECURE_CREATE_STORE=1 TMPDIR="$work/tmp" \
    "$bin/GRDBClientPackageTests.xctest") >"$work/tests.log" 2>&1 || status=$?

count() { grep -cE "^Test Case '$1' $2 " "$work/tests.log" || true; }
passed="$(count '.*' passed)"
failed="$(count '.*' failed)"
skipped="$(count '.*' skipped)"
pool_tests="$(grep -cE "^Test Case 'DatabasePoolTests\..*' started" "$work/tests.log" || true)"
pool_skipped="$(count 'DatabasePoolTests\..*' skipped)"
queue_passed="$(count 'DatabaseQueueTests\..*' passed)"
if [ "$status" != 0 ] || [ "$failed" != 0 ] || ! grep -q "^Test Suite 'All tests' passed" "$work/tests.log" \
    || [ "$queue_passed" -lt 6 ] || [ "$pool_tests" -lt 7 ]; then
    cat "$work/tests.log" >&2
    echo "grdb: FAIL: exit status $status, $passed passed, $failed failed, $skipped skipped (DatabaseQueue: $queue_passed passed; DatabasePool: $pool_tests tests)" >&2
    exit 1
fi
if [ "$pool_skipped" = "$pool_tests" ] && [ "$(count 'DatabasePoolWithoutWALTests\..*' passed)" = 1 ]; then
    pool="DatabasePool: skipped, the acsecure VFS refuses WAL ($pool_skipped tests; DatabasePool fails cleanly)"
elif [ "$pool_skipped" = 0 ]; then
    pool="DatabasePool (WAL) on acsecure too"
else
    cat "$work/tests.log" >&2
    echo "grdb: FAIL: $pool_skipped of the $pool_tests DatabasePool tests skipped (all, with DatabasePoolWithoutWALTests passed, or none)" >&2
    exit 1
fi
echo "grdb: GRDB.swift 7.10.0, DatabaseQueue on acsecure; $pool; example grdb-notes ok; $passed passed"
