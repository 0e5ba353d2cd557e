// The floor of a crash-safe 100 B / 512 B append: system calls and AES-GCM only, no engine code.
//   plain    write(2) of the bytes (O_APPEND)
//   chunk    today's format: re-seal the last chunk (its fill cycles as appends fill it), seal the
//            trailer, pwrite the part beyond the old end, then the part before it
//   record   a tail-record format: seal only the new bytes as a record, seal the trailer, pwrite
//            the part beyond the old end, then the 32 bytes over the old trailer; every 4 KiB of
//            records is compacted into one full chunk (sealed and written once, counted)
//   v4       today's format as the engine writes it since stop 36 (version 4, chunk 0 at 8576): one
//            pwrite when the rewritten chunk and its trailer lie in one page; the split above when
//            only the part before the old end does; else, first, a copy of the new end into a
//            tail-copy slot (and its descriptor sealed), then one pwrite (what a kill cannot tear)
//   record1  tail records written the same way: the record and the new trailer over the old
//            trailer in one pwrite when they lie in one page, else the two ordered pwrites above;
//            compaction copies the chunk into a slot first (it rewrites records in place)
// Each mode makes exactly the system calls and AES-256-GCM operations its format needs and nothing
// else, so the ratios are ceilings: the engine adds its own code on top (docs/BENCHMARKS.md).
//   cc -std=c11 -O2 -o append-floor append-floor.c -lcrypto
//   ./append-floor DIR [rounds] [size]      (100 000 appends per mode and round, medians printed)
#define _GNU_SOURCE
#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
static unsigned char key[32], nonce[12], aad[24], plain[8192], sealed[8192 + 64], tag[16];
static EVP_CIPHER_CTX *ctx;

static void seal(size_t n) {
    nonce[0]++;
    int len;
    if (!EVP_EncryptInit_ex(ctx, NULL, NULL, NULL, nonce) || !EVP_EncryptUpdate(ctx, NULL, &len, aad, sizeof aad)
        || (n && !EVP_EncryptUpdate(ctx, sealed + 16, &len, plain, (int)n)) || !EVP_EncryptFinal_ex(ctx, sealed + 16 + n, &len)
        || !EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, 16, tag)) abort();
}

static int fresh(const char *path, int flags) {
    unlink(path);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | flags, 0600);
    if (fd < 0) { perror("open"); exit(1); }
    return fd;
}

enum { CALLS = 100000, CHUNK = 4096, OVER = 32 };

static double runPlain(const char *path, size_t size) {
    int fd = fresh(path, O_APPEND);
    double t = now();
    for (int i = 0; i < CALLS; i++) if (write(fd, plain, size) != (ssize_t)size) abort();
    t = now() - t;
    close(fd);
    return t / CALLS * 1e6;
}

static double runChunk(const char *path, size_t size) {
    int fd = fresh(path, 0);
    off_t full = 0;   // bytes of full chunks (records) before the last chunk
    size_t fill = 0;  // plaintext bytes in the last chunk
    double t = now();
    for (int i = 0; i < CALLS; i++) {
        size_t left = size;
        while (left > 0) {  // an append that fills the last chunk goes on in the next one
            size_t n = left < CHUNK - fill ? left : CHUNK - fill;
            off_t chunkAt = 128 + full;
            off_t oldEnd = chunkAt + (fill ? fill + OVER : 0) + OVER;
            fill += n;
            left -= n;
            seal(fill);
            seal(0);
            size_t record = fill + OVER, total = record + OVER;
            off_t newEnd = chunkAt + total;
            size_t beyond = (size_t)(newEnd - oldEnd);
            if (pwrite(fd, sealed + total - beyond, beyond, oldEnd) != (ssize_t)beyond) abort();
            if (pwrite(fd, sealed, total - beyond, chunkAt) != (ssize_t)(total - beyond)) abort();
            if (fill == CHUNK) { full += CHUNK + OVER; fill = 0; }
        }
    }
    t = now() - t;
    close(fd);
    return t / CALLS * 1e6;
}

static double runRecord(const char *path, size_t size) {
    int fd = fresh(path, 0);
    off_t end = 128 + OVER;  // header and trailer
    size_t tail = 0;         // plaintext bytes in tail records
    double t = now();
    for (int i = 0; i < CALLS; i++) {
        seal(size);
        seal(0);
        size_t record = size + OVER, total = record + OVER;
        off_t at = end - OVER;  // the record starts over the old trailer
        if (pwrite(fd, sealed + OVER, total - OVER, at + OVER) != (ssize_t)(total - OVER)) abort();
        if (pwrite(fd, sealed, OVER, at) != OVER) abort();
        end = at + total;
        tail += size;
        if (tail >= CHUNK) {  // compaction: one full chunk sealed and written (then the tail restarts)
            seal(CHUNK);
            if (pwrite(fd, sealed, CHUNK + OVER, 128) != CHUNK + OVER) abort();
            tail -= CHUNK;
        }
    }
    t = now() - t;
    close(fd);
    return t / CALLS * 1e6;
}

static int onePage(off_t from, off_t to) { return from / 4096 == (to - 1) / 4096; }

enum { V4_FIRST_CHUNK = 128 + 2 * (CHUNK + 128) };

static double runV4(const char *path, size_t size) {
    int fd = fresh(path, 0);
    off_t full = 0;
    size_t fill = 0;
    double t = now();
    for (int i = 0; i < CALLS; i++) {
        size_t left = size;
        while (left > 0) {
            size_t n = left < CHUNK - fill ? left : CHUNK - fill;
            off_t chunkAt = V4_FIRST_CHUNK + full;
            off_t oldEnd = chunkAt + (fill ? fill + OVER : 0) + OVER;
            int hadBytes = fill > 0;
            fill += n;
            left -= n;
            seal(fill);
            seal(0);
            size_t total = fill + OVER + OVER;
            off_t newEnd = chunkAt + total;
            if (onePage(chunkAt, newEnd) || !hadBytes) {
                if (pwrite(fd, sealed, total, chunkAt) != (ssize_t)total) abort();
            } else if (onePage(chunkAt, oldEnd - OVER)) {
                size_t beyond = (size_t)(newEnd - oldEnd);
                if (pwrite(fd, sealed + total - beyond, beyond, oldEnd) != (ssize_t)beyond) abort();
                if (pwrite(fd, sealed, total - beyond, chunkAt) != (ssize_t)(total - beyond)) abort();
            } else {
                seal(0);  // the copy's descriptor
                if (pwrite(fd, sealed, total + 64, 128) != (ssize_t)(total + 64)) abort();
                if (pwrite(fd, sealed, total, chunkAt) != (ssize_t)total) abort();
            }
            if (fill == CHUNK) { full += CHUNK + OVER; fill = 0; }
        }
    }
    t = now() - t;
    close(fd);
    return t / CALLS * 1e6;
}

static double runRecordOneWrite(const char *path, size_t size) {
    int fd = fresh(path, 0);
    off_t chunkAt = V4_FIRST_CHUNK, end = chunkAt + OVER;
    size_t tail = 0;
    double t = now();
    for (int i = 0; i < CALLS; i++) {
        seal(size);
        seal(0);
        size_t total = size + OVER + OVER;
        off_t at = end - OVER;
        if (onePage(at, at + total)) {
            if (pwrite(fd, sealed, total, at) != (ssize_t)total) abort();
        } else {
            if (pwrite(fd, sealed + OVER, total - OVER, at + OVER) != (ssize_t)(total - OVER)) abort();
            if (pwrite(fd, sealed, OVER, at) != OVER) abort();
        }
        end = at + total;
        tail += size;
        if (tail >= CHUNK) {  // compaction: a copy first, then the full chunk over the records
            seal(CHUNK);
            seal(0);
            if (pwrite(fd, sealed, CHUNK + OVER + 64, 128) != CHUNK + OVER + 64) abort();
            if (pwrite(fd, sealed, CHUNK + OVER, chunkAt) != CHUNK + OVER) abort();
            tail -= CHUNK;
        }
    }
    t = now() - t;
    close(fd);
    return t / CALLS * 1e6;
}

static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: %s DIR [rounds] [size]\n", argv[0]); return 2; }
    int rounds = argc > 2 ? atoi(argv[2]) : 5;
    size_t size = argc > 3 ? (size_t)atoi(argv[3]) : 100;
    char path[4096];
    snprintf(path, sizeof path, "%s/append-floor.%d", argv[1], (int)getpid());
    RAND_bytes(key, sizeof key);
    RAND_bytes(plain, sizeof plain);
    ctx = EVP_CIPHER_CTX_new();
    if (!EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), NULL, key, NULL)) abort();
    if (rounds > 64) rounds = 64;
    double p[64], c[64], r[64], v[64], r1[64];
    for (int i = 0; i < rounds; i++) {
        p[i] = runPlain(path, size);
        c[i] = runChunk(path, size);
        r[i] = runRecord(path, size);
        v[i] = runV4(path, size);
        r1[i] = runRecordOneWrite(path, size);
        printf("round %d: plain %.3f us, chunk %.3f us (%.2fx), record %.3f us (%.2fx), v4 %.3f us (%.2fx), record1 %.3f us (%.2fx)\n",
               i + 1, p[i], c[i], p[i] / c[i], r[i], p[i] / r[i], v[i], p[i] / v[i], r1[i], p[i] / r1[i]);
    }
    qsort(p, rounds, sizeof *p, cmp); qsort(c, rounds, sizeof *c, cmp); qsort(r, rounds, sizeof *r, cmp);
    qsort(v, rounds, sizeof *v, cmp); qsort(r1, rounds, sizeof *r1, cmp);
    int m = rounds / 2;
    printf("%zu B appends, medians: plain %.3f us; chunk rewrite %.3f us = %.2fx plain; tail record %.3f us = %.2fx plain;"
           " v4 as written %.3f us = %.2fx plain; tail record, one write in a page %.3f us = %.2fx plain\n",
           size, p[m], c[m], p[m] / c[m], r[m], p[m] / r[m], v[m], p[m] / v[m], r1[m], p[m] / r1[m]);
    unlink(path);
    return 0;
}
