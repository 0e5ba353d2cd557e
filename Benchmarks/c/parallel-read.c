/* Scaling of random 4 KiB reads of one file with the number of threads (issue 26), through the C API
 * against plain pread(2): each thread has its own descriptor (or, with "shared", all threads use one
 * descriptor and pread), reads CALLS random chunk-aligned 4 KiB blocks of a FILE_MIB file, and the
 * calls per second of all threads together are reported per thread count, with the scaling (÷ the
 * 1-thread figure of the same contender and round). Rounds interleave contenders and thread counts;
 * medians. Compare the engine's scaling with `openssl speed -multi N -evp aes-256-gcm` (what the cores
 * give AES-GCM) measured in the same sitting: Benchmarks/parallel-read.sh does both.
 * usage: parallel-read DIR [ROUNDS [CALLS [FILE_MIB [MAX_THREADS [shared]]]]]
 *   (cc -O2 -pthread parallel-read.c $(pkg-config --cflags --libs acsecurefile);
 *   environment: ACSECURE_HOME, ACSECURE_APP_ID as for Examples/c) */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <ACSecureFile/ACSecureFile.h>

enum { PLAIN, ENGINE, CONTENDERS, MAX_ROUNDS = 32, MAX_THREADS = 16 };
static const char *names[CONTENDERS] = { "plain", "engine" };
static char path[CONTENDERS][4096];
static long calls, chunks;
static int shared;

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
static void fail(const char *what) { perror(what); exit(1); }

struct job { int contender, fd; unsigned seed; pthread_barrier_t *start; };

static void *reader(void *arg) {
    struct job *j = arg;
    int c = j->contender, fd = j->fd;
    if (!shared) fd = c == PLAIN ? open(path[c], O_RDONLY) : ACSecureFileOpen(path[c], O_RDONLY, 0);
    if (fd < 0) fail("open");
    char buf[4096];
    unsigned seed = j->seed;
    pthread_barrier_wait(j->start);
    for (long i = 0; i < calls; i++) {
        seed = seed * 1103515245u + 12345u;
        off_t offset = (off_t)((seed >> 4) % (unsigned)chunks) * 4096;
        ssize_t n = c == PLAIN ? pread(fd, buf, sizeof buf, offset) : ACSecureFilePread(fd, buf, sizeof buf, offset);
        if (n != (ssize_t)sizeof buf) fail("pread");
    }
    if (!shared && (c == PLAIN ? close(fd) : ACSecureFileClose(fd)) != 0) fail("close");
    return NULL;
}

/* Calls per second of `threads` threads together. */
static double run(int c, int threads) {
    pthread_t t[MAX_THREADS];
    struct job jobs[MAX_THREADS];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
    int fd = -1;
    if (shared) { fd = c == PLAIN ? open(path[c], O_RDONLY) : ACSecureFileOpen(path[c], O_RDONLY, 0); if (fd < 0) fail("open"); }
    for (int i = 0; i < threads; i++) {
        jobs[i] = (struct job){ c, fd, 0x9e3779b9u * (unsigned)(i + 1), &start };
        if (pthread_create(&t[i], NULL, reader, &jobs[i]) != 0) fail("pthread_create");
    }
    pthread_barrier_wait(&start);
    double t0 = now();
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    double elapsed = now() - t0;
    pthread_barrier_destroy(&start);
    if (shared && (c == PLAIN ? close(fd) : ACSecureFileClose(fd)) != 0) fail("close");
    return (double)calls * threads / elapsed;
}

static int byValue(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: %s DIR [ROUNDS [CALLS [FILE_MIB [MAX_THREADS [shared]]]]]\n", argv[0]); return 2; }
    int rounds = argc > 2 ? atoi(argv[2]) : 3;
    calls = argc > 3 ? atol(argv[3]) : 100000;
    long mib = argc > 4 ? atol(argv[4]) : 128;
    int maxThreads = argc > 5 ? atoi(argv[5]) : 4;
    shared = argc > 6 && strcmp(argv[6], "shared") == 0;
    if (rounds < 1 || rounds > MAX_ROUNDS || calls < 1 || mib < 1 || maxThreads < 1 || maxThreads > MAX_THREADS) {
        fprintf(stderr, "parallel-read: 1..32 rounds, 1..16 threads\n");
        return 2;
    }
    chunks = mib * 256;
    static char block[1 << 20];
    memset(block, 'r', sizeof block);
    for (int c = 0; c < CONTENDERS; c++) {
        snprintf(path[c], sizeof path[c], "%s/parallel-read.%s", argv[1], names[c]);
        int fd = c == PLAIN ? open(path[c], O_RDWR | O_CREAT | O_TRUNC, 0600) : ACSecureFileOpen(path[c], O_RDWR | O_CREAT | O_TRUNC, 0600);
        if (fd < 0) fail("create");
        for (long i = 0; i < mib; i++) {
            ssize_t n = c == PLAIN ? write(fd, block, sizeof block) : ACSecureFileWrite(fd, block, sizeof block);
            if (n != (ssize_t)sizeof block) fail("write");
        }
        if ((c == PLAIN ? close(fd) : ACSecureFileClose(fd)) != 0) fail("close");
    }
    static double rate[CONTENDERS][MAX_THREADS + 1][MAX_ROUNDS], scaling[CONTENDERS][MAX_THREADS + 1][MAX_ROUNDS];
    for (int r = 0; r < rounds; r++)
        for (int n = 1; n <= maxThreads; n *= 2)
            for (int c = 0; c < CONTENDERS; c++) {
                rate[c][n][r] = run(c, n);
                scaling[c][n][r] = rate[c][n][r] / rate[c][1][r];
            }
    printf("random 4 KiB pread, %ld MiB file, %ld calls per thread, %s, medians of %d rounds\n",
           mib, calls, shared ? "one shared descriptor" : "a descriptor per thread", rounds);
    printf("%-8s %14s %9s %14s %9s %14s\n", "threads", "plain M/s", "scaling", "engine M/s", "scaling", "engine÷plain");
    for (int n = 1; n <= maxThreads; n *= 2) {
        double m[CONTENDERS], s[CONTENDERS], ratio[MAX_ROUNDS];
        for (int r = 0; r < rounds; r++) ratio[r] = rate[ENGINE][n][r] / rate[PLAIN][n][r];
        for (int c = 0; c < CONTENDERS; c++) {
            qsort(rate[c][n], (size_t)rounds, sizeof(double), byValue);
            qsort(scaling[c][n], (size_t)rounds, sizeof(double), byValue);
            m[c] = rate[c][n][rounds / 2] / 1e6;
            s[c] = scaling[c][n][rounds / 2];
        }
        qsort(ratio, (size_t)rounds, sizeof(double), byValue);
        printf("%-8d %14.3f %8.2fx %14.3f %8.2fx %13.2fx\n", n, m[PLAIN], s[PLAIN], m[ENGINE], s[ENGINE], ratio[rounds / 2]);
    }
    for (int c = 0; c < CONTENDERS; c++) unlink(path[c]);
    return 0;
}
