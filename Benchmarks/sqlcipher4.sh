#!/usr/bin/env bash
# Lays out SQLCipher 4 (the current release, the one users pick) as a C library beside the project,
# for Benchmarks/sqlite-speedtest.sh. Nothing of it is committed: it lives in DIR (default
# Benchmarks/.build/sqlcipher4, ignored by git).
#
# Where it comes from: PyPI's `sqlcipher3-binary` wheel (pinned version and SHA-256, fetched with
# `pip download`). PyPI and Debian's mirrors are the only registries a script reaches here, and
# neither has the current SQLCipher's sources in a form that builds without other downloads:
# Debian 12 ships SQLCipher 3.4.1, Debian 13's source package is 4.6.1 and unstable's 4.10 (and
# need a deb-src entry for another release), and pip cannot fetch the `sqlcipher3` sdist without
# running its setup, which fetches OpenSSL through conan. The wheel's Python extension `sqlcipher3/_sqlite3.cpython-*.so` is SQLCipher's amalgamation
# (SQLCipher 4.12.0 community, SQLite 3.51.1 for wheel 0.6.0) linked together with the Python
# binding, and it exports the whole SQLite C API (sqlite3_open_v2, sqlite3_key, ...), so a C
# program links against it like against libsqlcipher. What else it needs:
#   - libpython's symbols, which only the binding uses (a Python module does not link libpython):
#     a stub library, libsqlcipher4-pystub.so, defines each of them as a function that aborts, so
#     the loader resolves them; no Python code runs, none of them is called.
#   - libcrypto: the wheel bundles OpenSSL 3.5 (sqlcipher3_binary.libs/libcrypto-*.so.3, found
#     through the module's RPATH $ORIGIN/../sqlcipher3_binary.libs). By default that name points at
#     the system's libcrypto.so.3 (OpenSSL 3.0, the one the acsecure engine and Debian's SQLCipher
#     3.4.1 use), so every stack encrypts with the same OpenSSL; SQLCIPHER4_CRYPTO=wheel keeps the
#     wheel's own. The module needs only OPENSSL_3.0.0 symbols (checked below).
# DIR then holds
#   lib/libsqlcipher4.so             the module, renamed (no SONAME; programs link -lsqlcipher4)
#   lib/libsqlcipher4-pystub.so      the stubs
#   sqlcipher3_binary.libs/          libcrypto-*.so.3 (a symbolic link to the system's by default)
#   lib/pkgconfig/sqlcipher4.pc      pkg-config --cflags --libs sqlcipher4 (rpath included); Version
#                                    is SQLCipher's, variable sqlite_version the embedded SQLite's
#   sqlcipher4-version               prints "sqlite <version> sqlcipher <cipher_version> <OpenSSL>"
# Programs compile against the system's sqlite3.h (libsqlite3-dev; the API is backwards compatible)
# and use PRAGMA key (sqlite3_key is exported too, but the system header declares it only with
# SQLITE_HAS_CODEC).
#
#   Benchmarks/sqlcipher4.sh [DIR]        prints DIR/lib/pkgconfig on stdout
# environment: SQLCIPHER4_WHEEL (default 0.6.0; another version skips the SHA-256 check),
#   SQLCIPHER4_CRYPTO (system | wheel, default system), CC (default cc).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${1:-$root/Benchmarks/.build/sqlcipher4}"
wheel_version="${SQLCIPHER4_WHEEL:-0.6.0}"
crypto="${SQLCIPHER4_CRYPTO:-system}"
cc="${CC:-cc}"
# sqlcipher3_binary-0.6.0-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.whl
pinned_sha256=421abf7a81e134bd808a7933d296f408aaf75475d6561d4a21e1f285b75445aa
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
say() { echo "sqlcipher4: $*" >&2; }

case "$crypto" in system|wheel) ;; *) say "SQLCIPHER4_CRYPTO must be system or wheel, not $crypto"; exit 2 ;; esac
[ "$(uname -m)" = x86_64 ] || { say "the pinned wheel is for x86_64, this is $(uname -m)"; exit 1; }
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
stamp="$dir/.done-$wheel_version-$crypto"
if [ -f "$stamp" ] && [ -f "$dir/lib/pkgconfig/sqlcipher4.pc" ]; then
    echo "$dir/lib/pkgconfig"
    exit 0
fi
rm -f "$dir"/.done-*

# ---- tools: pip (Debian's python3-pip on a fresh machine), nm/readelf (binutils), cc, sqlite3.h, libcrypto
need=()
python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip)
command -v nm >/dev/null && command -v readelf >/dev/null || need+=(binutils)
command -v "$cc" >/dev/null || need+=(gcc libc6-dev)
dpkg -s libsqlite3-dev >/dev/null 2>&1 || need+=(libsqlite3-dev)
dpkg -s libssl-dev >/dev/null 2>&1 || need+=(libssl-dev)
if [ ${#need[@]} -gt 0 ]; then
    say "installing ${need[*]}"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi

# ---- the wheel: one file, whatever Python runs this (the module's SQLite does not depend on it)
dl="$dir/download"
rm -rf "$dl" "$dir/wheel"
mkdir -p "$dl"
say "pip download sqlcipher3-binary==$wheel_version (cp311, manylinux2014_x86_64)"
python3 -m pip download --quiet --no-deps --only-binary=:all: --platform manylinux2014_x86_64 \
    --python-version 3.11 --implementation cp --abi cp311 -d "$dl" "sqlcipher3-binary==$wheel_version" >&2
whl="$(ls "$dl"/sqlcipher3_binary-*.whl)"
sha="$(sha256sum "$whl" | cut -d' ' -f1)"
if [ "$wheel_version" = 0.6.0 ] && [ "$sha" != "$pinned_sha256" ]; then
    say "$whl: SHA-256 $sha, expected $pinned_sha256"
    exit 1
fi
python3 -m zipfile -e "$whl" "$dir/wheel"
module="$(ls "$dir"/wheel/sqlcipher3/_sqlite3*.so)"
bundled="$(ls "$dir"/wheel/sqlcipher3_binary.libs/libcrypto-*.so.3)"

# ---- lay it out
rm -rf "$dir/lib" "$dir/sqlcipher3_binary.libs"
mkdir -p "$dir/lib/pkgconfig" "$dir/sqlcipher3_binary.libs"
cp "$module" "$dir/lib/libsqlcipher4.so"
crypto_name="$(basename "$bundled")"
if [ "$crypto" = system ]; then
    other="$(nm -D --undefined-only "$dir/lib/libsqlcipher4.so" | grep -o '@OPENSSL_[0-9.]*' | sort -u | grep -vx '@OPENSSL_3.0.0' || true)"
    [ -z "$other" ] || { say "the module needs OpenSSL symbols newer than 3.0 ($other): use SQLCIPHER4_CRYPTO=wheel"; exit 1; }
    system_crypto="$("$cc" -print-file-name=libcrypto.so.3)"
    system_crypto="$(readlink -f "$system_crypto")"
    [ -f "$system_crypto" ] || { say "no system libcrypto.so.3 (libssl-dev)"; exit 1; }
    ln -s "$system_crypto" "$dir/sqlcipher3_binary.libs/$crypto_name"
else
    cp "$bundled" "$dir/sqlcipher3_binary.libs/$crypto_name"
fi

# ---- libpython stubs: every undefined symbol that is not libc's, libpthread's or libcrypto's
{
    echo '/* Generated by Benchmarks/sqlcipher4.sh: libpython symbols of the sqlcipher3 module, never called. */'
    echo '#include <stdlib.h>'
    nm -D --undefined-only "$dir/lib/libsqlcipher4.so" | awk '$1 == "U" && $2 !~ /@/ && $2 ~ /^_?Py/ { print $2 }' | sort -u |
        while read -r sym; do echo "void $sym(void) { abort(); }"; done
} >"$dir/pystub.c"
"$cc" -O2 -shared -fPIC -w "$dir/pystub.c" -o "$dir/lib/libsqlcipher4-pystub.so"

# ---- probe: versions, and that a program linked this way runs
cat >"$dir/sqlcipher4-version.c" <<'C'
/* Prints "sqlite <version> sqlcipher <cipher_version> <provider> <provider version>"; with a path,
 * also writes a keyed database there and checks that it reads back with the key and not without. */
#include <stdio.h>
#include <sqlite3.h>
static int show(void *unused, int n, char **values, char **names) { (void)unused; (void)names; for (int i = 0; i < n; i++) printf(" %s", values[i] ? values[i] : "NULL"); return 0; }
static int count(sqlite3 *db) { sqlite3_stmt *s; int n = -1; if (sqlite3_prepare_v2(db, "SELECT count(*) FROM t", -1, &s, 0) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW) n = sqlite3_column_int(s, 0); sqlite3_finalize(s); return n; }
int main(int argc, char **argv) {
    sqlite3 *db;
    if (sqlite3_open(":memory:", &db) != SQLITE_OK || sqlite3_exec(db, "PRAGMA key='probe'", 0, 0, 0) != SQLITE_OK) return 1;
    printf("sqlite %s sqlcipher", sqlite3_libversion());
    if (sqlite3_exec(db, "PRAGMA cipher_version", show, 0, 0) != SQLITE_OK) return 1;
    sqlite3_exec(db, "PRAGMA cipher_provider; PRAGMA cipher_provider_version", show, 0, 0);
    printf("\n");
    sqlite3_close(db);
    if (argc < 2) return 0;
    if (sqlite3_open(argv[1], &db) != SQLITE_OK || sqlite3_exec(db, "PRAGMA key='probe'; CREATE TABLE t(x); INSERT INTO t VALUES ('plaintext-marker')", 0, 0, 0) != SQLITE_OK) return 2;
    sqlite3_close(db);
    sqlite3_open(argv[1], &db); int unkeyed = count(db); sqlite3_close(db);
    sqlite3_open(argv[1], &db); sqlite3_exec(db, "PRAGMA key='probe'", 0, 0, 0); int keyed = count(db); sqlite3_close(db);
    if (unkeyed != -1 || keyed != 1) { fprintf(stderr, "keyed database: %d rows without the key, %d with it\n", unkeyed, keyed); return 3; }
    return 0;
}
C
# -lm -ldl: the module calls log() (FTS5) and dlopen() (extensions) without naming libm or libdl.
libs=(-L"$dir/lib" -lsqlcipher4 -lsqlcipher4-pystub -lm -ldl -Wl,-rpath,"$dir/lib")
"$cc" -O2 "$dir/sqlcipher4-version.c" "${libs[@]}" -o "$dir/sqlcipher4-version"
rm -f "$dir/probe.db"
read -r _ sqlite_version _ cipher_version _ <<<"$("$dir/sqlcipher4-version" "$dir/probe.db")"
grep -q plaintext-marker "$dir/probe.db" && { say "the probe's keyed database is not encrypted"; exit 1; }
rm -f "$dir/probe.db"
[ -n "$cipher_version" ] || { say "the module answers no PRAGMA cipher_version"; exit 1; }
ldd "$dir/sqlcipher4-version" | grep -q 'libsqlite3\.so' && { say "the probe loads the system libsqlite3 too"; exit 1; }
cat >"$dir/lib/pkgconfig/sqlcipher4.pc" <<PC
# Generated by Benchmarks/sqlcipher4.sh from sqlcipher3-binary $wheel_version (libcrypto: $crypto)
libdir=$dir/lib
sqlite_version=$sqlite_version
wheel=sqlcipher3-binary $wheel_version
crypto=$crypto

Name: sqlcipher4
Description: SQLCipher $cipher_version (SQLite $sqlite_version) from PyPI's sqlcipher3-binary $wheel_version
Version: $cipher_version
Libs: -L\${libdir} -lsqlcipher4 -lsqlcipher4-pystub -lm -ldl -Wl,-rpath,\${libdir}
Cflags:
PC
rm -rf "$dl" "$dir/wheel"
touch "$stamp"
say "$("$dir/sqlcipher4-version") (libcrypto: $crypto) in $dir"
echo "$dir/lib/pkgconfig"
