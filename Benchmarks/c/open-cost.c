/* Median cost of a fresh open (+close) of an existing secure file against plain open+fstat+close,
 * interleaved in the same run, and the time of the first ACSecureFileOpen (secure services start).
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
    double *s = calloc(n, sizeof *s), *q = calloc(n, sizeof *q);
    for (int i = 0; i < n; i++) {
        double a = now();
        int f = ACSecureFileOpen(sec, O_RDONLY);
        if (f < 0 || ACSecureFileClose(f) != 0) { perror("secure open"); return 1; }
        double b = now();
        int g = open(plain, O_RDONLY);
        struct stat st;
        if (g < 0 || fstat(g, &st) != 0) { perror("plain open"); return 1; }
        close(g);
        double c = now();
        s[i] = b - a; q[i] = c - b;
    }
    qsort(s, n, sizeof *s, cmp); qsort(q, n, sizeof *q, cmp);
    printf("first ACSecureFileOpen (O_CREAT, incl. services start): %.1f us\n", first / 1e3);
    printf("open+close secure: median %.2f us   plain open+fstat+close: median %.2f us   ratio %.1fx  (n=%d)\n",
           s[n / 2] / 1e3, q[n / 2] / 1e3, s[n / 2] / q[n / 2], n);
    return 0;
}
