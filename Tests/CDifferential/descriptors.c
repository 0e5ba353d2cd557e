/*
 * descriptors — how many kernel descriptors secure descriptors take, as ACSecureFile.h documents
 * ("Descriptors"): descriptors on N different files use 2N kernel descriptors (each file's own
 * plus one the library shares among the process's descriptors of that file), and M descriptors on
 * one file M + 1. With RLIMIT_NOFILE lowered, ACSecureFileOpen fails with EMFILE exactly where
 * those counts say, and the failed open leaves no descriptor behind.
 *
 *   descriptors DIR      (DIR: an empty directory for the store and the files)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <ACSecureFile/ACSecureFile.h>
#include <ACSecureFile/ACSecureServices.h>

enum { kFiles = 10, kSameFile = 3, kLowLimit = 64, kMaxOpen = 64 };

static const char *dir;
static int failures;

/* The process's open kernel descriptors numbered below `below`. */
static int open_below(int below) {
    int n = 0;
    for (int fd = 0; fd < below; fd++) n += fcntl(fd, F_GETFD) != -1;
    return n;
}

static int open_descriptors(void) { return open_below(4096); }

static const char *path(int i) {
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/file-%d", dir, i);
    return buf;
}

static void expect(int ok, const char *what, int got, int want) {
    printf("descriptors: %s %s: %d (expected %d)\n", ok ? "ok  " : "FAIL", what, got, want);
    if (!ok) failures++;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: descriptors DIR\n");
        return 2;
    }
    dir = argv[1];
    char store[4096];
    snprintf(store, sizeof store, "%s/store", dir);
    if (ACSecureServicesStart("acsecure-descriptors", store) != 0) {
        fprintf(stderr, "descriptors: ACSecureServicesStart: %s\n", strerror(errno));
        return 1;
    }
    int fds[kMaxOpen];
    int base = open_descriptors();

    for (int i = 0; i < kFiles; i++) {
        fds[i] = ACSecureFileOpen(path(i), O_RDWR | O_CREAT, 0600);
        if (fds[i] < 0) {
            fprintf(stderr, "descriptors: open %s: %s\n", path(i), strerror(errno));
            return 1;
        }
    }
    int used = open_descriptors() - base;
    expect(used == 2 * kFiles, "kernel descriptors for 10 different files", used, 2 * kFiles);
    for (int i = 0; i < kSameFile; i++) fds[kFiles + i] = ACSecureFileOpen(path(0), O_RDONLY);
    used = open_descriptors() - base;
    expect(used == 2 * kFiles + kSameFile, "after 3 more descriptors on file 0", used, 2 * kFiles + kSameFile);
    for (int i = 0; i < kFiles + kSameFile; i++) {
        if (fds[i] >= 0 && ACSecureFileClose(fds[i]) != 0) {
            fprintf(stderr, "descriptors: close: %s\n", strerror(errno));
            return 1;
        }
    }
    used = open_descriptors() - base;
    expect(used == 0, "after closing them all", used, 0);

    /* EMFILE at the limit: a new descriptor gets the lowest free number, which must be below
     * RLIMIT_NOFILE, so with the limit at kLowLimit, half of the free numbers below it are
     * different files open, and the next open fails. */
    int free_below = kLowLimit - open_below(kLowLimit);
    if (free_below < 10) {
        fprintf(stderr, "descriptors: only %d descriptor numbers below %d are free: cannot test the limit\n", free_below, kLowLimit);
        return 1;
    }
    struct rlimit limit;
    getrlimit(RLIMIT_NOFILE, &limit);
    struct rlimit low = {kLowLimit, limit.rlim_max};
    if (setrlimit(RLIMIT_NOFILE, &low) != 0) {
        fprintf(stderr, "descriptors: setrlimit: %s\n", strerror(errno));
        return 1;
    }
    int opened = 0, err = 0;
    for (int i = 0; i < kMaxOpen; i++) {
        int fd = ACSecureFileOpen(path(i), O_RDWR | O_CREAT, 0600);
        if (fd < 0) {
            err = errno;
            break;
        }
        fds[opened++] = fd;
    }
    int want = free_below / 2;
    expect(opened == want, "different files open at RLIMIT_NOFILE 64", opened, want);
    expect(err == EMFILE, "errno of the open past the limit is EMFILE", err, EMFILE);
    used = open_descriptors() - base;
    expect(used == 2 * opened, "kernel descriptors after the failed open (nothing left behind)", used, 2 * opened);
    for (int i = 0; i < opened; i++) ACSecureFileClose(fds[i]);
    setrlimit(RLIMIT_NOFILE, &limit);
    used = open_descriptors() - base;
    expect(used == 0, "after closing them all", used, 0);

    if (failures) {
        printf("descriptors: FAILED (%d)\n", failures);
        return 1;
    }
    printf("descriptors: OK (2 kernel descriptors per file, 1 more per extra descriptor on a file)\n");
    return 0;
}
