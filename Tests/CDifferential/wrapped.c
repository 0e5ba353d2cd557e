/*
 * wrapped.c — sharing a file from an extension through the C API (ACSecureSharing.h).
 *
 * The "host app" (this process, secure services started) gets a crypto block for group "group-a"
 * and passes it over a pipe to an "extension": this program again (fork + exec of /proc/self/exe
 * with --extension), which never starts secure services (its ACSECURE_HOME must still not exist
 * afterwards). The extension wraps a file; the host opens it with the right group and reads back
 * the original bytes and name, then checks: wrong or no group -> EIO/ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR,
 * a plain secure file or a plain file -> EILSEQ/ACWRAPPEDFILEREADERROR_UNKNOWN_WRAPPER_FORMAT,
 * a flipped ciphertext byte -> EIO/ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR, and the argument errors.
 *
 * usage: wrapped DIRECTORY      (an existing, empty directory)
 * Prints "wrapped: N passed, M failed" and exits 1 if a check failed.
 */
#define _GNU_SOURCE 1
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ACSecureFile/ACError.h>
#include <ACSecureFile/ACSecureFile.h>
#include <ACSecureFile/ACSecureServices.h>
#include <ACSecureFile/ACSecureSharing.h>

static int passed, failed;
static const char *who = "wrapped";

#define CHECK(cond, ...)                                                                  \
    do {                                                                                  \
        if (cond) {                                                                       \
            passed++;                                                                     \
        } else {                                                                          \
            failed++;                                                                     \
            fprintf(stderr, "%s: FAIL %s:%d: %s — ", who, __FILE__, __LINE__, #cond);     \
            fprintf(stderr, __VA_ARGS__);                                                 \
            fputc('\n', stderr);                                                          \
        }                                                                                 \
    } while (0)

enum { CONTENT_SIZE = 3 * 4096 + 1234 }; /* spans chunk boundaries, and the name record shifts it */
static const char *actual_name = "quarterly report.pdf";

static void path(char *out, const char *dir, const char *name) { snprintf(out, 4096, "%s/%s", dir, name); }

static int write_all(const char *p, const unsigned char *data, size_t n) {
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return -1;
    ssize_t w = write(fd, data, n);
    close(fd);
    return w == (ssize_t)n ? 0 : -1;
}

/* The extension: reads the crypto block from stdin, wraps argv[3] into argv[4]. No ACSecureServices*
 * call, and nothing here may start services from the environment. */
static int extension(char **argv) {
    who = "wrapped(extension)";
    const char *home = getenv("ACSECURE_HOME");
    unsigned char block[ACSECURE_CRYPTO_BLOCK_SIZE + 8];
    size_t got = 0;
    ssize_t n;
    while ((n = read(STDIN_FILENO, block + got, sizeof block - got)) > 0) got += (size_t)n;
    CHECK(got == ACSECURE_CRYPTO_BLOCK_SIZE, "read %zu bytes of crypto block", got);

    /* A damaged block is refused, and leaves no file behind. */
    block[30] ^= 1;
    errno = 0;
    int r = ACSecureWrapFile(argv[3], argv[4], block, got, actual_name);
    CHECK(r == -1 && errno == EINVAL, "damaged block: %d errno %d", r, errno);
    CHECK(access(argv[4], F_OK) == -1, "damaged block left %s", argv[4]);
    block[30] ^= 1;
    errno = 0;
    r = ACSecureWrapFile(argv[3], argv[4], block, got - 1, actual_name);
    CHECK(r == -1 && errno == EINVAL, "short block: %d errno %d", r, errno);

    r = ACSecureWrapFile(argv[3], argv[4], block, got, actual_name);
    CHECK(r == 0, "ACSecureWrapFile: %s", strerror(errno));
    explicit_bzero(block, sizeof block);

    CHECK(home != NULL && access(home, F_OK) == -1 && errno == ENOENT,
          "secure services were started in the extension (%s exists)", home ? home : "(unset)");
    struct stat st;
    CHECK(stat(argv[4], &st) == 0 && (st.st_mode & 0777) == 0600, "wrapped file mode %o", st.st_mode & 0777);
    printf("%s: %d passed, %d failed\n", who, passed, failed);
    return failed == 0 ? 0 : 1;
}

/* Expects -1 with errno and the open detail. */
static void expect_open_fails(const char *p, const char *group, int want_errno, int want_detail, const char *what) {
    char name[ACSECURE_WRAPPED_FILE_NAME_MAX + 1];
    int detail = -7;
    errno = 0;
    int fd = ACSecureWrappedFileOpen(p, group, name, sizeof name, &detail);
    int e = errno;
    CHECK(fd == -1 && e == want_errno && detail == want_detail, "%s: fd %d errno %d (%s) detail %d; wanted errno %d detail %d",
          what, fd, e, strerror(e), detail, want_errno, want_detail);
    if (fd >= 0) ACSecureWrappedFileClose(fd);
}

int main(int argc, char **argv) {
    if (argc == 5 && strcmp(argv[1], "--extension") == 0) return extension(argv);
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIRECTORY\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1];
    char store[4096], plain[4096], wrapped[4096], home[4096], secure[4096], tampered[4096];
    path(store, dir, "host-store");
    path(plain, dir, "original.bin");
    path(wrapped, dir, "shared.wrapped");
    path(home, dir, "extension-home-never-created");
    path(secure, dir, "plain-secure.sec");
    path(tampered, dir, "tampered.wrapped");
    if (ACSecureServicesStart("wrapped-host", store) != 0) {
        fprintf(stderr, "wrapped: ACSecureServicesStart: %s\n", strerror(errno));
        return 1;
    }

    static unsigned char content[CONTENT_SIZE], back[CONTENT_SIZE + 100];
    for (size_t i = 0; i < CONTENT_SIZE; i++) content[i] = (unsigned char)(i * 2654435761u >> 13);
    CHECK(write_all(plain, content, CONTENT_SIZE) == 0, "writing %s: %s", plain, strerror(errno));

    /* The crypto block: too small a buffer says how much is needed. */
    unsigned char block[128];
    size_t length = 10;
    errno = 0;
    CHECK(ACSecureGetCryptoBlock("group-a", block, &length) == -1 && errno == ERANGE && length == ACSECURE_CRYPTO_BLOCK_SIZE,
          "small buffer: errno %d length %zu", errno, length);
    errno = 0;
    CHECK(ACSecureGetCryptoBlock("", block, &length) == -1 && errno == EINVAL, "empty group: errno %d", errno);
    length = sizeof block;
    CHECK(ACSecureGetCryptoBlock("group-a", block, &length) == 0 && length == ACSECURE_CRYPTO_BLOCK_SIZE,
          "ACSecureGetCryptoBlock: %s, length %zu", strerror(errno), length);

    /* The extension, over a pipe. */
    int fds[2];
    if (pipe(fds) != 0) return 1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[0], STDIN_FILENO);
        close(fds[0]);
        close(fds[1]);
        setenv("ACSECURE_HOME", home, 1);
        setenv("ACSECURE_APP_ID", "the-extension", 1);
        char *args[] = {argv[0], "--extension", home, plain, wrapped, NULL};
        execv("/proc/self/exe", args);
        _exit(127);
    }
    close(fds[0]);
    CHECK(write(fds[1], block, length) == (ssize_t)length, "writing the block to the pipe");
    close(fds[1]);
    explicit_bzero(block, sizeof block);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the extension failed (status %d)", status);

    /* The host app reads it with the right group. */
    char name[ACSECURE_WRAPPED_FILE_NAME_MAX + 1];
    int detail = -7;
    int fd = ACSecureWrappedFileOpen(wrapped, "group-a", name, sizeof name, &detail);
    CHECK(fd >= 0 && detail == ACE_NO_ERROR, "open: fd %d errno %s detail %d", fd, strerror(errno), detail);
    if (fd >= 0) {
        CHECK(strcmp(name, actual_name) == 0, "actual file name '%s'", name);
        size_t total = 0;
        ssize_t n;
        while ((n = ACSecureWrappedFileRead(fd, back + total, total % 2 ? 777 : 4099)) > 0) total += (size_t)n;
        CHECK(n == 0 && total == CONTENT_SIZE && memcmp(back, content, CONTENT_SIZE) == 0,
              "read back %zu bytes (last %zd), equal %d", total, n, total == CONTENT_SIZE && !memcmp(back, content, total));
        CHECK(ACSecureWrappedFileLseek(fd, 0, SEEK_END) == CONTENT_SIZE, "SEEK_END");
        CHECK(ACSecureWrappedFilePread(fd, back, 100, 4090) == 100 && memcmp(back, content + 4090, 100) == 0, "pread");
        CHECK(ACSecureWrappedFileLseek(fd, 0, SEEK_CUR) == CONTENT_SIZE, "pread moved the offset");
        CHECK(ACSecureWrappedFilePread(fd, back, 100, CONTENT_SIZE - 10) == 10, "pread at the end");
        CHECK(ACSecureWrappedFileLseek(fd, -10, SEEK_END) == CONTENT_SIZE - 10 && ACSecureWrappedFileRead(fd, back, 100) == 10 &&
                  memcmp(back, content + CONTENT_SIZE - 10, 10) == 0, "seek from the end and read");
        struct stat st;
        CHECK(ACSecureWrappedFileFstat(fd, &st) == 0 && st.st_size == CONTENT_SIZE && S_ISREG(st.st_mode), "fstat size %lld",
              (long long)st.st_size);
        CHECK(ACSecureWrappedFileLastError(fd) == ACE_NO_ERROR, "last error after success");
        errno = 0;
        CHECK(ACSecureWrappedFileLseek(fd, -1, SEEK_SET) == -1 && errno == EINVAL &&
                  ACSecureWrappedFileLastError(fd) == ACE_NEGATIVE_FILE_LEN_ERROR, "negative seek: errno %d", errno);
        errno = 0;
        CHECK(ACSecureWrappedFilePread(fd, NULL, 5, 0) == -1 && errno == EFAULT && ACSecureWrappedFileLastError(fd) == ACE_INVALID_ARG,
              "NULL buffer: errno %d", errno);
        /* Not an ACSecureFile descriptor, and no writing. */
        errno = 0;
        CHECK(ACSecureFileRead(fd, back, 10) == -1 && errno == EBADF, "ACSecureFileRead on a wrapped fd: errno %d", errno);
        errno = 0;
        CHECK(ACSecureFileWrite(fd, "x", 1) == -1 && errno == EBADF, "ACSecureFileWrite on a wrapped fd: errno %d", errno);
        /* Like every secure descriptor, a wrapped one stops while services are locked (EACCES +
         * ACE_NO_KEYS_ERROR) and works again after unlock. */
        CHECK(ACSecureServicesLock() == 0, "lock");
        errno = 0;
        CHECK(ACSecureWrappedFilePread(fd, back, 50, 0) == -1 && errno == EACCES &&
                  ACSecureWrappedFileLastError(fd) == ACE_NO_KEYS_ERROR, "read while locked: errno %d", errno);
        CHECK(ACSecureServicesUnlock(NULL) == 0, "unlock: %s", strerror(errno));
        CHECK(ACSecureWrappedFilePread(fd, back, 50, 0) == 50 && memcmp(back, content, 50) == 0, "read after unlock");
        CHECK(ACSecureWrappedFileClose(fd) == 0, "close");
        errno = 0;
        CHECK(ACSecureWrappedFileClose(fd) == -1 && errno == EBADF, "second close: errno %d", errno);
        errno = 0;
        CHECK(ACSecureWrappedFileRead(fd, back, 1) == -1 && errno == EBADF, "read after close: errno %d", errno);
    }

    /* Name buffer too small: nothing opened. NULL name with zero capacity is fine. */
    char small[5];
    detail = -7;
    errno = 0;
    CHECK(ACSecureWrappedFileOpen(wrapped, "group-a", small, sizeof small, &detail) == -1 && errno == ERANGE &&
              detail == ACE_INVALID_ARG, "small name buffer: errno %d detail %d", errno, detail);
    fd = ACSecureWrappedFileOpen(wrapped, "group-a", NULL, 0, NULL);
    CHECK(fd >= 0 && ACSecureWrappedFileRead(fd, back, 8) == 8 && memcmp(back, content, 8) == 0, "open without a name: %s",
          strerror(errno));
    if (fd >= 0) ACSecureWrappedFileClose(fd);

    expect_open_fails(wrapped, "group-b", EIO, ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR, "another group");
    expect_open_fails(wrapped, NULL, EIO, ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR, "no group");
    expect_open_fails(wrapped, "", EINVAL, ACE_INVALID_ARG, "empty group");

    /* Not wrapped files: a plain secure file of this app, and a plain file. */
    int sfd = ACSecureFileOpen(secure, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(sfd >= 0 && ACSecureFileWrite(sfd, content, 5000) == 5000 && ACSecureFileClose(sfd) == 0, "plain secure file");
    expect_open_fails(secure, "group-a", EILSEQ, ACWRAPPEDFILEREADERROR_UNKNOWN_WRAPPER_FORMAT, "plain secure file");
    expect_open_fails(plain, "group-a", EILSEQ, ACWRAPPEDFILEREADERROR_UNKNOWN_WRAPPER_FORMAT, "plain file");
    expect_open_fails(home, "group-a", ENOENT, ACE_NO_ERROR, "missing file");
    expect_open_fails(dir, "group-a", EISDIR, ACE_REGULAR_FILE_ONLY_ERROR, "directory");

    /* One flipped ciphertext byte (in the second chunk): no byte of the file is given out wrongly. */
    {
        int in = open(wrapped, O_RDONLY), out = open(tampered, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        static unsigned char raw[CONTENT_SIZE * 2 + 16384];
        /* Chunk 1 starts after the header, the two tail-copy slots (format version 4) and chunk 0. */
        enum { SECOND_CHUNK = 128 + 2 * (64 + 4096 + 64) + 4128 + 100 };
        ssize_t n = read(in, raw, sizeof raw);
        CHECK(n > SECOND_CHUNK, "wrapped file size %zd", n);
        if (n > SECOND_CHUNK) raw[SECOND_CHUNK] ^= 0x40;
        CHECK(write(out, raw, (size_t)n) == n, "writing the tampered copy");
        close(in);
        close(out);
        detail = -7;
        fd = ACSecureWrappedFileOpen(tampered, "group-a", NULL, 0, &detail);
        if (fd < 0) {
            CHECK(errno == EIO && detail == ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR, "tampered open: errno %d detail %d", errno, detail);
        } else {
            ssize_t r = 0;
            errno = 0;
            while ((r = ACSecureWrappedFileRead(fd, back, sizeof back)) > 0) {}
            CHECK(r == -1 && errno == EIO && ACSecureWrappedFileLastError(fd) == ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR,
                  "tampered read: %zd errno %d", r, errno);
            ACSecureWrappedFileClose(fd);
        }
    }

    printf("wrapped: %d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
