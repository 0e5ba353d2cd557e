/* How often a SIGKILL at a random moment leaves a chunk that does not read (docs/BENCHMARKS.md
 * "Appends in one pwrite in one page"). A child process appends SIZE-byte records to a new file
 * through the C API (mode "append"), or overwrites SIZE-byte spans at random multiples of SIZE in a
 * 64 KiB file, or one of 16 spans above 4 KiB (mode "overwrite": 100 B spans rewrite chunks in
 * part, 4096 B and larger spans whole chunks), as
 * fast as it can; the parent kills it with SIGKILL after a random 1–21 ms,
 * then opens the file and reads it whole. A trial counts when the open or a read fails, or a byte
 * reads as a value the file never had (neither the 64 KiB's first bytes nor the child's). The
 * promise is 0: "a crash mid-call loses at most that call's bytes and never leaves an unreadable
 * chunk behind". A chunk rewritten in place spans two pages, and Linux stops a write between two
 * pages when SIGKILL is pending, so today some trials fail (FORMAT.md "What a crash can cost").
 * Since stop 36 a short last chunk is covered (a rewrite's tail copy goes first): appends leave
 * none; since stop 37 a chunk rewritten in part is too (a chunk copy goes first): overwrites leave
 * none; since stop 39 a chunk rewritten whole by a write of at most two chunks is too (4096 and
 * 8192 B spans). scripts/test-c.sh runs 100 kills of each 100 B mode and 50 of each whole-chunk
 * size with --require-none, which fails the run on any.
 * usage: kill-tear DIR [TRIALS [SIZE [append|overwrite [--require-none]]]]  (defaults 400, 100,
 *        append; SIZE up to 65536; cc -O2 kill-tear.c $(pkg-config --cflags --libs acsecurefile);
 *        environment: ACSECURE_HOME, ACSECURE_APP_ID as for Examples/c)
 * Prints: "<mode> <size> B: <trials> kills, <n> left a chunk that does not read (<percent> %)";
 * exits 1 when --require-none is given and n > 0. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <ACSecureFile/ACSecureFile.h>

enum { SMALL_FILE = 65536, LARGEST_SIZE = 65536 };
static char buffer[16 * LARGEST_SIZE];
static char record[LARGEST_SIZE];

/* The file an overwriter rewrites: 64 KiB for spans up to 4 KiB, 16 spans for larger ones. */
static int overwrittenFile(int size) { return size <= 4096 ? SMALL_FILE : 16 * size; }

static void fail(const char *what) { perror(what); exit(1); }

/* The child: writes until killed. Never returns. */
static void writeUntilKilled(const char *path, int overwrite, int size, int ready, unsigned seed) {
    int fd = ACSecureFileOpen(path, overwrite ? O_RDWR : (O_WRONLY | O_APPEND), 0600);
    if (fd < 0) _exit(2);
    memset(record, 'a' + seed % 26, sizeof record);
    if (write(ready, "r", 1) != 1) _exit(2);
    srand(seed);
    for (;;) {
        ssize_t n = overwrite ? ACSecureFilePwrite(fd, record, (size_t)size, (off_t)(rand() % (overwrittenFile(size) / size - 1)) * size)
                              : ACSecureFileWrite(fd, record, (size_t)size);
        if (n != size) _exit(3);
    }
}

/* 1 when the file does not open, some read fails, or a byte is neither `old` nor `record`. */
static int leftUnreadable(const char *path, int trial, char old, char record) {
    int fd = ACSecureFileOpen(path, O_RDONLY, 0);
    if (fd < 0) { fprintf(stderr, "trial %d: open failed (errno %d)\n", trial, errno); return 1; }
    off_t at = 0;
    ssize_t n;
    int wrong = 0;
    while ((n = ACSecureFilePread(fd, buffer, sizeof buffer, at)) > 0) {
        for (ssize_t i = 0; i < n && !wrong; i++) {
            if (buffer[i] != old && buffer[i] != record) {
                fprintf(stderr, "trial %d: byte %lld reads %d, a value it never had\n", trial, (long long)(at + i), buffer[i]);
                wrong = 1;
            }
        }
        at += n;
    }
    int bad = n < 0 || wrong;
    if (bad) fprintf(stderr, "trial %d: a read at or after %lld failed (errno %d, ACE %d)\n", trial, (long long)at, errno, ACSecureFileLastError(fd));
    if (ACSecureFileClose(fd) != 0) fail("close");
    return bad;
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: kill-tear DIR [TRIALS [SIZE [append|overwrite [--require-none]]]]\n"); return 2; }
    int trials = argc > 2 ? atoi(argv[2]) : 400, size = argc > 3 ? atoi(argv[3]) : 100;
    int overwrite = argc > 4 && strcmp(argv[4], "overwrite") == 0;
    int requireNone = argc > 5 && strcmp(argv[5], "--require-none") == 0;
    if (trials < 1 || size < 1 || size > LARGEST_SIZE) { fprintf(stderr, "kill-tear: TRIALS >= 1, SIZE 1..%d\n", LARGEST_SIZE); return 2; }
    char path[4096];
    snprintf(path, sizeof path, "%s/kill-tear.%d", argv[1], (int)getpid());
    srand((unsigned)getpid());
    int bad = 0;
    for (int t = 0; t < trials; t++) {
        int fd = ACSecureFileOpen(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
        if (fd < 0) fail("create");
        if (overwrite) {
            memset(buffer, 1, sizeof buffer);
            if (ACSecureFileWrite(fd, buffer, (size_t)overwrittenFile(size)) != overwrittenFile(size)) fail("write");
        }
        if (ACSecureFileClose(fd) != 0) fail("close");
        int ready[2];
        if (pipe(ready) != 0) fail("pipe");
        pid_t child = fork();
        if (child < 0) fail("fork");
        if (child == 0) { close(ready[0]); writeUntilKilled(path, overwrite, size, ready[1], (unsigned)t); }
        close(ready[1]);
        char c;
        if (read(ready[0], &c, 1) != 1) { fprintf(stderr, "kill-tear: the child did not start\n"); return 1; }
        close(ready[0]);
        struct timespec pause = { 0, (rand() % 20000 + 1000) * 1000L };
        nanosleep(&pause, NULL);
        kill(child, SIGKILL);
        int status;
        if (waitpid(child, &status, 0) != child) fail("waitpid");
        if (!WIFSIGNALED(status)) { fprintf(stderr, "kill-tear: the child stopped before the kill (status %d)\n", status); return 1; }
        bad += leftUnreadable(path, t, 1, (char)('a' + (unsigned)t % 26));
    }
    unlink(path);
    printf("%s %d B: %d kills, %d left a chunk that does not read (%.1f %%)\n", overwrite ? "overwrite" : "append",
           size, trials, bad, 100.0 * bad / trials);
    return requireNone && bad > 0 ? 1 : 0;
}
