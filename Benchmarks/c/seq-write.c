/* Sequential write in 1 MiB calls (or CALL_KIB KiB calls): ACSecureFileWrite against plain write(2), alternating rounds in
 * one process, each file deleted before its round and fsynced after it (both untimed, as in
 * Benchmarks/compare.sh, so neither side waits for the other's writeback); close is timed.
 * Prints each round and the median ratio. A check of compare.sh's "seq write, 1 MiB calls" line
 * without the rest of its workloads around it.
 * usage: seq-write DIR [MIB [ROUNDS [CALL_KIB]]]  (environment: ACSECURE_HOME, ACSECURE_APP_ID as for Examples/c) */
#define _POSIX_C_SOURCE 200809L
#include <ACSecureFile/ACSecureFile.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static size_t CALL = 1 << 20;

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }

static void settle(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd >= 0) { fsync(fd); close(fd); }
}

/* Writes `mib` MiB to a new file at `path` in 1 MiB calls, plain or through the engine: bytes/s from
 * the open to the close, or -1 after printing why it failed. The file is fsynced after, untimed. */
static double writeRate(int secure, const char *path, const char *buf, int mib) {
    unlink(path);
    double t0 = now();
    int fd = secure ? ACSecureFileOpen(path, O_WRONLY | O_CREAT | O_TRUNC, 0600) : open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) { perror(path); return -1; }
    for (size_t i = 0; i < (size_t)mib * (1 << 20) / CALL; i++) {
        if ((secure ? ACSecureFileWrite(fd, buf, CALL) : write(fd, buf, CALL)) != (ssize_t)CALL) { perror(secure ? "ACSecureFileWrite" : "write"); return -1; }
    }
    if ((secure ? ACSecureFileClose(fd) : close(fd)) != 0) { perror(secure ? "ACSecureFileClose" : "close"); return -1; }
    double rate = (double)mib * (1 << 20) / (now() - t0);
    settle(path);
    return rate;
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: %s DIR [MIB [ROUNDS [CALL_KIB]]]\n", argv[0]); return 2; }
    int mib = argc > 2 ? atoi(argv[2]) : 256, rounds = argc > 3 ? atoi(argv[3]) : 6, kib = argc > 4 ? atoi(argv[4]) : 1024;
    if (mib < 1 || rounds < 1 || rounds > 100 || kib < 1 || kib > 65536 || ((size_t)mib << 10) % (size_t)kib != 0) {
        fprintf(stderr, "seq-write: bad MIB, ROUNDS or CALL_KIB (MIB must be a multiple of the call)\n");
        return 2;
    }
    CALL = (size_t)kib << 10;
    char sec[4096], plain[4096];
    snprintf(sec, sizeof sec, "%s/seq-write.acsf", argv[1]);
    snprintf(plain, sizeof plain, "%s/seq-write.plain", argv[1]);
    char *buf = malloc(CALL);
    if (buf == NULL) { perror("malloc"); return 1; }
    for (size_t i = 0; i < CALL; i++) buf[i] = (char)(i * 131 ^ i >> 8);
    double ratios[100];
    for (int r = 0; r < rounds; r++) {
        double plainRate = writeRate(0, plain, buf, mib);
        double secureRate = plainRate < 0 ? -1 : writeRate(1, sec, buf, mib);
        if (secureRate < 0) return 1;
        ratios[r] = secureRate / plainRate;
        printf("round %d: plain %.2f GB/s, engine %.2f GB/s: %.2fx\n", r + 1, plainRate / 1e9, secureRate / 1e9, ratios[r]);
    }
    qsort(ratios, (size_t)rounds, sizeof *ratios, cmp);
    printf("median engine / plain (%d rounds, %d MiB in %d KiB calls): %.2fx\n", rounds, mib, kib, ratios[rounds / 2]);
    unlink(plain);
    unlink(sec);
    free(buf);
    return 0;
}
