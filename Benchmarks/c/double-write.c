/* What double writes cost (docs/BENCHMARKS.md "Double writes"): in-place pwrites at random offsets of
 * a 4 MiB file, through the C API against plain POSIX calls, interleaved rounds, medians. "default"
 * rows open the secure file with ACSecureFileOpenWithOptions(0) (a chunk copy, no barrier), "double"
 * rows with ACSECURE_OPEN_DOUBLE_WRITE (the copy, fdatasync, the rewrite, fdatasync, for each chunk
 * rewritten in part); "+fdatasync" rows sync after every write (plain: fdatasync), which is what a
 * program does that needs each write durable.
 *   100 B                  : 100 bytes at a random byte offset (one chunk in part, rarely two)
 *   4K+2K                  : 4 KiB from the middle of a random chunk (two chunks in part)
 *   4K aligned             : 4 KiB over a whole random chunk (nothing to double-write)
 * usage: double-write DIR [ROUNDS [CYCLES]]  (cc -O2 double-write.c $(pkg-config --cflags --libs acsecurefile);
 * environment: ACSECURE_HOME, ACSECURE_APP_ID as for Examples/c) */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <ACSecureFile/ACSecureFile.h>

#include "bench-table.h"

enum { WORKLOADS = 10, FILE_CHUNKS = 1024 };
/* Workload w: its size (100 B below 4, else 4 KiB), whether it syncs, where (aligned from 8 on). */
static const char *workloadNames[WORKLOADS] = {
    "100 B default", "100 B double", "100 B+fdatasync dflt", "100 B+fdatasync dbl",
    "4K+2K default", "4K+2K double", "4K+2K+fdatasync dflt", "4K+2K+fdatasync dbl",
    "4K aligned default", "4K aligned double",
};
static char buffer[FILE_CHUNKS * 4096];
static const char *dir;

/* µs per cycle of workload `w`. */
static double cycles(int c, int w, long count) {
    char path[4096];
    snprintf(path, sizeof path, "%s/double-write.%d", dir, c);
    int flags = O_RDWR | O_CREAT | O_TRUNC;
    int doubled = w % 2 == 1;
    int fd = c == PLAIN ? open(path, flags, 0600) : ACSecureFileOpenWithOptions(path, flags, 0600, doubled ? ACSECURE_OPEN_DOUBLE_WRITE : 0);
    if (fd < 0) fail("open");
    ssize_t n = c == PLAIN ? pwrite(fd, buffer, sizeof buffer, 0) : ACSecureFilePwrite(fd, buffer, sizeof buffer, 0);
    if (n != (ssize_t)sizeof buffer) fail("fill");
    if ((c == PLAIN ? fdatasync(fd) : ACSecureFileFdatasync(fd)) != 0) fail("fdatasync");
    size_t size = w < 4 ? 100 : 4096;
    int sync = w == 2 || w == 3 || w == 6 || w == 7;
    srand(24);
    double t0 = now();
    for (long i = 0; i < count; i++) {
        off_t at = w < 4 ? (off_t)((size_t)rand() % (sizeof buffer - size)) : (off_t)(rand() % (FILE_CHUNKS - 1)) * 4096 + (w < 8 ? 2048 : 0);
        buffer[0] = (char)i;
        n = c == PLAIN ? pwrite(fd, buffer, size, at) : ACSecureFilePwrite(fd, buffer, size, at);
        if (n != (ssize_t)size) fail("pwrite");
        if (sync && (c == PLAIN ? fdatasync(fd) : ACSecureFileFdatasync(fd)) != 0) fail("fdatasync");
    }
    double t = now() - t0;
    if ((c == PLAIN ? close(fd) : ACSecureFileClose(fd)) != 0) fail("close");
    return t / count * 1e6;
}

int main(int argc, char **argv) {
    memset(buffer, 'x', sizeof buffer);
    return runCycles(argc, argv, &dir, 300, WORKLOADS, workloadNames, cycles);
}
