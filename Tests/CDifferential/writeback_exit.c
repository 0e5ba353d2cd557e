/*
 * writeback_exit — the exit flush of write-back buffering, from C: a program that writes through
 * ACSECURE_OPEN_WRITE_BACK in 100-byte records and leaves with exit(0) without closing must find
 * every byte in the file (the atexit flush writes the buffered run; docs/FORMAT.md "Caching,
 * durability, concurrency and crashes").
 *
 *   writeback_exit STORE FILE write N    writes N bytes, then exit(0) without ACSecureFileClose
 *   writeback_exit STORE FILE check N    exits 0 only if FILE holds exactly those N bytes
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ACSecureFile/ACSecureFile.h>
#include <ACSecureFile/ACSecureServices.h>

static unsigned char pattern(size_t i) { return (unsigned char)(i * 7 + i / 4096); }

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: writeback_exit STORE FILE write|check N\n");
        return 2;
    }
    size_t n = strtoull(argv[4], NULL, 10);
    if (ACSecureServicesStart("acsecure-writeback-exit", argv[1]) != 0) {
        fprintf(stderr, "writeback_exit: ACSecureServicesStart: %s\n", strerror(errno));
        return 1;
    }
    unsigned char *bytes = malloc(n + 1);
    if (!bytes) return 1;
    if (strcmp(argv[3], "write") == 0) {
        int fd = ACSecureFileOpenWithOptions(argv[2], O_RDWR | O_CREAT | O_TRUNC, 0600, ACSECURE_OPEN_WRITE_BACK);
        if (fd < 0) {
            fprintf(stderr, "writeback_exit: open: %s\n", strerror(errno));
            return 1;
        }
        for (size_t i = 0; i < n; i++) bytes[i] = pattern(i);
        for (size_t at = 0; at < n; at += 100) {
            size_t len = n - at < 100 ? n - at : 100;
            if (ACSecureFileWrite(fd, bytes + at, len) != (ssize_t)len) {
                fprintf(stderr, "writeback_exit: write at %zu: %s\n", at, strerror(errno));
                return 1;
            }
        }
        exit(0); /* no close: the exit flush must write what is buffered */
    }
    int fd = ACSecureFileOpen(argv[2], O_RDONLY);
    if (fd < 0) {
        fprintf(stderr, "writeback_exit: FAIL: open for check: %s\n", strerror(errno));
        return 1;
    }
    size_t got = 0;
    ssize_t r;
    while (got <= n && (r = ACSecureFileRead(fd, bytes + got, n + 1 - got)) > 0) got += (size_t)r;
    ACSecureFileClose(fd);
    if (got != n) {
        fprintf(stderr, "writeback_exit: FAIL: the file holds %zu bytes, %zu were written before exit\n", got, n);
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        if (bytes[i] != pattern(i)) {
            fprintf(stderr, "writeback_exit: FAIL: byte %zu differs\n", i);
            return 1;
        }
    }
    printf("writeback_exit: %zu bytes written in 100-byte records through write-back, exit(0) without close: all in the file\n", n);
    return 0;
}
