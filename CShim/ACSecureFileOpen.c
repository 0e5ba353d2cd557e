/*
 * The one variadic entry point of the C API. Swift cannot define or call a C variadic function,
 * so the optional mode is read here, as open() does, and forwarded to Swift.
 */
#define _GNU_SOURCE 1
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "ACSecureFile/ACSecureFile.h"
#include "ACSecureFile/ACSecureServices.h"
#include "ACSecureFile/ACSecureFileShim.h"

/* The Swift side reads these types through the imported declarations, but it converts them to
 * Int/Int64/Int32 and assumes a 64-bit Linux ABI: check that here once. */
_Static_assert(sizeof(off_t) == 8, "ACSecureFile needs a 64-bit off_t");
_Static_assert(sizeof(ssize_t) == sizeof(intptr_t), "ssize_t must be pointer-sized (Swift Int)");
_Static_assert(sizeof(size_t) == sizeof(uintptr_t), "size_t must be pointer-sized (Swift Int)");
_Static_assert(sizeof(mode_t) == sizeof(unsigned int), "mode_t is read from the varargs as unsigned int");
_Static_assert(sizeof(struct iovec) == 2 * sizeof(void *), "struct iovec is { void *, size_t }");
_Static_assert(offsetof(struct iovec, iov_base) == 0, "iov_base first");
_Static_assert(offsetof(struct iovec, iov_len) == sizeof(void *), "iov_len second");
/* The enum values are ABI and must match the Swift ACErrorCode raw values. */
_Static_assert(sizeof(ACError) == sizeof(int), "ACError is returned as int");
_Static_assert(ACE_NO_ERROR == 0 && ACE_NO_KEYS_ERROR == 1 && ACE_FILE_TOO_BIG_ERROR == 2 &&
               ACE_NEGATIVE_FILE_LEN_ERROR == 3 && ACE_LOW_MEMORY_ERROR == 4 &&
               ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR == 5 && ACE_INVALID_ARG == 6 &&
               ACE_REGULAR_FILE_ONLY_ERROR == 7 && ACE_INTERNAL_ERROR == 8 &&
               ACE_READ_ON_WRITEONLY_ERROR == 9 && ACE_WRITE_ON_READONLY_ERROR == 10 &&
               ACE_TRUNC_ON_READONLY_ERROR == 11, "ACE_* values are fixed");
_Static_assert(ACSECURESERVICESAVAILABILITY_UNAVAILABLE == 0 &&
               ACSECURESERVICESAVAILABILITY_AVAILABLE == 1, "availability values are fixed");

/* glibc's own test for "open() reads a mode" (O_TMPFILE includes O_DIRECTORY, so test all bits). */
#ifdef __O_TMPFILE
#define ACSECUREFILE_NEEDS_MODE(oflag) (((oflag) & O_CREAT) != 0 || ((oflag) & __O_TMPFILE) == __O_TMPFILE)
#elif defined(O_TMPFILE)
#define ACSECUREFILE_NEEDS_MODE(oflag) (((oflag) & O_CREAT) != 0 || ((oflag) & O_TMPFILE) == O_TMPFILE)
#else
#define ACSECUREFILE_NEEDS_MODE(oflag) (((oflag) & O_CREAT) != 0)
#endif

int ACSecureFileOpen(const char *path, int oflag, ...) {
    mode_t mode = 0;
    if (ACSECUREFILE_NEEDS_MODE(oflag)) {
        va_list ap;
        va_start(ap, oflag);
        /* mode_t is unsigned int, which default argument promotion leaves unchanged. */
        mode = (mode_t)va_arg(ap, unsigned int);
        va_end(ap);
    }
    return ACSecureFile_openWithMode(path, oflag, mode);
}
