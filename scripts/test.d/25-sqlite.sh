#!/usr/bin/env bash
# Encrypted SQLite (ACSecureSQLite.h) as a C user gets it: the release libraries installed into a temp
# prefix by scripts/install-c-library.sh, programs built with cc + `pkg-config acsecuresqlite`.
#   - Tests/CSQLite/sqlite_vfs.c: the same workload on SQLite's default VFS and on "acsecure"
#     (identical results, integrity_check, nothing in the clear), 2 writer processes and a reader on
#     one database, a second writer beside a steady one (fair locking: it gets in, as with plain
#     SQLite), and a writer SIGKILLed at $SQLITE_KILLS (default 250) random moments with
#     synchronous=FULL, then at half as many with synchronous=OFF, and at a quarter as many with
#     synchronous=OFF in journal_mode TRUNCATE and PERSIST (the database's write cache is flushed
#     before the journal's truncation or header write ends the transaction), and beside those (at
#     the same time, on the other core) in WAL mode at half as many with synchronous=FULL and
#     NORMAL and a quarter with OFF (checkpoints included),
#     3 writer processes and a reader on one WAL database, two processes sharing one WAL
#     database (each sees the other's commits and checkpoints), and WAL solo mode (walsolo: a
#     process alone runs without coordination; one that visits while it is idle, and one that joins
#     in the middle of its write transaction, are seen, and it is solo again once alone);
#   - Examples/c/secure-sqlite.c;
#   - the sqlite3 shell loading libacsecuresqlite_ext.so (with ?acsecure_read_cache=0);
#   - the workload again without the read and write caches (ACSECURE_READ_CACHE_MIB=0,
#     ACSECURE_WRITE_CACHE_MIB=0), with a 1 MiB write cache (full, so flushed mid-transaction), and
#     bad sizes refused.
# environment: SWIFT_SCRATCH_PATH (default .build), CC (default cc), KEEP=1 keeps the temp dir,
#   ACSECURE_TEST_C_PREFIX (scripts/test.sh: the install the C API suite made in this run, used
#   instead of installing again when it holds acsecuresqlite.pc), SQLITE_KILLS, SQLITE_SEED (default: the time; printed, so a failure can be replayed).
set -euo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
cc="${CC:-cc}"
kills="${SQLITE_KILLS:-250}"
seed="${SQLITE_SEED:-$(date +%s)}"
work="$(mktemp -d "${TMPDIR:-/tmp}/acsecure-test-sqlite.XXXXXX")"
if [ "${KEEP:-0}" != 1 ]; then trap 'rm -rf "$work"' EXIT; else echo "25-sqlite: keeping $work" >&2; fi

if [ -n "${ACSECURE_TEST_C_PREFIX:-}" ] && [ -f "$ACSECURE_TEST_C_PREFIX/lib/pkgconfig/acsecuresqlite.pc" ]; then
    prefix="$ACSECURE_TEST_C_PREFIX"
    echo "25-sqlite: using the C library installed in $prefix by the C API suite" >&2
else
    prefix="$work/prefix"
    "$root/scripts/install-c-library.sh" "$prefix"
fi
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
read -r -a flags <<<"$(pkg-config --cflags --libs acsecuresqlite)"
build() { # build OUTPUT SOURCE
    echo "25-sqlite: $cc -std=c11 -Wall -Wextra -Werror -O2 $2 ${flags[*]} -o $1" >&2
    "$cc" -std=c11 -Wall -Wextra -Werror -O2 "$2" "${flags[@]}" -o "$work/$1"
}
build sqlite_vfs "$root/Tests/CSQLite/sqlite_vfs.c"
build secure-sqlite "$root/Examples/c/secure-sqlite.c"
unset LD_LIBRARY_PATH
export ACSECURE_HOME="$work/store" ACSECURE_APP_ID="test-sqlite" ACSECURE_CREATE_STORE=1

status=0
mkdir "$work/workload" && "$work/sqlite_vfs" workload "$work/workload" || status=1
# The database's read cache (on by default) off, and a bad size refused.
mkdir "$work/workload-nocache" && ACSECURE_READ_CACHE_MIB=0 ACSECURE_WRITE_CACHE_MIB=0 "$work/sqlite_vfs" workload "$work/workload-nocache" || status=1
mkdir "$work/workload-small-write-cache" && ACSECURE_WRITE_CACHE_MIB=1 "$work/sqlite_vfs" workload "$work/workload-small-write-cache" || status=1
for cache in READ WRITE; do
    if (cd "$work" && env "ACSECURE_${cache}_CACHE_MIB=lots" ./secure-sqlite bad-cache.db "x") >"$work/bad-cache.out" 2>&1; then
        echo "caches: FAIL: ACSECURE_${cache}_CACHE_MIB=lots opened the database" >&2; status=1
    elif ! grep -q "ACSECURE_${cache}_CACHE_MIB=lots is not a size" "$work/bad-cache.out"; then
        echo "caches: FAIL: ACSECURE_${cache}_CACHE_MIB=lots was refused without saying why:" >&2; cat "$work/bad-cache.out" >&2; status=1
    else
        echo "caches: ACSECURE_${cache}_CACHE_MIB=lots refuses to open the database, saying why"
    fi
    # Set but empty is unset (a shell's VAR=), not an error.
    if ! (cd "$work" && env "ACSECURE_${cache}_CACHE_MIB=" ./secure-sqlite empty-cache.db "x") >"$work/empty-cache.out" 2>&1; then
        echo "caches: FAIL: ACSECURE_${cache}_CACHE_MIB= (empty) refused the database:" >&2; cat "$work/empty-cache.out" >&2; status=1
    fi
done
# Set-up friction: without a store the example says why (the VFS's sqlite3_log, which it prints),
# not only SQLite's "unable to open database file".
if (cd "$work" && ACSECURE_HOME="$work/no-store" ACSECURE_CREATE_STORE= ./secure-sqlite nostore.db "x") >"$work/no-store.out" 2>&1; then
    echo "setup: FAIL: a database opened without a store" >&2; status=1
elif grep -q "no secure services store at $work/no-store" "$work/no-store.out" && grep -q "ACSECURE_CREATE_STORE=1" "$work/no-store.out"; then
    echo "setup: without a store the open fails saying so and how to create one"
else
    echo "setup: FAIL: without a store the reason was not given:" >&2; cat "$work/no-store.out" >&2; status=1
fi
mkdir "$work/multi" && timeout 120 "$work/sqlite_vfs" multi "$work/multi/multi.db" 2 150 || { echo "25-sqlite: FAIL: multi (exit $?)" >&2; status=1; }
timeout 120 "$work/sqlite_vfs" multi "$work/multi/multi-wal.db" 3 300 WAL || { echo "25-sqlite: FAIL: multi in WAL mode (exit $?)" >&2; status=1; }
# Fair locking: a second writer beside a steady one gets in (no SQLITE_BUSY within 5 s, medians of 5 rounds).
mkdir "$work/fair" && timeout 120 "$work/sqlite_vfs" fair "$work/fair" 5 || { echo "25-sqlite: FAIL: fair (exit $?)" >&2; status=1; }
echo "25-sqlite: SIGKILL test, seed $seed"
# The kill runs in two families that run side by side, one per core: the rollback-journal modes and
# the WAL modes (separate databases). In each round the writer process works while its parent sleeps
# until the kill, so a family keeps about one core busy; their output is shown afterwards, in order.
crash_rollback() {
    local rc=0
    # (Three fifths of SQLITE_KILLS here: with the runs below, 399 rollback and 312 WAL kills per test run.)
    mkdir "$work/crash" && "$work/sqlite_vfs" crash "$work/crash/crash.db" $((kills * 3 / 5)) "$seed" FULL || rc=1
    # synchronous=OFF: no xSync orders journal and database, so this checks the VFS's own ordering.
    mkdir "$work/crash-off" && "$work/sqlite_vfs" crash "$work/crash-off/crash.db" $((kills / 2)) "$((seed + 1))" OFF || rc=1
    for mode in TRUNCATE PERSIST; do
        mkdir "$work/crash-$mode" && "$work/sqlite_vfs" crash "$work/crash-$mode/crash.db" $((kills / 4)) "$((seed + 2))" OFF "$mode" || rc=1
    done
    return "$rc"
}
# WAL: writers and their automatic checkpoints (every 100 pages) SIGKILLed; synchronous FULL,
# NORMAL and OFF (a process kill must lose no commit in WAL mode with any of them).
crash_wal() {
    local rc=0
    mkdir "$work/crash-wal" && "$work/sqlite_vfs" crash "$work/crash-wal/full.db" $((kills / 2)) "$((seed + 3))" FULL WAL || rc=1
    "$work/sqlite_vfs" crash "$work/crash-wal/normal.db" $((kills / 2)) "$((seed + 4))" NORMAL WAL || rc=1
    "$work/sqlite_vfs" crash "$work/crash-wal/off.db" $((kills / 4)) "$((seed + 5))" OFF WAL || rc=1
    return "$rc"
}
crash_rollback >"$work/crash-rollback.out" 2>&1 &
rollback_pid=$!
crash_wal >"$work/crash-wal.out" 2>&1 || status=1
wait "$rollback_pid" || status=1
cat "$work/crash-rollback.out" "$work/crash-wal.out"
# WAL between processes: two processes use the database at once and see each other's commits.
mkdir "$work/walprocess" && timeout 60 "$work/sqlite_vfs" walprocess "$work/walprocess/wal.db" || { echo "25-sqlite: FAIL: walprocess (exit $?)" >&2; status=1; }
mkdir "$work/walsolo" && timeout 60 "$work/sqlite_vfs" walsolo "$work/walsolo/solo.db" || { echo "25-sqlite: FAIL: walsolo (exit $?)" >&2; status=1; }

# The example, then its database through the sqlite3 shell with the extension loaded.
(cd "$work" && ./secure-sqlite notes.db "first note" && ./secure-sqlite notes.db "second note") >"$work/example.out" || status=1
if grep -q "2: second note" "$work/example.out" && ! grep -q "second note" "$work/notes.db"; then
    echo "examples: secure-sqlite OK (2 notes, none in the clear)"
else
    echo "examples: FAIL: secure-sqlite" >&2; cat "$work/example.out" >&2; status=1
fi
shell_out="$(cd "$work" && sqlite3 -batch :memory: ".load $prefix/lib/libacsecuresqlite_ext" ".open file:notes.db?vfs=acsecure&acsecure_read_cache=0" \
    "SELECT group_concat(body, ',') FROM note;" 2>&1)" || true
if [ "$shell_out" = "first note,second note" ]; then
    echo "sqlite3 shell: .load libacsecuresqlite_ext and ?vfs=acsecure read the example's database"
else
    echo "sqlite3 shell: FAIL: got: $shell_out" >&2; status=1
fi
plain_out="$(cd "$work" && sqlite3 -batch notes.db "SELECT count(*) FROM note;" 2>&1)" && status=1
case "$plain_out" in
    *"not a database"*) echo "sqlite3 shell: without the VFS the database is \"not a database\"" ;;
    *) echo "sqlite3 shell: FAIL: the plain VFS said: $plain_out" >&2; status=1 ;;
esac

[ "$status" = 0 ] && echo "25-sqlite: all SQLite VFS tests passed" || echo "25-sqlite: FAILED" >&2
exit "$status"
