// What an fsync after 8 MiB of writes costs, and how much depends on what the process did just
// before the call rather than on the data (compare.sh's "fsync 8 MiB" line).
//
// Each round times, three times each and averaged, on a new file per call:
//   plain        write(2) 8 × 1 MiB back to back, fsync(2) at once
//   plain-busy   the same writes spaced by 0.3 ms of busy work (about the engine's sealing time
//                per MiB), fsync(2) at once
//   engine       ACSecureFileWrite 8 × 1 MiB, ACSecureFileFsync at once
//   plain-pause  plain, then 20 ms asleep before fsync(2)
//   engine-pause engine, then 20 ms asleep before ACSecureFileFsync
// The data is random (incompressible, like ciphertext). Prints one line of milliseconds per round.
//
//   cc -O2 -o fsync-timing fsync-timing.c -I<prefix>/include -L<prefix>/lib -lACSecureFile -Wl,-rpath,<prefix>/lib
//   ACSECURE_HOME=<store> ACSECURE_APP_ID=default ./fsync-timing <dir on the disk to measure> [rounds]
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <ACSecureFile/ACSecureFile.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static char buf[1 << 20];

static void busy(double seconds) {
    double t0 = now();
    while (now() - t0 < seconds) {}
}

/* The calls of one contender: plain POSIX or the engine's C API. */
struct api {
    const char *name;
    int (*open)(const char *, int, mode_t);
    ssize_t (*write)(int, const void *, size_t);
    int (*fsync)(int);
    int (*close)(int);
};

static int plainOpen(const char *path, int flags, mode_t mode) { return open(path, flags, mode); }
static int engineOpen(const char *path, int flags, mode_t mode) { return ACSecureFileOpen(path, flags, mode); }
static const struct api plainAPI = { "plain", plainOpen, write, fsync, close };
static const struct api engineAPI = { "engine", engineOpen, ACSecureFileWrite, ACSecureFileFsync, ACSecureFileClose };

/* Writes 8 MiB to a new file (spaced by busy work if asked), optionally pauses, and times the fsync. */
static double timeFsync(const struct api *api, const char *path, int spaced, int pause) {
    unlink(path);
    int fd = api->open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) { perror(api->name); exit(1); }
    for (int i = 0; i < 8; i++) {
        if (api->write(fd, buf, sizeof buf) != (ssize_t)sizeof buf) { perror(api->name); exit(1); }
        if (spaced) busy(0.0003);
    }
    if (pause) usleep(20000);
    double t = now();
    if (api->fsync(fd) != 0) { perror(api->name); exit(1); }
    t = now() - t;
    api->close(fd);
    unlink(path);
    return t;
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: %s DIR [rounds]\n", argv[0]); return 2; }
    int rounds = argc > 2 ? atoi(argv[2]) : 9;
    char path[4096];
    snprintf(path, sizeof path, "%s/fsync-timing.%d", argv[1], (int)getpid());
    FILE *r = fopen("/dev/urandom", "r");
    if (!r || fread(buf, 1, sizeof buf, r) != sizeof buf) { perror("/dev/urandom"); return 1; }
    fclose(r);
    printf("plain_ms plain_busy_ms engine_ms plain_pause_ms engine_pause_ms\n");
    for (int round = 0; round < rounds; round++) {
        double t[5] = {0};
        for (int k = 0; k < 3; k++) {
            t[0] += timeFsync(&plainAPI, path, 0, 0);
            t[1] += timeFsync(&plainAPI, path, 1, 0);
            t[2] += timeFsync(&engineAPI, path, 0, 0);
            t[3] += timeFsync(&plainAPI, path, 0, 1);
            t[4] += timeFsync(&engineAPI, path, 0, 1);
        }
        printf("%.3f %.3f %.3f %.3f %.3f\n", t[0] / 3e-3, t[1] / 3e-3, t[2] / 3e-3, t[3] / 3e-3, t[4] / 3e-3);
        fflush(stdout);
    }
    return 0;
}
