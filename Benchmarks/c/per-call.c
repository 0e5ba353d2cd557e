/* Per-call cost of small calls through the C API against plain POSIX calls, interleaved rounds,
 * medians (docs/BENCHMARKS.md "Per-call costs"): 100 B and 512 B O_APPEND writes to a new file,
 * O_APPEND writevs of a 16-byte header and a 100-byte record (a log's shape),
 * 4 KiB pread and in-place pwrite at random chunk-aligned offsets of a 16 MiB file, the last two
 * also in coordinated mode (ACSECURE_OPEN_SHARED), and in-place pwrites that rewrite chunks in part
 * (docs/BENCHMARKS.md "Chunk copies"): 100 B at random byte offsets, 4 KiB halfway into a chunk. To compare two builds of the library, run it
 * alternately with LD_LIBRARY_PATH pointing at each and take the medians of the ratios.
 * usage: per-call DIR [ROUNDS [CALLS]]  (cc -O2 per-call.c $(pkg-config --cflags --libs acsecurefile);
 * environment: ACSECURE_HOME, ACSECURE_APP_ID as for Examples/c) */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <sys/uio.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <ACSecureFile/ACSecureFile.h>
#include "bench-util.h"

enum { PLAIN, ENGINE, COORDINATED, CONTENDERS, WORKLOADS = 7, MAX_ROUNDS = 64, FILE_CHUNKS = 4096 };
static const char *contenderNames[CONTENDERS] = { "plain", "engine", "engine-mp" };
static const char *workloadNames[WORKLOADS] = { "append 100 B", "append 512 B", "pread 4 KiB", "pwrite 4 KiB", "writev 16+100",
                                                "pwrite 100 B", "pwrite 4K+2K" };
static char buffer[65536];
static const char *dir;

static int openAs(int c, const char *name, int flags) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.%d", dir, name, c);
    if (c == PLAIN) return open(path, flags, 0600);
    return ACSecureFileOpenWithOptions(path, flags, 0600, c == COORDINATED ? ACSECURE_OPEN_SHARED : 0);
}

static void closeAs(int c, int fd) {
    if ((c == PLAIN ? close(fd) : ACSecureFileClose(fd)) != 0) { perror("close"); exit(1); }
}

/* µs per O_APPEND write of `size` bytes to a new file (close not timed). */
static double appends(int c, size_t size, long calls) {
    int fd = openAs(c, "append", O_RDWR | O_CREAT | O_TRUNC | O_APPEND);
    if (fd < 0) fail("open");
    double t0 = now();
    for (long i = 0; i < calls; i++) {
        ssize_t n = c == PLAIN ? write(fd, buffer, size) : ACSecureFileWrite(fd, buffer, size);
        if (n != (ssize_t)size) fail("write");
    }
    double t = now() - t0;
    closeAs(c, fd);
    return t / calls * 1e6;
}

/* µs per O_APPEND writev of a 16-byte header and a 100-byte record to a new file. */
static double headerAndRecord(int c, long calls) {
    int fd = openAs(c, "writev", O_RDWR | O_CREAT | O_TRUNC | O_APPEND);
    if (fd < 0) fail("open");
    struct iovec iov[2] = {{buffer, 16}, {buffer + 16, 100}};
    double t0 = now();
    for (long i = 0; i < calls; i++) {
        ssize_t n = c == PLAIN ? writev(fd, iov, 2) : ACSecureFileWritev(fd, iov, 2);
        if (n != 116) fail("writev");
    }
    double t = now() - t0;
    closeAs(c, fd);
    return t / calls * 1e6;
}

/* µs per pread or pwrite of `size` bytes at random offsets (the same for every contender): chunk-aligned
 * plus `into` bytes, or (`into` < 0) at any byte of the file. */
static double randomIO(int c, int writing, size_t size, long into, long calls) {
    int fd = openAs(c, "data", O_RDWR);
    if (fd < 0) fail("open");
    unsigned seed = 12345;
    double t0 = now();
    for (long i = 0; i < calls; i++) {
        seed = seed * 1103515245u + 12345u;
        off_t offset = into < 0 ? (off_t)((seed >> 4) % (FILE_CHUNKS * 4096u - size))
                                : (off_t)((seed >> 8) % (FILE_CHUNKS - 1)) * 4096 + into;
        ssize_t n = writing ? (c == PLAIN ? pwrite(fd, buffer, size, offset) : ACSecureFilePwrite(fd, buffer, size, offset))
                            : (c == PLAIN ? pread(fd, buffer, size, offset) : ACSecureFilePread(fd, buffer, size, offset));
        if (n != (ssize_t)size) fail(writing ? "pwrite" : "pread");
    }
    double t = now() - t0;
    closeAs(c, fd);
    return t / calls * 1e6;
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: per-call DIR [ROUNDS [CALLS]]\n"); return 2; }
    dir = argv[1];
    int rounds = argc > 2 ? atoi(argv[2]) : 7;
    long calls = argc > 3 ? atol(argv[3]) : 20000;
    if (rounds < 1 || rounds > MAX_ROUNDS || calls < 1) { fprintf(stderr, "per-call: 1..64 rounds, at least 1 call\n"); return 2; }
    memset(buffer, 'x', sizeof buffer);
    for (int c = 0; c < CONTENDERS; c++) {  /* each contender's own 16 MiB file */
        int fd = openAs(c, "data", O_RDWR | O_CREAT | O_TRUNC);
        if (fd < 0) fail("open");
        for (int i = 0; i < FILE_CHUNKS / 16; i++) {
            ssize_t n = c == PLAIN ? write(fd, buffer, 65536) : ACSecureFileWrite(fd, buffer, 65536);
            if (n != 65536) fail("write");
        }
        closeAs(c, fd);
    }
    static double us[WORKLOADS][CONTENDERS][MAX_ROUNDS];
    for (int r = 0; r < rounds; r++)
        for (int w = 0; w < WORKLOADS; w++)
            for (int c = 0; c < CONTENDERS; c++) {
                if (c == COORDINATED && (w < 2 || w == 4)) continue;
                us[w][c][r] = w == 0 ? appends(c, 100, calls) : w == 1 ? appends(c, 512, calls)
                            : w == 4 ? headerAndRecord(c, calls) : w == 5 ? randomIO(c, 1, 100, -1, calls)
                            : w == 6 ? randomIO(c, 1, 4096, 2048, calls) : randomIO(c, w == 3, 4096, 0, calls);
            }
    for (int w = 0; w < WORKLOADS; w++) {
        printf("%-14s", workloadNames[w]);
        for (int c = 0; c < CONTENDERS; c++) {
            if (c == COORDINATED && (w < 2 || w == 4)) continue;
            double ratio[MAX_ROUNDS];
            for (int r = 0; r < rounds; r++) ratio[r] = us[w][PLAIN][r] / us[w][c][r];
            qsort(us[w][c], (size_t)rounds, sizeof(double), byValue);
            qsort(ratio, (size_t)rounds, sizeof(double), byValue);
            printf("  %s %.2f us (x%.2f)", contenderNames[c], us[w][c][rounds / 2], ratio[rounds / 2]);
        }
        printf("\n");
    }
    return 0;
}
