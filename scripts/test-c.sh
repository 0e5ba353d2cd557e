#!/usr/bin/env bash
# The C API tested as a user would use it: build the release library, install it into a temporary
# prefix, compile the C test programs and examples with plain `cc $(pkg-config ...)`, and run them.
#
#   scripts/test-c.sh [SEED [SEQUENCES [OPERATIONS]]]
#
# Runs: Tests/CDifferential/ace_codes.c (every provokable ACE_* value),
#       Tests/CDifferential/wrapped.c (an extension process without secure services wraps a file,
#       the host app opens it: ACSecureSharing.h),
#       Tests/CDifferential/differential.c (random POSIX-vs-secure sequences; default seed 1,
#       2000 sequences of 60 operations, then a quarter as many with ACSECURE_BUFFERING=write-back),
#       Tests/CDifferential/writeback_exit.c (write-back data written by exit() without close),
#       Tests/CDifferential/fork.c (descriptors inherited across fork: coordinated, handoff, write-back; large writes on both sides),
#       Tests/CDifferential/harden.c (ACSecureHardenProcess),
#       Tests/CDifferential/descriptors.c (kernel descriptors per secure descriptor, EMFILE at the
#       limit ACSecureFile.h states),
#       and Examples/c (secure-copy, securecat) with secure services started from the environment
#       only (the store created with ACSECURE_CREATE_STORE=1), once (as root) with the Swift
#       toolchain's runtime directory hidden: the library must not need it; Benchmarks/c/open-cost.c
#       (200 opens, no timing assertion: it must build and run), seq-write.c, fsync-timing.c, cut-cost.c, sync-cost.c,
#       parallel-read.c, journal-pattern.c, per-call.c, overwrite-cost.c, double-write.c, writeback-append.c and kill-tear.c (one short round
#       each, likewise; kill-tear.c's 100 random kills of an appender, and of an overwriter, 50 of overwriters of 4, 8, 16
#       and 64 KiB of whole chunks, and 50 of an overwriter with double writes, must leave no unreadable chunk).
# environment: SWIFT_SCRATCH_PATH (default .build), CC (default cc), KEEP=1 keeps the temp dir,
#   ACSECURE_TEST_C_PREFIX install there instead of into the temp dir (scripts/test.sh: the SQLite and
#   CPython suites then use this install instead of making their own),
#   CFLAGS extra flags for the C programs (e.g. "-DSKIP_RDONLY_TRUNC -DSKIP_LSTAT_WHILE_OPEN" to look
#   past a known divergence, see differential.c).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
seed="${1:-1}"
sequences="${2:-2000}"
operations="${3:-60}"
cc="${CC:-cc}"
work="$(mktemp -d "${TMPDIR:-/tmp}/acsecure-test-c.XXXXXX")"
if [ "${KEEP:-0}" != 1 ]; then trap 'rm -rf "$work"' EXIT; else echo "test-c: keeping $work" >&2; fi

prefix="${ACSECURE_TEST_C_PREFIX:-$work/prefix}"
"$root/scripts/install-c-library.sh" "$prefix"
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
read -r -a flags <<<"$(pkg-config --cflags --libs acsecurefile)"

build() { # build OUTPUT SOURCE
    read -r -a extra <<<"${CFLAGS:-}"
    echo "test-c: $cc -std=c11 -Wall -Wextra -Werror -O2 ${extra[*]} $2 ${flags[*]} -o $1" >&2
    "$cc" -std=c11 -Wall -Wextra -Werror -O2 "${extra[@]}" "$2" "${flags[@]}" -o "$work/$1"
}
build differential "$root/Tests/CDifferential/differential.c"
build ace_codes "$root/Tests/CDifferential/ace_codes.c"
build wrapped "$root/Tests/CDifferential/wrapped.c"
build harden "$root/Tests/CDifferential/harden.c"
build descriptors "$root/Tests/CDifferential/descriptors.c"
build writeback_exit "$root/Tests/CDifferential/writeback_exit.c"
build fork "$root/Tests/CDifferential/fork.c"
build securecat "$root/Examples/c/securecat.c"
build secure-copy "$root/Examples/c/secure-copy.c"
build open-cost "$root/Benchmarks/c/open-cost.c"
build seq-write "$root/Benchmarks/c/seq-write.c"
build fsync-timing "$root/Benchmarks/c/fsync-timing.c"
build cut-cost "$root/Benchmarks/c/cut-cost.c"
build sync-cost "$root/Benchmarks/c/sync-cost.c"
build parallel-read "$root/Benchmarks/c/parallel-read.c"
build journal-pattern "$root/Benchmarks/c/journal-pattern.c"
build per-call "$root/Benchmarks/c/per-call.c"
build overwrite-cost "$root/Benchmarks/c/overwrite-cost.c"
build kill-tear "$root/Benchmarks/c/kill-tear.c"
build double-write "$root/Benchmarks/c/double-write.c"
build writeback-append "$root/Benchmarks/c/writeback-append.c"

# The binaries find libACSecureFile.so through the rpath from the .pc file only.
unset LD_LIBRARY_PATH

status=0

# One version, set in one place (scripts/version.sh): the libraries' file names and SONAMEs, both
# .pc files' Version:, and no RUNPATH into the install prefix (the SQLite libraries use $ORIGIN).
version="$("$root/scripts/version.sh")"
major="${version%%.*}"
lib="$prefix/lib"
soname_of() { readelf -d "$1" | sed -n 's/.*(SONAME).*\[\(.*\)\].*/\1/p'; }
runpath_of() { readelf -d "$1" | sed -n 's/.*(\(RUNPATH\|RPATH\)).*\[\(.*\)\].*/\2/p'; }
version_bad=""
for name in ACSecureFile ACSecureSQLite; do
    [ -f "$lib/lib$name.so.$version" ] || version_bad+=" lib$name.so.$version missing;"
    [ "$(soname_of "$lib/lib$name.so.$version")" = "lib$name.so.$major" ] || version_bad+=" lib$name SONAME '$(soname_of "$lib/lib$name.so.$version")';"
    [ "$(readlink "$lib/lib$name.so.$major")" = "lib$name.so.$version" ] || version_bad+=" lib$name.so.$major link;"
    [ "$(readlink "$lib/lib$name.so")" = "lib$name.so.$major" ] || version_bad+=" lib$name.so link;"
done
for pc in acsecurefile acsecuresqlite; do
    [ "$(pkg-config --modversion "$pc")" = "$version" ] || version_bad+=" $pc.pc Version '$(pkg-config --modversion "$pc")';"
done
for so in "$lib/libACSecureSQLite.so.$version" "$lib/libacsecuresqlite_ext.so"; do
    [ "$(runpath_of "$so")" = '$ORIGIN' ] || version_bad+=" $(basename "$so") RUNPATH '$(runpath_of "$so")';"
done
[ -z "$(runpath_of "$lib/libACSecureFile.so.$version")" ] || version_bad+=" libACSecureFile has a RUNPATH;"
if [ -z "$version_bad" ]; then
    echo "version: $version everywhere (libraries .so.$version, SONAMEs .so.$major, both .pc files; SQLite RUNPATH \$ORIGIN)"
else
    echo "version: FAIL:$version_bad" >&2
    status=1
fi
"$work/ace_codes" "$work/ace" || status=1
"$work/harden" || status=1
mkdir "$work/descriptors-files" && "$work/descriptors" "$work/descriptors-files" || status=1
mkdir "$work/wrapped-files" && "$work/wrapped" "$work/wrapped-files" || status=1
"$work/differential" "$seed" "$sequences" "$operations" "$work/differential-files" || status=1
# Every secure open write-back (the environment switch of unmodified programs): the same results.
ACSECURE_BUFFERING=write-back "$work/differential" "$((seed + 1000000))" "$(( (sequences + 3) / 4 ))" "$operations" \
    "$work/differential-wb-files" || status=1
mkdir "$work/fork-files" && "$work/fork" "$work/fork-store" "$work/fork-files" || status=1
for n in 10000 150000; do
    "$work/writeback_exit" "$work/writeback-store" "$work/writeback-$n" write "$n" \
        && "$work/writeback_exit" "$work/writeback-store" "$work/writeback-$n" check "$n" || status=1
done

# Examples, with secure services started from the environment (no ACSecureServices* call). A file
# call creates no store: the first run asks for one explicitly with ACSECURE_CREATE_STORE=1.
export ACSECURE_HOME="$work/example-store" ACSECURE_APP_ID="test-c-examples"
head -c 1000003 /dev/urandom >"$work/plain.bin"
if "$work/secure-copy" "$work/plain.bin" "$work/secure.bin" 2>/dev/null || [ -e "$ACSECURE_HOME" ]; then
    echo "examples: FAIL: a file call created a store without ACSECURE_CREATE_STORE=1" >&2
    status=1
fi
ACSECURE_CREATE_STORE=1 "$work/secure-copy" "$work/plain.bin" "$work/secure.bin"
"$work/securecat" "$work/secure.bin" >"$work/roundtrip.bin"
if cmp -s "$work/plain.bin" "$work/roundtrip.bin"; then
    echo "examples: secure-copy | securecat round trip of 1000003 bytes OK"
else
    echo "examples: FAIL: securecat output differs from the source" >&2
    status=1
fi
if cmp -s "$work/plain.bin" "$work/secure.bin" || grep -q "$(head -c 32 "$work/plain.bin" | od -An -tx1 | tr -d ' \n')" <(od -An -tx1 "$work/secure.bin" | tr -d ' \n'); then
    echo "examples: FAIL: the secure file contains the plaintext" >&2
    status=1
fi
printf 'hello, secure world\n' | "$work/securecat" -w "$work/hello.sec"
if [ "$("$work/securecat" "$work/hello.sec")" = "hello, secure world" ] && ! grep -q "secure world" "$work/hello.sec"; then
    echo "examples: securecat -w round trip OK"
else
    echo "examples: FAIL: securecat -w round trip" >&2
    status=1
fi
mkdir "$work/open-cost-files" && "$work/open-cost" "$work/open-cost-files" 200 || status=1
"$work/seq-write" "$work/open-cost-files" 4 1 >/dev/null || status=1
"$work/fsync-timing" "$work/open-cost-files" 1 >/dev/null || status=1
"$work/cut-cost" "$work/open-cost-files" 1 20 >/dev/null || status=1
"$work/sync-cost" "$work/open-cost-files" 1 5 >/dev/null || status=1
"$work/parallel-read" "$work/open-cost-files" 1 200 1 2 >/dev/null || status=1
"$work/journal-pattern" "$work/open-cost-files" 32 1 1 >/dev/null || status=1
"$work/per-call" "$work/open-cost-files" 1 50 >/dev/null || status=1
"$work/overwrite-cost" "$work/open-cost-files" 1 >/dev/null || status=1
"$work/double-write" "$work/open-cost-files" 1 5 >/dev/null || status=1
"$work/writeback-append" "$work/open-cost-files" 1 2000 >/dev/null || status=1
# A SIGKILL at a random moment must never leave an appender's or an overwriter's file with a chunk
# that does not read or a byte it never had (before stop 36 about 8 % of kills of an appender did,
# before stop 37 about 5 % of an overwriter's: the chance that 100 pass by luck is about 2 in
# 10,000 and 6 in 1,000).
for mode in append overwrite; do
    if ! out="$("$work/kill-tear" "$work/open-cost-files" 100 100 "$mode" --require-none 2>&1)"; then
        echo "test-c: kill-tear: random kills of an $([ "$mode" = append ] && echo appender || echo overwriter) left unreadable chunks:" >&2
        echo "$out" >&2
        status=1
    fi
done
# Overwriters of whole chunks, a database's 4 and 8 KiB pages (since stop 39 such a write copies
# each chunk first; before, 6-8 % of kills of the 4 KiB one left its chunk unreadable), and 16 and
# 64 KiB (since stop 41; before, 2 % and 14 % of kills left one).
for size in 4096 8192 16384 65536; do
    if ! out="$("$work/kill-tear" "$work/open-cost-files" 50 "$size" overwrite --require-none 2>&1)"; then
        echo "test-c: kill-tear: random kills of a $size-byte overwriter of whole chunks left unreadable chunks:" >&2
        echo "$out" >&2
        status=1
    fi
done
# The same overwriter with double writes (ACSECURE_DOUBLE_WRITE=1: two fdatasyncs per overwrite).
if ! out="$(ACSECURE_DOUBLE_WRITE=1 "$work/kill-tear" "$work/open-cost-files" 50 100 overwrite --require-none 2>&1)"; then
    echo "test-c: kill-tear: random kills of an overwriter with double writes left unreadable chunks:" >&2
    echo "$out" >&2
    status=1
fi

# The library carries the Swift runtime: a C program runs with the toolchain's runtime directory
# hidden (a mount namespace with an empty directory bound over it). Needs root and unshare(1).
swiftlib="$(dirname "$(dirname "$(command -v swift)")")/lib/swift"
if [ "$(id -u)" = 0 ] && command -v unshare >/dev/null && [ -d "$swiftlib" ]; then
    mkdir "$work/empty"
    if unshare -m sh -c 'mount --bind "$1" "$2" && [ ! -e "$2/linux/libswiftCore.so" ] && "$3" "$4"' sh \
        "$work/empty" "$swiftlib" "$work/securecat" "$work/hello.sec" >"$work/hidden.out" \
        && [ "$(cat "$work/hidden.out")" = "hello, secure world" ]; then
        echo "examples: securecat runs with $swiftlib hidden OK"
    else
        echo "examples: FAIL: securecat needs the Swift toolchain's runtime ($swiftlib)" >&2
        status=1
    fi
else
    echo "examples: not root (or no unshare): skipped running with the Swift runtime hidden" >&2
fi
ACSECURE_APP_ID="another-app" "$work/securecat" "$work/hello.sec" 2>/dev/null && {
    echo "examples: FAIL: another app ID could read the file" >&2
    status=1
}

[ "$status" = 0 ] && echo "test-c: all C tests passed" || echo "test-c: FAILED" >&2
exit "$status"
