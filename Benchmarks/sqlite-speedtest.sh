#!/usr/bin/env bash
# SQLite's own benchmark, speedtest1, on these stacks in the same run, alternating rounds:
#   plain             the system libsqlite3, default (unix) VFS
#   acsecure          the system libsqlite3, VFS "acsecure" (libACSecureSQLite.so, installed into a
#                     temp prefix), with the engine's read cache and the VFS's write cache at their
#                     default sizes (16 MiB each; 4 MiB write cache per temporary database)
#   acsecure-nocache  the same with ACSECURE_READ_CACHE_MIB=0 (no read cache; the write cache stays)
#   sqlcipher         Debian's libsqlcipher (SQLCipher 3.4.1, SQLite 3.15; its defaults), PRAGMA key
#                     via speedtest1's --key
#   sqlcipher4        SQLCipher 4 (4.12.0, SQLite 3.51.1), its defaults, PRAGMA key via --key:
#                     Benchmarks/sqlcipher4.sh compiles it from the amalgamation in PyPI's sqlcipher3
#                     sdist with the flags of the system libsqlite3, against the system's libcrypto
#   sqlcipher4-nokey  the same library without a key: SQLite 3.51.1 built as the system's 3.40.1
#                     is (plus SQLCipher's hooks), the honest base for SQLCipher 4's own cost
# each in rollback-journal mode (speedtest1's default, DELETE) and in WAL mode (--journal wal), and
# reports, per mode and --size, each stack's median TOTAL time over the rounds and its ratio to plain
# in the same mode (also per speedtest1 test) and its median peak RSS (/usr/bin/time), as Markdown
# tables (with a summary of every ratio at the end) and a gnuplot chart.
#
# WAL: speedtest1 runs "PRAGMA journal_mode=wal" and ignores what it answers, so a stack that
# refuses WAL (the acsecure VFS does today) would silently run in rollback mode. Before the runs,
# each stack's own binary opens a fresh database the way speedtest1 does (VFS, key), asks for WAL,
# writes, and asks again (--journal-check): a stack that answers anything but "wal" is reported as
# "refused" (with what it answered) and not run in WAL mode. When a stack gains WAL it is measured
# with no change here.
#
# speedtest1.c is not in this repository: it is fetched from the Debian source package of sqlite3
# (the version matching the system libsqlite3) by scripts/debian-source.sh.
#
#   Benchmarks/sqlite-speedtest.sh [ROUNDS [SIZES]]      default 3 "50 200" (about 12 min on this shared
#                                                        2-core machine: SQLCipher 3 and 4 take most)
# environment: OUT (default Benchmarks/.build/sqlite-speedtest) for sources, binaries, raw outputs,
#   results.md and the chart; DBDIR (default $OUT/db) where the databases are written;
#   ACSECURE_READ_CACHE_MIB (default unset: 16 MiB) for the acsecure stack;
#   STACKS (default: all six above, in that order) and MODES (default "rollback wal") to run fewer;
#   SQLCIPHER4_DIR (default Benchmarks/.build/sqlcipher4), SQLCIPHER4_FROM and SQLCIPHER4_CRYPTO
#   for Benchmarks/sqlcipher4.sh; SQLCIPHER4_CACHE (default unset: the library's own default, 2 MB
#   as for every other stack) passes --cachesize to both sqlcipher4 stacks (-2000 to give
#   SQLCIPHER4_FROM=wheel, compiled with -8000, the same page cache as the others).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
rounds="${1:-3}"
sizes="${2:-50 200}"
out="${OUT:-$root/Benchmarks/.build/sqlite-speedtest}"
dbdir="${DBDIR:-$out/db}"
all_stacks="plain acsecure acsecure-nocache sqlcipher sqlcipher4 sqlcipher4-nokey"
stacks="${STACKS:-$all_stacks}"
modes="${MODES:-rollback wal}"
sqlcipher4_cache="${SQLCIPHER4_CACHE:-}"
for s in $stacks; do case " $all_stacks " in *" $s "*) ;; *) echo "sqlite-speedtest: unknown stack $s (stacks: $all_stacks)" >&2; exit 2 ;; esac; done
case " $stacks " in *" plain "*) ;; *) echo "sqlite-speedtest: STACKS must include plain (every ratio is to plain)" >&2; exit 2 ;; esac
for m in $modes; do case "$m" in rollback|wal) ;; *) echo "sqlite-speedtest: unknown mode $m (modes: rollback wal)" >&2; exit 2 ;; esac; done
mkdir -p "$out/src" "$out/raw" "$dbdir"
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"

# ---- speedtest1.c from Debian's source package
src="$out/src/speedtest1.c"
if [ ! -f "$src" ]; then
    orig="$("$root/scripts/debian-source.sh" sqlite3 "$out/src")"
    tar -xJf "$orig" -C "$out/src" --wildcards '*/test/speedtest1.c'
    mv "$out"/src/sqlite3-*/test/speedtest1.c "$src"
fi
for pkg in libsqlite3-dev libsqlcipher-dev gnuplot-nox time; do
    dpkg -s "$pkg" >/dev/null 2>&1 || { $sudo apt-get update -qq; DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$pkg" >/dev/null; }
done

# ---- binaries
"$root/scripts/install-c-library.sh" "$out/prefix" >&2
export PKG_CONFIG_PATH="$out/prefix/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
# speedtest1 knows only preinstalled VFSes (--vfs NAME): its main runs after ours has registered
# "acsecure". The same main, in every stack's binary, answers --journal-check (see above).
cat > "$out/src/speedtest-main.c" <<'C'
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sqlite3.h>
#ifdef WITH_ACSECURE
#include <ACSecureFile/ACSecureServices.h>
#include <ACSecureFile/ACSecureSQLite.h>
#endif
int speedtest1_main(int argc, char **argv);
static int first_column(void *into, int n, char **values, char **names) {
    (void)names;
    if (n > 0 && values[0]) snprintf((char *)into, 64, "%s", values[0]);
    return 0;
}
/* --journal-check MODE DB [--vfs NAME] [--key KEY]: opens DB as speedtest1 does, sets the journal
 * mode, writes, and prints "<SQLite version> <mode the PRAGMA answered> <mode in force after the
 * write> [<error message>]", "error" for a statement that failed. */
static int journal_check(int argc, char **argv) {
    const char *mode = argv[2], *path = argv[3], *vfs = 0, *key = 0;
    for (int i = 4; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--vfs") == 0) vfs = argv[i + 1];
        else if (strcmp(argv[i], "--key") == 0) key = argv[i + 1];
        else { fprintf(stderr, "--journal-check: unknown option %s\n", argv[i]); return 2; }
    }
    sqlite3 *db;
    char asked[64] = "error", after[64] = "error", *sql;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, vfs) != SQLITE_OK) { fprintf(stderr, "--journal-check: cannot open %s\n", path); return 1; }
    if (key) { sql = sqlite3_mprintf("PRAGMA key('%q')", key); sqlite3_exec(db, sql, 0, 0, 0); sqlite3_free(sql); }
    sql = sqlite3_mprintf("PRAGMA journal_mode=%s", mode);
    int rc = sqlite3_exec(db, sql, first_column, asked, 0);
    sqlite3_free(sql);
    if (rc == SQLITE_OK) rc = sqlite3_exec(db, "CREATE TABLE t(x); INSERT INTO t VALUES (1)", 0, 0, 0);
    if (rc == SQLITE_OK) rc = sqlite3_exec(db, "PRAGMA journal_mode", first_column, after, 0);
    printf("%s %s %s %s\n", sqlite3_libversion(), asked, after, rc == SQLITE_OK ? "" : sqlite3_errmsg(db));
    sqlite3_close(db);
    return 0;
}
int main(int argc, char **argv) {
#ifdef WITH_ACSECURE
    /* File calls start services from the environment only when the store exists: create it here. */
    if (ACSecureServicesStart(getenv("ACSECURE_APP_ID"), getenv("ACSECURE_HOME")) != 0) { perror("ACSecureServicesStart"); return 1; }
    if (ACSecureSQLiteRegister(0) != SQLITE_OK) { fprintf(stderr, "cannot register acsecure\n"); return 1; }
#endif
    if (argc >= 4 && strcmp(argv[1], "--journal-check") == 0) return journal_check(argc, argv);
    return speedtest1_main(argc, argv);
}
C
read -r -a vfs_flags <<<"$(pkg-config --cflags --libs acsecuresqlite)"
read -r -a cipher_flags <<<"$(pkg-config --cflags --libs sqlcipher)"
cc -O2 -w -Dmain=speedtest1_main -c "$src" -o "$out/speedtest1.o"
cc -O2 -DWITH_ACSECURE "$out/src/speedtest-main.c" "$out/speedtest1.o" "${vfs_flags[@]}" -o "$out/speedtest1"
# SQLCipher 3.4 is SQLite 3.15: build speedtest1 against its own headers (plus a constant it lacks, used
# only with --reserve).
cc -O2 -w -DSQLITE_HAS_CODEC -DSQLITE_FCNTL_RESERVE_BYTES=38 -Dmain=speedtest1_main "${cipher_flags[@]}" -c "$src" -o "$out/speedtest1-sqlcipher.o"
cc -O2 "$out/src/speedtest-main.c" "$out/speedtest1-sqlcipher.o" "${cipher_flags[@]}" -o "$out/speedtest1-sqlcipher"
versions="libsqlite3 $(pkg-config --modversion sqlite3) (speedtest1.c from the same Debian source package), sqlcipher $(pkg-config --modversion sqlcipher) (libsqlcipher-dev $(dpkg-query -W -f '${Version}' libsqlcipher-dev))"
case " $stacks " in *" sqlcipher4"*)
    # SQLCipher 4: the same speedtest1 object as plain's (the system's sqlite3.h; the API is
    # backwards compatible).
    sqlcipher4_pc="$("$root/Benchmarks/sqlcipher4.sh" "${SQLCIPHER4_DIR:-$root/Benchmarks/.build/sqlcipher4}")"
    read -r -a cipher4_flags <<<"$(PKG_CONFIG_PATH="$sqlcipher4_pc" pkg-config --libs sqlcipher4)"
    cc -O2 "$out/src/speedtest-main.c" "$out/speedtest1.o" "${cipher4_flags[@]}" -o "$out/speedtest1-sqlcipher4"
    ! ldd "$out/speedtest1-sqlcipher4" | grep -q 'libsqlite3\.so' || { echo "sqlite-speedtest: speedtest1-sqlcipher4 loads the system libsqlite3" >&2; exit 1; }
    pc4() { PKG_CONFIG_PATH="$sqlcipher4_pc" pkg-config "$@" sqlcipher4; }
    versions="$versions, sqlcipher4 $(pc4 --modversion) (SQLite $(pc4 --variable=sqlite_version), $(pc4 --variable=source), libcrypto: $(pc4 --variable=crypto)${sqlcipher4_cache:+; --cachesize $sqlcipher4_cache})" ;;
esac
echo "sqlite-speedtest: $versions" >&2
echo "$versions" >"$out/versions.txt"

# ---- runs
export ACSECURE_HOME="$out/store" ACSECURE_APP_ID="sqlite-speedtest"
# The command line of STACK, without the database: speedtest1 or its --journal-check share it.
stack_cmd() { # stack_cmd STACK  (sets the array cmd)
    case "$1" in
        plain) cmd=("$out/speedtest1") ;;
        acsecure) cmd=("$out/speedtest1" --vfs acsecure) ;;
        acsecure-nocache) cmd=(env ACSECURE_READ_CACHE_MIB=0 "$out/speedtest1" --vfs acsecure) ;;
        sqlcipher) cmd=("$out/speedtest1-sqlcipher" --key speedtest-key) ;;
        sqlcipher4) cmd=("$out/speedtest1-sqlcipher4" --key speedtest-key ${sqlcipher4_cache:+--cachesize "$sqlcipher4_cache"}) ;;
        sqlcipher4-nokey) cmd=("$out/speedtest1-sqlcipher4" ${sqlcipher4_cache:+--cachesize "$sqlcipher4_cache"}) ;;
    esac
}
clean_db() { rm -f -- "$1" "$1"-*; }  # the database and its -journal, -wal, -shm, -aclock, ...
rm -f "$out"/raw/*.txt "$out"/raw/*.rss "$out"/raw/*.refused
# Which stacks refuse WAL: --journal-check with the stack's own binary, VFS and key.
declare -A refused=()
case " $modes " in *" wal "*)
    for stack in $stacks; do
        stack_cmd "$stack"
        db="$dbdir/check-$stack.db"
        clean_db "$db"
        # --vfs and --key come after the database for --journal-check; --cachesize is speedtest1's only.
        bin=() opts=()
        for ((i = 0; i < ${#cmd[@]}; i++)); do
            case "${cmd[i]}" in
                --vfs|--key) opts+=("${cmd[i]}" "${cmd[i + 1]}"); i=$((i + 1)) ;;
                --cachesize) i=$((i + 1)) ;;
                *) bin+=("${cmd[i]}") ;;
            esac
        done
        answer="$("${bin[@]}" --journal-check wal "$db" "${opts[@]}")" || { echo "sqlite-speedtest: $stack --journal-check failed" >&2; exit 1; }
        clean_db "$db"
        read -r version asked after message <<<"$answer"
        if [ "$asked" != wal ] || [ "$after" != wal ]; then
            refused[$stack]="$asked"
            if [ "$asked" = error ]; then why="PRAGMA journal_mode=WAL failed: ${message:-no message}"; else why="PRAGMA journal_mode=WAL answered $asked, $after after a write"; fi
            echo "$why (SQLite $version)" >"$out/raw/wal-$stack.refused"
            echo "sqlite-speedtest: $stack refuses WAL ($why): reported as refused" >&2
        else
            echo "sqlite-speedtest: $stack runs in WAL mode (SQLite $version)" >&2
        fi
    done ;;
esac
run() { # run MODE STACK SIZE ROUND
    local mode="$1" stack="$2" size="$3" r="$4" db="$dbdir/speedtest-$2.db" journal=()
    local name="$mode-$stack-$size-$r"
    [ "$mode" = wal ] && journal=(--journal wal)
    stack_cmd "$stack"
    clean_db "$db"
    # Peak RSS (kB) of each run, from GNU time, into its own file.
    /usr/bin/time -f "%M" -o "$out/raw/$name.rss" "${cmd[@]}" "${journal[@]}" --size "$size" "$db" >"$out/raw/$name.txt" 2>&1 ||
        { echo "sqlite-speedtest: $stack --size $size ($mode) failed:" >&2; tail -5 "$out/raw/$name.txt" >&2; exit 1; }
    clean_db "$db"
    printf '%s%s size %s round %s: %s\n' "$stack" "$([ "$mode" = wal ] && echo ' WAL')" "$size" "$r" "$(grep TOTAL "$out/raw/$name.txt" | awk '{print $NF}')" >&2
}
# The machine's load before and after (the runs are only comparable within one run).
load_before="$(uptime)"
echo "sqlite-speedtest: before: $load_before" >&2
forward=()
for mode in $modes; do for stack in $stacks; do
    [ "$mode" = wal ] && [ -n "${refused[$stack]:-}" ] && continue
    forward+=("$mode $stack")
done; done
for size in $sizes; do
    for r in $(seq 1 "$rounds"); do
        # Alternate the order too (reversed every other round), so no stack always runs after the
        # same neighbour.
        order=("${forward[@]}")
        if [ $((r % 2)) = 0 ]; then order=(); for ((i = ${#forward[@]} - 1; i >= 0; i--)); do order+=("${forward[i]}"); done; fi
        for pair in "${order[@]}"; do run $pair "$size" "$r"; done
    done
done

load_after="$(uptime)"
echo "sqlite-speedtest: after: $load_after" >&2

# ---- medians and ratios
python3 - "$out" "$rounds" "$sizes" "$stacks" "$modes" "$load_before" "$load_after" <<'PY'
import glob, os, re, statistics, sys
out, rounds, sizes, stacks, modes = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split(), sys.argv[5].split()
load_before, load_after = sys.argv[6].strip(), sys.argv[7].strip()
line = re.compile(r"^\s*(\d+) - (.*?)\.*\s+(\d+\.\d+)s\s*$")
total = re.compile(r"TOTAL\.*\s+(\d+\.\d+)s")
def parse(path):
    tests, t = {}, None
    for l in open(path):
        m = line.match(l)
        if m: tests[int(m.group(1))] = (m.group(2).strip(), float(m.group(3)))
        m = total.search(l)
        if m: t = float(m.group(1))
    return tests, t
def refusal(s):
    p = f"{out}/raw/wal-{s}.refused"
    return open(p).read().strip() if os.path.exists(p) else None
md = [f"Versions: {open(f'{out}/versions.txt').read().strip()}.", "", f"Load: before `{load_before}`, after `{load_after}`."]
chart = []
summary = {}  # (mode, size) -> {stack: (median, ratio, rss)} or refusal string
others = [s for s in stacks if s != "plain"]
for mode in modes:
    for size in sizes:
        runs = {s: [parse(p) for p in sorted(glob.glob(f"{out}/raw/{mode}-{s}-{size}-*.txt"))] for s in stacks}
        ran = [s for s in stacks if runs[s]]
        med = {s: statistics.median(t for _, t in runs[s]) for s in ran}
        rss = {s: statistics.median(int(open(p).read().split()[-1]) for p in glob.glob(f"{out}/raw/{mode}-{s}-{size}-*.rss")) for s in ran}
        label = "" if mode == "rollback" else ", WAL"
        md.append(f"\n### `--size {size}`{label} ({rounds} rounds, median TOTAL)\n")
        md.append("| stack | median TOTAL (s) | ratio to plain | median peak RSS (MiB) |")
        md.append("|---|---:|---:|---:|")
        row = summary.setdefault((mode, size), {})
        for s in stacks:
            if s in med:
                md.append(f"| {s} | {med[s]:.3f} | {med[s] / med['plain']:.2f}× | {rss[s] / 1024:.1f} |")
                row[s] = (med[s], med[s] / med["plain"], rss[s] / 1024)
            else:
                md.append(f"| {s} | refused | refused | – |" if refusal(s) else f"| {s} | – | – | – |")
                row[s] = "refused" if refusal(s) else None
        notes = [f"{s}: WAL refused ({refusal(s)})" for s in stacks if s not in med and refusal(s)]
        if "sqlcipher4" in med and "sqlcipher4-nokey" in med:
            notes.append(f"sqlcipher4 ÷ sqlcipher4-nokey (the same SQLite, keyed ÷ unkeyed): {med['sqlcipher4'] / med['sqlcipher4-nokey']:.2f}×")
        if notes: md.append("\n" + "; ".join(notes) + ".")
        chart.append((f"--size {size}{'' if mode == 'rollback' else ' WAL'}", [med[s] / med["plain"] if s in med else None for s in others]))
        md.append(f"\nPer test (`--size {size}`{label}): median time ÷ plain's median\n")
        md.append("| test | plain (s) | " + " | ".join(others) + " |")
        md.append("|---|---:|" + "---:|" * len(others))
        ids = sorted(runs["plain"][0][0])
        for i in ids:
            name = runs["plain"][0][0][i][0]
            m = {s: statistics.median(r[0][i][1] for r in runs[s] if i in r[0]) for s in ran if all(i in r[0] for r in runs[s])}
            if "plain" not in m: continue
            base = m["plain"]
            cell = lambda s: (f"{m[s] / base:.2f}×" if base > 0 else "–") if s in m else ("refused" if refusal(s) and s not in ran else "n/a")
            md.append(f"| {i} {name} | {base:.3f} | " + " | ".join(cell(s) for s in others) + " |")
# Every ratio in one table: a row per stack, a column per mode and size.
cols = [(mode, size) for mode in modes for size in sizes]
md.append(f"\n### Summary ({rounds} rounds): median TOTAL ÷ plain's in the same mode (median peak RSS, MiB)\n")
md.append("| stack | " + " | ".join(f"{'rollback' if m == 'rollback' else 'WAL'} `--size {z}`" for m, z in cols) + " |")
md.append("|---|" + "---:|" * len(cols))
for s in stacks:
    def cell(c):
        v = summary[c].get(s)
        if v == "refused": return "refused"
        if v is None: return "–"
        return f"{v[1]:.2f}× ({v[2]:.1f})"
    md.append(f"| {s} | " + " | ".join(cell(c) for c in cols) + " |")
open(f"{out}/results.md", "w").write("\n".join(md) + "\n")
with open(f"{out}/ratios.dat", "w") as f:
    f.write("# size " + " ".join(f"{s}/plain" for s in others) + "  (? = refused or not run)\n")
    for label, values in chart: f.write(f'"{label}" ' + " ".join("?" if v is None else f"{v:.4f}" for v in values) + "\n")
print("\n".join(md))
PY
if command -v gnuplot >/dev/null; then
    titles=""
    col=2
    for s in $stacks; do
        case "$s" in
            plain) continue ;;
            acsecure) t="acsecure VFS, read cache" ;;
            acsecure-nocache) t="acsecure VFS, no read cache" ;;
            sqlcipher) t="SQLCipher 3.4.1" ;;
            sqlcipher4) t="SQLCipher 4" ;;
            sqlcipher4-nokey) t="SQLCipher 4's SQLite, no key" ;;
        esac
        if [ -z "$titles" ]; then titles="\"$out/ratios.dat\" using $col:xtic(1) title \"$t\""; else titles="$titles, \"\" using $col title \"$t\""; fi
        col=$((col + 1))
    done
    note=""
    if ls "$out"/raw/*.refused >/dev/null 2>&1; then note="\\n(no bar: $(ls "$out"/raw/*.refused | sed 's|.*/wal-||; s|\.refused$||' | paste -sd, - | sed 's/,/, /g') refused WAL)"; fi
    gnuplot <<GP
set terminal svg size 960,420 font "sans,12"
set output "$out/sqlite-speedtest.svg"
set title "speedtest1: time ÷ plain SQLite in the same mode (median of $rounds rounds)$note"
set datafile missing "?"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set yrange [0:*]
set ylabel "ratio to plain (lower is better)"
set grid ytics
set key outside right top
set arrow from graph 0, first 1 to graph 1, first 1 nohead dt 2
plot $titles
GP
    echo "sqlite-speedtest: chart $out/sqlite-speedtest.svg" >&2
fi
echo "sqlite-speedtest: results in $out/results.md" >&2
