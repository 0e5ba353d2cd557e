#!/usr/bin/env bash
# Builds the C library (release) and installs it under PREFIX, so that
#
#     export PKG_CONFIG_PATH=PREFIX/lib/pkgconfig
#     cc prog.c $(pkg-config --cflags --libs acsecurefile)
#
# works. Installs:
#     PREFIX/include/ACSecureFile.h, ACError.h, ACSecureServices.h, ACSecureSharing.h
#     PREFIX/lib/libACSecureFile.so
#     PREFIX/lib/pkgconfig/acsecurefile.pc
# and the encrypted-SQLite VFS "acsecure" (ACSecureSQLite.h), built with cc against the above and the
# system libsqlite3:
#     PREFIX/include/ACSecureSQLite.h
#     PREFIX/lib/libACSecureSQLite.so          (cc prog.c $(pkg-config --cflags --libs acsecuresqlite))
#     PREFIX/lib/libacsecuresqlite_ext.so      (sqlite3 shell: .load PREFIX/lib/libacsecuresqlite_ext)
#     PREFIX/lib/pkgconfig/acsecuresqlite.pc
#
# Runtime library path (rpath): a program needs to find two things at run time.
#   1. libACSecureFile.so itself: the .pc file adds -Wl,-rpath,PREFIX/lib (or use LD_LIBRARY_PATH,
#      or install into a directory ld.so already searches and run ldconfig).
#   2. The Swift runtime (libswiftCore.so, libswift_Concurrency.so, libswiftGlibc.so, ...): the
#      library carries a RUNPATH to the toolchain's runtime directory, printed by
#      `pkg-config --variable=swiftruntimedir acsecurefile` (here: the first entry of
#      runtimeLibraryPaths in `swift -print-target-info`). On a machine without the toolchain at
#      that path, install the Swift runtime and add -Wl,-rpath,<its lib/swift/linux> or set
#      LD_LIBRARY_PATH.
# The library also links the system's libcrypto (OpenSSL) and libsodium.
#
# usage: scripts/install-c-library.sh PREFIX
# environment: SWIFT_SCRATCH_PATH  SwiftPM build directory (default .build); CC (default cc)
set -euo pipefail

if [ $# -ne 1 ]; then
    echo "usage: $0 PREFIX" >&2
    exit 2
fi
root="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "$1"
prefix="$(cd "$1" && pwd)"
scratch="${SWIFT_SCRATCH_PATH:-$root/.build}"

"$root/scripts/install-deps.sh"

echo "install-c-library: building libACSecureFile.so (release)" >&2
swift build --package-path "$root" --scratch-path "$scratch" -c release --product ACSecureFile >&2
bindir="$(swift build --package-path "$root" --scratch-path "$scratch" -c release --show-bin-path)"
lib="$bindir/libACSecureFile.so"
[ -f "$lib" ] || { echo "install-c-library: $lib was not built" >&2; exit 1; }

swiftrt="$(swift -print-target-info | sed -n '/"runtimeLibraryPaths"/,/]/{s/^ *"\(\/[^"]*\)".*/\1/p}' | head -n 1)"
[ -n "$swiftrt" ] || swiftrt="$(dirname "$(dirname "$(command -v swift)")")/lib/swift/linux"

install -d "$prefix/include" "$prefix/lib/pkgconfig"
for h in ACSecureFile.h ACError.h ACSecureServices.h ACSecureSharing.h; do
    install -m 0644 "$root/CShim/include/$h" "$prefix/include/$h"
done
install -m 0755 "$lib" "$prefix/lib/libACSecureFile.so"

version="$(git -C "$root" describe --tags --always 2>/dev/null || echo 0)"
cat > "$prefix/lib/pkgconfig/acsecurefile.pc" <<PC
prefix=$prefix
includedir=\${prefix}/include
libdir=\${prefix}/lib
swiftruntimedir=$swiftrt

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
install -m 0644 "$root/Sources/CACSecureSQLite/include/ACSecureSQLite.h" "$prefix/include/ACSecureSQLite.h"
echo "install-c-library: building libACSecureSQLite.so and libacsecuresqlite_ext.so" >&2
"$cc" "${vfs_flags[@]}" "$vfs_src" -L"$prefix/lib" -lACSecureFile -Wl,-rpath,"$prefix/lib" "${sqlite_libs[@]}" \
    -Wl,-soname,libACSecureSQLite.so -o "$prefix/lib/libACSecureSQLite.so"
"$cc" "${vfs_flags[@]}" -DACSECURE_SQLITE_EXTENSION "$vfs_src" -L"$prefix/lib" -lACSecureFile -Wl,-rpath,"$prefix/lib" \
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

echo "install-c-library: installed into $prefix (Swift runtime: $swiftrt)" >&2
