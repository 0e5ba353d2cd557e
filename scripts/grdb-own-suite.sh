#!/usr/bin/env bash
# Long run, outside scripts/test.sh (about 10 minutes on 2 cores): GRDB.swift 7.10.0's own test suite
# (2,777 XCTest tests), built from the mirrored package, run twice with the system's libsqlite3:
#   - on SQLite's default VFS (unix): the baseline;
#   - with the acsecure VFS made SQLite's default VFS in the test process: LD_PRELOAD of
#     acsecure-default.so (Tests/GRDBClient/OwnSuite/acsecure-default.c), which calls
#     ACSecureSQLiteRegister(1) at the process's first sqlite3_open_v2, so every database the suite
#     opens is encrypted (checked: the run's temporary directory and a probe database).
# Each test class runs in its own process (scripts/grdb-own-suite.py): a test that crashes the
# process costs that test only. The tests that pass on plain SQLite but not on acsecure run once
# more, alone, on acsecure; then the report: both runs' counts and those tests grouped by cause
# (the VFS refusing WAL, or the failure's message), flaky ones apart.
#
#   scripts/grdb-own-suite.sh        prints the report; its last line starts "grdb-own-suite:"
# environment: SWIFT_SCRATCH_PATH (default .build; the GRDB checkout and its build go in
#   $SWIFT_SCRATCH_PATH/grdb-own-suite), GRDB_OWN_SUITE_OUT (default $SWIFT_SCRATCH_PATH/grdb-own-suite/results:
#   plain.tsv, acsecure.tsv, recheck.tsv, report.txt, build.log), KEEP=1 keeps the temp dir,
#   GRDB_OWN_SUITE_CLASS_TIMEOUT (seconds a class may take, default 900).
# Exits non-zero when the suite could not be built or run, or acsecure was not in use; not for
# failing tests (this measures).
set -euo pipefail

root="$(cd -P "$(dirname "$0")/.." && pwd)"
scratch="${SWIFT_SCRATCH_PATH:-$root/.build}"
version=7.10.0
base="$scratch/grdb-own-suite"
src="$base/GRDB.swift-$version"
out="${GRDB_OWN_SUITE_OUT:-$base/results}"
work="$(mktemp -d "${TMPDIR:-/tmp}/acsecure-grdb-own.XXXXXX")"
if [ "${KEEP:-0}" = 1 ]; then echo "grdb-own-suite: keeping $work" >&2; else trap 'rm -rf "$work"' EXIT; fi
mkdir -p "$base" "$out"
start=$SECONDS
"$root/scripts/install-deps.sh"

# GRDB.swift's sources at the tag, from the same mirror SwiftPM resolves https://github.com/groue/GRDB.swift from.
if [ ! -f "$src/Package.swift" ]; then
    rm -rf "$src.tmp"
    git -c advice.detachedHead=false clone --quiet --branch "$version" https://github.com/groue/GRDB.swift "$src.tmp"
    mv "$src.tmp" "$src"
fi
echo "grdb-own-suite: building GRDB.swift $version and its tests (debug)" >&2
if ! swift build --package-path "$src" --scratch-path "$base/build" --build-tests >"$out/build.log" 2>&1; then
    tail -40 "$out/build.log" >&2
    echo "grdb-own-suite: FAIL: GRDB.swift's tests did not build (log: $out/build.log)" >&2
    exit 1
fi
tests="$(swift build --package-path "$src" --scratch-path "$base/build" --show-bin-path)/GRDBPackageTests.xctest"
echo "grdb-own-suite: built in $((SECONDS - start)) s" >&2

# The acsecure VFS as a C user gets it, and the preloaded library that makes it the default.
"$root/scripts/install-c-library.sh" "$work/prefix" >"$work/install.log" 2>&1 || { cat "$work/install.log" >&2; exit 1; }
read -r -a flags <<<"$(PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig" pkg-config --cflags --libs acsecuresqlite)"
preload="$work/acsecure-default.so"
"${CC:-cc}" -std=c11 -Wall -Wextra -Werror -O2 -shared -fPIC "$root/Tests/GRDBClient/OwnSuite/acsecure-default.c" "${flags[@]}" -ldl -o "$preload"

export ACSECURE_HOME="$work/store" ACSECURE_APP_ID="grdb-own-suite" ACSECURE_CREATE_STORE=1
# The preload works: a database the sqlite3 shell creates through it is encrypted.
LD_PRELOAD="$preload" sqlite3 "$work/probe.db" "CREATE TABLE t(x); INSERT INTO t VALUES ('GRDB-OWN-SUITE-PROBE');" >/dev/null
if head -c 16 "$work/probe.db" | grep -q "SQLite format 3" || grep -q "GRDB-OWN-SUITE-PROBE" "$work/probe.db"; then
    echo "grdb-own-suite: FAIL: the preloaded library did not make acsecure the default VFS (probe.db is plain SQLite)" >&2
    exit 1
fi

runner=(python3 "$root/scripts/grdb-own-suite.py")
mkdir "$work/tmp-plain" "$work/tmp-acsecure"
echo "grdb-own-suite: running the suite on plain SQLite" >&2
TMPDIR="$work/tmp-plain" "${runner[@]}" run --binary "$tests" --results "$out/plain.tsv" >&2
echo "grdb-own-suite: running the suite with acsecure as SQLite's default VFS" >&2
TMPDIR="$work/tmp-acsecure" "${runner[@]}" run --binary "$tests" --preload "$preload" --results "$out/acsecure.tsv" >&2
# acsecure was in use: its lock files (<database>-aclock, never removed) are in the run's TMPDIR
# (GRDB's DatabaseMigrator.hasSchemaChanges opens and deletes a temporary database there).
# (-print -quit: with pipefail, a find still writing when grep -q has exited dies of SIGPIPE, and
# the check failed whenever there were many lock files.)
if ! find "$work/tmp-acsecure" -name '*-aclock' -print -quit | grep -q .; then
    echo "grdb-own-suite: FAIL: no acsecure lock file in the acsecure run's TMPDIR: was the VFS in use?" >&2
    exit 1
fi

# The tests lost on acsecure, once more alone.
awk -F'\t' 'NR == FNR { if ($1 == "ok") ok[$2] = 1; next } ($2 in ok) && $1 != "ok" { print $2 }' \
    "$out/plain.tsv" "$out/acsecure.tsv" >"$out/lost.txt"
recheck=()
if [ -s "$out/lost.txt" ]; then
    echo "grdb-own-suite: running the $(wc -l <"$out/lost.txt") tests lost on acsecure once more" >&2
    mkdir "$work/tmp-recheck"
    TMPDIR="$work/tmp-recheck" "${runner[@]}" run --binary "$tests" --preload "$preload" --tests "$out/lost.txt" --results "$out/recheck.tsv" >&2
    recheck=(--recheck "$out/recheck.tsv")
fi
"${runner[@]}" compare --plain "$out/plain.tsv" --acsecure "$out/acsecure.tsv" "${recheck[@]}" --report "$out/report.txt"
echo "grdb-own-suite: $((SECONDS - start)) s in all; results in $out" >&2
