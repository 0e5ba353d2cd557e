#!/usr/bin/env bash
# Builds the C library (release) and installs it under PREFIX, so that
#
#     export PKG_CONFIG_PATH=PREFIX/lib/pkgconfig
#     cc prog.c $(pkg-config --cflags --libs acsecurefile)      # #include <ACSecureFile/ACSecureFile.h>
#
# works. Installs:
#     PREFIX/include/ACSecureFile/ACSecureFile.h, ACError.h, ACSecureServices.h, ACSecureSharing.h
#     PREFIX/lib/libACSecureFile.so.VERSION, and the links libACSecureFile.so.MAJOR (the SONAME) and
#         libACSecureFile.so (for -lACSecureFile)
#     PREFIX/lib/pkgconfig/acsecurefile.pc
# and the encrypted-SQLite VFS "acsecure" (ACSecureSQLite.h), built with cc against the above and the
# system libsqlite3:
#     PREFIX/include/ACSecureFile/ACSecureSQLite.h
#     PREFIX/lib/libACSecureSQLite.so.VERSION, and the links libACSecureSQLite.so.MAJOR (the SONAME)
#         and libACSecureSQLite.so (cc prog.c $(pkg-config --cflags --libs acsecuresqlite))
#     PREFIX/lib/libacsecuresqlite_ext.so      (sqlite3 shell: .load PREFIX/lib/libacsecuresqlite_ext,
#                                               the path `pkg-config --variable=extension acsecuresqlite` prints)
#     PREFIX/lib/pkgconfig/acsecuresqlite.pc
# VERSION (MAJOR.MINOR.PATCH) is the package's one version (scripts/version.sh reads it from
# Sources/ACSecureFoundation/Version.swift, which `acsecure --version` prints); both .pc files say it.
#
# The library carries the Swift runtime inside (linked with -static-stdlib): it needs only the
# system's libcrypto (OpenSSL 3), libsodium, libstdc++ and libc, so a C program runs on a machine
# without a Swift toolchain. SwiftPM links its own .build/.../libACSecureFile.so against the
# toolchain's shared runtime and cannot link a dynamic library with -static-stdlib, so this script
# links the release object files of the product itself (swiftc -emit-library -static-stdlib), with
#   - the version script scripts/libACSecureFile.map: only the functions of the public headers are
#     exported (checked below against the installed headers),
#   - SONAME libACSecureFile.so.MAJOR,
#   - -z nodelete: a dlclose (SQLite closing the extension that loaded it) never unloads it, since
#     its threads' pthread-key destructors (the C API's last error message and lookup cache) and the
#     Swift runtime inside must stay in place for threads that exit later.
# A program finds libACSecureFile.so.MAJOR through the rpath the .pc file adds (-Wl,-rpath,PREFIX/lib),
# LD_LIBRARY_PATH, or by installing into a directory ld.so already searches (then run ldconfig).
# libACSecureSQLite and the extension find it beside themselves (RUNPATH $ORIGIN): the installed lib/
# directory can be moved or copied whole.
#
# usage: scripts/install-c-library.sh PREFIX
# environment: SWIFT_SCRATCH_PATH  SwiftPM build directory (default .build); CC (default cc)
set -euo pipefail

if [ $# -ne 1 ]; then
    echo "usage: $0 PREFIX" >&2
    exit 2
fi
root="$(cd -P "$(dirname "$0")/.." && pwd)"  # -P: the checkout, also when run through a symbolic link
mkdir -p "$1"
prefix="$(cd "$1" && pwd)"
scratch="${SWIFT_SCRATCH_PATH:-$root/.build}"

"$root/scripts/install-deps.sh"

echo "install-c-library: building libACSecureFile.so (release)" >&2
swift build --package-path "$root" --scratch-path "$scratch" -c release --product ACSecureFile >&2
bindir="$(swift build --package-path "$root" --scratch-path "$scratch" -c release --show-bin-path)"
lib="$bindir/libACSecureFile.so"
[ -f "$lib" ] || { echo "install-c-library: $lib was not built" >&2; exit 1; }

objects="$(dirname "$bindir")/release/ACSecureFile.product/Objects.LinkFileList"
[ -f "$objects" ] || objects="$bindir/ACSecureFile.product/Objects.LinkFileList"
[ -f "$objects" ] || { echo "install-c-library: SwiftPM's object list for the product was not found (looked for $objects)" >&2; exit 1; }

version="$("$root/scripts/version.sh")"
major="${version%%.*}"
soname="libACSecureFile.so.$major"
real="libACSecureFile.so.$version"
if ! grep -q "^ACSECUREFILE_$major {" "$root/scripts/libACSecureFile.map"; then
    echo "install-c-library: scripts/libACSecureFile.map's version node is not ACSECUREFILE_$major (version $version)" >&2
    exit 1
fi
work="$(mktemp -d "${TMPDIR:-/tmp}/acsecure-install.XXXXXX")"
trap 'rm -rf "$work"' EXIT
echo "install-c-library: linking $real with the Swift runtime inside (-static-stdlib)" >&2
swiftc -emit-library -static-stdlib -o "$work/$real" "@$objects" -lcrypto -lsodium \
    -Xlinker "-soname=$soname" -Xlinker "--version-script=$root/scripts/libACSecureFile.map" -Xlinker --gc-sections \
    -Xlinker -z -Xlinker nodelete >&2
strip --strip-unneeded "$work/$real"

# The library must stand on the system libraries alone, and export exactly the headers' functions.
if readelf -d "$work/$real" | grep -E 'NEEDED.*(swift|Foundation|ICU|dispatch|BlocksRuntime)' >&2; then
    echo "install-c-library: $real still needs a Swift runtime library (above)" >&2
    exit 1
fi
if ! readelf -d "$work/$real" | grep -q 'Flags:.*NODELETE'; then
    echo "install-c-library: $real is not marked NODELETE (-z nodelete)" >&2
    exit 1
fi
sed -n 's/^[A-Za-z_][A-Za-z0-9_ *]*[ *]\(ACSecure[A-Za-z0-9_]*\)(.*/\1/p' \
    "$root/CShim/include/ACSecureFile/ACSecureFile.h" "$root/CShim/include/ACSecureFile/ACSecureServices.h" "$root/CShim/include/ACSecureFile/ACSecureSharing.h" \
    | sort -u >"$work/declared"
nm -D --defined-only "$work/$real" | awk '$2 ~ /^[A-Z]$/ && $2 != "A" { sub(/@.*/, "", $3); print $3 }' | sort -u >"$work/exported"
if ! cmp -s "$work/declared" "$work/exported"; then
    echo "install-c-library: exported symbols differ from the public headers' functions (< declared, > exported):" >&2
    diff "$work/declared" "$work/exported" >&2 || true
    exit 1
fi

install -d "$prefix/include/ACSecureFile" "$prefix/lib/pkgconfig"
for h in ACSecureFile.h ACError.h ACSecureServices.h ACSecureSharing.h; do
    install -m 0644 "$root/CShim/include/ACSecureFile/$h" "$prefix/include/ACSecureFile/$h"
done
install -m 0755 "$work/$real" "$prefix/lib/$real"
ln -sfn "$real" "$prefix/lib/$soname"
ln -sfn "$soname" "$prefix/lib/libACSecureFile.so"

cat > "$prefix/lib/pkgconfig/acsecurefile.pc" <<PC
prefix=$prefix
includedir=\${prefix}/include
libdir=\${prefix}/lib

Name: acsecurefile
Description: AppConnect-style POSIX secure file I/O (chunked AES-256-GCM) for C programs
Version: $version
Cflags: -I\${includedir}
Libs: -L\${libdir} -lACSecureFile -Wl,-rpath,\${libdir}
Requires.private: libcrypto libsodium
PC

# The SQLite VFS: one source, built as a library linked with libsqlite3 and as a loadable extension
# (which reaches SQLite through the extension API table, so it works in any host that loads it).
cc="${CC:-cc}"
read -r -a sqlite_cflags <<<"$(pkg-config --cflags sqlite3)"
read -r -a sqlite_libs <<<"$(pkg-config --libs sqlite3)"
vfs_src="$root/Sources/CACSecureSQLite/ACSecureSQLite.c"
vfs_flags=(-std=c11 -O2 -fPIC -shared -Wall -Wextra -Werror -I"$prefix/include" -I"$root/Sources/CACSecureSQLite/include" "${sqlite_cflags[@]}")
install -m 0644 "$root/Sources/CACSecureSQLite/include/ACSecureFile/ACSecureSQLite.h" "$prefix/include/ACSecureFile/ACSecureSQLite.h"
echo "install-c-library: building libACSecureSQLite.so.$version and libacsecuresqlite_ext.so" >&2
# RUNPATH $ORIGIN: each finds libACSecureFile.so.MAJOR in its own directory, wherever that is.
"$cc" "${vfs_flags[@]}" "$vfs_src" -L"$prefix/lib" -lACSecureFile '-Wl,-rpath,$ORIGIN' "${sqlite_libs[@]}" \
    -Wl,-soname,"libACSecureSQLite.so.$major" -o "$prefix/lib/libACSecureSQLite.so.$version"
ln -sfn "libACSecureSQLite.so.$version" "$prefix/lib/libACSecureSQLite.so.$major"
ln -sfn "libACSecureSQLite.so.$major" "$prefix/lib/libACSecureSQLite.so"
"$cc" "${vfs_flags[@]}" -DACSECURE_SQLITE_EXTENSION "$vfs_src" -L"$prefix/lib" -lACSecureFile '-Wl,-rpath,$ORIGIN' \
    -o "$prefix/lib/libacsecuresqlite_ext.so"
cat > "$prefix/lib/pkgconfig/acsecuresqlite.pc" <<PC
prefix=$prefix
includedir=\${prefix}/include
libdir=\${prefix}/lib
extension=\${libdir}/libacsecuresqlite_ext.so

Name: acsecuresqlite
Description: Encrypted SQLite: the "acsecure" SQLite VFS on acsecurefile
Version: $version
Requires: acsecurefile sqlite3
Cflags: -I\${includedir}
Libs: -L\${libdir} -lACSecureSQLite -Wl,-rpath,\${libdir}
PC

echo "install-c-library: installed version $version into $prefix ($(wc -l <"$work/exported") exported functions, $(stat -c %s "$prefix/lib/$real") bytes)" >&2
