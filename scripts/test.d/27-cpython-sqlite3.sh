#!/usr/bin/env bash
# A real client's own test suite on encrypted SQLite: CPython's test_sqlite3 (433 tests of the
# sqlite3 module: connections, transactions, undecodable file names and URIs, backups, a second
# process on the same database, ...) run twice with the system's python3 and libsqlite3:
#   - on SQLite's default VFS (unix): the baseline;
#   - with the acsecure VFS (libACSecureSQLite.so, installed into a temp prefix) made SQLite's
#     default in every Python process (Tests/Python/acsecure-default/sitecustomize.py), so every
#     database the suite opens, in the test process and its children, is encrypted (checked).
# Every test that passes on the baseline must pass on acsecure. Debian's python3 ships test.support
# but not test.test_sqlite3: it comes from Debian's source package of that python
# (scripts/debian-source.sh), kept in $SWIFT_SCRATCH_PATH/cpython-test-sqlite3.
# Prints "cpython-sqlite3: N passed, ..." (and the failures' tracebacks on failure).
# environment: SWIFT_SCRATCH_PATH (default .build), KEEP=1 keeps the temp dir, ACSECURE_TEST_C_PREFIX
#   (scripts/test.sh: the install the C API suite made in this run, used instead of installing again
#   when it holds acsecuresqlite.pc).
set -euo pipefail

root="$(cd -P "$(dirname "$0")/../.." && pwd)"
scratch="${SWIFT_SCRATCH_PATH:-$root/.build}"
work="$(mktemp -d "${TMPDIR:-/tmp}/acsecure-cpython.XXXXXX")"
if [ "${KEEP:-0}" = 1 ]; then echo "cpython-sqlite3: keeping $work" >&2; else trap 'rm -rf "$work"' EXIT; fi

python=/usr/bin/python3
[ -x "$python" ] || python="$(command -v python3)"
tests=()
if ! "$python" -c 'import test.test_sqlite3' >/dev/null 2>&1; then
    version="$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}.{sys.version_info[2]}")')"
    cache="$scratch/cpython-test-sqlite3/$version"
    if [ ! -d "$cache/Lib/test/test_sqlite3" ]; then
        orig="$("$root/scripts/debian-source.sh" "python${version%.*}" "$scratch/cpython-test-sqlite3/src")"
        rm -rf "$cache.tmp" && mkdir -p "$cache.tmp"
        tar -xf "$orig" -C "$cache.tmp" --strip-components=1 --wildcards '*/Lib/test/test_sqlite3/*'
        rm -rf "$cache" && mv "$cache.tmp" "$cache"
    fi
    tests=(--tests "$cache/Lib/test")
fi

if [ -n "${ACSECURE_TEST_C_PREFIX:-}" ] && [ -f "$ACSECURE_TEST_C_PREFIX/lib/pkgconfig/acsecuresqlite.pc" ]; then
    prefix="$ACSECURE_TEST_C_PREFIX"
else
    prefix="$work/prefix"
    "$root/scripts/install-c-library.sh" "$prefix" >"$work/install.log" 2>&1 || { cat "$work/install.log" >&2; exit 1; }
fi
library="$prefix/lib/libACSecureSQLite.so"
export ACSECURE_HOME="$work/store" ACSECURE_APP_ID="cpython-test-sqlite3" ACSECURE_CREATE_STORE=1
# The suite names its files after TESTFN (its undecodable name too) in a temporary working directory.
cd "$work"
"$python" "$root/Tests/Python/run_test_sqlite3.py" --vfs unix "${tests[@]}" --results "$work/unix.txt" 2>"$work/unix.log" \
    || { cat "$work/unix.log" >&2; exit 1; }
PYTHONPATH="$root/Tests/Python/acsecure-default" ACSECURE_SQLITE_LIBRARY="$library" \
    "$python" "$root/Tests/Python/run_test_sqlite3.py" --vfs acsecure "${tests[@]}" --results "$work/acsecure.txt" 2>"$work/acsecure.log" \
    || { cat "$work/acsecure.log" >&2; exit 1; }

# Every test that passes on unix passes on acsecure.
grep '^ok ' "$work/unix.txt" | sort >"$work/unix-ok.txt"
grep '^ok ' "$work/acsecure.txt" | sort >"$work/acsecure-ok.txt"
baseline=$(wc -l <"$work/unix-ok.txt")
passed=$(wc -l <"$work/acsecure-ok.txt")
[ "$baseline" -ge 400 ] || { echo "cpython-sqlite3: FAIL: only $baseline tests passed on the baseline (the suite did not run?)" >&2; exit 1; }
lost="$(comm -23 "$work/unix-ok.txt" "$work/acsecure-ok.txt")"
if [ -n "$lost" ]; then
    echo "cpython-sqlite3: FAIL: passed on unix but not on acsecure:" >&2
    echo "$lost" >&2
    grep '^#' "$work/acsecure.txt" | sed 's/^# \{0,1\}//' >&2
    exit 1
fi
echo "cpython-sqlite3: $passed passed on acsecure ($baseline on unix; $(grep -c '^skip ' "$work/unix.txt") skipped by CPython), python $("$python" -c 'import sys; print(sys.version.split()[0])'), $(grep -c '^ok .*undecodable' "$work/acsecure.txt") with undecodable names"
