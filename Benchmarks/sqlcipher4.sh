#!/usr/bin/env bash
# Builds SQLCipher 4 (the current release, the one users pick) as a C library beside the project,
# for Benchmarks/sqlite-speedtest.sh. Nothing of it is committed: it lives in DIR (default
# Benchmarks/.build/sqlcipher4, ignored by git).
#
# Where it comes from. PyPI and Debian's mirrors are the only registries a script reaches here.
# Debian 12 ships SQLCipher 3.4.1 (Debian 13's source package is 4.6.1, unstable's 4.10); PyPI's
# `sqlcipher3` sdist 0.6.0 carries SQLCipher's amalgamation, vendor/sqlite3.c and sqlite3.h:
# SQLCipher 4.12.0 community on SQLite 3.51.1. `pip download` fetches it (pinned version and
# SHA-256; pip runs its setup.py only to read its metadata), and this script compiles the
# amalgamation itself:
#   SQLCIPHER4_FROM=sdist (default) compiles it with the flags Debian 12 compiles the system
#     libsqlite3 3.40.1 with (sqlite3's debian/rules: -O2 -fno-strict-aliasing and its -DSQLITE_*
#     list; what its configure adds: FTS4, FTS5, math functions, fdatasync, ...; dpkg-buildflags'
#     hardening), plus what SQLCipher requires (SQLITE_HAS_CODEC, SQLITE_TEMP_STORE=2 as its
#     --with-tempstore=yes, SQLITE_EXTRA_INIT/SHUTDOWN), against the system's libcrypto (OpenSSL
#     3.0, the one the acsecure engine uses). So "sqlcipher4 without a key" is SQLite 3.51.1 built
#     as the system's 3.40.1 is; the compile options that still differ are printed (and kept in
#     DIR/compile-options.diff).
#   SQLCIPHER4_FROM=wheel lays out the Python extension of PyPI's `sqlcipher3-binary` 0.6.0 wheel
#     instead (the same SQLCipher 4.12.0 / SQLite 3.51.1, which exports the whole C API), with
#     abort() stubs for libpython's symbols and, by default, the system's libcrypto in place of the
#     wheel's OpenSSL 3.5 (SQLCIPHER4_CRYPTO=wheel keeps it). That build is UNOPTIMISED (-O0:
#     arguments spilled to the stack, no inlining; without a key it runs speedtest1 1.7-1.9x slower
#     than the system's SQLite), so it is here only to compare with: its keyed-to-unkeyed ratio
#     understates SQLCipher's cost.
# DIR then holds
#   lib/libsqlcipher4.so             the library (programs link -lsqlcipher4; the .pc adds the rpath)
#   include/sqlcipher4/sqlite3.h     SQLCipher's header (sdist only; it declares sqlite3_key)
#   lib/pkgconfig/sqlcipher4.pc      pkg-config --cflags --libs sqlcipher4; Version is SQLCipher's,
#                                    variables sqlite_version, source and crypto say the rest
#   sqlcipher4-version               prints "sqlite <version> sqlcipher <cipher_version> <provider> <its version>"
# The script checks that a keyed database it writes does not contain its plaintext and does not
# open without the key.
#
#   Benchmarks/sqlcipher4.sh [DIR]        prints DIR/lib/pkgconfig on stdout
# environment: SQLCIPHER4_FROM (sdist | wheel, default sdist), SQLCIPHER4_CRYPTO (wheel only:
#   system | wheel, default system), CC (default cc).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${1:-$root/Benchmarks/.build/sqlcipher4}"
from="${SQLCIPHER4_FROM:-sdist}"
crypto="${SQLCIPHER4_CRYPTO:-system}"
cc="${CC:-cc}"
sdist_version=0.6.0  # sqlcipher3-0.6.0.tar.gz: SQLCipher 4.12.0, SQLite 3.51.1
sdist_sha256=a351ae630bd614c2c10ed898b420f7bc817e438153f683f88348c445d6b3a9b1
wheel_version=0.6.0  # sqlcipher3_binary-0.6.0-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.whl
wheel_sha256=421abf7a81e134bd808a7933d296f408aaf75475d6561d4a21e1f285b75445aa
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
say() { echo "sqlcipher4: $*" >&2; }

case "$from" in sdist) crypto=system ;; wheel) ;; *) say "SQLCIPHER4_FROM must be sdist or wheel, not $from"; exit 2 ;; esac
case "$crypto" in system|wheel) ;; *) say "SQLCIPHER4_CRYPTO must be system or wheel, not $crypto"; exit 2 ;; esac
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
stamp="$dir/.done-$from-$crypto"
if [ -f "$stamp" ] && [ -f "$dir/lib/pkgconfig/sqlcipher4.pc" ]; then
    echo "$dir/lib/pkgconfig"
    exit 0
fi
rm -f "$dir"/.done-*

# ---- tools: pip (Debian's python3-pip on a fresh machine), nm (binutils), cc, sqlite3.h, libcrypto
need=()
python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip)
command -v nm >/dev/null || need+=(binutils)
command -v "$cc" >/dev/null || need+=(gcc libc6-dev)
dpkg -s libsqlite3-dev >/dev/null 2>&1 || need+=(libsqlite3-dev)
dpkg -s libssl-dev >/dev/null 2>&1 || need+=(libssl-dev)
if [ ${#need[@]} -gt 0 ]; then
    say "installing ${need[*]}"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi

dl="$dir/download"
rm -rf "$dl" "$dir/unpacked" "$dir/lib" "$dir/include" "$dir/sqlcipher3_binary.libs"
mkdir -p "$dl" "$dir/unpacked" "$dir/lib/pkgconfig"
check_sha256() { # check_sha256 FILE EXPECTED
    local sha
    sha="$(sha256sum "$1" | cut -d' ' -f1)"
    [ "$sha" = "$2" ] || { say "$1: SHA-256 $sha, expected $2"; exit 1; }
}
cflags="" libs=""
if [ "$from" = sdist ]; then
    say "pip download sqlcipher3==$sdist_version (sdist)"
    python3 -m pip download --quiet --no-deps --no-binary=:all: -d "$dl" "sqlcipher3==$sdist_version" >&2
    tarball="$dl/sqlcipher3-$sdist_version.tar.gz"
    check_sha256 "$tarball" "$sdist_sha256"
    tar -xzf "$tarball" -C "$dir/unpacked" "sqlcipher3-$sdist_version/vendor/sqlite3.c" "sqlcipher3-$sdist_version/vendor/sqlite3.h"
    vendor="$dir/unpacked/sqlcipher3-$sdist_version/vendor"
    mkdir -p "$dir/include/sqlcipher4"
    cp "$vendor/sqlite3.h" "$dir/include/sqlcipher4/sqlite3.h"
    # Debian 12's sqlite3 3.40.1: debian/rules' CFLAGS, then what its ./configure defines on glibc
    # (--enable-fts4 --enable-fts5 --enable-json, math functions by default, HAVE_*), and
    # dpkg-buildflags' code-generating flags. -g is left out (no difference to the code).
    debian=(-O2 -fno-strict-aliasing
        -DSQLITE_SECURE_DELETE -DSQLITE_ENABLE_COLUMN_METADATA
        -DSQLITE_ENABLE_FTS3 -DSQLITE_ENABLE_FTS3_PARENTHESIS
        -DSQLITE_ENABLE_RTREE=1 -DSQLITE_SOUNDEX=1
        -DSQLITE_ENABLE_UNLOCK_NOTIFY
        -DSQLITE_OMIT_LOOKASIDE=1 -DSQLITE_ENABLE_DBSTAT_VTAB
        -DSQLITE_ALLOW_ROWID_IN_VIEW
        -DSQLITE_ENABLE_UPDATE_DELETE_LIMIT=1
        -DSQLITE_ENABLE_LOAD_EXTENSION
        -DSQLITE_ENABLE_JSON1
        -DSQLITE_LIKE_DOESNT_MATCH_BLOBS
        -DSQLITE_THREADSAFE=1
        -DSQLITE_ENABLE_FTS3_TOKENIZER=1
        -DSQLITE_USE_URI=1
        -DSQLITE_MAX_SCHEMA_RETRY=25
        -DSQLITE_ENABLE_PREUPDATE_HOOK
        -DSQLITE_ENABLE_SESSION
        -DSQLITE_ENABLE_STMTVTAB
        -DSQLITE_MAX_VARIABLE_NUMBER=250000
        -DSQLITE_ENABLE_FTS4 -DSQLITE_ENABLE_FTS5 -DSQLITE_ENABLE_MATH_FUNCTIONS
        -DHAVE_FDATASYNC=1 -DHAVE_USLEEP=1 -DHAVE_LOCALTIME_R=1 -DHAVE_GMTIME_R=1 -DHAVE_ISNAN=1
        -DHAVE_MALLOC_H=1 -DHAVE_MALLOC_USABLE_SIZE=1 -DHAVE_POSIX_FALLOCATE=1 -DHAVE_STRCHRNUL=1
        -DHAVE_STDINT_H=1 -DHAVE_INTTYPES_H=1
        -fstack-protector-strong -D_FORTIFY_SOURCE=2)
    # What SQLCipher requires (its README's configure --with-tempstore=yes and CFLAGS), OpenSSL.
    sqlcipher=(-DSQLITE_HAS_CODEC -DSQLITE_TEMP_STORE=2
        -DSQLITE_EXTRA_INIT=sqlcipher_extra_init -DSQLITE_EXTRA_SHUTDOWN=sqlcipher_extra_shutdown
        -DSQLCIPHER_CRYPTO_OPENSSL)
    say "compiling SQLCipher's amalgamation (-O2, Debian's sqlite3 flags; about a minute)"
    "$cc" "${debian[@]}" "${sqlcipher[@]}" -w -fPIC -shared -I"$vendor" "$vendor/sqlite3.c" \
        -Wl,-soname,libsqlcipher4.so -lcrypto -lpthread -ldl -lm -o "$dir/lib/libsqlcipher4.so"
    cflags="-I\${includedir}/sqlcipher4"
    libs="-L\${libdir} -lsqlcipher4 -Wl,-rpath,\${libdir}"
    source="sqlcipher3 $sdist_version sdist, compiled here"
else
    say "pip download sqlcipher3-binary==$wheel_version (cp311, manylinux2014_x86_64)"
    [ "$(uname -m)" = x86_64 ] || { say "the pinned wheel is for x86_64, this is $(uname -m)"; exit 1; }
    python3 -m pip download --quiet --no-deps --only-binary=:all: --platform manylinux2014_x86_64 \
        --python-version 3.11 --implementation cp --abi cp311 -d "$dl" "sqlcipher3-binary==$wheel_version" >&2
    whl="$(ls "$dl"/sqlcipher3_binary-*.whl)"
    check_sha256 "$whl" "$wheel_sha256"
    python3 -m zipfile -e "$whl" "$dir/unpacked"
    module="$(ls "$dir"/unpacked/sqlcipher3/_sqlite3*.so)"
    bundled="$(ls "$dir"/unpacked/sqlcipher3_binary.libs/libcrypto-*.so.3)"
    # The module has no SONAME and finds its libcrypto through RPATH $ORIGIN/../sqlcipher3_binary.libs.
    cp "$module" "$dir/lib/libsqlcipher4.so"
    mkdir -p "$dir/sqlcipher3_binary.libs"
    if [ "$crypto" = system ]; then
        other="$(nm -D --undefined-only "$dir/lib/libsqlcipher4.so" | grep -o '@OPENSSL_[0-9.]*' | sort -u | grep -vx '@OPENSSL_3.0.0' || true)"
        [ -z "$other" ] || { say "the module needs OpenSSL symbols newer than 3.0 ($other): use SQLCIPHER4_CRYPTO=wheel"; exit 1; }
        system_crypto="$(readlink -f "$("$cc" -print-file-name=libcrypto.so.3)")"
        [ -f "$system_crypto" ] || { say "no system libcrypto.so.3 (libssl-dev)"; exit 1; }
        ln -s "$system_crypto" "$dir/sqlcipher3_binary.libs/$(basename "$bundled")"
    else
        cp "$bundled" "$dir/sqlcipher3_binary.libs/"
    fi
    # libpython's symbols (only the binding uses them; a Python module does not link libpython):
    # each an aborting function, so that the loader resolves them. No Python code runs.
    {
        echo '/* Generated by Benchmarks/sqlcipher4.sh: libpython symbols of the sqlcipher3 module, never called. */'
        echo '#include <stdlib.h>'
        nm -D --undefined-only "$dir/lib/libsqlcipher4.so" | awk '$1 == "U" && $2 !~ /@/ && $2 ~ /^_?Py/ { print $2 }' | sort -u |
            while read -r sym; do echo "void $sym(void) { abort(); }"; done
    } >"$dir/pystub.c"
    "$cc" -O2 -shared -fPIC -w "$dir/pystub.c" -o "$dir/lib/libsqlcipher4-pystub.so"
    # -lm -ldl: the module calls log() (FTS5) and dlopen() (extensions) without naming libm or libdl.
    libs="-L\${libdir} -lsqlcipher4 -lsqlcipher4-pystub -lm -ldl -Wl,-rpath,\${libdir}"
    source="sqlcipher3-binary $wheel_version wheel (built -O0)"
fi

# ---- probe: versions, compile options, and a keyed database that must be encrypted
cat >"$dir/sqlcipher4-version.c" <<'C'
/* Prints "sqlite <version> sqlcipher <cipher_version> <provider> <provider version>"; with
 * --options, the library's compile options, one a line; with a path, also writes a keyed database
 * there and checks that it reads back with the key and not without. */
#include <stdio.h>
#include <string.h>
#include <sqlite3.h>
static int show(void *sep, int n, char **values, char **names) { (void)names; for (int i = 0; i < n; i++) printf("%s%s", (const char *)sep, values[i] ? values[i] : "NULL"); return 0; }
static int count(sqlite3 *db) { sqlite3_stmt *s; int n = -1; if (sqlite3_prepare_v2(db, "SELECT count(*) FROM t", -1, &s, 0) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW) n = sqlite3_column_int(s, 0); sqlite3_finalize(s); return n; }
int main(int argc, char **argv) {
    sqlite3 *db;
    if (sqlite3_open(":memory:", &db) != SQLITE_OK) return 1;
    if (argc > 1 && strcmp(argv[1], "--options") == 0) return sqlite3_exec(db, "PRAGMA compile_options", show, "\n", 0) == SQLITE_OK ? (printf("\n"), 0) : 1;
    if (sqlite3_exec(db, "PRAGMA key='probe'", 0, 0, 0) != SQLITE_OK) return 1;
    printf("sqlite %s sqlcipher", sqlite3_libversion());
    if (sqlite3_exec(db, "PRAGMA cipher_version", show, " ", 0) != SQLITE_OK) return 1;
    sqlite3_exec(db, "PRAGMA cipher_provider; PRAGMA cipher_provider_version", show, " ", 0);
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
expand() { local s="$1"; s="${s//\$\{libdir\}/$dir/lib}"; echo "${s//\$\{includedir\}/$dir/include}"; }
read -r -a probe_flags <<<"$(expand "$cflags") $(expand "$libs")"
"$cc" -O2 "$dir/sqlcipher4-version.c" "${probe_flags[@]}" -o "$dir/sqlcipher4-version"
! ldd "$dir/sqlcipher4-version" | grep -q 'libsqlite3\.so' || { say "the probe loads the system libsqlite3 too"; exit 1; }
rm -f "$dir/probe.db"
read -r _ sqlite_version _ cipher_version _ <<<"$("$dir/sqlcipher4-version" "$dir/probe.db")"
[ -n "$cipher_version" ] || { say "the library answers no PRAGMA cipher_version"; exit 1; }
! grep -q plaintext-marker "$dir/probe.db" || { say "the probe's keyed database is not encrypted"; exit 1; }
rm -f "$dir/probe.db"
# Compile options against the system libsqlite3's (the "plain" stack).
"$cc" -O2 "$dir/sqlcipher4-version.c" -lsqlite3 -o "$dir/system-sqlite-options"
"$dir/system-sqlite-options" --options | sort >"$dir/compile-options.system"
"$dir/sqlcipher4-version" --options | sort >"$dir/compile-options.sqlcipher4"
diff "$dir/compile-options.system" "$dir/compile-options.sqlcipher4" | grep '^[<>]' >"$dir/compile-options.diff" || true
cat >"$dir/lib/pkgconfig/sqlcipher4.pc" <<PC
# Generated by Benchmarks/sqlcipher4.sh ($source, libcrypto: $crypto)
prefix=$dir
libdir=\${prefix}/lib
includedir=\${prefix}/include
sqlite_version=$sqlite_version
source=$source
crypto=$crypto

Name: sqlcipher4
Description: SQLCipher $cipher_version (SQLite $sqlite_version) from $source
Version: $cipher_version
Libs: $libs
Cflags: $cflags
PC
rm -rf "$dl" "$dir/unpacked"
touch "$stamp"
say "$("$dir/sqlcipher4-version") ($source, libcrypto: $crypto) in $dir"
say "compile options against the system libsqlite3's (< system, > sqlcipher4): $(tr '\n' ' ' <"$dir/compile-options.diff")"
echo "$dir/lib/pkgconfig"
