/* Sequential write in 1 MiB calls: ACSecureFileWrite against plain write(2), alternating rounds in
 * one process, each file deleted before its round and fsynced after it (both untimed, as in
 * Benchmarks/compare.sh, so neither side waits for the other's writeback); close is timed.
 * Prints each round and the median ratio. A check of compare.sh's "seq write, 1 MiB calls" line
 * without the rest of its workloads around it.
 * usage: seq-write DIR [MIB [ROUNDS]]  (environment: ACSECURE_HOME, ACSECURE_APP_ID as for Examples/c) */
#define _POSIX_C_SOURCE 200809L
#include <ACSecureFile/ACSecureFile.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CALL (1 << 20)

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }

static void settle(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd >= 0) { fsync(fd); close(fd); }
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: %s DIR [MIB [ROUNDS]]\n", argv[0]); return 2; }
    int mib = argc > 2 ? atoi(argv[2]) : 256, rounds = argc > 3 ? atoi(argv[3]) : 6;
    if (mib < 1 || rounds < 1 || rounds > 100) { fprintf(stderr, "seq-write: bad MIB or ROUNDS\n"); return 2; }
    char sec[4096], plain[4096];
    snprintf(sec, sizeof sec, "%s/seq-write.acsf", argv[1]);
    snprintf(plain, sizeof plain, "%s/seq-write.plain", argv[1]);
    char *buf = malloc(CALL);
    if (buf == NULL) { perror("malloc"); return 1; }
    for (int i = 0; i < CALL; i++) buf[i] = (char)(i * 131 ^ i >> 8);
    double ratios[100];
    for (int r = 0; r < rounds; r++) {
        unlink(plain);
        double t0 = now();
        int fd = open(plain, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd < 0) { perror(plain); return 1; }
        for (int i = 0; i < mib; i++) if (write(fd, buf, CALL) != CALL) { perror("write"); return 1; }
        if (close(fd) != 0) { perror("close"); return 1; }
        double plainRate = (double)mib * CALL / (now() - t0);
        settle(plain);

        unlink(sec);
        t0 = now();
        int sfd = ACSecureFileOpen(sec, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (sfd < 0) { perror(sec); return 1; }
        for (int i = 0; i < mib; i++) if (ACSecureFileWrite(sfd, buf, CALL) != CALL) { perror("ACSecureFileWrite"); return 1; }
        if (ACSecureFileClose(sfd) != 0) { perror("ACSecureFileClose"); return 1; }
        double secureRate = (double)mib * CALL / (now() - t0);
        settle(sec);
        ratios[r] = secureRate / plainRate;
        printf("round %d: plain %.2f GB/s, engine %.2f GB/s: %.2fx\n", r + 1, plainRate / 1e9, secureRate / 1e9, ratios[r]);
    }
    qsort(ratios, (size_t)rounds, sizeof *ratios, cmp);
    printf("median engine / plain (%d rounds, %d MiB in 1 MiB calls): %.2fx\n", rounds, mib, ratios[rounds / 2]);
    unlink(plain);
    unlink(sec);
    free(buf);
    return 0;
}
