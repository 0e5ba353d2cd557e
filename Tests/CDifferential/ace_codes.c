/*
 * ace_codes.c — every ACE_* value that a program can provoke, with its errno, through the C API.
 *
 *   read on write-only, write on read-only, truncate on read-only, negative lengths and offsets,
 *   too big (> 2^44 plaintext bytes), bad whence / iovcnt, no keys after ACSecureServicesLock,
 *   corrupt data after flipping a byte of the file, a non-secure file, a file of another app,
 *   a directory (EISDIR), unknown and closed descriptors (EBADF), retire.
 *
 * ACE_LOW_MEMORY_ERROR, ACE_INTERNAL_ERROR and ACE_REGULAR_FILE_ONLY_ERROR (an NSURL check in the
 * original SDK) cannot be provoked from outside the engine.
 *
 * usage: ace_codes [directory]      (default: a new directory under $TMPDIR or /tmp)
 * Prints "ace_codes: N passed, M failed" and exits 1 if a check failed.
 */
#define _GNU_SOURCE 1
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <ACSecureFile/ACError.h>
#include <ACSecureFile/ACSecureFile.h>
#include <ACSecureFile/ACSecureServices.h>

static int passed, failed;
static char base[2048];

#define CHECK(cond, ...)                                                               \
    do {                                                                               \
        if (cond) {                                                                    \
            passed++;                                                                  \
        } else {                                                                       \
            failed++;                                                                  \
            fprintf(stderr, "ace_codes: FAIL %s:%d: %s — ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                              \
            fputc('\n', stderr);                                                       \
        }                                                                              \
    } while (0)

/* A failed call: -1, the errno, and (for a valid fd) the ACE_* value. */
#define EXPECT_FAIL(call, fd, want_errno, want_ace)                                                          \
    do {                                                                                                     \
        errno = 0;                                                                                           \
        long long r_ = (long long)(call);                                                                    \
        int e_ = errno;                                                                                      \
        int ace_ = (fd) >= 0 ? ACSecureFileLastError(fd) : -2;                                              \
        CHECK(r_ == -1 && e_ == (want_errno) && ((want_ace) == -2 || ace_ == (want_ace)),                    \
              "%s returned %lld errno %d (%s), last error %d; wanted -1, errno %d (%s), last error %d", #call, \
              r_, e_, strerror(e_), ace_, (want_errno), strerror(want_errno), (want_ace));                  \
    } while (0)

#define EXPECT_OK(call, fd)                                                                            \
    do {                                                                                               \
        errno = 0;                                                                                     \
        long long r_ = (long long)(call);                                                              \
        int e_ = errno;                                                                                \
        int ace_ = (fd) >= 0 ? ACSecureFileLastError(fd) : 0;                                         \
        CHECK(r_ >= 0 && ace_ == ACE_NO_ERROR, "%s returned %lld errno %d (%s), last error %d", #call, r_, \
              e_, strerror(e_), ace_);                                                                 \
    } while (0)

static const char *path(const char *name) {
    static char buf[4][4200];
    static int i;
    char *p = buf[i++ % 4];
    snprintf(p, sizeof buf[0], "%s/%s", base, name);
    return p;
}

static int make_secure_file(const char *name, size_t size) {
    int fd = ACSecureFileOpen(path(name), O_RDWR | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0, "create %s: %s", name, strerror(errno));
    if (fd < 0) return -1;
    unsigned char buf[4096];
    for (size_t done = 0; done < size;) {
        size_t n = size - done < sizeof buf ? size - done : sizeof buf;
        for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)(done + i);
        ssize_t w = ACSecureFileWrite(fd, buf, n);
        CHECK(w == (ssize_t)n, "write %s: %zd %s", name, w, strerror(errno));
        if (w != (ssize_t)n) break;
        done += n;
    }
    return fd;
}

static void test_access_modes(void) {
    char b[16] = "0123456789abcdef";
    int fd = make_secure_file("modes", 100);
    EXPECT_OK(ACSecureFileClose(fd), -1);

    int wo = ACSecureFileOpen(path("modes"), O_WRONLY);
    CHECK(wo >= 0, "open O_WRONLY: %s", strerror(errno));
    EXPECT_FAIL(ACSecureFileRead(wo, b, sizeof b), wo, EBADF, ACE_READ_ON_WRITEONLY_ERROR);
    EXPECT_OK(ACSecureFileWrite(wo, b, sizeof b), wo); /* success clears the last error */
    EXPECT_FAIL(ACSecureFilePread(wo, b, sizeof b, 0), wo, EBADF, ACE_READ_ON_WRITEONLY_ERROR);
    struct iovec v = {b, sizeof b};
    EXPECT_FAIL(ACSecureFileReadv(wo, &v, 1), wo, EBADF, ACE_READ_ON_WRITEONLY_ERROR);
    EXPECT_OK(ACSecureFileClose(wo), -1);

    int ro = ACSecureFileOpen(path("modes"), O_RDONLY);
    CHECK(ro >= 0, "open O_RDONLY: %s", strerror(errno));
    EXPECT_FAIL(ACSecureFileWrite(ro, b, sizeof b), ro, EBADF, ACE_WRITE_ON_READONLY_ERROR);
    EXPECT_FAIL(ACSecureFilePwrite(ro, b, sizeof b, 0), ro, EBADF, ACE_WRITE_ON_READONLY_ERROR);
    EXPECT_FAIL(ACSecureFileWritev(ro, &v, 1), ro, EBADF, ACE_WRITE_ON_READONLY_ERROR);
    EXPECT_FAIL(ACSecureFtruncate(ro, 10), ro, EINVAL, ACE_TRUNC_ON_READONLY_ERROR);
    EXPECT_OK(ACSecureFileRead(ro, b, sizeof b), ro);
    CHECK(memcmp(b, "0123456789abcdef", 16) == 0, "read back what O_WRONLY wrote");
    EXPECT_OK(ACSecureFileClose(ro), -1);
}

static void test_lengths_and_arguments(void) {
    const off_t max = (off_t)1 << 44;
    char b[8] = {0};
    int fd = make_secure_file("lengths", 5000);
    EXPECT_FAIL(ACSecureFtruncate(fd, -1), fd, EINVAL, ACE_NEGATIVE_FILE_LEN_ERROR);
    EXPECT_FAIL(ACSecureFileLseek(fd, -1, SEEK_SET), fd, EINVAL, ACE_NEGATIVE_FILE_LEN_ERROR);
    EXPECT_FAIL(ACSecureFileLseek(fd, -5001, SEEK_END), fd, EINVAL, ACE_NEGATIVE_FILE_LEN_ERROR);
    EXPECT_FAIL(ACSecureFilePread(fd, b, sizeof b, -1), fd, EINVAL, ACE_NEGATIVE_FILE_LEN_ERROR);
    EXPECT_FAIL(ACSecureFilePwrite(fd, b, sizeof b, -1), fd, EINVAL, ACE_NEGATIVE_FILE_LEN_ERROR);
    EXPECT_FAIL(ACSecureTruncate(path("lengths"), -1), -1, EINVAL, -2);

    /* Only sizes and offsets at or past the limit: the engine stores holes as encrypted zeros, so
     * anything below it would really be written (RLIMIT_FSIZE in main() guards against that). */
    EXPECT_FAIL(ACSecureFtruncate(fd, max + 1), fd, EFBIG, ACE_FILE_TOO_BIG_ERROR);
    EXPECT_FAIL(ACSecureFilePwrite(fd, b, sizeof b, max), fd, EFBIG, ACE_FILE_TOO_BIG_ERROR);
    EXPECT_FAIL(ACSecureTruncate(path("lengths"), max + 1), -1, EFBIG, -2);
    /* Seeking there is allowed (as lseek), but writing is not; reading finds end of file. */
    EXPECT_FAIL(ACSecureFileLseek(fd, max + 1, SEEK_SET), fd, EINVAL, ACE_FILE_TOO_BIG_ERROR);
    EXPECT_OK(ACSecureFileLseek(fd, max, SEEK_SET), fd);
    EXPECT_FAIL(ACSecureFileWrite(fd, b, 1), fd, EFBIG, ACE_FILE_TOO_BIG_ERROR);
    struct iovec one = {b, 1};
    EXPECT_FAIL(ACSecureFileWritev(fd, &one, 1), fd, EFBIG, ACE_FILE_TOO_BIG_ERROR);
    EXPECT_OK(ACSecureFileRead(fd, b, 1), fd);
    struct stat st;
    EXPECT_OK(ACSecureFstat(fd, &st), fd);
    CHECK(st.st_size == 5000, "size after the refused writes: %lld", (long long)st.st_size);

    EXPECT_FAIL(ACSecureFileLseek(fd, 0, 42), fd, EINVAL, ACE_INVALID_ARG);
    struct iovec v = {b, sizeof b};
    EXPECT_FAIL(ACSecureFileReadv(fd, &v, -1), fd, EINVAL, ACE_INVALID_ARG);
    EXPECT_FAIL(ACSecureFileWritev(fd, &v, 1025), fd, EINVAL, ACE_INVALID_ARG);
    EXPECT_FAIL(ACSecureFstat(fd, NULL), fd, EFAULT, ACE_INVALID_ARG);
    EXPECT_FAIL(ACSecureFileRead(fd, NULL, 10), fd, EFAULT, ACE_INVALID_ARG);
    EXPECT_OK(ACSecureFileRead(fd, NULL, 0), fd);
    EXPECT_OK(ACSecureFileClose(fd), -1);
}

static void test_descriptors(void) {
    char b[4];
    EXPECT_FAIL(ACSecureFileRead(-1, b, 1), -1, EBADF, -2);
    EXPECT_FAIL(ACSecureFileClose(12345), -1, EBADF, -2);
    errno = 0;
    CHECK(ACSecureFileLastError(12345) == -1 && errno == EBADF, "LastError of an unknown fd");
    /* A plain descriptor is not a secure one. */
    int plain = open(path("plain"), O_RDWR | O_CREAT, 0600);
    EXPECT_FAIL(ACSecureFileRead(plain, b, 1), -1, EBADF, -2);
    close(plain);
    int fd = make_secure_file("closing", 10);
    EXPECT_OK(ACSecureFileClose(fd), -1);
    EXPECT_FAIL(ACSecureFileClose(fd), -1, EBADF, -2);
    EXPECT_FAIL(ACSecureFileWrite(fd, b, 1), -1, EBADF, -2);
    errno = 0;
    CHECK(ACSecureFileLastError(fd) == -1 && errno == EBADF, "LastError of a closed fd");
    /* The number is reused by the kernel and then names the new file only. */
    int fd2 = ACSecureFileOpen(path("closing"), O_RDONLY);
    CHECK(fd2 == fd, "descriptor reuse: got %d after closing %d", fd2, fd);
    EXPECT_OK(ACSecureFileRead(fd2, b, 4), fd2);
    EXPECT_OK(ACSecureFileClose(fd2), -1);
}

static void test_paths(void) {
    EXPECT_FAIL(ACSecureFileOpen(base, O_RDONLY), -1, EISDIR, -2);
    EXPECT_FAIL(ACSecureFileOpen(base, O_RDWR), -1, EISDIR, -2);
    EXPECT_FAIL(ACSecureTruncate(base, 0), -1, EISDIR, -2);
    EXPECT_FAIL(ACSecureFileOpen(path("missing"), O_RDONLY), -1, ENOENT, -2);
    int fd = make_secure_file("exists", 1);
    EXPECT_OK(ACSecureFileClose(fd), -1);
    EXPECT_FAIL(ACSecureFileOpen(path("exists"), O_RDWR | O_CREAT | O_EXCL, 0600), -1, EEXIST, -2);
    EXPECT_FAIL(ACSecureFileRename(path("missing"), path("x")), -1, ENOENT, -2);
    struct stat st;
    EXPECT_FAIL(ACSecureLstat(path("missing"), &st), -1, ENOENT, -2);
    EXPECT_OK(ACSecureLstat(base, &st), -1);
    CHECK(S_ISDIR(st.st_mode), "lstat of a directory");

    /* Rename keeps the file readable without re-encryption. */
    fd = make_secure_file("before", 9000);
    EXPECT_OK(ACSecureFileClose(fd), -1);
    struct stat raw1, raw2;
    lstat(path("before"), &raw1);
    EXPECT_OK(ACSecureFileRename(path("before"), path("after")), -1);
    lstat(path("after"), &raw2);
    CHECK(raw1.st_ino == raw2.st_ino && raw1.st_size == raw2.st_size, "rename moved the same inode");
    fd = ACSecureFileOpen(path("after"), O_RDONLY);
    unsigned char b[9000];
    CHECK(ACSecureFileRead(fd, b, sizeof b) == 9000 && b[8999] == (unsigned char)8999, "read after rename");
    ACSecureFileClose(fd);
}

static void flip_byte(const char *p, off_t at) {
    int raw = open(p, O_RDWR);
    unsigned char c;
    CHECK(raw >= 0 && pread(raw, &c, 1, at) == 1, "read raw byte at %lld", (long long)at);
    c ^= 0x01;
    CHECK(pwrite(raw, &c, 1, at) == 1, "write raw byte");
    close(raw);
}

static void test_corruption(void) {
    unsigned char b[3 * 4096];
    int fd = make_secure_file("corrupt", sizeof b);
    EXPECT_OK(ACSecureFileClose(fd), -1);
    struct stat raw;
    lstat(path("corrupt"), &raw);
    flip_byte(path("corrupt"), raw.st_size - 100); /* inside the last chunk's ciphertext */
    fd = ACSecureFileOpen(path("corrupt"), O_RDONLY);
    CHECK(fd >= 0, "open a file with a corrupt chunk: %s", strerror(errno));
    if (fd >= 0) {
        EXPECT_OK(ACSecureFilePread(fd, b, 4096, 0), fd); /* the first chunk is still fine */
        EXPECT_FAIL(ACSecureFilePread(fd, b, 100, 2 * 4096 + 10), fd, EIO, ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR);
        EXPECT_FAIL(ACSecureFileRead(fd, b, sizeof b), fd, EIO, ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR);
        ACSecureFileClose(fd);
    }

    /* A plain file written without the secure API. */
    int plain = open(path("notsecure"), O_RDWR | O_CREAT | O_TRUNC, 0600);
    memset(b, 'x', sizeof b);
    CHECK(write(plain, b, sizeof b) == (ssize_t)sizeof b, "write plain file");
    close(plain);
    errno = 0;
    fd = ACSecureFileOpen(path("notsecure"), O_RDONLY);
    if (fd < 0) {
        CHECK(errno == EIO, "open of a non-secure file: errno %d (%s), wanted EIO", errno, strerror(errno));
    } else {
        EXPECT_FAIL(ACSecureFileRead(fd, b, 10), fd, EIO, ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR);
        ACSecureFileClose(fd);
    }
    struct stat st;
    EXPECT_FAIL(ACSecureLstat(path("notsecure"), &st), -1, EIO, -2);
    EXPECT_FAIL(ACSecureTruncate(path("notsecure"), 1), -1, EIO, -2);
}

static void test_keys(void) {
    char b[100];
    int fd = make_secure_file("keys", 5000);
    CHECK(ACSecureServicesGetAvailability() == ACSECURESERVICESAVAILABILITY_AVAILABLE, "available");
    EXPECT_OK(ACSecureServicesLock(), -1);
    CHECK(ACSecureServicesGetAvailability() == ACSECURESERVICESAVAILABILITY_UNAVAILABLE, "unavailable after lock");
    EXPECT_FAIL(ACSecureFilePread(fd, b, sizeof b, 0), fd, EACCES, ACE_NO_KEYS_ERROR);
    EXPECT_FAIL(ACSecureFileWrite(fd, b, sizeof b), fd, EACCES, ACE_NO_KEYS_ERROR);
    EXPECT_FAIL(ACSecureFtruncate(fd, 1), fd, EACCES, ACE_NO_KEYS_ERROR);
    EXPECT_FAIL(ACSecureFileOpen(path("keys"), O_RDONLY), -1, EACCES, -2);
    EXPECT_FAIL(ACSecureFileOpen(path("new-while-locked"), O_RDWR | O_CREAT, 0600), -1, EACCES, -2);
    EXPECT_OK(ACSecureServicesUnlock(NULL), -1);
    EXPECT_OK(ACSecureFilePread(fd, b, sizeof b, 0), fd);
    CHECK(b[99] == 99, "data after unlock");
    EXPECT_OK(ACSecureFileClose(fd), -1);

    /* A passcode: wrong passcode is EACCES; no file is re-encrypted. */
    EXPECT_OK(ACSecureServicesSetPasscode(NULL, "secret"), -1);
    EXPECT_OK(ACSecureServicesLock(), -1);
    EXPECT_FAIL(ACSecureServicesUnlock("wrong"), -1, EACCES, -2);
    EXPECT_FAIL(ACSecureServicesUnlock(NULL), -1, EACCES, -2);
    EXPECT_OK(ACSecureServicesUnlock("secret"), -1);
    fd = ACSecureFileOpen(path("keys"), O_RDONLY);
    CHECK(fd >= 0 && ACSecureFileRead(fd, b, sizeof b) == 100, "read after passcode unlock");
    ACSecureFileClose(fd);
    EXPECT_FAIL(ACSecureServicesSetPasscode("wrong", NULL), -1, EACCES, -2);
    EXPECT_OK(ACSecureServicesSetPasscode("secret", NULL), -1);

    /* Another app's file: same store, another app ID. */
    char store[4200];
    snprintf(store, sizeof store, "%s/store", base);
    EXPECT_OK(ACSecureServicesStart("other-app", store), -1);
    fd = ACSecureFileOpen(path("keys"), O_RDONLY);
    if (fd < 0) {
        CHECK(errno == EIO, "open of another app's file: errno %d (%s), wanted EIO", errno, strerror(errno));
    } else {
        EXPECT_FAIL(ACSecureFileRead(fd, b, 10), fd, EIO, ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR);
        ACSecureFileClose(fd);
    }
    /* Shared through an encryption group it works. */
    fd = ACSecureFileOpenWithGroupID(path("group"), O_RDWR | O_CREAT | O_TRUNC, 0600, "team");
    CHECK(fd >= 0 && ACSecureFileWrite(fd, "shared", 6) == 6, "write group file: %s", strerror(errno));
    ACSecureFileClose(fd);
    EXPECT_FAIL(ACSecureFileOpenWithGroupID(path("group"), O_RDONLY, 0, ""), -1, EINVAL, -2);
    EXPECT_OK(ACSecureServicesStart("acsecure-ace-codes", store), -1);
    fd = ACSecureFileOpenWithGroupID(path("group"), O_RDONLY, 0, "team");
    CHECK(fd >= 0 && ACSecureFileRead(fd, b, sizeof b) == 6 && memcmp(b, "shared", 6) == 0, "read group file");
    ACSecureFileClose(fd);

    /* Retire: the store is gone, every file is unreadable for ever. */
    fd = make_secure_file("retired", 10);
    EXPECT_OK(ACSecureServicesRetire(), -1);
    CHECK(ACSecureServicesGetAvailability() == ACSECURESERVICESAVAILABILITY_UNAVAILABLE, "unavailable after retire");
    EXPECT_FAIL(ACSecureFileRead(fd, b, 1), fd, EACCES, ACE_NO_KEYS_ERROR);
    EXPECT_FAIL(ACSecureServicesUnlock(NULL), -1, EACCES, -2);
    ACSecureFileClose(fd);
    EXPECT_OK(ACSecureServicesStart("acsecure-ace-codes", store), -1); /* a new, empty store */
    fd = ACSecureFileOpen(path("retired"), O_RDONLY);
    if (fd < 0) {
        CHECK(errno == EIO, "open after retire and restart: errno %d (%s), wanted EIO", errno, strerror(errno));
    } else {
        EXPECT_FAIL(ACSecureFileRead(fd, b, 1), fd, EIO, ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR);
        ACSecureFileClose(fd);
    }
}

int main(int argc, char **argv) {
    /* A safety net: a bug that writes a huge file fails with EFBIG instead of filling the disk. */
    struct rlimit fsize = {256 << 20, 256 << 20};
    signal(SIGXFSZ, SIG_IGN);
    setrlimit(RLIMIT_FSIZE, &fsize);
    if (argc > 1) {
        snprintf(base, sizeof base, "%s", argv[1]);
        mkdir(base, 0700);
    } else {
        const char *tmp = getenv("TMPDIR");
        snprintf(base, sizeof base, "%s/acsecure-ace.XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(base)) {
            perror("mkdtemp");
            return 2;
        }
    }
    if (ACSecureServicesStart("acsecure-ace-codes", path("store")) != 0) {
        fprintf(stderr, "ace_codes: ACSecureServicesStart failed: %s\n", strerror(errno));
        return 2;
    }
    test_access_modes();
    test_lengths_and_arguments();
    test_descriptors();
    test_paths();
    test_corruption();
    test_keys();
    printf("ace_codes: %d passed, %d failed\n", passed, failed);
    if (argc <= 1 && failed == 0) {
        char cmd[2200];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
        if (system(cmd) != 0) fprintf(stderr, "ace_codes: could not remove %s\n", base);
    }
    return failed == 0 ? 0 : 1;
}
