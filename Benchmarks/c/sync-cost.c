/* What a sync costs with tail copies (docs/BENCHMARKS.md "Tail copies: what a sync costs"): per
 * cycle, through the C API against plain POSIX calls, interleaved rounds, medians.
 *   append 100+fdatasync  : a 100-byte append, then fdatasync (a log that syncs every record)
 *   append 4K+fdatasync   : a 4096-byte append at a chunk-aligned end, then fdatasync
 *   pwrite 4K+fdatasync   : a 4 KiB overwrite at a random chunk of a 1 MiB file, then fdatasync
 *   append 100, O_DSYNC   : 100-byte appends through a descriptor opened with O_DSYNC
 * Every sync of a version 4 file first copies the file's end into a tail-copy slot (docs/FORMAT.md
 * "Tail copies"): one more pwrite of at most 4.2 KiB before the flush. To compare two builds of
 * the library, run it alternately with LD_LIBRARY_PATH pointing at each and compare the ratios.
 * usage: sync-cost DIR [ROUNDS [CYCLES]]  (cc -O2 sync-cost.c $(pkg-config --cflags --libs acsecurefile);
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

enum { WORKLOADS = 4 };
static const char *workloadNames[WORKLOADS] = { "append 100+fdatasync", "append 4K+fdatasync", "pwrite 4K+fdatasync", "append 100, O_DSYNC" };
static char buffer[1 << 20];
static const char *dir;


static int openAs(int c, const char *name, int flags) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.%d", dir, name, c);
    flags |= O_RDWR | O_CREAT | O_TRUNC;
    return c == PLAIN ? open(path, flags, 0600) : ACSecureFileOpen(path, flags, 0600);
}
static ssize_t pw(int c, int fd, size_t n, off_t at) { return c == PLAIN ? pwrite(fd, buffer, n, at) : ACSecureFilePwrite(fd, buffer, n, at); }
static int datasync(int c, int fd) { return c == PLAIN ? fdatasync(fd) : ACSecureFileFdatasync(fd); }

/* µs per cycle of workload `w`. */
static double cycles(int c, int w, long count) {
    int fd = openAs(c, "sync", w == 3 ? O_DSYNC : 0);
    if (fd < 0) fail("open");
    off_t size = w == 2 ? (off_t)sizeof buffer : 10000;
    if (pw(c, fd, size, 0) != size || datasync(c, fd) != 0) fail("setup");
    if (w == 1) { size = 12288; if (pw(c, fd, 2288, 10000) != 2288 || datasync(c, fd) != 0) fail("setup"); }
    unsigned seed = 7;
    double t0 = now();
    for (long i = 0; i < count; i++) {
        switch (w) {
        case 0: case 3:
            if (pw(c, fd, 100, size) != 100) fail("pwrite");
            size += 100;
            break;
        case 1:
            if (pw(c, fd, 4096, size) != 4096) fail("pwrite");
            size += 4096;
            break;
        default:
            seed = seed * 1103515245 + 12345;
            if (pw(c, fd, 4096, (off_t)(seed >> 16) % 256 * 4096) != 4096) fail("pwrite");
        }
        if (w != 3 && datasync(c, fd) != 0) fail("fdatasync");
    }
    double t = now() - t0;
    if ((c == PLAIN ? close(fd) : ACSecureFileClose(fd)) != 0) fail("close");
    return t / count * 1e6;
}

int main(int argc, char **argv) {
    for (size_t i = 0; i < sizeof buffer; i++) buffer[i] = (char)(i * 7 + 1);
    return runCycles(argc, argv, &dir, 300, WORKLOADS, workloadNames, cycles);
}
