/* The cost of chunk-aligned overwrites in place of 16 KiB, 64 KiB and 1 MiB (several whole chunks
 * each) at random offsets of a 64 MiB file, against plain pwrite(2) on a plain file in the same
 * round: the default handle (which copies each whole chunk first, so that a kill cannot leave it
 * torn: docs/FORMAT.md "Whole chunks") and one opened with ACSECURE_OPEN_WHOLE_CHUNKS_IN_PLACE
 * (no copy: the caller repairs torn chunks itself). Interleaved rounds, medians of the per-round
 * ratios (docs/BENCHMARKS.md). To compare two builds, run it alternately with LD_LIBRARY_PATH
 * pointing at each.
 * usage: overwrite-cost DIR [ROUNDS]   (cc -O2 overwrite-cost.c $(pkg-config --cflags --libs acsecurefile);
 * environment: ACSECURE_HOME, ACSECURE_APP_ID as for Examples/c) */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <ACSecureFile/ACSecureFile.h>
#include "bench-util.h"

enum { PLAIN, DEFAULT, IN_PLACE, CONTENDERS, SIZES = 3, MAX_ROUNDS = 64 };
static const char *contenderNames[CONTENDERS] = { "plain", "default", "in-place" };
static const size_t sizes[SIZES] = { 16 << 10, 64 << 10, 1 << 20 };
static const off_t fileSize = 64 << 20;
static char buffer[1 << 20];
static const char *dir;

static int openAs(int c, int flags) {
    char path[4096];
    snprintf(path, sizeof path, "%s/overwrite.%d", dir, c == PLAIN ? 0 : 1);
    if (c == PLAIN) return open(path, flags, 0600);
    return ACSecureFileOpenWithOptions(path, flags, 0600, c == IN_PLACE ? ACSECURE_OPEN_WHOLE_CHUNKS_IN_PLACE : 0);
}

static void closeAs(int c, int fd) {
    if ((c == PLAIN ? close(fd) : ACSecureFileClose(fd)) != 0) fail("close");
}

/* µs per pwrite of `size` bytes at chunk-aligned random offsets (the same for every contender),
 * 32 MiB written in all. */
static double overwrites(int c, size_t size) {
    int fd = openAs(c, O_RDWR);
    if (fd < 0) fail("open");
    long calls = (32 << 20) / (long)size;
    unsigned seed = 12345;
    double t0 = now();
    for (long i = 0; i < calls; i++) {
        seed = seed * 1103515245u + 12345u;
        off_t offset = (off_t)((seed >> 8) % (unsigned)((fileSize - (off_t)size) / 4096)) * 4096;
        ssize_t n = c == PLAIN ? pwrite(fd, buffer, size, offset) : ACSecureFilePwrite(fd, buffer, size, offset);
        if (n != (ssize_t)size) fail("pwrite");
    }
    double t = now() - t0;
    closeAs(c, fd);
    return t / calls * 1e6;
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: overwrite-cost DIR [ROUNDS]\n"); return 2; }
    dir = argv[1];
    int rounds = argc > 2 ? atoi(argv[2]) : 5;
    if (rounds < 1 || rounds > MAX_ROUNDS) { fprintf(stderr, "overwrite-cost: 1..64 rounds\n"); return 2; }
    memset(buffer, 'x', sizeof buffer);
    for (int c = PLAIN; c <= DEFAULT; c++) {  /* a plain file and a secure file of 64 MiB */
        int fd = openAs(c, O_RDWR | O_CREAT | O_TRUNC);
        if (fd < 0) fail("open");
        for (off_t at = 0; at < fileSize; at += (off_t)sizeof buffer) {
            ssize_t n = c == PLAIN ? write(fd, buffer, sizeof buffer) : ACSecureFileWrite(fd, buffer, sizeof buffer);
            if (n != (ssize_t)sizeof buffer) fail("write");
        }
        closeAs(c, fd);
    }
    static double us[SIZES][CONTENDERS][MAX_ROUNDS];
    for (int r = 0; r < rounds; r++)
        for (int s = 0; s < SIZES; s++)
            for (int c = 0; c < CONTENDERS; c++) us[s][c][r] = overwrites(c, sizes[s]);
    for (int s = 0; s < SIZES; s++) {
        printf("overwrite %4zu KiB", sizes[s] >> 10);
        for (int c = 0; c < CONTENDERS; c++) {
            double ratio[MAX_ROUNDS];
            for (int r = 0; r < rounds; r++) ratio[r] = us[s][PLAIN][r] / us[s][c][r];
            qsort(us[s][c], (size_t)rounds, sizeof(double), byValue);
            qsort(ratio, (size_t)rounds, sizeof(double), byValue);
            printf("  %s %.1f us (x%.2f)", contenderNames[c], us[s][c][rounds / 2], ratio[rounds / 2]);
        }
        printf("\n");
    }
    return 0;
}
