/* The system calls of the journal that issue 24 item 4's goal needs (docs/FORMAT.md, "Power loss":
 * "Not built"), on plain files and without encryption, against plain random overwrites: what the
 * journal would add to the engine's random 4 KiB pwrite and to fsync, measured before building it.
 *
 *   plain    pwrite 4 KiB at a random chunk of a synced 64 MiB file; fsync every K writes.
 *   journal  the same writes go out of place: pwrite 4 KiB + a 64-byte entry header, in sequence,
 *            into the current of two 8 MiB journal regions in the same file (after the data); at
 *            every K-th write one fsync (journal and data in one file: one barrier), then the
 *            chunks of the epoch just synced are written home from memory (no barrier: their
 *            journal copies stay valid until the next fsync makes the home copies durable) and
 *            the other region becomes current. A region that fills forces that sync early.
 * Rounds alternate plain and journal; medians of per-round time per write and of fsync time.
 *
 * build: cc -std=c11 -O2 journal-pattern.c -o journal-pattern (plain files only: no library)
 * usage: journal-pattern DIR [WRITES [ROUNDS [REGION_MIB]]]   (K = 1, 16, 256 and never; regions of
 *        8 MiB by default: with more than WRITES entries, "never" forces no sync) */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CHUNK 4096
#define DATA_CHUNKS (16384)                 /* 64 MiB */
static off_t REGION = 8 << 20;      /* journal-pattern's 4th argument, in MiB */
#define ENTRY (CHUNK + 64)

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e9 + t.tv_nsec; }
static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }
static void fail(const char *what) { perror(what); exit(1); }

static unsigned rng = 1;
static unsigned next(void) { rng = rng * 1103515245u + 12345u; return rng >> 8; }

/* Returns ns per write; *syncNs gets the time spent in fsync per write. */
static double run(int fd, int journal, int writes, int every, double *syncNs) {
    static char buf[ENTRY];
    static int epoch[(1 << 30) / ENTRY + 1];
    int inEpoch = 0, region = 0;
    off_t at = 0;
    double syncing = 0, start = now();
    for (int i = 1; i <= writes; i++) {
        int chunk = (int)(next() % DATA_CHUNKS);
        memset(buf, i & 0xff, CHUNK);
        if (!journal) {
            if (pwrite(fd, buf, CHUNK, (off_t)chunk * CHUNK) != CHUNK) fail("pwrite");
        } else {
            off_t base = (off_t)DATA_CHUNKS * CHUNK + (off_t)region * REGION;
            if (pwrite(fd, buf, ENTRY, base + at) != ENTRY) fail("pwrite journal");
            at += ENTRY;
            epoch[inEpoch++] = chunk;
        }
        int full = journal && at + ENTRY > REGION;
        if ((every > 0 && i % every == 0) || full) {
            double s = now();
            if (fsync(fd) != 0) fail("fsync");
            syncing += now() - s;
            for (int e = 0; e < inEpoch; e++)  /* home copies, from memory */
                if (pwrite(fd, buf, CHUNK, (off_t)epoch[e] * CHUNK) != CHUNK) fail("pwrite home");
            inEpoch = 0; at = 0; region ^= 1;
        }
    }
    *syncNs = syncing / writes;
    return (now() - start) / writes;
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: %s DIR [WRITES [ROUNDS]]\n", argv[0]); return 2; }
    int writes = argc > 2 ? atoi(argv[2]) : 4096, rounds = argc > 3 ? atoi(argv[3]) : 5;
    if (argc > 4) REGION = (off_t)atoi(argv[4]) << 20;
    if (REGION < ENTRY || REGION > (1 << 30)) { fprintf(stderr, "REGION_MIB: 1 to 1024\n"); return 2; }
    char path[4096];
    snprintf(path, sizeof path, "%s/journal-pattern.data", argv[1]);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) fail("open");
    static char zero[1 << 20];
    memset(zero, 'a', sizeof zero);
    for (off_t o = 0; o < (off_t)DATA_CHUNKS * CHUNK + 2 * REGION; o += sizeof zero)
        if (pwrite(fd, zero, sizeof zero, o) != (ssize_t)sizeof zero) fail("fill");
    if (fsync(fd) != 0) fail("fsync");
    int every[] = {1, 16, 256, 0};
    printf("journal regions of %lld MiB\n", (long long)(REGION >> 20));
    printf("| fsync every | plain: per write | journal: per write | ratio (plain ÷ journal) | plain: fsync per write | journal: fsync per write | fsync ratio (journal ÷ plain) |\n|---|---|---|---|---|---|---|\n");
    for (int k = 0; k < 4; k++) {
        double p[64], j[64], ps[64], js[64];
        int n = writes;
        if (every[k] == 1 && n > 512) n = 512;  /* a sync per write: keep the round short */
        for (int r = 0; r < rounds && r < 64; r++) {
            rng = 1 + (unsigned)r;
            if (r % 2 == 0) { p[r] = run(fd, 0, n, every[k], &ps[r]); rng = 1 + (unsigned)r; j[r] = run(fd, 1, n, every[k], &js[r]); }
            else { j[r] = run(fd, 1, n, every[k], &js[r]); rng = 1 + (unsigned)r; p[r] = run(fd, 0, n, every[k], &ps[r]); }
            if (fsync(fd) != 0) fail("fsync");
        }
        int m = rounds < 64 ? rounds : 64;
        qsort(p, m, sizeof p[0], cmp); qsort(j, m, sizeof j[0], cmp); qsort(ps, m, sizeof ps[0], cmp); qsort(js, m, sizeof js[0], cmp);
        char label[32];
        if (every[k] > 0) snprintf(label, sizeof label, "%d writes", every[k]); else snprintf(label, sizeof label, "never (%d writes)", n);
        printf("| %s | %.2f us | %.2f us | %.2fx | %.2f us | %.2f us | %.2fx |\n", label, p[m / 2] / 1e3, j[m / 2] / 1e3, p[m / 2] / j[m / 2],
               ps[m / 2] / 1e3, js[m / 2] / 1e3, ps[m / 2] > 0 ? js[m / 2] / ps[m / 2] : 0.0);
    }
    close(fd);
    unlink(path);
    return 0;
}
