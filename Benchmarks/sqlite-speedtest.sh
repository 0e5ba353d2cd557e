#!/usr/bin/env bash
# SQLite's own benchmark, speedtest1, on three stacks in the same run, alternating rounds:
#   plain             the system libsqlite3, default (unix) VFS
#   acsecure          the system libsqlite3, VFS "acsecure" (libACSecureSQLite.so, installed into a
#                     temp prefix), with the engine's read cache and the VFS's write cache at their
#                     default sizes (16 MiB each; 4 MiB write cache per temporary database)
#   acsecure-nocache  the same with ACSECURE_READ_CACHE_MIB=0 (no read cache; the write cache stays)
#   sqlcipher         Debian's libsqlcipher (SQLCipher defaults), PRAGMA key via speedtest1's --key
# and reports, per --size, each stack's median TOTAL time over the rounds and its ratio to plain
# (also per speedtest1 test) and its median peak RSS (/usr/bin/time), as a Markdown table and a
# gnuplot chart.
#
# speedtest1.c is not in this repository: it is fetched from the Debian source package of sqlite3
# (the version matching the system libsqlite3) by scripts/debian-source.sh.
#
#   Benchmarks/sqlite-speedtest.sh [ROUNDS [SIZES]]      e.g. 5 "50 200"
# environment: OUT (default Benchmarks/.build/sqlite-speedtest) for sources, binaries, raw outputs,
#   results.md and the chart; DBDIR (default $OUT/db) where the databases are written;
#   ACSECURE_READ_CACHE_MIB (default unset: 16 MiB) for the acsecure stack.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
rounds="${1:-5}"
sizes="${2:-50 200}"
out="${OUT:-$root/Benchmarks/.build/sqlite-speedtest}"
dbdir="${DBDIR:-$out/db}"
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
for pkg in libsqlite3-dev libsqlcipher-dev gnuplot-nox; do
    dpkg -s "$pkg" >/dev/null 2>&1 || { $sudo apt-get update -qq; DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$pkg" >/dev/null; }
done

# ---- binaries
"$root/scripts/install-c-library.sh" "$out/prefix" >&2
export PKG_CONFIG_PATH="$out/prefix/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
# speedtest1 knows only preinstalled VFSes (--vfs NAME): its main runs after ours has registered "acsecure".
cat > "$out/src/register-acsecure.c" <<'C'
#include <stdio.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <ACSecureFile/ACSecureServices.h>
#include <ACSecureFile/ACSecureSQLite.h>
int speedtest1_main(int argc, char **argv);
int main(int argc, char **argv) {
    /* File calls start services from the environment only when the store exists: create it here. */
    if (ACSecureServicesStart(getenv("ACSECURE_APP_ID"), getenv("ACSECURE_HOME")) != 0) { perror("ACSecureServicesStart"); return 1; }
    if (ACSecureSQLiteRegister(0) != SQLITE_OK) { fprintf(stderr, "cannot register acsecure\n"); return 1; }
    return speedtest1_main(argc, argv);
}
C
read -r -a vfs_flags <<<"$(pkg-config --cflags --libs acsecuresqlite)"
read -r -a cipher_flags <<<"$(pkg-config --cflags --libs sqlcipher)"
cc -O2 -w -Dmain=speedtest1_main -c "$src" -o "$out/speedtest1.o"
cc -O2 "$out/src/register-acsecure.c" "$out/speedtest1.o" "${vfs_flags[@]}" -o "$out/speedtest1"
# SQLCipher 3.4 is SQLite 3.15: build speedtest1 against its own headers (plus a constant it lacks, used
# only with --reserve).
cc -O2 -w -DSQLITE_HAS_CODEC -DSQLITE_FCNTL_RESERVE_BYTES=38 "$src" "${cipher_flags[@]}" -o "$out/speedtest1-sqlcipher"
echo "sqlite-speedtest: libsqlite3 $(pkg-config --modversion sqlite3) (speedtest1.c from the same Debian source package), sqlcipher $(pkg-config --modversion sqlcipher)" >&2

# ---- runs
export ACSECURE_HOME="$out/store" ACSECURE_APP_ID="sqlite-speedtest"
run() { # run STACK SIZE ROUND
    local stack="$1" size="$2" r="$3" db="$dbdir/speedtest-$1.db"
    rm -f "$db" "$db-journal" "$db-aclock"
    # Peak RSS (kB) of each run, from GNU time, into its own file.
    local timed=(/usr/bin/time -f "%M" -o "$out/raw/$stack-$size-$r.rss")
    case "$stack" in
        plain) "${timed[@]}" "$out/speedtest1" --size "$size" "$db" ;;
        acsecure) "${timed[@]}" "$out/speedtest1" --size "$size" --vfs acsecure "$db" ;;
        acsecure-nocache) ACSECURE_READ_CACHE_MIB=0 "${timed[@]}" "$out/speedtest1" --size "$size" --vfs acsecure "$db" ;;
        sqlcipher) "${timed[@]}" "$out/speedtest1-sqlcipher" --size "$size" --key speedtest-key "$db" ;;
    esac >"$out/raw/$stack-$size-$r.txt" 2>&1 || { echo "sqlite-speedtest: $stack --size $size failed:" >&2; tail -5 "$out/raw/$stack-$size-$r.txt" >&2; exit 1; }
    rm -f "$db" "$db-journal" "$db-aclock"
    printf '%s size %s round %s: %s\n' "$stack" "$size" "$r" "$(grep TOTAL "$out/raw/$stack-$size-$r.txt" | awk '{print $NF}')" >&2
}
rm -f "$out"/raw/*.txt "$out"/raw/*.rss
for size in $sizes; do
    for r in $(seq 1 "$rounds"); do
        # Alternate the order too, so no stack always runs after the same neighbour.
        if [ $((r % 2)) = 1 ]; then order="plain acsecure acsecure-nocache sqlcipher"; else order="sqlcipher acsecure-nocache acsecure plain"; fi
        for stack in $order; do run "$stack" "$size" "$r"; done
    done
done

# ---- medians and ratios
python3 - "$out" "$rounds" "$sizes" <<'PY'
import glob, os, re, statistics, sys
out, rounds, sizes = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
stacks = ["plain", "acsecure", "acsecure-nocache", "sqlcipher"]
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
md = []
chart = []
for size in sizes:
    runs = {s: [parse(p) for p in sorted(glob.glob(f"{out}/raw/{s}-{size}-*.txt"))] for s in stacks}
    med = {s: statistics.median(t for _, t in runs[s]) for s in stacks}
    md.append(f"\n### `--size {size}` ({rounds} rounds, median TOTAL)\n")
    rss = {s: statistics.median(int(open(p).read().split()[-1]) for p in glob.glob(f"{out}/raw/{s}-{size}-*.rss")) for s in stacks}
    md.append("| stack | median TOTAL (s) | ratio to plain | median peak RSS (MiB) |")
    md.append("|---|---:|---:|---:|")
    for s in stacks:
        md.append(f"| {s} | {med[s]:.3f} | {med[s] / med['plain']:.2f}× | {rss[s] / 1024:.1f} |")
    chart.append((size, med["acsecure"] / med["plain"], med["acsecure-nocache"] / med["plain"], med["sqlcipher"] / med["plain"]))
    md.append(f"\nPer test (`--size {size}`): median time ÷ plain's median\n")
    md.append("| test | plain (s) | acsecure | acsecure-nocache | sqlcipher |")
    md.append("|---|---:|---:|---:|---:|")
    ids = sorted(runs["plain"][0][0])
    for i in ids:
        name = runs["plain"][0][0][i][0]
        m = {s: statistics.median(r[0][i][1] for r in runs[s] if i in r[0]) for s in stacks if all(i in r[0] for r in runs[s])}
        if "plain" not in m: continue
        base = m["plain"]
        cell = lambda s: (f"{m[s] / base:.2f}×" if base > 0 else "–") if s in m else "n/a"
        md.append(f"| {i} {name} | {base:.3f} | {cell('acsecure')} | {cell('acsecure-nocache')} | {cell('sqlcipher')} |")
open(f"{out}/results.md", "w").write("\n".join(md) + "\n")
with open(f"{out}/ratios.dat", "w") as f:
    f.write("# size acsecure/plain acsecure-nocache/plain sqlcipher/plain\n")
    for size, a, n, c in chart: f.write(f'"--size {size}" {a:.4f} {n:.4f} {c:.4f}\n')
print("\n".join(md))
PY
if command -v gnuplot >/dev/null; then
    gnuplot <<GP
set terminal svg size 640,400 font "sans,12"
set output "$out/sqlite-speedtest.svg"
set title "speedtest1: time ÷ plain SQLite (median of $rounds rounds)"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set yrange [0:*]
set ylabel "ratio to plain (lower is better)"
set grid ytics
set key top left
set arrow from graph 0, first 1 to graph 1, first 1 nohead dt 2
plot "$out/ratios.dat" using 2:xtic(1) title "acsecure VFS, read cache", "" using 3 title "acsecure VFS, no read cache", "" using 4 title "SQLCipher"
GP
    echo "sqlite-speedtest: chart $out/sqlite-speedtest.svg" >&2
fi
echo "sqlite-speedtest: results in $out/results.md" >&2
