/*
 * fork — secure descriptors across fork(2) (ACSecureFile.h "Processes and fork()"). Each case fails
 * with the engine as it was before fork was handled (late: before its own fix):
 *
 *   coordinated  parent and child append 100-byte records through the inherited ACSECURE_OPEN_SHARED
 *                descriptor at the same time. Every record of both must be in the file. (The record
 *                lock belongs to the open file description, which parent and child shared: the two
 *                did not exclude each other and the file ended up unreadable.)
 *   late         a descriptor opened in default mode before the fork; after it, parent and child
 *                each open the file again with ACSECURE_OPEN_SHARED and append at the same time.
 *                Every record must be in the file. (The child's state had adopted the inherited
 *                description while it was uncoordinated and then locked through it.)
 *   handoff      default mode: the parent writes after the fork, then the child appends through its
 *                inherited descriptor. The child's append must land after the parent's bytes, and
 *                the child must read them. (It appended at the length cached before the fork, over
 *                the parent's bytes.)
 *   writeback    write-back mode: the parent flushes its buffered bytes and writes more; then the
 *                child exits with exit(). The file must keep everything. (The child's exit flushed
 *                its copy of the parent's old buffer, cutting the file back to it.)
 *   daemon       write-back mode, as daemon(3) does it: a process writes (buffered), forks and
 *                leaves with _exit; its child closes the descriptor. The bytes must be in the file
 *                (fork() writes the buffer first; a child that merely dropped its copy lost them).
 *
 *   large        large writes (sealed by the sealing pool's threads) before the fork, then in parent
 *                and child at once, each to a file of its own. Both must read back. (A guard rather
 *                than a regression case: the child has none of the parent's threads, and the pool's
 *                mutex may have been copied held, so the child starts a pool of its own.)
 *
 *   fork STORE DIR     runs them all; prints one line per case, exits 0 only if all pass
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ACSecureFile/ACSecureFile.h>
#include <ACSecureFile/ACSecureServices.h>

enum { RECORD = 100, RECORDS = 2000, PART = 5000 };

static int fail(const char *test, const char *what) {
    fprintf(stderr, "fork: %s: FAIL: %s (%s)\n", test, what, strerror(errno));
    return 1;
}

/* Reads the whole file through a fresh descriptor; returns its length or -1. */
static long readAll(const char *path, unsigned char *out, size_t capacity) {
    int fd = ACSecureFileOpen(path, O_RDONLY);
    if (fd < 0) return -1;
    size_t got = 0;
    ssize_t n;
    while ((n = ACSecureFileRead(fd, out + got, capacity - got)) > 0) got += (size_t)n;
    int closed = ACSecureFileClose(fd);
    return n < 0 || closed != 0 ? -1 : (long)got;
}

/* Waits for the child; true when it exited with 0. */
static int childSucceeded(pid_t pid) {
    int status;
    return waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* Forks a child that waits until the parent calls go(): returns the pid in the parent, 0 in the
 * child once released, -1 if the fork failed. */
static int goPipe[2];
static pid_t forkWaiting(void) {
    if (pipe(goPipe) != 0) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        char token;
        close(goPipe[1]);
        if (read(goPipe[0], &token, 1) != 1) _exit(2);
        return 0;
    }
    close(goPipe[0]);
    return pid;
}

static int go(void) {
    int ok = write(goPipe[1], "g", 1) == 1;
    close(goPipe[1]);
    return ok;
}

/* Checks that the file is PART bytes of each letter of `letters`, in order. */
static int expectParts(const char *test, const char *path, const char *letters) {
    size_t parts = strlen(letters);
    static unsigned char all[4 * PART + 1];
    long n = readAll(path, all, sizeof all);
    int same = n == (long)(parts * PART);
    for (size_t p = 0; same && p < parts; p++)
        for (size_t i = 0; same && i < PART; i++) same = all[p * PART + i] == (unsigned char)letters[p];
    if (!same) fprintf(stderr, "fork: %s: FAIL: the file reads %ld bytes, expected %zu x %d bytes: %s\n", test, n, parts, PART, letters);
    return same ? 0 : 1;
}

static int coordinated(const char *test, const char *path) {
    int fd = ACSecureFileOpenWithOptions(path, O_RDWR | O_CREAT | O_TRUNC | O_APPEND, 0600, ACSECURE_OPEN_SHARED);
    if (fd < 0) return fail(test, "open");
    pid_t pid = fork();
    if (pid < 0) return fail(test, "fork");
    unsigned char record[RECORD];
    memset(record, pid == 0 ? 'c' : 'p', sizeof record);
    for (int i = 0; i < RECORDS; i++) {
        if (ACSecureFileWrite(fd, record, sizeof record) != (ssize_t)sizeof record) {
            if (pid == 0) _exit(1);
            return fail(test, "parent's append");
        }
    }
    if (pid == 0) _exit(ACSecureFileClose(fd) == 0 ? 0 : 1);
    if (!childSucceeded(pid)) return fail(test, "the child's appends or close failed");
    if (ACSecureFileClose(fd) != 0) return fail(test, "close");
    static unsigned char all[2 * RECORDS * RECORD + 1];
    long n = readAll(path, all, sizeof all);
    if (n != 2 * RECORDS * RECORD) {
        fprintf(stderr, "fork: %s: FAIL: the file reads %ld bytes, expected %d\n", test, n, 2 * RECORDS * RECORD);
        return 1;
    }
    long parent = 0, child = 0;
    for (long i = 0; i < n; i += RECORD) {  /* whole records, each all one process's */
        if (memcmp(all + i, all + i + 1, RECORD - 1) != 0) return fail(test, "a record mixes bytes");
        if (all[i] == 'p') parent++; else if (all[i] == 'c') child++;
    }
    if (parent != RECORDS || child != RECORDS) {
        fprintf(stderr, "fork: %s: FAIL: %ld parent and %ld child records, expected %d each\n", test, parent, child, RECORDS);
        return 1;
    }
    printf("fork: coordinated: %d + %d concurrent appends through an inherited descriptor, all in the file\n", RECORDS, RECORDS);
    return 0;
}

/* Appends RECORDS records of `byte` through a new ACSECURE_OPEN_SHARED descriptor; 0 on success. */
static int appendShared(const char *path, char byte) {
    int fd = ACSecureFileOpenWithOptions(path, O_WRONLY | O_APPEND, 0, ACSECURE_OPEN_SHARED);
    if (fd < 0) return 1;
    unsigned char record[RECORD];
    memset(record, byte, sizeof record);
    for (int i = 0; i < RECORDS; i++)
        if (ACSecureFileWrite(fd, record, sizeof record) != (ssize_t)sizeof record) return 1;
    return ACSecureFileClose(fd) == 0 ? 0 : 1;
}

static int late(const char *test, const char *path) {
    int fd = ACSecureFileOpen(path, O_RDWR | O_CREAT | O_TRUNC, 0600);  /* default mode, kept open */
    if (fd < 0) return fail(test, "open");
    pid_t pid = fork();
    if (pid < 0) return fail(test, "fork");
    if (pid == 0) _exit(appendShared(path, 'c'));
    if (appendShared(path, 'p') != 0) return fail(test, "parent's appends");
    if (!childSucceeded(pid)) return fail(test, "the child's appends failed");
    if (ACSecureFileClose(fd) != 0) return fail(test, "close");
    static unsigned char all[2 * RECORDS * RECORD + 1];
    long n = readAll(path, all, sizeof all), parent = 0, child = 0;
    for (long i = 0; n == 2 * RECORDS * RECORD && i < n; i += RECORD) {
        if (memcmp(all + i, all + i + 1, RECORD - 1) != 0) break;
        if (all[i] == 'p') parent++; else if (all[i] == 'c') child++;
    }
    if (parent != RECORDS || child != RECORDS) {
        fprintf(stderr, "fork: %s: FAIL: the file reads %ld bytes, %ld parent and %ld child records, expected %d each\n",
                test, n, parent, child, RECORDS);
        return 1;
    }
    printf("fork: late: coordinated appends through descriptors opened after the fork, next to one inherited: all in the file\n");
    return 0;
}

static int handoff(const char *test, const char *path) {
    unsigned char a[PART], b[PART], c[PART];
    memset(a, 'a', PART);
    memset(b, 'b', PART);
    memset(c, 'c', PART);
    int fd = ACSecureFileOpen(path, O_RDWR | O_CREAT | O_TRUNC | O_APPEND, 0600);
    if (fd < 0) return fail(test, "open");
    if (ACSecureFileWrite(fd, a, PART) != PART) return fail(test, "write a");
    pid_t pid = forkWaiting();
    if (pid < 0) return fail(test, "fork");
    if (pid == 0) {
        /* The parent has written b: the inherited descriptor appends after it and reads it. */
        if (ACSecureFileWrite(fd, c, PART) != PART) _exit(3);
        static unsigned char seen[3 * PART + 1];
        if (ACSecureFilePread(fd, seen, sizeof seen, 0) != 3 * PART) _exit(4);
        if (memcmp(seen, a, PART) || memcmp(seen + PART, b, PART) || memcmp(seen + 2 * PART, c, PART)) _exit(5);
        _exit(ACSecureFileClose(fd) == 0 ? 0 : 6);
    }
    if (ACSecureFileWrite(fd, b, PART) != PART) return fail(test, "write b");
    if (!go()) return fail(test, "pipe write");
    int status;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "fork: %s: FAIL: the child's append or read-back failed (exit %d)\n", test,
                WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        return 1;
    }
    if (ACSecureFileClose(fd) != 0) return fail(test, "close");
    if (expectParts(test, path, "abc")) return 1;
    printf("fork: handoff: the child's append through its inherited descriptor lands after the parent's later write\n");
    return 0;
}

static int writeBack(const char *test, const char *path) {
    unsigned char x[PART], y[PART];
    memset(x, 'x', PART);
    memset(y, 'y', PART);
    int fd = ACSecureFileOpenWithOptions(path, O_RDWR | O_CREAT | O_TRUNC, 0600, ACSECURE_OPEN_WRITE_BACK);
    if (fd < 0) return fail(test, "open");
    if (ACSecureFileWrite(fd, x, PART) != PART) return fail(test, "write x");  /* buffered */
    pid_t pid = forkWaiting();
    if (pid < 0) return fail(test, "fork");
    if (pid == 0) exit(0);  /* the exit flush: must not write the parent's buffer again */
    if (ACSecureFileFlush(fd) != 0) return fail(test, "flush x");
    if (ACSecureFileWrite(fd, y, PART) != PART || ACSecureFileFlush(fd) != 0) return fail(test, "write y");
    if (!go()) return fail(test, "pipe write");
    if (!childSucceeded(pid)) return fail(test, "child");
    if (ACSecureFileClose(fd) != 0) return fail(test, "close");
    if (expectParts(test, path, "xy")) return 1;
    printf("fork: writeback: a child's exit does not write its copy of the parent's buffer\n");
    return 0;
}

static int daemonLike(const char *test, const char *path) {
    unsigned char w[PART];
    memset(w, 'w', PART);
    pid_t pid = fork();
    if (pid < 0) return fail(test, "fork");
    if (pid == 0) {
        int fd = ACSecureFileOpenWithOptions(path, O_RDWR | O_CREAT | O_TRUNC, 0600, ACSECURE_OPEN_WRITE_BACK);
        if (fd < 0 || ACSecureFileWrite(fd, w, PART) != PART) _exit(2);  /* buffered */
        pid_t daemonized = fork();
        if (daemonized < 0) _exit(3);
        if (daemonized == 0) _exit(ACSecureFileClose(fd) == 0 ? 0 : 4);
        int status;
        if (waitpid(daemonized, &status, 0) != daemonized || !WIFEXITED(status) || WEXITSTATUS(status) != 0) _exit(5);
        _exit(0);  /* as daemon(3)'s parent leaves: no flush, no close */
    }
    int status;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "fork: %s: FAIL: the writer or its child failed (exit %d)\n", test, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        return 1;
    }
    if (expectParts(test, path, "w")) return 1;
    printf("fork: daemon: bytes buffered before fork() are in the file after the forking process _exits\n");
    return 0;
}

/* Writes `count` bytes of `letter` to `path` (new) in 1 MiB calls and reads them back; 0 when both work. */
static int writeLargeAndCheck(const char *path, int letter, size_t count) {
    enum { CALL = 1 << 20 };
    static unsigned char buf[CALL];
    memset(buf, letter, sizeof buf);
    int fd = ACSecureFileOpen(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) return 1;
    for (size_t done = 0; done < count; done += CALL) {
        if (ACSecureFileWrite(fd, buf, CALL) != CALL) return 1;
    }
    if (ACSecureFileClose(fd) != 0) return 1;
    static unsigned char back[4 << 20];
    long n = readAll(path, back, sizeof back);
    if (n != (long)count) return 1;
    for (long i = 0; i < n; i++) if (back[i] != (unsigned char)letter) return 1;
    return 0;
}

static int large(const char *test, const char *path) {
    char mine[4200], theirs[4200];
    snprintf(mine, sizeof mine, "%s.parent", path);
    snprintf(theirs, sizeof theirs, "%s.child", path);
    if (writeLargeAndCheck(mine, 'a', 2 << 20) != 0) return fail(test, "the large write before the fork");
    pid_t pid = forkWaiting();
    if (pid < 0) return fail(test, "fork");
    if (pid == 0) _exit(writeLargeAndCheck(theirs, 'c', 3 << 20));
    if (!go()) return fail(test, "releasing the child");
    int parent = writeLargeAndCheck(mine, 'p', 3 << 20);
    if (!childSucceeded(pid)) return fail(test, "the child's large writes did not read back");
    if (parent != 0) return fail(test, "the parent's large writes after the fork did not read back");
    printf("fork: large: 3 MiB written in 1 MiB calls by parent and child at once after the fork, both read back\n");
    return 0;
}

/* Runs one case on DIR/NAME. */
static int run(const char *dir, const char *name, int (*test)(const char *name, const char *path)) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    fflush(stdout);  /* a child's exit() must not print the parent's buffered lines again */
    return test(name, path);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: fork STORE DIR\n");
        return 2;
    }
    if (ACSecureServicesStart("acsecure-fork", argv[1]) != 0) {
        fprintf(stderr, "fork: ACSecureServicesStart: %s\n", strerror(errno));
        return 1;
    }
    int failures = run(argv[2], "coordinated", coordinated);  /* one after another, in this order */
    failures += run(argv[2], "late", late);
    failures += run(argv[2], "handoff", handoff);
    failures += run(argv[2], "writeback", writeBack);
    failures += run(argv[2], "daemon", daemonLike);
    failures += run(argv[2], "large", large);
    return failures == 0 ? 0 : 1;
}
