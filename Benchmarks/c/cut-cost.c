/* What ordering cuts for a power loss costs (docs/BENCHMARKS.md "Cuts ordered for a power loss"):
 * per cycle, through the C API against plain POSIX calls, interleaved rounds, medians.
 *   shrink   : a 64 KiB file cut inside a chunk (to 20000 bytes), then written back to 64 KiB
 *   empty    : 4 KiB written, then ftruncate to 0 (SQLite's TRUNCATE journal without syncs)
 *   empty+fs : the same with an fdatasync after the write and after the cut (synchronous=FULL)
 * To compare two builds of the library, run it alternately with LD_LIBRARY_PATH pointing at each
 * and take the medians of the ratios.
 * usage: cut-cost DIR [ROUNDS [CYCLES]]  (cc -O2 cut-cost.c $(pkg-config --cflags --libs acsecurefile);
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

enum { WORKLOADS = 3 };
static const char *workloadNames[WORKLOADS] = { "shrink+regrow", "write+empty", "write+empty, synced" };
static char buffer[65536];
static const char *dir;


static int openAs(int c, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.%d", dir, name, c);
    return c == PLAIN ? open(path, O_RDWR | O_CREAT | O_TRUNC, 0600) : ACSecureFileOpen(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
}
static ssize_t pw(int c, int fd, size_t n, off_t at) { return c == PLAIN ? pwrite(fd, buffer, n, at) : ACSecureFilePwrite(fd, buffer, n, at); }
static int cut(int c, int fd, off_t length) { return c == PLAIN ? ftruncate(fd, length) : ACSecureFtruncate(fd, length); }
static int datasync(int c, int fd) { return c == PLAIN ? fdatasync(fd) : ACSecureFileFdatasync(fd); }

/* µs per cycle of workload `w`. */
static double cycles(int c, int w, long count) {
    int fd = openAs(c, "cut");
    if (fd < 0) fail("open");
    if (pw(c, fd, 65536, 0) != 65536 || datasync(c, fd) != 0) fail("setup");
    double t0 = now();
    for (long i = 0; i < count; i++) {
        if (w == 0) {
            if (cut(c, fd, 20000) != 0) fail("ftruncate");
            if (pw(c, fd, 65536 - 20000, 20000) != 65536 - 20000) fail("pwrite");
        } else {
            if (pw(c, fd, 4096, 0) != 4096) fail("pwrite");
            if (w == 2 && datasync(c, fd) != 0) fail("fdatasync");
            if (cut(c, fd, 0) != 0) fail("ftruncate");
            if (w == 2 && datasync(c, fd) != 0) fail("fdatasync");
        }
    }
    double t = now() - t0;
    if ((c == PLAIN ? close(fd) : ACSecureFileClose(fd)) != 0) fail("close");
    return t / count * 1e6;
}

/* The synced workload's cycles take ten times longer: it runs a tenth as many. */
static double measure(int c, int w, long count) { return cycles(c, w, w == 2 ? count / 10 + 1 : count); }

int main(int argc, char **argv) {
    memset(buffer, 0x5a, sizeof buffer);
    return runCycles(argc, argv, &dir, 2000, WORKLOADS, workloadNames, measure);
}
