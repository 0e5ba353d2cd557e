/*
 * differential.c — the ACSecure* calls must behave exactly like their POSIX counterparts.
 *
 * Runs random sequences of all 14 calls twice, in lock step: with open/read/write/... on a plain
 * file, and with ACSecureFileOpen/ACSecureFileRead/... on a secure file. Every return value,
 * every errno of a failed call and every byte read must be equal; after every successful call on
 * a secure descriptor ACSecureFileLastError must be ACE_NO_ERROR. Each sequence ends by closing
 * everything and comparing the whole content of both files.
 *
 * Sequences exercise several descriptors on the same file, O_APPEND, O_TRUNC, O_EXCL, holes,
 * truncates, offsets around the 4096-byte chunk boundaries, readv/writev with up to IOV_MAX
 * iovecs (and the EINVAL cases beyond), lseek SEEK_SET/CUR/END with negative results and bad
 * whence values, renames while descriptors are open, and bad descriptors.
 *
 * To look past a known divergence while it is being fixed, build with -DSKIP_RDONLY_TRUNC
 * (no O_RDONLY|O_TRUNC opens) or -DSKIP_LSTAT_WHILE_OPEN (lstat/truncate by path only while no
 * descriptor is open). The default build checks everything.
 *
 * usage: differential [seed [sequences [operations-per-sequence [directory]]]]
 *   defaults: seed 1, 2000 sequences, 60 operations, a new directory under $TMPDIR (or /tmp).
 * Prints "differential: N passed, M failed (...)" and exits 1 if any sequence failed.
 * The secure side uses its own secure services store inside the directory.
 *
 *   cc -O2 differential.c $(pkg-config --cflags --libs acsecurefile) -o differential
 */
#define _GNU_SOURCE 1
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include <ACSecureFile/ACSecureFile.h>
#include <ACSecureFile/ACSecureServices.h>

#define CHUNK 4096
#define NSLOTS 4
#define MAXIOV 1024
#define BUFSIZE (6 * CHUNK + 64)
#define LOGSIZE 24

/* ---- the two implementations behind one table ---- */

typedef struct {
    const char *name;
    int (*open)(const char *, int, ...);
    int (*close)(int);
    ssize_t (*read)(int, void *, size_t);
    ssize_t (*write)(int, const void *, size_t);
    ssize_t (*pread)(int, void *, size_t, off_t);
    ssize_t (*pwrite)(int, const void *, size_t, off_t);
    ssize_t (*readv)(int, const struct iovec *, int);
    ssize_t (*writev)(int, const struct iovec *, int);
    off_t (*lseek)(int, off_t, int);
    int (*rename)(const char *, const char *);
    int (*fstat)(int, struct stat *);
    int (*lstat)(const char *, struct stat *);
    int (*ftruncate)(int, off_t);
    int (*truncate)(const char *, off_t);
} Impl;

static const Impl impls[2] = {
    {"posix", open, close, read, write, pread, pwrite, readv, writev, lseek, rename, fstat, lstat,
     ftruncate, truncate},
    {"secure", ACSecureFileOpen, ACSecureFileClose, ACSecureFileRead, ACSecureFileWrite,
     ACSecureFilePread, ACSecureFilePwrite, ACSecureFileReadv, ACSecureFileWritev, ACSecureFileLseek,
     ACSecureFileRename, ACSecureFstat, ACSecureLstat, ACSecureFtruncate, ACSecureTruncate},
};

/* ---- deterministic randomness (splitmix64) ---- */

static uint64_t rng_state;
static uint64_t rnd(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
static uint64_t below(uint64_t n) { return n ? rnd() % n : 0; }
static int chance(int percent) { return (int)below(100) < percent; }

/* An offset or length that likes chunk boundaries: k*4096 + {-2..2}, small values, or anything
 * in the first few chunks. */
static int64_t pick_offset(int64_t around_size) {
    switch (below(6)) {
    case 0: case 1: {
        int64_t k = (int64_t)below(12);
        int64_t v = k * CHUNK + (int64_t)below(5) - 2;
        return v < 0 ? 0 : v;
    }
    case 2: return (int64_t)below(64);
    case 3: return (int64_t)below(8 * CHUNK);
    case 4: {  /* near the current end */
        int64_t v = around_size + (int64_t)below(2 * CHUNK + 1) - CHUNK;
        return v < 0 ? 0 : v;
    }
    default: return (int64_t)below(3) == 0 ? 16 * CHUNK + (int64_t)below(3 * CHUNK) : (int64_t)below(CHUNK);
    }
}

static size_t pick_size(void) {
    static const size_t sizes[] = {0, 1, 2, 7, 100, 4095, 4096, 4097, 8191, 8192, 8193, 12289};
    if (chance(40)) return sizes[below(sizeof sizes / sizeof sizes[0])];
    if (chance(50)) return (size_t)below(600);
    return (size_t)below(5 * CHUNK + 300);
}

/* ---- state ---- */

typedef struct {
    int used;
    int fd[2];
    int flags;
} Slot;

static char dirs[2][2100];      /* plain and secure directories */
/* The second name is not UTF-8 (Latin-1 "é", a stray 0xFF): names are bytes, as open(2) takes them. */
static const char *names[2] = {"f", "g\xe9\xff"};
static Slot slots[NSLOTS];
static int current_name;        /* which name the sequence mostly uses */
static unsigned char wbuf[BUFSIZE];
static unsigned char rbuf[2][BUFSIZE];
static struct iovec iov[2][MAXIOV + 2];

static uint64_t seed, seq_no, op_no, ops_total, calls_total, calls_failed_alike;
static int seq_failed;
static char oplog[LOGSIZE][256];
static int oplog_n;

static void logop(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(oplog[oplog_n % LOGSIZE], sizeof oplog[0], fmt, ap);
    va_end(ap);
    oplog_n++;
}

static void path_of(char *out, size_t cap, int side, int name) {
    int n = snprintf(out, cap, "%s/%s", dirs[side], names[name]);
    if (n < 0 || (size_t)n >= cap) abort();
}

static void fail(const char *fmt, ...) {
    if (seq_failed) return;
    seq_failed = 1;
    fprintf(stderr, "differential: MISMATCH seed %" PRIu64 " sequence %" PRIu64 " operation %" PRIu64 ": ",
            seed, seq_no, op_no);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n  last operations of this sequence:\n");
    int first = oplog_n > LOGSIZE ? oplog_n - LOGSIZE : 0;
    for (int i = first; i < oplog_n; i++) fprintf(stderr, "    %s\n", oplog[i % LOGSIZE]);
}

/* Compares one call's results on both sides: the return value, and errno when it failed. */
static int same(const char *what, long long r0, int e0, long long r1, int e1) {
    calls_total += 2;
    if (r0 != r1 || (r0 < 0 && e0 != e1)) {
        fail("%s: posix returned %lld (errno %d %s), secure returned %lld (errno %d %s)", what, r0,
             r0 < 0 ? e0 : 0, r0 < 0 ? strerror(e0) : "-", r1, r1 < 0 ? e1 : 0, r1 < 0 ? strerror(e1) : "-");
        return 0;
    }
    if (r0 < 0) calls_failed_alike += 2;
    return 1;
}

/* After a successful call on a valid secure descriptor, the last error must be ACE_NO_ERROR. */
static void last_error_clear(const char *what, int fd) {
    int le = ACSecureFileLastError(fd);
    if (le != ACE_NO_ERROR) fail("%s: ACSecureFileLastError(%d) is %d after success", what, fd, le);
}

static int open_slot(void) {
    int n = 0, pick = -1;
    for (int i = 0; i < NSLOTS; i++)
        if (slots[i].used && below((uint64_t)++n) == 0) pick = i;
    return pick;
}

static int free_slot(void) {
    for (int i = 0; i < NSLOTS; i++)
        if (!slots[i].used) return i;
    return -1;
}

/* A descriptor for both sides: usually an open slot's, sometimes an invalid one (EBADF). */
static int pick_fds(int fd[2], int *slot) {
    *slot = open_slot();
    if (*slot < 0 || chance(3)) {
        static const int bad[] = {-1, 1 << 20, 99999};
        fd[0] = fd[1] = bad[below(3)];
        *slot = -1;
        return 0;
    }
    fd[0] = slots[*slot].fd[0];
    fd[1] = slots[*slot].fd[1];
    return 1;
}

static void fill_write_buffer(size_t n) {
    for (size_t i = 0; i < n; i++) wbuf[i] = (unsigned char)rnd();
    /* Some zero runs, so plaintext that looks like a hole is also covered. */
    if (n > 0 && chance(10)) memset(wbuf, 0, n / 2);
}

static int64_t current_size_hint(void) {
    struct stat st;
    char p[4200];
    path_of(p, sizeof p, 0, current_name);
    return lstat(p, &st) == 0 ? (int64_t)st.st_size : 0;
}

/* ---- the operations ---- */

static void op_open(void) {
    int s = free_slot();
    if (s < 0) return;
    static const int acc[] = {O_RDONLY, O_WRONLY, O_RDWR, O_RDWR};
    int flags = acc[below(4)];
    if (chance(75)) flags |= O_CREAT;
    if (chance(5)) flags |= O_EXCL;
    if (chance(12)) flags |= O_TRUNC;
#ifdef SKIP_RDONLY_TRUNC
    if ((flags & O_ACCMODE) == O_RDONLY) flags &= ~O_TRUNC;
#endif
    if (chance(25)) flags |= O_APPEND;
    if (chance(20)) flags |= O_CLOEXEC;
    mode_t mode = chance(80) ? 0644 : 0600;
    int name = chance(85) ? current_name : 1 - current_name;
    int r[2], e[2];
    for (int side = 0; side < 2; side++) {
        char p[4200];
        path_of(p, sizeof p, side, name);
        errno = 0;
        r[side] = impls[side].open(p, flags, mode);
        e[side] = errno;
    }
    logop("open(%s, 0%o, 0%o) = %d/%d", names[name], flags, mode, r[0], r[1]);
    if (!same("open", r[0] < 0 ? -1 : 0, e[0], r[1] < 0 ? -1 : 0, e[1])) {
        if (r[0] >= 0) close(r[0]);
        if (r[1] >= 0) ACSecureFileClose(r[1]);
        return;
    }
    if (r[0] >= 0) {
        slots[s].used = 1;
        slots[s].fd[0] = r[0];
        slots[s].fd[1] = r[1];
        slots[s].flags = flags;
        last_error_clear("open", r[1]);
    }
}

static void op_close(void) {
    int fd[2], s;
    pick_fds(fd, &s);
    int r0 = impls[0].close(fd[0]), e0 = errno;
    int r1 = impls[1].close(fd[1]), e1 = errno;
    logop("close(slot %d: %d/%d) = %d/%d", s, fd[0], fd[1], r0, r1);
    if (s >= 0) slots[s].used = 0;
    same("close", r0, e0, r1, e1);
    /* A closed secure descriptor is gone: its last error cannot be asked for any more. */
    if (s >= 0 && ACSecureFileLastError(fd[1]) != -1)
        fail("ACSecureFileLastError(%d) after close did not fail", fd[1]);
}

static void compare_read(const char *what, ssize_t r0, int e0, ssize_t r1, int e1, int fd1, int valid) {
    if (!same(what, r0, e0, r1, e1)) return;
    if (memcmp(rbuf[0], rbuf[1], BUFSIZE) != 0) {
        size_t i = 0;
        while (rbuf[0][i] == rbuf[1][i]) i++;
        fail("%s: bytes differ first at buffer index %zu (posix %02x, secure %02x), returned %zd", what, i,
             rbuf[0][i], rbuf[1][i], r0);
        return;
    }
    if (valid && r1 >= 0) last_error_clear(what, fd1);
}

static void prepare_read_buffers(void) {
    memset(rbuf[0], 0xA5, BUFSIZE);
    memset(rbuf[1], 0xA5, BUFSIZE);
}

static void op_read(int positional) {
    int fd[2], s;
    int valid = pick_fds(fd, &s);
    size_t n = pick_size();
    off_t off = chance(4) ? -(off_t)below(5000) - 1 : (off_t)pick_offset(current_size_hint());
    void *buf[2] = {rbuf[0], rbuf[1]};
    prepare_read_buffers();
    ssize_t r[2];
    int e[2];
    for (int side = 0; side < 2; side++) {
        errno = 0;
        r[side] = positional ? impls[side].pread(fd[side], buf[side], n, off) : impls[side].read(fd[side], buf[side], n);
        e[side] = errno;
    }
    if (positional) logop("pread(slot %d, %zu, %lld) = %zd/%zd", s, n, (long long)off, r[0], r[1]);
    else logop("read(slot %d, %zu) = %zd/%zd", s, n, r[0], r[1]);
    compare_read(positional ? "pread" : "read", r[0], e[0], r[1], e[1], fd[1], valid);
}

static void op_write(int positional) {
    int fd[2], s;
    int valid = pick_fds(fd, &s);
    size_t n = pick_size();
    off_t off = chance(4) ? -(off_t)below(5000) - 1 : (off_t)pick_offset(current_size_hint());
    fill_write_buffer(n);
    const void *buf = wbuf;
    ssize_t r[2];
    int e[2];
    for (int side = 0; side < 2; side++) {
        errno = 0;
        r[side] = positional ? impls[side].pwrite(fd[side], buf, n, off) : impls[side].write(fd[side], buf, n);
        e[side] = errno;
    }
    if (positional) logop("pwrite(slot %d, %zu, %lld) = %zd/%zd", s, n, (long long)off, r[0], r[1]);
    else logop("write(slot %d, %zu) = %zd/%zd", s, n, r[0], r[1]);
    if (same(positional ? "pwrite" : "write", r[0], e[0], r[1], e[1]) && valid && r[1] >= 0)
        last_error_clear("write", fd[1]);
}

/* Builds the same iovec layout for both sides over rbuf (readv) or wbuf (writev). */
static int build_iovecs(int for_read, int *out_count) {
    int cnt;
    switch (below(10)) {
    case 0: cnt = 0; break;
    case 1: cnt = 1; break;
    case 2: cnt = MAXIOV; break;
    case 3: cnt = chance(50) ? MAXIOV + 1 : -1; break; /* EINVAL */
    case 4: cnt = 64 + (int)below(200); break;
    default: cnt = 2 + (int)below(15); break;
    }
    *out_count = cnt;
    int real = cnt < 0 ? 0 : (cnt > MAXIOV ? MAXIOV + 1 : cnt);
    size_t budget = BUFSIZE, used = 0;
    for (int i = 0; i < real; i++) {
        size_t len;
        if (real > 300) len = (size_t)below(12);
        else if (chance(15)) len = 0;
        else if (chance(20)) len = (size_t)below(CHUNK + 2);
        else len = (size_t)below(400);
        if (len > budget - used) len = budget - used;
        for (int side = 0; side < 2; side++) {
            iov[side][i].iov_base = for_read ? (void *)(rbuf[side] + used) : (void *)(wbuf + used);
            iov[side][i].iov_len = len;
        }
        used += len;
    }
    return (int)used;
}

static void op_readv(void) {
    int fd[2], s, cnt;
    int valid = pick_fds(fd, &s);
    prepare_read_buffers();
    int total = build_iovecs(1, &cnt);
    ssize_t r[2];
    int e[2];
    for (int side = 0; side < 2; side++) {
        errno = 0;
        r[side] = impls[side].readv(fd[side], iov[side], cnt);
        e[side] = errno;
    }
    logop("readv(slot %d, %d iovecs, %d bytes) = %zd/%zd", s, cnt, total, r[0], r[1]);
    compare_read("readv", r[0], e[0], r[1], e[1], fd[1], valid);
}

static void op_writev(void) {
    int fd[2], s, cnt;
    int valid = pick_fds(fd, &s);
    fill_write_buffer(BUFSIZE);
    int total = build_iovecs(0, &cnt);
    ssize_t r[2];
    int e[2];
    for (int side = 0; side < 2; side++) {
        errno = 0;
        r[side] = impls[side].writev(fd[side], iov[side], cnt);
        e[side] = errno;
    }
    logop("writev(slot %d, %d iovecs, %d bytes) = %zd/%zd", s, cnt, total, r[0], r[1]);
    if (same("writev", r[0], e[0], r[1], e[1]) && valid && r[1] >= 0) last_error_clear("writev", fd[1]);
}

static void op_lseek(void) {
    int fd[2], s;
    int valid = pick_fds(fd, &s);
    int whence;
    off_t off;
    switch (below(8)) {
    case 0: case 1: case 2: whence = SEEK_SET; off = (off_t)pick_offset(current_size_hint()); break;
    case 3: whence = SEEK_SET; off = -(off_t)below(3 * CHUNK) - 1; break;
    case 4: whence = SEEK_CUR; off = (off_t)below(4 * CHUNK) - 2 * CHUNK; break;
    case 5: whence = SEEK_END; off = (off_t)below(4 * CHUNK) - 2 * CHUNK; break;
    case 6: whence = SEEK_CUR; off = 0; break;
    default: whence = chance(50) ? 42 : -1; off = 0; break; /* EINVAL */
    }
    off_t r0 = impls[0].lseek(fd[0], off, whence);
    int e0 = errno;
    off_t r1 = impls[1].lseek(fd[1], off, whence);
    int e1 = errno;
    logop("lseek(slot %d, %lld, %d) = %lld/%lld", s, (long long)off, whence, (long long)r0, (long long)r1);
    if (same("lseek", r0, e0, r1, e1) && valid && r1 >= 0) last_error_clear("lseek", fd[1]);
}

static void op_ftruncate(void) {
    int fd[2], s;
    int valid = pick_fds(fd, &s);
    off_t len = chance(6) ? -(off_t)below(100) - 1 : (off_t)pick_offset(current_size_hint());
    int r0 = impls[0].ftruncate(fd[0], len), e0 = errno;
    int r1 = impls[1].ftruncate(fd[1], len), e1 = errno;
    logop("ftruncate(slot %d, %lld) = %d/%d", s, (long long)len, r0, r1);
    if (same("ftruncate", r0, e0, r1, e1) && valid && r1 >= 0) last_error_clear("ftruncate", fd[1]);
}

static void op_truncate(void) {
    int name = chance(85) ? current_name : 1 - current_name;
    off_t len = chance(6) ? -(off_t)below(100) - 1 : (off_t)pick_offset(current_size_hint());
    int r[2], e[2];
    for (int side = 0; side < 2; side++) {
        char p[4200];
        path_of(p, sizeof p, side, name);
        errno = 0;
        r[side] = impls[side].truncate(p, len);
        e[side] = errno;
    }
    logop("truncate(%s, %lld) = %d/%d", names[name], (long long)len, r[0], r[1]);
    same("truncate", r[0], e[0], r[1], e[1]);
}

static void compare_stat(const char *what, const struct stat *a, const struct stat *b) {
    if (a->st_size != b->st_size || a->st_mode != b->st_mode || a->st_nlink != b->st_nlink)
        fail("%s: posix size %lld mode 0%o nlink %lu, secure size %lld mode 0%o nlink %lu", what,
             (long long)a->st_size, a->st_mode, (unsigned long)a->st_nlink, (long long)b->st_size, b->st_mode,
             (unsigned long)b->st_nlink);
}

static void op_fstat(void) {
    int fd[2], s;
    int valid = pick_fds(fd, &s);
    struct stat st[2];
    memset(st, 0, sizeof st);
    int r0 = impls[0].fstat(fd[0], &st[0]), e0 = errno;
    int r1 = impls[1].fstat(fd[1], &st[1]), e1 = errno;
    logop("fstat(slot %d) = %d/%d size %lld/%lld", s, r0, r1, (long long)st[0].st_size, (long long)st[1].st_size);
    if (!same("fstat", r0, e0, r1, e1) || r0 < 0) return;
    compare_stat("fstat", &st[0], &st[1]);
    if (valid) last_error_clear("fstat", fd[1]);
}

static void op_lstat(void) {
#ifdef SKIP_LSTAT_WHILE_OPEN
    if (open_slot() >= 0) return;
#endif
    int name = below(2);
    struct stat st[2];
    memset(st, 0, sizeof st);
    int r[2], e[2];
    for (int side = 0; side < 2; side++) {
        char p[4200];
        path_of(p, sizeof p, side, name);
        errno = 0;
        r[side] = impls[side].lstat(p, &st[side]);
        e[side] = errno;
    }
    logop("lstat(%s) = %d/%d size %lld/%lld", names[name], r[0], r[1], (long long)st[0].st_size,
          (long long)st[1].st_size);
    if (same("lstat", r[0], e[0], r[1], e[1]) && r[0] == 0) compare_stat("lstat", &st[0], &st[1]);
}

static void op_rename(void) {
    int from = chance(80) ? current_name : 1 - current_name;
    int r[2], e[2];
    for (int side = 0; side < 2; side++) {
        char a[4200], b[4200];
        path_of(a, sizeof a, side, from);
        path_of(b, sizeof b, side, 1 - from);
        errno = 0;
        r[side] = impls[side].rename(a, b);
        e[side] = errno;
    }
    logop("rename(%s, %s) = %d/%d", names[from], names[1 - from], r[0], r[1]);
    if (same("rename", r[0], e[0], r[1], e[1]) && r[0] == 0) current_name = 1 - from;
}

/* Closes every slot, then compares each name's whole content on both sides. */
static void finish_sequence(void) {
    for (int i = 0; i < NSLOTS; i++) {
        if (!slots[i].used) continue;
        int r0 = close(slots[i].fd[0]), e0 = errno;
        int r1 = ACSecureFileClose(slots[i].fd[1]), e1 = errno;
        slots[i].used = 0;
        logop("final close(slot %d) = %d/%d", i, r0, r1);
        same("final close", r0, e0, r1, e1);
    }
    static unsigned char a[1 << 16], b[1 << 16];
    for (int name = 0; name < 2; name++) {
        char p0[4200], p1[4200];
        path_of(p0, sizeof p0, 0, name);
        path_of(p1, sizeof p1, 1, name);
        int f0 = open(p0, O_RDONLY), e0 = errno;
        int f1 = ACSecureFileOpen(p1, O_RDONLY), e1 = errno;
        if (!same("final open", f0 < 0 ? -1 : 0, e0, f1 < 0 ? -1 : 0, e1)) {
            if (f0 >= 0) close(f0);
            if (f1 >= 0) ACSecureFileClose(f1);
            continue;
        }
        if (f0 < 0) continue;
        long long pos = 0;
        for (;;) {
            ssize_t n0 = read(f0, a, sizeof a);
            ssize_t n1 = ACSecureFileRead(f1, b, sizeof b);
            if (n0 != n1) {
                fail("final content of %s: at %lld posix read %zd, secure read %zd (errno %d)", names[name], pos, n0,
                     n1, errno);
                break;
            }
            if (n0 <= 0) break;
            if (memcmp(a, b, (size_t)n0) != 0) {
                fail("final content of %s differs in the %zd bytes at %lld", names[name], n0, pos);
                break;
            }
            pos += n0;
        }
        close(f0);
        ACSecureFileClose(f1);
    }
}

static void run_sequence(uint64_t ops) {
    seq_failed = 0;
    oplog_n = 0;
    current_name = 0;
    for (int side = 0; side < 2; side++)
        for (int name = 0; name < 2; name++) {
            char p[4200];
            path_of(p, sizeof p, side, name);
            unlink(p);
        }
    for (op_no = 0; op_no < ops && !seq_failed; op_no++) {
        ops_total++;
        unsigned k = (unsigned)below(100);
        if (open_slot() < 0 && chance(90)) k = 0; /* mostly work on open descriptors */
        if (k < 10) op_open();
        else if (k < 15) op_close();
        else if (k < 25) op_read(0);
        else if (k < 33) op_read(1);
        else if (k < 45) op_write(0);
        else if (k < 53) op_write(1);
        else if (k < 59) op_readv();
        else if (k < 66) op_writev();
        else if (k < 76) op_lseek();
        else if (k < 82) op_ftruncate();
        else if (k < 86) op_truncate();
        else if (k < 91) op_fstat();
        else if (k < 95) op_lstat();
        else op_rename();
    }
    if (!seq_failed) finish_sequence();
    else {
        for (int i = 0; i < NSLOTS; i++)
            if (slots[i].used) {
                close(slots[i].fd[0]);
                ACSecureFileClose(slots[i].fd[1]);
                slots[i].used = 0;
            }
    }
}

int main(int argc, char **argv) {
    seed = argc > 1 ? strtoull(argv[1], NULL, 0) : 1;
    uint64_t sequences = argc > 2 ? strtoull(argv[2], NULL, 0) : 2000;
    uint64_t ops = argc > 3 ? strtoull(argv[3], NULL, 0) : 60;
    char base[2048];
    if (argc > 4) {
        snprintf(base, sizeof base, "%s", argv[4]);
        mkdir(base, 0700);
    } else {
        const char *tmp = getenv("TMPDIR");
        snprintf(base, sizeof base, "%s/acsecure-differential.XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(base)) {
            perror("mkdtemp");
            return 2;
        }
    }
    if (snprintf(dirs[0], sizeof dirs[0], "%s/plain", base) >= (int)sizeof dirs[0] ||
        snprintf(dirs[1], sizeof dirs[1], "%s/secure", base) >= (int)sizeof dirs[1]) {
        fprintf(stderr, "differential: directory name too long\n");
        return 2;
    }
    mkdir(dirs[0], 0700);
    mkdir(dirs[1], 0700);
    char store[4200];
    snprintf(store, sizeof store, "%s/store", base);
    if (ACSecureServicesStart("acsecure-differential", store) != 0) {
        fprintf(stderr, "differential: ACSecureServicesStart failed: %s\n", strerror(errno));
        return 2;
    }
    umask(022);
    /* A safety net: a bug that writes a huge file fails with EFBIG instead of filling the disk. */
    struct rlimit fsize = {256 << 20, 256 << 20};
    signal(SIGXFSZ, SIG_IGN);
    setrlimit(RLIMIT_FSIZE, &fsize);

    uint64_t passed = 0, failed = 0;
    for (seq_no = 0; seq_no < sequences; seq_no++) {
        rng_state = seed * 0x100000001B3ULL + seq_no;
        run_sequence(ops);
        if (seq_failed) failed++;
        else passed++;
        if (failed >= 10) {
            fprintf(stderr, "differential: stopping after 10 failed sequences\n");
            break;
        }
    }
    printf("differential: %" PRIu64 " passed, %" PRIu64 " failed (seed %" PRIu64 ", %" PRIu64
           " operations, %" PRIu64 " calls compared, %" PRIu64 " of them failing alike)\n",
           passed, failed, seed, ops_total, calls_total, calls_failed_alike);
    if (argc <= 4 && failed == 0) {
        char cmd[4300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
        if (system(cmd) != 0) fprintf(stderr, "differential: could not remove %s\n", base);
    }
    return failed == 0 ? 0 : 1;
}
