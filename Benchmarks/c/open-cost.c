/* Median cost of a fresh open (+close) of an existing secure file against plain open+fstat+close,
 * interleaved in the same run, and the time of the first ACSecureFileOpen (secure services start).
 * Also an open with the read cache (ACSECURE_OPEN_READ_CACHE, 16 MiB) + a 4 KiB pread + close against
 * plain open+pread+close: what the SQLite VFS pays to reopen a database another process changed.
 * Built and run briefly by scripts/test-c.sh; for figures: open-cost DIR 20000.
 * usage: open-cost DIR [N]  (environment: ACSECURE_HOME, ACSECURE_APP_ID as for Examples/c) */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <ACSecureFile/ACSecureFile.h>

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e9 + t.tv_nsec; }
static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: %s DIR [N]\n", argv[0]); return 2; }
    int n = argc > 2 ? atoi(argv[2]) : 2000;
    char sec[4096], plain[4096];
    snprintf(sec, sizeof sec, "%s/open-cost.acsf", argv[1]);
    snprintf(plain, sizeof plain, "%s/open-cost.plain", argv[1]);
    double t0 = now();
    int fd = ACSecureFileOpen(sec, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) { perror("ACSecureFileOpen"); return 1; }
    double first = now() - t0;
    char buf[10000]; memset(buf, 'x', sizeof buf);
    if (ACSecureFileWrite(fd, buf, sizeof buf) != (ssize_t)sizeof buf || ACSecureFileClose(fd) != 0) { perror("write"); return 1; }
    int p = open(plain, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (p < 0 || write(p, buf, sizeof buf) != (ssize_t)sizeof buf) { perror("plain"); return 1; }
    close(p);
    /* so: secure open; sc: secure open+close; po: plain open+fstat; pc: plain open+fstat+close */
    double *so = calloc(n, sizeof *so), *sc = calloc(n, sizeof *sc), *po = calloc(n, sizeof *po), *pc = calloc(n, sizeof *pc);
    if (!so || !sc || !po || !pc) { perror("calloc"); return 1; }
    for (int i = 0; i < n; i++) {
        double a = now();
        int f = ACSecureFileOpen(sec, O_RDONLY);
        double b = now();
        if (f < 0 || ACSecureFileClose(f) != 0) { perror("secure open"); return 1; }
        double c = now();
        int g = open(plain, O_RDONLY);
        struct stat st;
        if (g < 0 || fstat(g, &st) != 0) { perror("plain open"); return 1; }
        double d = now();
        close(g);
        double e = now();
        so[i] = b - a; sc[i] = c - a; po[i] = d - c; pc[i] = e - c;
    }
    /* rc: secure open with the read cache + pread 4 KiB + close; pr: plain open + pread + close */
    double *rc = calloc(n, sizeof *rc), *pr = calloc(n, sizeof *pr);
    if (!rc || !pr) { perror("calloc"); return 1; }
    for (int i = 0; i < n; i++) {
        double a = now();
        int f = ACSecureFileOpenWithOptions(sec, O_RDONLY, 0, ACSECURE_OPEN_READ_CACHE);
        if (f < 0 || ACSecureFilePread(f, buf, 4096, 0) != 4096 || ACSecureFileClose(f) != 0) { perror("secure open+pread"); return 1; }
        double b = now();
        int g = open(plain, O_RDONLY);
        if (g < 0 || pread(g, buf, 4096, 0) != 4096) { perror("plain open+pread"); return 1; }
        close(g);
        rc[i] = b - a; pr[i] = now() - b;
    }
    qsort(rc, n, sizeof *rc, cmp); qsort(pr, n, sizeof *pr, cmp);
    qsort(so, n, sizeof *so, cmp); qsort(sc, n, sizeof *sc, cmp); qsort(po, n, sizeof *po, cmp); qsort(pc, n, sizeof *pc, cmp);
    printf("first ACSecureFileOpen (O_CREAT, incl. services start): %.1f us\n", first / 1e3);
    printf("medians (n=%d): ACSecureFileOpen %.2f us vs open+fstat %.2f us: %.1fx;  with close %.2f us vs %.2f us: %.1fx\n",
           n, so[n / 2] / 1e3, po[n / 2] / 1e3, so[n / 2] / po[n / 2], sc[n / 2] / 1e3, pc[n / 2] / 1e3, sc[n / 2] / pc[n / 2]);
    printf("medians: open with the read cache + pread 4 KiB + close %.2f us vs open+pread+close %.2f us: %.1fx\n",
           rc[n / 2] / 1e3, pr[n / 2] / 1e3, rc[n / 2] / pr[n / 2]);
    return 0;
}
