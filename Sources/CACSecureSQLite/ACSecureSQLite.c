/*
 * ACSecureSQLite.c — the "acsecure" SQLite VFS: SQLite's files through ACSecureFile.h.
 *
 * Built two ways from this one file:
 *   - as a library linked with libsqlite3 (SwiftPM target CACSecureSQLite, libACSecureSQLite.so);
 *   - with -DACSECURE_SQLITE_EXTENSION as a loadable extension (libacsecuresqlite_ext.so) for the
 *     sqlite3 shell: SQLite's functions are then reached through the sqlite3_api table.
 * See ACSecureSQLite.h for what the VFS promises (locking, durability, WAL).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifdef ACSECURE_SQLITE_EXTENSION
#include <sqlite3ext.h>
SQLITE_EXTENSION_INIT1
#else
#include <sqlite3.h>
#endif

#include <ACSecureFile/ACSecureFile.h>
#include <ACSecureFile/ACSecureSQLite.h>

/* The WAL index (WAL, below): its file and the unix VFS's lock offsets in it. */
#define ACSQL_SHM_SUFFIX "-shm"
#define ACSQL_SHM_BASE ((22 + SQLITE_SHM_NLOCK) * 4)  /* the unix VFS's first lock byte */
#define ACSQL_SHM_DMS (ACSQL_SHM_BASE + SQLITE_SHM_NLOCK)

/* SQLite's lock bytes (os.h): the same offsets as the unix VFS, in the "-aclock" file. */
#define ACSQL_PENDING_BYTE 0x40000000
#define ACSQL_RESERVED_BYTE (ACSQL_PENDING_BYTE + 1)
#define ACSQL_SHARED_FIRST (ACSQL_PENDING_BYTE + 2)
#define ACSQL_SHARED_SIZE 510
/* A writer waiting for RESERVED (fair locking, acsqlAnnounceIntent): the byte after SQLite's range. */
#define ACSQL_INTENT_BYTE (ACSQL_SHARED_FIRST + ACSQL_SHARED_SIZE)
/* How long one failed attempt keeps other writers yielding (SQLite's busy handler sleeps at most
 * 100 ms between attempts). */
#define ACSQL_INTENT_MS 250
/* Where the intent's deadline is kept in "<db>-aclock" (after the 8-byte change mark). */
#define ACSQL_INTENT_DEADLINE_OFFSET 8
/* WAL across processes (acsqlWALBegin): a process's presence (read-locked while it uses the
 * database in WAL mode), its transactions in solo mode (read-locked while any runs), and the WAL
 * mark (a random word each process stores when it starts using the database in WAL mode). */
#define ACSQL_PRESENCE_BYTE (ACSQL_INTENT_BYTE + 1)
#define ACSQL_SOLO_BYTE (ACSQL_INTENT_BYTE + 2)
#define ACSQL_WAL_MARK_OFFSET 16
/* How long a process starting to use the database in WAL mode waits, per attempt, for another
 * process's transactions in solo mode to end. Then xShmMap answers SQLITE_BUSY, which SQLite's WAL
 * code retries with its own backoff (about 100 attempts before SQLITE_PROTOCOL: a minute in all). */
#define ACSQL_ADMIT_MS 500

/* The engine's plaintext chunk: a write of part of a chunk rewrites (re-encrypts) the whole chunk. */
#define ACSQL_CHUNK_SIZE 4096

#define ACSQL_LOCK_SUFFIX "-aclock"

/*
 * A database file: the process's one secure descriptor of it, shared by every connection.
 *
 * The engine keeps one state (length, cached chunk) per file and process, and outside its
 * coordinated mode it does not reread what other processes wrote until every descriptor of the
 * file in this process is closed and the file opened again. SQLite's locks already say when that
 * can be needed: only another process's EXCLUSIVE lock lets it change the database, and that lock
 * excludes every SHARED lock. So a writer stores a fresh random "change mark" in the first 8 bytes
 * of "<db>-aclock" before its first change of the database, and a connection that takes a SHARED
 * lock compares the mark with the one this process last saw: when they differ, the descriptor is
 * closed and opened again (no connection of this process can be reading then: a SHARED holder
 * would already have seen the new mark). Reads and writes then need no per-call coordination,
 * which costs a lock, an fstat and a chunk decryption per call (docs/BENCHMARKS.md).
 */
typedef struct ACSQLInode {
    dev_t dev;
    ino_t ino;
    int fd;              /* secure descriptor; -1 after a failed reopen */
    int oflag;           /* how fd was opened */
    unsigned int options; /* and with which ACSECURE_OPEN_* options */
    char *path;
    int refs;            /* connections using it */
    uint64_t seen;       /* the change mark when fd was last made current */
    struct ACSQLFile *journal;  /* the open rollback journal (of the connection holding RESERVED), or NULL */
    struct ACSQLFile *writer;   /* the connection whose write cache holds chunks of this database, or NULL */
    int walUsers;        /* connections of this process with the WAL index mapped */
    /* WAL across processes (acsqlWALBegin), guarded by walLock. */
    pthread_mutex_t walLock;
    int walPresenceFD;   /* plain descriptor of "<db>-aclock" holding this process's presence lock; -1 */
    int walAdmitted;     /* this process has announced itself (acsqlWALAdmit) and uses the index */
    int walSolo;         /* no other process uses the database in WAL mode: default mode and caches */
    unsigned int walModeGen;  /* bumped at each switch or refresh: "-wal" handles apply it at their next call */
    uint64_t walMark;    /* the WAL mark when this process last looked */
    int walTokens;       /* connections in a transaction begun in solo mode (the solo byte is read-locked) */
    int walActive;       /* connections in a transaction (holding WAL-index locks) */
    struct ACSQLFile *walCacheOwner;  /* the "-wal" handle whose write cache holds frames, or NULL */
    struct ACSQLInode *next;
} ACSQLInode;

/*
 * A database's write cache. SQLite rewrites the same pages many times in one transaction whenever
 * the transaction is larger than its page cache (speedtest1 --size 200: 871,675 page writes, 60,320
 * distinct pages between two syncs). For a plain file each rewrite is a copy into the kernel's page
 * cache; through the engine it would be a chunk encryption and a pwrite of 4,128 bytes. So the VFS
 * keeps the whole chunks a connection writes to its database in memory and writes them, in chunk
 * order and contiguous chunks in one call, when the file needs them:
 *   - at SQLITE_FCNTL_SYNC (SQLite sends it before it syncs the database at a commit or rollback,
 *     and in place of that sync with synchronous=OFF), xSync, SQLITE_FCNTL_COMMIT_PHASETWO,
 *     xTruncate, xClose, a write that is not whole chunks, and before the connection's EXCLUSIVE
 *     lock is released (no other connection or process reads the database while it is held);
 *   - before the journal stops being hot: before its close, its truncation and any write over its
 *     header (DELETE, TRUNCATE and PERSIST modes);
 *   - all of them when the cache is full.
 * A page's write only moves later, never earlier, and the journal's own collected records are
 * written first: the database is still never ahead of its journal, and every page of a transaction
 * SQLite reports committed is in the file before its journal stops being hot. A crash loses only
 * pages of a transaction whose journal is still hot, which the rollback restores anyway.
 */
typedef struct ACSQLWriteCache {
    unsigned char *memory;  /* capacity chunks, then the flush buffer (mmap'ed, not in core dumps) */
    size_t mapped;
    sqlite3_int64 *chunkOf; /* the chunk index held by each slot */
    sqlite3_int64 *order;   /* (chunk, slot) pairs sorted at a flush */
    int *table;             /* open addressing: chunk index -> slot + 1, 0 when empty */
    unsigned int mask;      /* table size - 1 (twice the capacity, a power of two) */
    int capacity;           /* slots; 0 without a write cache */
    int count;              /* slots in use */
    sqlite3_int64 end;      /* the end of the highest cached chunk */
} ACSQLWriteCache;

/* Chunks written together at a flush (one engine write; the engine batches up to 1 MiB). */
#define ACSQL_FLUSH_CHUNKS 64

static pthread_mutex_t acsqlInodesMutex = PTHREAD_MUTEX_INITIALIZER;
static ACSQLInode *acsqlInodes;

typedef struct ACSQLFile {
    sqlite3_file base;
    int fd;              /* secure descriptor (ACSecureFile*) of a journal or temporary file, -1 for a database */
    ACSQLInode *inode;   /* a database's shared descriptor, NULL for other files */
    int lockFD;          /* plain descriptor of "<db>-aclock" for OFD locks, -1 for files without locks */
    int lockLevel;       /* SQLITE_LOCK_* held by this connection */
    int markWritten;     /* this EXCLUSIVE lock has stored a new change mark */
    int intent;          /* this connection holds the intent byte: it waits for RESERVED */
    int needsDirSync;    /* a new journal: sync its directory at the first xSync */
    int persistWAL;      /* SQLITE_FCNTL_PERSIST_WAL, kept as the unix VFS keeps it */
    int chunkSize;       /* SQLITE_FCNTL_CHUNK_SIZE: the file's length is kept a multiple of it (0: off) */
    int lastErrno;
    char *path;          /* sqlite3_malloc'ed full path, NULL for anonymous temporary files */
    /* WAL: this connection's view of the wal-index ("<db>-shm", plain shared memory, see ACSecureSQLite.h). */
    int shmFD;           /* -1 until the first xShmMap */
    void **shmRegions;   /* mapped regions, NULL-padded */
    int shmRegionCount;
    int shmRegionSize;
    /* A rollback journal's appends, collected into writes of up to 64 KiB: the engine re-encrypts
     * a chunk at every write that ends inside it, and journal records (a page + 8 bytes) never end
     * on a chunk boundary. Written before the journal is read, synced, truncated or closed, and
     * before any write to its database (the database must never be ahead of its journal). */
    int journalKind;     /* a rollback or super-journal: torn chunks read as zeros (acsqlRead) */
    int isWAL;           /* a "-wal" file: SQLite's offsets are mapped to slots (acsqlWALPhysical) */
    int repairingTornChunks; /* acsqlWriteOverTornChunks is writing: a refusal now is final */
    int walPageSize;     /* its page size, from its header (0 until known) */
    ACSQLInode *walOf;   /* a "-wal" file's database (a reference), NULL if it was not open */
    unsigned int walModeSeen;  /* the walOf->walModeGen this handle last applied */
    sqlite3_int64 walCommitEnd; /* the end (SQLite's offset) of a commit frame being written, else -1 */
    int walAfterCommit;  /* a commit's frames were just written: partial writes go through (acsqlWALCachePut) */
    int shmHeld;         /* a database connection's WAL-index locks (bit i: lock i) */
    int walInTransaction; /* counted in walActive */
    int walToken;        /* counted in walTokens */
    ACSQLInode *journalOf;
    unsigned char *pending;
    sqlite3_int64 pendingOffset;
    int pendingLength;
    ACSQLWriteCache cache;   /* a database's write cache (above) */
} ACSQLFile;

#define ACSQL_PENDING_CAPACITY (16 * ACSQL_CHUNK_SIZE)

static int acsqlFlushAll(ACSQLFile *f);
static void acsqlCacheClear(ACSQLFile *f);
static int acsqlWALExtend(ACSQLFile *f, sqlite3_int64 physicalEnd);

static int acsqlFD(ACSQLFile *f) { return f->inode ? __atomic_load_n(&f->inode->fd, __ATOMIC_ACQUIRE) : f->fd; }

/* The big-endian 8-byte word at `offset` of "<db>-aclock" (the change mark at 0, a waiting writer's
 * deadline at 8): the bytes read (-1 with errno), the word decoded as if the missing bytes were 0. */
static ssize_t acsqlReadLockWord(int fd, off_t offset, uint64_t *value) {
    unsigned char b[8] = {0};
    ssize_t n;
    do { n = pread(fd, b, sizeof b, offset); } while (n < 0 && errno == EINTR);
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = v << 8 | b[i];
    *value = v;
    return n;
}

/* Writes such a word; the bytes written (-1 with errno). */
static ssize_t acsqlWriteLockWord(int fd, off_t offset, uint64_t value) {
    unsigned char b[8];
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(value >> (56 - 8 * i));
    ssize_t n;
    do { n = pwrite(fd, b, sizeof b, offset); } while (n < 0 && errno == EINTR);
    return n;
}

/* The change mark in "<db>-aclock" (0 for a new, empty lock file). */
static int acsqlReadMark(ACSQLFile *f, uint64_t *mark) {
    if (acsqlReadLockWord(f->lockFD, 0, mark) < 0) { f->lastErrno = errno; return -1; }
    return 0;
}

/*
 * The engine's report on a file's end, right after it is opened (ACSecureFileLastError): an
 * interrupted write recovered (bytes after the last authenticated end, which a crash in the middle
 * of an extension leaves: SQLite's hot journal restores what the write changed) is logged and the
 * file used; no end that authenticates at all (the file was cut or damaged at its end, or a power
 * loss tore a write over its old trailer) takes the end from a hot journal if there is one
 * (acsqlAdoptEndFromHotJournal), and otherwise refuses a database with SQLITE_CORRUPT, SQLite's
 * code for a database image that is not what was written (applications handle it as a damaged
 * database). A journal in that state is
 * read as SQLite reads a short or torn journal: its chunks that do not authenticate read as zeros
 * (acsqlReadFile), which its record checksums reject, so the rollback stops there.
 */
/* A big-endian u32, as SQLite stores the fields of its journal and WAL headers. */
static uint32_t acsqlBE32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* v if it is a page size SQLite can have (a power of two from 512 to 65536), else 0. */
static int acsqlPageSizeOrZero(uint32_t v) {
    return (v >= 512 && v <= 65536 && (v & (v - 1)) == 0) ? (int)v : 0;
}

/*
 * A database whose end does not authenticate, with a hot rollback journal beside it: a power loss
 * tore a write of the transaction the journal protects (an append of pages from a chunk-aligned end
 * writes the new chunk over the old trailer: FORMAT.md "Power loss"), and the journal, itself
 * authenticated, records the database's size before that transaction (its header's page count and
 * page size) and every page the transaction changed. Its size is taken as the database's end
 * (ACSecureFileAdoptEnd) and SQLite's hot-journal rollback restores the pages. Returns 1 when the
 * end was taken from the journal. Only for page-aligned sizes on a chunk boundary and a writable
 * descriptor; anything else leaves the database refused.
 */
static int acsqlAdoptEndFromHotJournal(int fd, const char *path) {
    char *journal = sqlite3_mprintf("%s-journal", path);
    if (journal == NULL) return 0;
    int jfd = ACSecureFileOpen(journal, O_RDONLY, 0);
    unsigned char h[28];
    ssize_t n = jfd >= 0 ? ACSecureFilePread(jfd, h, sizeof h, 0) : -1;
    if (jfd >= 0) ACSecureFileClose(jfd);
    static const unsigned char magic[8] = { 0xd9, 0xd5, 0x05, 0xf9, 0x20, 0xa1, 0x63, 0xd7 };
    int adopted = 0;
    if (n == (ssize_t)sizeof h && memcmp(h, magic, sizeof magic) == 0) {
        uint32_t pages = acsqlBE32(h + 16);
        uint32_t pageSize = acsqlBE32(h + 24);
        int validPageSize = acsqlPageSizeOrZero(pageSize) != 0;
        off_t size = (off_t)pages * (off_t)pageSize;
        if (validPageSize && ACSecureFileAdoptEnd(fd, size) == 0) {
            sqlite3_log(SQLITE_NOTICE, "acsecure: %s: the database's end did not authenticate (a write torn by a crash); its hot journal records %u pages of %u bytes before the interrupted transaction: that is taken as its end, and the rollback restores the pages",
                        path, pages, pageSize);
            adopted = 1;
        } else if (validPageSize) {
            sqlite3_log(SQLITE_WARNING, "acsecure: %s: its hot journal records %lld bytes before the interrupted transaction, which cannot be taken as its end: %s",
                        path, (long long)size, strerror(errno));
        }
    }
    sqlite3_free(journal);
    return adopted;
}

static int acsqlCheckEnd(int fd, const char *path, int isDatabase) {
    if (ACSecureFileLastError(fd) != ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR) return SQLITE_OK;
    if (ACSecureFileEndRestored(fd) == 1) {
        /* What a power loss leaves when it tore the end (or someone cut it): the file as at its last
         * sync, from which SQLite's own recovery (a hot journal, the WAL) goes on. */
        sqlite3_log(SQLITE_WARNING, "acsecure: %s: its end did not authenticate and was restored from its last sync's tail copy (%lld bytes after it ignored)",
                    path, (long long)ACSecureFileRecoveredBytes(fd));
        return SQLITE_OK;
    }
    off_t recovered = ACSecureFileRecoveredBytes(fd);
    if (recovered > 0) {
        sqlite3_log(SQLITE_NOTICE, "acsecure: %s: an interrupted write was recovered: the %lld bytes after its last authenticated end are ignored",
                    path, (long long)recovered);
        return SQLITE_OK;
    }
    if (isDatabase && acsqlAdoptEndFromHotJournal(fd, path)) return SQLITE_OK;
    if (isDatabase) {
        sqlite3_log(SQLITE_CORRUPT, "acsecure: %s: the database's end does not authenticate (the file was cut, extended or damaged at its end): not opened",
                    path);
        return SQLITE_CORRUPT;
    }
    sqlite3_log(SQLITE_WARNING, "acsecure: %s: the journal's end does not authenticate (cut or damaged): it is read as a short journal", path);
    return SQLITE_OK;
}

/* After taking SHARED: reopen the database's descriptor if another process changed the file. */
static int acsqlRefresh(ACSQLFile *f) {
    uint64_t mark;
    if (acsqlReadMark(f, &mark) != 0) return SQLITE_IOERR_READ;
    ACSQLInode *node = f->inode;
    int rc = SQLITE_OK;
    pthread_mutex_lock(&acsqlInodesMutex);
    /* Not while connections of this process use the database in WAL mode: they read through the
     * descriptor at any moment, and acsqlWALBegin keeps its state current (the mark stays unseen:
     * the reopen happens once WAL mode is over). */
    if ((mark != node->seen || node->fd < 0) && node->walUsers == 0) {
        /* Close first: while any descriptor is open the engine keeps the old state. */
        if (node->fd >= 0) ACSecureFileClose(node->fd);
        int fd = ACSecureFileOpenWithOptions(node->path, node->oflag & ~(O_CREAT | O_EXCL | O_TRUNC), 0, node->options);
        __atomic_store_n(&node->fd, fd, __ATOMIC_RELEASE);
        if (fd < 0) {
            f->lastErrno = errno;
            sqlite3_log(SQLITE_IOERR_READ, "acsecure: reopen %s after another process changed it: %s", node->path, strerror(errno));
            rc = errno == EACCES ? SQLITE_IOERR_AUTH : SQLITE_IOERR_READ;
        } else if ((rc = acsqlCheckEnd(fd, node->path, 1)) != SQLITE_OK) {
            /* Cut or damaged at its end since this process last read it: nothing is read from it. */
            ACSecureFileClose(fd);
            __atomic_store_n(&node->fd, -1, __ATOMIC_RELEASE);
        } else {
            node->seen = mark;
        }
    }
    pthread_mutex_unlock(&acsqlInodesMutex);
    return rc;
}

/* Before a connection's first change under EXCLUSIVE: a new mark tells other processes to reopen. */
static int acsqlWriteMark(ACSQLFile *f) {
    if (f->inode == NULL || f->markWritten) return SQLITE_OK;
    uint64_t old = 0, mark = 0;
    if (acsqlReadMark(f, &old) != 0) return SQLITE_IOERR_WRITE;
    while (mark == 0 || mark == old) sqlite3_randomness((int)sizeof mark, &mark);
    ssize_t n = acsqlWriteLockWord(f->lockFD, 0, mark);
    if (n != 8) {
        f->lastErrno = n < 0 ? errno : EIO;
        sqlite3_log(SQLITE_IOERR_WRITE, "acsecure: cannot write the change mark of %s%s: %s", f->path, ACSQL_LOCK_SUFFIX, strerror(f->lastErrno));
        return SQLITE_IOERR_WRITE;
    }
    pthread_mutex_lock(&acsqlInodesMutex);
    f->inode->seen = mark;  /* this process's descriptor stays current: its own writes go through it */
    pthread_mutex_unlock(&acsqlInodesMutex);
    f->markWritten = 1;
    return SQLITE_OK;
}

static sqlite3_vfs *acsqlDefaultVFS(sqlite3_vfs *vfs) { return (sqlite3_vfs *)vfs->pAppData; }

/* sqlite3_log cuts a message at about 210 bytes: a longer one (an engine message with a path) is
 * logged in pieces, each "acsecure: ", the later ones marked as continuations. */
static void acsqlLogLong(int code, const char *text) {
    const size_t piece = 180;
    size_t length = strlen(text), at = 0;
    for (int first = 1; at < length; first = 0) {
        size_t n = length - at;
        if (n > piece) {
            n = piece;
            while (n > piece / 2 && text[at + n] != ' ') n--;  /* end a piece at a space if there is one */
            if (text[at + n] != ' ') n = piece;
        }
        sqlite3_log(code, "acsecure: %s%.*s", first ? "" : "(continued) ", (int)n, text + at);
        at += n;
        while (at < length && text[at] == ' ') at++;
    }
}

/* ---- Locks: open-file-description locks, so each connection (not each process) owns its locks. */

static int acsqlSetLock(int fd, short type, off_t start, off_t len) {
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = type;
    fl.l_whence = SEEK_SET;
    fl.l_start = start;
    fl.l_len = len;
    for (;;) {
        if (fcntl(fd, F_OFD_SETLK, &fl) == 0) return 0;
        if (errno != EINTR) return -1;
    }
}

/* Whether another open file description (another connection) holds a lock on [start, start+len)
 * that a write lock would conflict with: 0 with *held set, or -1 with errno. */
static int acsqlLockHeldElsewhere(int fd, off_t start, off_t len, int *held) {
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = start;
    fl.l_len = len;
    if (fcntl(fd, F_OFD_GETLK, &fl) != 0) return -1;
    *held = fl.l_type != F_UNLCK;
    return 0;
}

/* SQLITE_BUSY when another connection holds a conflicting lock, else the I/O error code. */
static int acsqlLockFailure(ACSQLFile *f, int ioerr) {
    int e = errno;
    f->lastErrno = e;
    return (e == EAGAIN || e == EACCES) ? SQLITE_BUSY : ioerr;
}

/*
 * Fair locking between writers. SQLite's writers poll: a connection that finds RESERVED taken
 * releases its locks and sleeps in its busy handler (1, 2, 5, ... 100 ms), then tries again. A writer
 * that commits in a loop re-takes RESERVED a fraction of a millisecond after releasing it, so a
 * poller whose commits are slow to come (each commit here costs encryption and syncs) almost never
 * lands in the gap: measured, a second process's 20 transactions took 8–15 s beside a steady
 * writer, and timed out. So a writer that finds RESERVED taken announces that it waits — a read
 * lock on the intent byte of "<db>-aclock" (released when it gets RESERVED, closes or dies) and a
 * deadline ACSQL_INTENT_MS ahead (renewed at each failed attempt, so an announcement nobody renews
 * expires) — and a connection that wants RESERVED while another connection's announcement is live
 * gets SQLITE_BUSY without trying: SQLite releases its SHARED lock and runs its busy handler, and
 * the waiting writer gets in at its next attempt. A connection that waits itself does not yield
 * (two waiters race as before; the loser's announcement then makes the winner yield next time).
 * Readers are never delayed: only RESERVED looks at announcements. An upgrade inside an explicit
 * transaction (BEGIN; SELECT; INSERT) gets SQLITE_BUSY as it does when RESERVED is taken.
 */
static int64_t acsqlNowMilliseconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);  /* system-wide: comparable between processes */
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* The lock file of the connection this thread last saw waiting for RESERVED, -1 for none: SQLite's
 * busy handler sleeps through the VFS (acsqlSleep), which then wakes as soon as RESERVED is free
 * instead of at a moment unrelated to the other writer's commit. A descriptor only, never a
 * pointer: at worst (the connection closed, the number reused) a sleep ends early. */
static __thread int acsqlWaitingLockFD = -1;

static void acsqlAnnounceIntent(ACSQLFile *f) {
    acsqlWaitingLockFD = f->lockFD;
    if (!f->intent && acsqlSetLock(f->lockFD, F_RDLCK, ACSQL_INTENT_BYTE, 1) == 0) f->intent = 1;
    if (!f->intent) return;
    /* Best effort: without it (a read-only lock file) the writer waits as SQLite's writers do. */
    (void)acsqlWriteLockWord(f->lockFD, ACSQL_INTENT_DEADLINE_OFFSET, (uint64_t)(acsqlNowMilliseconds() + ACSQL_INTENT_MS));
}

static void acsqlWithdrawIntent(ACSQLFile *f) {
    if (acsqlWaitingLockFD == f->lockFD) acsqlWaitingLockFD = -1;
    if (f->intent && acsqlSetLock(f->lockFD, F_UNLCK, ACSQL_INTENT_BYTE, 1) == 0) f->intent = 0;
}

/* Whether another connection's announcement is live (see above). */
static int acsqlAnotherWriterWaits(ACSQLFile *f) {
    int held = 0;
    if (f->intent || acsqlLockHeldElsewhere(f->lockFD, ACSQL_INTENT_BYTE, 1, &held) != 0 || !held) return 0;
    uint64_t deadline = 0;
    if (acsqlReadLockWord(f->lockFD, ACSQL_INTENT_DEADLINE_OFFSET, &deadline) != 8) return 0;
    return acsqlNowMilliseconds() < (int64_t)deadline;
}

static int acsqlLock(sqlite3_file *file, int level) {
    ACSQLFile *f = (ACSQLFile *)file;
    if (f->lockLevel >= level) return SQLITE_OK;
    if (f->lockFD < 0) { f->lockLevel = level; return SQLITE_OK; }
    if (level == SQLITE_LOCK_SHARED) {
        /* A writer waiting for EXCLUSIVE holds PENDING: new readers keep out until it is done. */
        if (acsqlSetLock(f->lockFD, F_RDLCK, ACSQL_PENDING_BYTE, 1) != 0) return acsqlLockFailure(f, SQLITE_IOERR_LOCK);
        int rc = SQLITE_OK;
        if (acsqlSetLock(f->lockFD, F_RDLCK, ACSQL_SHARED_FIRST, ACSQL_SHARED_SIZE) != 0) rc = acsqlLockFailure(f, SQLITE_IOERR_LOCK);
        if (acsqlSetLock(f->lockFD, F_UNLCK, ACSQL_PENDING_BYTE, 1) != 0 && rc == SQLITE_OK) {
            f->lastErrno = errno;
            rc = SQLITE_IOERR_UNLOCK;
        }
        if (rc == SQLITE_OK && f->inode != NULL && (rc = acsqlRefresh(f)) != SQLITE_OK) {
            acsqlSetLock(f->lockFD, F_UNLCK, ACSQL_SHARED_FIRST, ACSQL_SHARED_SIZE);
            return rc;
        }
        if (rc == SQLITE_OK) f->lockLevel = SQLITE_LOCK_SHARED;
        return rc;
    }
    if (level == SQLITE_LOCK_RESERVED) {
        if (acsqlAnotherWriterWaits(f)) {
            f->lastErrno = EAGAIN;
            return SQLITE_BUSY;  /* yield to the writer that waits (fair locking, above) */
        }
        if (acsqlSetLock(f->lockFD, F_WRLCK, ACSQL_RESERVED_BYTE, 1) != 0) {
            int rc = acsqlLockFailure(f, SQLITE_IOERR_LOCK);
            if (rc == SQLITE_BUSY) acsqlAnnounceIntent(f);
            return rc;
        }
        acsqlWithdrawIntent(f);
        f->lockLevel = SQLITE_LOCK_RESERVED;
        return SQLITE_OK;
    }
    /* EXCLUSIVE (SQLite asks for it, never for PENDING directly): PENDING first, then the readers' range. */
    if (f->lockLevel < SQLITE_LOCK_PENDING) {
        if (acsqlSetLock(f->lockFD, F_WRLCK, ACSQL_PENDING_BYTE, 1) != 0) return acsqlLockFailure(f, SQLITE_IOERR_LOCK);
        f->lockLevel = SQLITE_LOCK_PENDING;
    }
    if (acsqlSetLock(f->lockFD, F_WRLCK, ACSQL_SHARED_FIRST, ACSQL_SHARED_SIZE) != 0) return acsqlLockFailure(f, SQLITE_IOERR_LOCK);
    f->lockLevel = SQLITE_LOCK_EXCLUSIVE;
    return SQLITE_OK;
}

static int acsqlUnlockFile(ACSQLFile *f, int level) {
    f->markWritten = 0;
    if (f->lockFD < 0) { f->lockLevel = level; return SQLITE_OK; }
    if (level == SQLITE_LOCK_SHARED) {
        if (f->lockLevel >= SQLITE_LOCK_EXCLUSIVE
            && acsqlSetLock(f->lockFD, F_RDLCK, ACSQL_SHARED_FIRST, ACSQL_SHARED_SIZE) != 0) {
            f->lastErrno = errno;
            return SQLITE_IOERR_RDLOCK;
        }
        /* PENDING and RESERVED are adjacent: release both at once. */
        if (acsqlSetLock(f->lockFD, F_UNLCK, ACSQL_PENDING_BYTE, 2) != 0) {
            f->lastErrno = errno;
            return SQLITE_IOERR_UNLOCK;
        }
        f->lockLevel = SQLITE_LOCK_SHARED;
        return SQLITE_OK;
    }
    if (acsqlSetLock(f->lockFD, F_UNLCK, ACSQL_PENDING_BYTE, 2 + ACSQL_SHARED_SIZE) != 0) {
        f->lastErrno = errno;
        return SQLITE_IOERR_UNLOCK;
    }
    f->lockLevel = SQLITE_LOCK_NONE;
    return SQLITE_OK;
}

static int acsqlUnlock(sqlite3_file *file, int level) {
    ACSQLFile *f = (ACSQLFile *)file;
    if (f->lockLevel <= level) return SQLITE_OK;
    int rc = SQLITE_OK;
    if (f->inode != NULL && f->lockLevel >= SQLITE_LOCK_RESERVED && level < SQLITE_LOCK_EXCLUSIVE) {
        /* Other connections may read once the lock is gone: what this one holds back goes first.
         * If it cannot, the transaction's journal is still hot (its finalization flushes first
         * and fails the same way) and rolls the file back: drop the chunks. */
        rc = acsqlFlushAll(f);
        if (rc != SQLITE_OK) acsqlCacheClear(f);
    }
    int urc = acsqlUnlockFile(f, level);
    return rc != SQLITE_OK ? rc : urc;
}

static int acsqlCheckReservedLock(sqlite3_file *file, int *out) {
    ACSQLFile *f = (ACSQLFile *)file;
    if (f->lockLevel >= SQLITE_LOCK_RESERVED || f->lockFD < 0) { *out = f->lockLevel >= SQLITE_LOCK_RESERVED; return SQLITE_OK; }
    *out = 0;
    if (acsqlLockHeldElsewhere(f->lockFD, ACSQL_RESERVED_BYTE, 1, out) != 0) {
        f->lastErrno = errno;
        *out = 0;
        return SQLITE_IOERR_CHECKRESERVEDLOCK;
    }
    return SQLITE_OK;
}

/* ---- I/O through the engine. */

static int acsqlSyncDirectoryOf(const char *path) {
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    if (slash == NULL) { strcpy(dir, "."); }
    else if (slash == path) { strcpy(dir, "/"); }
    else {
        size_t n = (size_t)(slash - path);
        if (n >= sizeof dir) { errno = ENAMETOOLONG; return -1; }
        memcpy(dir, path, n);
        dir[n] = '\0';
    }
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return -1;
    int rc;
    do { rc = fsync(dfd); } while (rc != 0 && errno == EINTR);
    int saved = errno;
    close(dfd);
    errno = saved;
    return rc;
}

static int acsqlReadFile(ACSQLFile *f, void *buf, int amount, sqlite3_int64 offset);
static int acsqlPwriteAll(ACSQLFile *f, const void *buf, size_t amount, sqlite3_int64 offset);

/*
 * A write into a journal's or a -wal's chunk that fails authentication. A power loss can tear a
 * rewrite of such a chunk (PERSIST rewrites its journal from offset 0, a -wal's frames and header are
 * rewritten after a restart); the torn chunk held only bytes no sync made durable (SQLite never
 * rewrites a synced sector: the sector size is the chunk size), and the VFS reads it as zeros
 * (acsqlReadFile). The engine refuses a partial rewrite of a damaged chunk (the rest of it is
 * lost), so SQLite's next write there failed ("disk I/O error") where a plain file takes it. The
 * VFS writes such a chunk as it reads it: the write widened to whole chunks (down to the old last
 * chunk when it starts past the end), the bytes around it as read, zeros for a damaged chunk. The
 * engine takes a whole-chunk write as a repair. Anything else refused stays refused.
 */
static int acsqlWriteOverTornChunks(ACSQLFile *f, const unsigned char *buf, size_t amount, sqlite3_int64 offset) {
    off_t size = ACSecureFileLseek(acsqlFD(f), 0, SEEK_END);
    if (size < 0) { f->lastErrno = errno; return SQLITE_IOERR_FSTAT; }
    sqlite3_int64 end = offset + (sqlite3_int64)amount;
    sqlite3_int64 start = (offset < size ? offset : size) / ACSQL_CHUNK_SIZE * ACSQL_CHUNK_SIZE;
    sqlite3_int64 wideEnd = (end + ACSQL_CHUNK_SIZE - 1) / ACSQL_CHUNK_SIZE * ACSQL_CHUNK_SIZE;
    if (wideEnd > size) wideEnd = size > end ? size : end;
    size_t length = (size_t)(wideEnd - start);
    unsigned char *whole = sqlite3_malloc64(length);
    if (whole == NULL) return SQLITE_NOMEM;
    memset(whole, 0, length);
    int rc = SQLITE_OK;
    sqlite3_int64 before = (offset < size ? offset : size) - start;
    if (before > 0) rc = acsqlReadFile(f, whole, (int)before, start);
    if (rc == SQLITE_IOERR_SHORT_READ) rc = SQLITE_OK;  /* zero-filled */
    if (rc == SQLITE_OK && wideEnd > end) rc = acsqlReadFile(f, whole + (end - start), (int)(wideEnd - end), end);
    if (rc == SQLITE_IOERR_SHORT_READ) rc = SQLITE_OK;
    memcpy(whole + (offset - start), buf, amount);
    if (rc == SQLITE_OK) {
        sqlite3_log(SQLITE_WARNING, "acsecure: %s: a write at %lld into a chunk that fails authentication (a write torn by a crash): "
                    "written as whole chunks from %lld, the torn bytes as zeros", f->path ? f->path : "(journal)", (long long)offset, (long long)start);
        f->repairingTornChunks = 1;
        rc = acsqlPwriteAll(f, whole, length, start);
        f->repairingTornChunks = 0;
    }
    explicit_bzero(whole, length);
    sqlite3_free(whole);
    return rc;
}

static int acsqlPwriteAll(ACSQLFile *f, const void *buf, size_t amount, sqlite3_int64 offset) {
    const char *p = buf;
    size_t done = 0;
    while (done < amount) {
        ssize_t n = ACSecureFilePwrite(acsqlFD(f), p + done, amount - done, (off_t)(offset + (sqlite3_int64)done));
        if (n < 0) {
            if (errno == EINTR) continue;
            int e = errno, ace = ACSecureFileLastError(acsqlFD(f));
            if (e == EIO && ace == ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR && (f->journalKind || f->isWAL) && !f->repairingTornChunks)
                return acsqlWriteOverTornChunks(f, (const unsigned char *)p + done, amount - done, offset + (sqlite3_int64)done);
            f->lastErrno = e;
            sqlite3_log(SQLITE_IOERR_WRITE, "acsecure: write %s at %lld: %s (ACE %d)", f->path ? f->path : "(temporary file)",
                        (long long)offset, strerror(e), ace);
            if (e == ENOSPC || e == EDQUOT) return SQLITE_FULL;
            /* Refused because the file's end or the chunk being rewritten fails authentication. */
            if (e == EIO && ace == ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR) return SQLITE_IOERR_DATA;
            return e == EACCES ? SQLITE_IOERR_AUTH : SQLITE_IOERR_WRITE;
        }
        if (n == 0) { f->lastErrno = ENOSPC; return SQLITE_FULL; }
        done += (size_t)n;
    }
    return SQLITE_OK;
}

static int acsqlFlushPending(ACSQLFile *f) {
    if (f == NULL || f->pendingLength == 0) return SQLITE_OK;
    int rc = acsqlPwriteAll(f, f->pending, (size_t)f->pendingLength, f->pendingOffset);
    f->pendingLength = 0;
    return rc;
}

/* Before a database changes: its journal's collected records go to the file first. */
static int acsqlFlushJournalOf(ACSQLFile *f) {
    if (f->inode == NULL) return SQLITE_OK;
    pthread_mutex_lock(&acsqlInodesMutex);
    ACSQLFile *journal = f->inode->journal;
    pthread_mutex_unlock(&acsqlInodesMutex);
    return acsqlFlushPending(journal);
}

/* ---- The write cache (ACSQLWriteCache). */

static unsigned int acsqlCacheHash(sqlite3_int64 chunk) {
    return (unsigned int)(((uint64_t)chunk * 0x9E3779B97F4A7C15ull) >> 32);
}

static unsigned char *acsqlCacheSlot(ACSQLWriteCache *c, int slot) { return c->memory + (size_t)slot * ACSQL_CHUNK_SIZE; }

static int acsqlCacheFind(const ACSQLWriteCache *c, sqlite3_int64 chunk) {
    if (c->count == 0) return -1;
    for (unsigned int i = acsqlCacheHash(chunk) & c->mask;; i = (i + 1) & c->mask) {
        int s = c->table[i];
        if (s == 0) return -1;
        if (c->chunkOf[s - 1] == chunk) return s - 1;
    }
}

/* The memory, at the first cached write: a private mapping kept out of core dumps. */
static int acsqlCacheAllocate(ACSQLWriteCache *c) {
    unsigned int tableSize = 1;
    while (tableSize < 2u * (unsigned int)c->capacity) tableSize <<= 1;
    size_t mapped = ((size_t)c->capacity + ACSQL_FLUSH_CHUNKS) * ACSQL_CHUNK_SIZE;
    void *memory = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) return SQLITE_NOMEM;
    (void)madvise(memory, mapped, MADV_DONTDUMP);  /* best effort, like the engine's guarded memory */
    c->chunkOf = sqlite3_malloc64(sizeof *c->chunkOf * (sqlite3_uint64)c->capacity);
    c->order = sqlite3_malloc64(2 * sizeof *c->order * (sqlite3_uint64)c->capacity);
    c->table = sqlite3_malloc64(sizeof *c->table * (sqlite3_uint64)tableSize);
    if (c->chunkOf == NULL || c->order == NULL || c->table == NULL) {
        munmap(memory, mapped);
        sqlite3_free(c->chunkOf);
        sqlite3_free(c->order);
        sqlite3_free(c->table);
        c->chunkOf = c->order = NULL;
        c->table = NULL;
        return SQLITE_NOMEM;
    }
    memset(c->table, 0, sizeof *c->table * tableSize);
    c->memory = memory;
    c->mapped = mapped;
    c->mask = tableSize - 1;
    return SQLITE_OK;
}

/* Empties the cache: its plaintext is wiped, and the database has no writer any more. */
static void acsqlCacheClear(ACSQLFile *f) {
    ACSQLWriteCache *c = &f->cache;
    if (c->count == 0) return;
    for (int slot = 0; slot < c->count; slot++) explicit_bzero(acsqlCacheSlot(c, slot), ACSQL_CHUNK_SIZE);
    memset(c->table, 0, sizeof *c->table * ((size_t)c->mask + 1));
    c->count = 0;
    c->end = 0;
    pthread_mutex_lock(&acsqlInodesMutex);
    if (f->inode != NULL && f->inode->writer == f) f->inode->writer = NULL;
    if (f->walOf != NULL && f->walOf->walCacheOwner == f) f->walOf->walCacheOwner = NULL;
    pthread_mutex_unlock(&acsqlInodesMutex);
}

static void acsqlCacheFree(ACSQLFile *f) {
    ACSQLWriteCache *c = &f->cache;
    acsqlCacheClear(f);
    if (c->memory != NULL) munmap(c->memory, c->mapped);
    sqlite3_free(c->chunkOf);
    sqlite3_free(c->order);
    sqlite3_free(c->table);
    memset(c, 0, sizeof *c);
}

static int acsqlCompareChunks(const void *a, const void *b) {
    sqlite3_int64 x = *(const sqlite3_int64 *)a, y = *(const sqlite3_int64 *)b;
    return (x > y) - (x < y);
}

/* Writes the cached chunks to the file (after the journal's collected records) and empties the
 * cache. On failure the cache keeps every chunk: the next flush writes them all again. */
static int acsqlCacheFlush(ACSQLFile *f) {
    ACSQLWriteCache *c = &f->cache;
    if (c->count == 0) return SQLITE_OK;
    int rc = acsqlFlushJournalOf(f);  /* the database is never ahead of its journal */
    /* A "-wal" file grows by whole slots before its frames are written (acsqlWALWrite). */
    if (rc == SQLITE_OK && f->isWAL) rc = acsqlWALExtend(f, c->end);
    if (rc != SQLITE_OK) return rc;
    for (int slot = 0; slot < c->count; slot++) {
        c->order[2 * slot] = c->chunkOf[slot];
        c->order[2 * slot + 1] = slot;
    }
    qsort(c->order, (size_t)c->count, 2 * sizeof *c->order, acsqlCompareChunks);
    unsigned char *run = acsqlCacheSlot(c, c->capacity);
    for (int i = 0; i < c->count && rc == SQLITE_OK;) {
        sqlite3_int64 first = c->order[2 * i];
        int n = 1;
        while (i + n < c->count && n < ACSQL_FLUSH_CHUNKS && c->order[2 * (i + n)] == first + n) n++;
        const unsigned char *source = acsqlCacheSlot(c, (int)c->order[2 * i + 1]);
        if (n > 1) {
            for (int k = 0; k < n; k++) memcpy(run + (size_t)k * ACSQL_CHUNK_SIZE, acsqlCacheSlot(c, (int)c->order[2 * (i + k) + 1]), ACSQL_CHUNK_SIZE);
            source = run;
        }
        rc = acsqlPwriteAll(f, source, (size_t)n * ACSQL_CHUNK_SIZE, first * ACSQL_CHUNK_SIZE);
        if (n > 1) explicit_bzero(run, (size_t)n * ACSQL_CHUNK_SIZE);
        i += n;
    }
    if (rc == SQLITE_OK) acsqlCacheClear(f);
    return rc;
}

/* A write of whole chunks into the cache (flushing all of it first when it is full). */
static int acsqlCacheWrite(ACSQLFile *f, const unsigned char *buf, int amount, sqlite3_int64 offset) {
    ACSQLWriteCache *c = &f->cache;
    for (int done = 0; done < amount; done += ACSQL_CHUNK_SIZE) {
        sqlite3_int64 chunk = (offset + done) / ACSQL_CHUNK_SIZE;
        int slot = acsqlCacheFind(c, chunk);
        if (slot < 0) {
            if (c->count == c->capacity) {
                int rc = acsqlCacheFlush(f);
                if (rc != SQLITE_OK) return rc;
            }
            if (c->count == 0 && (f->inode != NULL || f->walOf != NULL)) {
                pthread_mutex_lock(&acsqlInodesMutex);
                if (f->inode != NULL) f->inode->writer = f;
                else f->walOf->walCacheOwner = f;
                pthread_mutex_unlock(&acsqlInodesMutex);
            }
            slot = c->count++;
            c->chunkOf[slot] = chunk;
            unsigned int i = acsqlCacheHash(chunk) & c->mask;
            while (c->table[i] != 0) i = (i + 1) & c->mask;
            c->table[i] = slot + 1;
        }
        memcpy(acsqlCacheSlot(c, slot), buf + done, ACSQL_CHUNK_SIZE);
        if ((chunk + 1) * ACSQL_CHUNK_SIZE > c->end) c->end = (chunk + 1) * ACSQL_CHUNK_SIZE;
    }
    return SQLITE_OK;
}

/* Before a journal stops being hot (or is read back): its database's cached chunks go to the file. */
static int acsqlFlushDatabaseOf(ACSQLFile *journal) {
    if (journal->journalOf == NULL) return SQLITE_OK;
    pthread_mutex_lock(&acsqlInodesMutex);
    ACSQLFile *db = journal->journalOf->writer;
    pthread_mutex_unlock(&acsqlInodesMutex);
    return db != NULL ? acsqlCacheFlush(db) : SQLITE_OK;
}

/* Everything a database connection holds back: the cached chunks and its journal's records. */
static int acsqlFlushAll(ACSQLFile *f) {
    int rc = acsqlCacheFlush(f);
    if (rc == SQLITE_OK) rc = acsqlFlushJournalOf(f);
    return rc;
}

static int acsqlShmUnmap(sqlite3_file *file, int deleteIndex);

/* A connection (or a "-wal" handle) stops using a database's node: the last one frees it and
 * returns the database's descriptor for the caller to close (else -1). */
static int acsqlReleaseInode(ACSQLInode *node) {
    int fd = -1;
    pthread_mutex_lock(&acsqlInodesMutex);
    if (--node->refs == 0) {
        ACSQLInode **p;
        for (p = &acsqlInodes; *p != node; p = &(*p)->next) {}
        *p = node->next;
        if (node->journal != NULL) node->journal->journalOf = NULL;
        if (node->walPresenceFD >= 0) close(node->walPresenceFD);
        pthread_mutex_destroy(&node->walLock);
        fd = node->fd;
        sqlite3_free(node->path);
        sqlite3_free(node);
    }
    pthread_mutex_unlock(&acsqlInodesMutex);
    return fd;
}

static int acsqlClose(sqlite3_file *file) {
    ACSQLFile *f = (ACSQLFile *)file;
    acsqlShmUnmap(file, 0);  /* SQLite unmaps first; this only covers a connection it did not */
    int rc = acsqlFlushPending(f);
    if (f->journalOf != NULL) {
        /* A closed journal is deleted next (DELETE mode): the database's cached chunks go first. */
        int frc = acsqlFlushDatabaseOf(f);
        if (rc == SQLITE_OK) rc = frc;
        pthread_mutex_lock(&acsqlInodesMutex);
        if (f->journalOf->journal == f) f->journalOf->journal = NULL;
        pthread_mutex_unlock(&acsqlInodesMutex);
        f->journalOf = NULL;
    }
    sqlite3_free(f->pending);
    f->pending = NULL;
    if (f->cache.capacity > 0) {
        /* A temporary file is deleted at close: its cached chunks are only wiped. So are a "-wal"
         * file's: frames of a transaction that did not commit (a commit writes its frames). */
        int frc = f->inode != NULL ? acsqlCacheFlush(f) : SQLITE_OK;
        if (frc != SQLITE_OK) {
            sqlite3_log(frc, "acsecure: close %s: its last cached pages could not be written", f->path);
            if (rc == SQLITE_OK) rc = frc;
        }
        acsqlCacheFree(f);
    }
    if (f->lockFD >= 0) {
        close(f->lockFD);  /* releases this connection's OFD locks */
        f->lockFD = -1;
    }
    if (f->inode != NULL) {
        int fd = acsqlReleaseInode(f->inode);
        f->inode = NULL;
        if (fd >= 0) f->fd = fd;  /* closed below */
    }
    if (f->walOf != NULL) {
        /* After this handle's descriptor: the database's may be the last of the node's. */
        int fd = f->fd;
        f->fd = -1;
        if (fd >= 0 && ACSecureFileClose(fd) != 0) {
            f->lastErrno = errno;
            rc = SQLITE_IOERR_CLOSE;
        }
        fd = acsqlReleaseInode(f->walOf);
        f->walOf = NULL;
        if (fd >= 0) ACSecureFileClose(fd);
    }
    if (f->fd >= 0) {
        if (ACSecureFileClose(f->fd) != 0) {
            f->lastErrno = errno;
            sqlite3_log(SQLITE_IOERR_CLOSE, "acsecure: close %s: %s", f->path ? f->path : "(temporary file)", strerror(errno));
            rc = SQLITE_IOERR_CLOSE;
        }
        f->fd = -1;
    }
    sqlite3_free(f->path);
    f->path = NULL;
    return rc;
}

/* Whether a database has a journal with content (a rollback is due or a commit is under way). */
static int acsqlHasJournal(ACSQLFile *f) {
    if (f->inode == NULL || f->path == NULL) return 0;
    char *journal = sqlite3_mprintf("%s-journal", f->path);
    struct stat st;
    int has = journal != NULL && stat(journal, &st) == 0 && st.st_size > 0;
    sqlite3_free(journal);
    return has;
}

/* A read from the file through the engine. */
static int acsqlReadFile(ACSQLFile *f, void *buf, int amount, sqlite3_int64 offset) {
    char *p = buf;
    size_t done = 0;
    while (done < (size_t)amount) {
        ssize_t n = ACSecureFilePread(acsqlFD(f), p + done, (size_t)amount - done, (off_t)(offset + (sqlite3_int64)done));
        if (n < 0) {
            if (errno == EINTR) continue;
            int e = errno, ace = ACSecureFileLastError(acsqlFD(f));
            if (e == EIO && ace == ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR && (f->journalKind || f->isWAL || acsqlHasJournal(f))) {
                /* A journal chunk torn by a crash in the middle of its write (the engine rewrites a
                 * chunk in place: docs/FORMAT.md "What a crash can cost"). SQLite expects a torn
                 * sector of a journal to hold garbage, which its record checksums and header magic
                 * reject; it never rewrites a synced sector (the sector size is the chunk size), so
                 * a torn chunk holds nothing a rollback needs. Give it zeros for that chunk.
                 * A database chunk torn the same way (or being written by another process: SQLite
                 * reads the header before it locks) is read as zeros only while a journal exists:
                 * the page is then in the journal, which restores it before any other use. */
                sqlite3_int64 at = offset + (sqlite3_int64)done;
                sqlite3_int64 chunkEnd = (at / ACSQL_CHUNK_SIZE + 1) * ACSQL_CHUNK_SIZE;
                size_t span = (size_t)(chunkEnd - at) < (size_t)amount - done ? (size_t)(chunkEnd - at) : (size_t)amount - done;
                sqlite3_log(SQLITE_WARNING, "acsecure: %s: the chunk at %lld fails authentication (a write torn by a crash): read as zeros",
                            f->path ? f->path : "(journal)", (long long)(at / ACSQL_CHUNK_SIZE * ACSQL_CHUNK_SIZE));
                memset(p + done, 0, span);
                done += span;
                continue;
            }
            f->lastErrno = e;
            if (e == EIO && ace == ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR) {
                /* As SQLite's checksum VFS reports a page that fails its check: tampering or damage,
                 * told apart from a disk's read error (SQLITE_IOERR_READ). */
                sqlite3_log(SQLITE_IOERR_DATA, "acsecure: read %s at %lld: a chunk fails authentication (tampered with or damaged)",
                            f->path ? f->path : "(temporary file)", (long long)offset);
                return SQLITE_IOERR_DATA;
            }
            sqlite3_log(SQLITE_IOERR_READ, "acsecure: read %s at %lld: %s (ACE %d)", f->path ? f->path : "(temporary file)",
                        (long long)offset, strerror(e), ace);
            return e == EACCES ? SQLITE_IOERR_AUTH : SQLITE_IOERR_READ;
        }
        if (n == 0) break;
        done += (size_t)n;
    }
    if (done < (size_t)amount) {
        /* SQLite requires the rest zero-filled on a short read. */
        memset(p + done, 0, (size_t)amount - done);
        return SQLITE_IOERR_SHORT_READ;
    }
    return SQLITE_OK;
}

/* A read of a database with cached chunks: those from the cache, the rest from the file. Bytes
 * the file does not have yet but that lie before the end of a cached chunk are a hole: zeros. */
static int acsqlCacheRead(ACSQLFile *f, unsigned char *buf, int amount, sqlite3_int64 offset) {
    ACSQLWriteCache *c = &f->cache;
    sqlite3_int64 at = offset, end = offset + amount;
    int rc = SQLITE_OK;
    while (at < end) {
        sqlite3_int64 chunk = at / ACSQL_CHUNK_SIZE, chunkEnd = (chunk + 1) * ACSQL_CHUNK_SIZE;
        int slot = acsqlCacheFind(c, chunk);
        if (slot >= 0) {
            sqlite3_int64 n = (chunkEnd < end ? chunkEnd : end) - at;
            memcpy(buf + (at - offset), acsqlCacheSlot(c, slot) + at % ACSQL_CHUNK_SIZE, (size_t)n);
            at += n;
            continue;
        }
        sqlite3_int64 runEnd = chunkEnd;
        while (runEnd < end && acsqlCacheFind(c, runEnd / ACSQL_CHUNK_SIZE) < 0) runEnd += ACSQL_CHUNK_SIZE;
        if (runEnd > end) runEnd = end;
        int frc = acsqlReadFile(f, buf + (at - offset), (int)(runEnd - at), at);
        if (frc == SQLITE_IOERR_SHORT_READ) {
            if (runEnd > c->end) rc = frc;
        } else if (frc != SQLITE_OK) {
            return frc;
        }
        at = runEnd;
    }
    return rc;
}

/*
 * The "-wal" file's layout. SQLite's WAL is a 32-byte header and frames of a 24-byte header and a
 * page (4,120 bytes for 4 KiB pages): frames do not fall on the engine's 4 KiB chunks, so appending
 * a frame would rewrite the chunk that holds the end of the one before, and a crash tearing that
 * rewrite (a SIGKILL may cut a write at a page boundary) would take a committed frame with it. So
 * the VFS gives each frame chunks of its own: the WAL header is alone in chunk 0, frame k occupies
 * the slot at 4096 + k·S (S = page size + 24 rounded up to whole chunks), its page at the slot's
 * start and its frame header right after the page, and the file always ends on a chunk boundary
 * (a write that extends it grows it to whole slots first: a sparse extension). A torn write then
 * damages only the frame being written, which SQLite's frame checksums reject as they reject a torn
 * frame of a plain WAL; such a chunk reads as zeros. With 4 KiB pages the file is about twice the
 * size of a plain WAL (docs/FORMAT.md "SQLite files").
 */
#define ACSQL_WAL_HEADER 32
#define ACSQL_WAL_FRAME_HEADER 24

static sqlite3_int64 acsqlWALSlotSize(const ACSQLFile *f) {
    return ((sqlite3_int64)f->walPageSize + ACSQL_WAL_FRAME_HEADER + ACSQL_CHUNK_SIZE - 1) / ACSQL_CHUNK_SIZE * ACSQL_CHUNK_SIZE;
}

/* The file offset of SQLite's offset `at`, and how many bytes from there are contiguous. */
static sqlite3_int64 acsqlWALPhysical(const ACSQLFile *f, sqlite3_int64 at, sqlite3_int64 *contiguous) {
    if (at < ACSQL_WAL_HEADER) { *contiguous = ACSQL_WAL_HEADER - at; return at; }
    sqlite3_int64 frame = f->walPageSize + ACSQL_WAL_FRAME_HEADER;
    sqlite3_int64 k = (at - ACSQL_WAL_HEADER) / frame, r = (at - ACSQL_WAL_HEADER) % frame;
    sqlite3_int64 slot = ACSQL_CHUNK_SIZE + k * acsqlWALSlotSize(f);
    if (r < ACSQL_WAL_FRAME_HEADER) { *contiguous = ACSQL_WAL_FRAME_HEADER - r; return slot + f->walPageSize + r; }
    *contiguous = frame - r;
    return slot + (r - ACSQL_WAL_FRAME_HEADER);
}

/* The file's length for SQLite's length `size`: whole chunks and slots. */
static sqlite3_int64 acsqlWALPhysicalSize(const ACSQLFile *f, sqlite3_int64 size) {
    if (size <= 0) return 0;
    if (size <= ACSQL_WAL_HEADER || f->walPageSize == 0) return ACSQL_CHUNK_SIZE;
    sqlite3_int64 frame = f->walPageSize + ACSQL_WAL_FRAME_HEADER;
    return ACSQL_CHUNK_SIZE + (size - ACSQL_WAL_HEADER + frame - 1) / frame * acsqlWALSlotSize(f);
}

/* SQLite's length for the file's length `physical` (a slot not complete counts as a frame: its
 * checksum rejects it). */
static sqlite3_int64 acsqlWALLogicalSize(const ACSQLFile *f, sqlite3_int64 physical) {
    if (physical <= 0) return 0;
    if (physical <= ACSQL_CHUNK_SIZE || f->walPageSize == 0) return ACSQL_WAL_HEADER;
    sqlite3_int64 slot = acsqlWALSlotSize(f);
    return ACSQL_WAL_HEADER + (physical - ACSQL_CHUNK_SIZE + slot - 1) / slot * (f->walPageSize + ACSQL_WAL_FRAME_HEADER);
}

/* The page size in a WAL header (bytes 8..11, big-endian), 0 if it is not one. */
static int acsqlWALHeaderPageSize(const unsigned char *header) {
    return acsqlPageSizeOrZero(acsqlBE32(header + 8));
}

/* The page size from the WAL header on disk, when this connection does not know it yet: another
 * connection may have written the header since this one opened the file (a pool's readers). */
static void acsqlWALLearnPageSize(ACSQLFile *f) {
    if (f->walPageSize != 0) return;
    unsigned char header[ACSQL_WAL_HEADER];
    if (ACSecureFilePread(acsqlFD(f), header, sizeof header, 0) == (ssize_t)sizeof header) f->walPageSize = acsqlWALHeaderPageSize(header);
}

/* The "-wal" file's length grown to `physicalEnd` rounded up to whole slots (never shrunk): a write
 * there then rewrites no chunk of an earlier frame. */
static int acsqlWALExtend(ACSQLFile *f, sqlite3_int64 physicalEnd) {
    if (physicalEnd > ACSQL_CHUNK_SIZE && f->walPageSize != 0) {
        sqlite3_int64 slot = acsqlWALSlotSize(f);
        physicalEnd = ACSQL_CHUNK_SIZE + (physicalEnd - ACSQL_CHUNK_SIZE + slot - 1) / slot * slot;
    }
    off_t now = ACSecureFileLseek(acsqlFD(f), 0, SEEK_END);
    if (now < 0) { f->lastErrno = errno; return SQLITE_IOERR_FSTAT; }
    if (physicalEnd <= now || ACSecureFtruncate(acsqlFD(f), (off_t)physicalEnd) == 0) return SQLITE_OK;
    int e = errno, ace = ACSecureFileLastError(acsqlFD(f));
    f->lastErrno = e;
    sqlite3_log(SQLITE_IOERR_WRITE, "acsecure: %s: cannot extend the WAL to %lld: %s (ACE %d)", f->path, (long long)physicalEnd, strerror(e), ace);
    if (e == ENOSPC || e == EDQUOT) return SQLITE_FULL;
    return e == EIO && ace == ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR ? SQLITE_IOERR_DATA : SQLITE_IOERR_WRITE;
}

/* Before a "-wal" handle's call into the engine: the mode its database's WAL state is in (solo:
 * the engine's default mode; otherwise coordinated), applied if it changed since this handle's
 * last call (acsqlWALBegin). The engine keeps one state per file and process, so the first handle
 * to apply a change switches it for all; applying it again only rereads the file. Under walLock,
 * so switches are applied in their order. */
static void acsqlWALFileMode(ACSQLFile *f) {
    ACSQLInode *node = f->walOf;
    if (node == NULL || __atomic_load_n(&node->walModeGen, __ATOMIC_ACQUIRE) == f->walModeSeen) return;
    pthread_mutex_lock(&node->walLock);
    int solo = node->walAdmitted && node->walSolo;
    if (ACSecureFileSetShared(f->fd, !solo) != 0) {
        /* Rereading failed (it is reported by the call that follows): coordinated is always safe. */
        sqlite3_log(SQLITE_WARNING, "acsecure: %s: cannot take up the WAL file's state: %s", f->path, strerror(errno));
        (void)ACSecureFileSetShared(f->fd, 1);
    }
    f->walModeSeen = node->walModeGen;
    pthread_mutex_unlock(&node->walLock);
}

/* A read of SQLite's bytes at the file's offset `at`: from the write cache where it holds them. */
static int acsqlWALReadPhysical(ACSQLFile *f, unsigned char *buf, int n, sqlite3_int64 at) {
    return f->cache.count > 0 ? acsqlCacheRead(f, buf, n, at) : acsqlReadFile(f, buf, n, at);
}

static int acsqlWALRead(ACSQLFile *f, unsigned char *buf, int amount, sqlite3_int64 offset) {
    int rc = SQLITE_OK;
    if (offset + amount > ACSQL_WAL_HEADER) acsqlWALLearnPageSize(f);
    while (amount > 0) {
        sqlite3_int64 contiguous;
        sqlite3_int64 at = acsqlWALPhysical(f, offset, &contiguous);
        int n = contiguous < amount ? (int)contiguous : amount;
        if (offset >= ACSQL_WAL_HEADER && f->walPageSize == 0) {
            memset(buf, 0, (size_t)amount);  /* no valid header: no frames */
            return SQLITE_IOERR_SHORT_READ;
        }
        int frc = acsqlWALReadPhysical(f, buf, n, at);
        if (frc == SQLITE_IOERR_SHORT_READ) rc = frc;
        else if (frc != SQLITE_OK) return frc;
        buf += n;
        offset += n;
        amount -= n;
    }
    return rc;
}

/*
 * The "-wal" file's write cache: a transaction's frames are collected before they are sealed.
 * SQLite overwrites a frame of the transaction under way in place each time its page cache spills
 * the page again (speedtest1 --size 200 spills the same pages many times per transaction); for a
 * plain WAL that is a copy into the kernel's page cache, here it would be two chunk encryptions
 * and a pwrite. So the connection's "-wal" handle keeps the chunks of the frames it writes in its
 * write cache (ACSQLWriteCache, the database's size: ACSECURE_WRITE_CACHE_MIB) and writes them,
 * in order and contiguous chunks in one call, after growing the file to whole slots:
 *   - as soon as the page of a commit frame (a frame header naming the database's size) is in
 *     the cache, so every frame of a transaction SQLite reports committed is in the file before
 *     SQLite publishes it in the WAL index (and an error fails the commit);
 *   - at xSync, xTruncate, a write over the WAL header, and when the cache is full;
 *   - at the database connection's xShmBarrier while it holds the WAL write lock (SQLite calls it
 *     when it publishes a commit: a safety net, normally empty by then).
 * Only the connection holding SQLite's WAL write lock writes the "-wal" file, and no connection
 * reads a frame before the commit that contains it is published, so nobody else needs the frames
 * held back. The connection's own reads take its cached chunks. When the write lock is released
 * the cache is wiped (frames of a transaction that did not commit, which a later writer
 * overwrites). A write into part of a chunk the cache does not hold is cached as a chunk of zeros
 * with those bytes if the chunk lies past the file's end or holds only a frame header (pages of
 * 4 KiB and more: the rest of that chunk is zeros by the layout), else as the chunk read from the
 * file with those bytes; but right after a commit's frames were written (until the next whole
 * chunk or WAL header is written) it goes to the file at once: SQLite then rewrites the checksums
 * in the headers of that transaction's frames, which must be in the file, with any error
 * reported, before it publishes the commit. Durability is SQLite's: a frame is in the file when
 * its commit returns.
 */
static int acsqlWALCachePut(ACSQLFile *f, const unsigned char *buf, int n, sqlite3_int64 at) {
    ACSQLWriteCache *c = &f->cache;
    for (int done = 0; done < n;) {
        sqlite3_int64 pos = at + done, chunk = pos / ACSQL_CHUNK_SIZE;
        int within = (int)(pos % ACSQL_CHUNK_SIZE);
        int span = ACSQL_CHUNK_SIZE - within < n - done ? ACSQL_CHUNK_SIZE - within : n - done;
        int rc = SQLITE_OK;
        if (span == ACSQL_CHUNK_SIZE) {
            f->walAfterCommit = 0;
            rc = acsqlCacheWrite(f, buf + done, ACSQL_CHUNK_SIZE, pos);
        } else {
            int slot = acsqlCacheFind(c, chunk);
            if (slot >= 0) {
                memcpy(acsqlCacheSlot(c, slot) + within, buf + done, (size_t)span);
            } else {
                off_t fileEnd = ACSecureFileLseek(acsqlFD(f), 0, SEEK_END);
                if (fileEnd < 0) { f->lastErrno = errno; return SQLITE_IOERR_FSTAT; }
                int inFile = chunk * ACSQL_CHUNK_SIZE < fileEnd;
                /* A frame header alone in its chunk: pages of 4 KiB and more end on a chunk boundary. */
                int headerChunk = within == 0 && span == ACSQL_WAL_FRAME_HEADER && f->walPageSize >= ACSQL_CHUNK_SIZE;
                if (inFile && f->walAfterCommit) {
                    rc = acsqlPwriteAll(f, buf + done, (size_t)span, pos);
                } else {
                    unsigned char whole[ACSQL_CHUNK_SIZE];
                    memset(whole, 0, sizeof whole);
                    if (inFile && !headerChunk) {
                        rc = acsqlReadFile(f, whole, ACSQL_CHUNK_SIZE, chunk * ACSQL_CHUNK_SIZE);
                        if (rc == SQLITE_IOERR_SHORT_READ) rc = SQLITE_OK;  /* zero-filled */
                    }
                    memcpy(whole + within, buf + done, (size_t)span);
                    if (rc == SQLITE_OK) rc = acsqlCacheWrite(f, whole, ACSQL_CHUNK_SIZE, chunk * ACSQL_CHUNK_SIZE);
                    explicit_bzero(whole, sizeof whole);
                }
            }
        }
        if (rc != SQLITE_OK) return rc;
        done += span;
    }
    return SQLITE_OK;
}

static int acsqlWALWrite(ACSQLFile *f, const unsigned char *buf, int amount, sqlite3_int64 offset) {
    if (offset == 0 && amount >= ACSQL_WAL_HEADER) {
        int pageSize = acsqlWALHeaderPageSize(buf);
        if (pageSize != 0) f->walPageSize = pageSize;
    }
    if (f->walPageSize == 0 && offset + amount > ACSQL_WAL_HEADER) acsqlWALLearnPageSize(f);
    if (f->walPageSize == 0 && offset + amount > ACSQL_WAL_HEADER) {
        sqlite3_log(SQLITE_IOERR_WRITE, "acsecure: %s: a WAL frame written before a WAL header that names a page size", f->path);
        return SQLITE_IOERR_WRITE;
    }
    int rc = SQLITE_OK;
    if (offset < ACSQL_WAL_HEADER) {
        /* A new WAL header (a restart): whatever is cached goes first. */
        f->walCommitEnd = -1;
        f->walAfterCommit = 0;
        if ((rc = acsqlCacheFlush(f)) != SQLITE_OK) return rc;
    }
    sqlite3_int64 frame = (sqlite3_int64)f->walPageSize + ACSQL_WAL_FRAME_HEADER;
    if (offset >= ACSQL_WAL_HEADER && (offset - ACSQL_WAL_HEADER) % frame == 0 && amount >= ACSQL_WAL_FRAME_HEADER) {
        /* A frame header: bytes 4..7 are the database's size after a commit, 0 in other frames. */
        uint32_t commitSize = acsqlBE32(buf + 4);
        if (commitSize != 0) f->walCommitEnd = offset + frame;
    }
    if (f->cache.capacity == 0) {
        /* Grow to whole slots first: the write then rewrites no chunk of an earlier frame. */
        rc = acsqlWALExtend(f, acsqlWALPhysicalSize(f, offset + amount));
        if (rc != SQLITE_OK) return rc;
    }
    if (f->cache.capacity > 0 && f->cache.memory == NULL && acsqlCacheAllocate(&f->cache) != SQLITE_OK) {
        sqlite3_log(SQLITE_NOMEM, "acsecure: %s: no memory for a write cache: frames are written at once", f->path);
        f->cache.capacity = 0;
        rc = acsqlWALExtend(f, acsqlWALPhysicalSize(f, offset + amount));
        if (rc != SQLITE_OK) return rc;
    }
    for (sqlite3_int64 at0 = offset, left = amount; left > 0;) {
        sqlite3_int64 contiguous;
        sqlite3_int64 at = acsqlWALPhysical(f, at0, &contiguous);
        int n = contiguous < left ? (int)contiguous : (int)left;
        const unsigned char *from = buf + (at0 - offset);
        rc = f->cache.capacity > 0 ? acsqlWALCachePut(f, from, n, at) : acsqlPwriteAll(f, from, (size_t)n, at);
        if (rc != SQLITE_OK) return rc;
        at0 += n;
        left -= n;
    }
    if (f->walCommitEnd >= 0 && offset + amount >= f->walCommitEnd) {
        /* The commit frame is complete: the transaction's frames go to the file now. */
        f->walCommitEnd = -1;
        rc = acsqlCacheFlush(f);
        f->walAfterCommit = 1;
    }
    return rc;
}

static int acsqlRead(sqlite3_file *file, void *buf, int amount, sqlite3_int64 offset) {
    ACSQLFile *f = (ACSQLFile *)file;
    if (f->isWAL) {
        acsqlWALFileMode(f);
        return acsqlWALRead(f, buf, amount, offset);
    }
    int frc = acsqlFlushPending(f);
    if (frc != SQLITE_OK) return frc;
    if (f->cache.count > 0) return acsqlCacheRead(f, buf, amount, offset);
    return acsqlReadFile(f, buf, amount, offset);
}

static int acsqlWrite(sqlite3_file *file, const void *buf, int amount, sqlite3_int64 offset) {
    ACSQLFile *f = (ACSQLFile *)file;
    if (f->isWAL) {
        acsqlWALFileMode(f);
        return acsqlWALWrite(f, buf, amount, offset);
    }
    int rc = acsqlWriteMark(f);
    if (rc != SQLITE_OK) return rc;
    if (f->cache.capacity > 0 && amount > 0 && offset % ACSQL_CHUNK_SIZE == 0 && amount % ACSQL_CHUNK_SIZE == 0) {
        if (f->cache.memory != NULL || acsqlCacheAllocate(&f->cache) == SQLITE_OK) return acsqlCacheWrite(f, buf, amount, offset);
        sqlite3_log(SQLITE_NOMEM, "acsecure: %s: no memory for a write cache: pages are written at once", f->path);
        f->cache.capacity = 0;
    }
    /* A write over a journal's header (PERSIST mode zeroes it to commit): the database first. */
    if (f->journalOf != NULL && offset == 0) rc = acsqlFlushDatabaseOf(f);
    if (rc == SQLITE_OK) rc = acsqlCacheFlush(f);  /* before a write that is not whole chunks */
    if (rc == SQLITE_OK) rc = acsqlFlushJournalOf(f);
    if (rc != SQLITE_OK) return rc;
    if (f->pending != NULL) {
        if (f->pendingLength > 0 && offset == f->pendingOffset + f->pendingLength && f->pendingLength + amount <= ACSQL_PENDING_CAPACITY) {
            memcpy(f->pending + f->pendingLength, buf, (size_t)amount);
            f->pendingLength += amount;
            return SQLITE_OK;
        }
        if ((rc = acsqlFlushPending(f)) != SQLITE_OK) return rc;
        if (amount < ACSQL_PENDING_CAPACITY) {
            memcpy(f->pending, buf, (size_t)amount);
            f->pendingOffset = offset;
            f->pendingLength = amount;
            return SQLITE_OK;
        }
    }
    return acsqlPwriteAll(f, buf, (size_t)amount, offset);
}

/* As the unix VFS: with SQLITE_FCNTL_CHUNK_SIZE set, lengths are rounded up to whole such chunks. */
static sqlite3_int64 acsqlRoundedLength(ACSQLFile *f, sqlite3_int64 size) {
    return f->chunkSize > 0 ? (size + f->chunkSize - 1) / f->chunkSize * f->chunkSize : size;
}

static int acsqlTruncate(sqlite3_file *file, sqlite3_int64 size) {
    ACSQLFile *f = (ACSQLFile *)file;
    if (f->isWAL) {
        acsqlWALFileMode(f);
        acsqlWALLearnPageSize(f);
        f->walCommitEnd = -1;
    }
    size = f->isWAL ? acsqlWALPhysicalSize(f, size) : acsqlRoundedLength(f, size);
    int rc = acsqlWriteMark(f);
    if (rc == SQLITE_OK) rc = acsqlFlushDatabaseOf(f);  /* a journal cut to 0 is no longer hot (TRUNCATE mode) */
    if (rc == SQLITE_OK) rc = acsqlCacheFlush(f);
    if (rc == SQLITE_OK) rc = acsqlFlushJournalOf(f);
    if (rc == SQLITE_OK) rc = acsqlFlushPending(f);
    if (rc != SQLITE_OK) return rc;
    if (ACSecureFtruncate(acsqlFD(f), (off_t)size) != 0) {
        int e = errno, ace = ACSecureFileLastError(acsqlFD(f));
        f->lastErrno = e;
        sqlite3_log(SQLITE_IOERR_TRUNCATE, "acsecure: truncate %s to %lld: %s (ACE %d)", f->path ? f->path : "(temporary file)",
                    (long long)size, strerror(e), ace);
        return e == EIO && ace == ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR ? SQLITE_IOERR_DATA : SQLITE_IOERR_TRUNCATE;
    }
    return SQLITE_OK;
}

static int acsqlSync(sqlite3_file *file, int flags) {
    ACSQLFile *f = (ACSQLFile *)file;
    if (f->isWAL) acsqlWALFileMode(f);
    int frc = acsqlFlushPending(f);
    if (frc == SQLITE_OK) frc = acsqlFlushAll(f);
    if (frc != SQLITE_OK) return frc;
    int rc = (flags & SQLITE_SYNC_DATAONLY) ? ACSecureFileFdatasync(acsqlFD(f)) : ACSecureFileFsync(acsqlFD(f));
    if (rc != 0) {
        f->lastErrno = errno;
        sqlite3_log(SQLITE_IOERR_FSYNC, "acsecure: fsync %s: %s", f->path ? f->path : "(temporary file)", strerror(errno));
        return SQLITE_IOERR_FSYNC;
    }
    if (f->needsDirSync && f->path != NULL) {
        /* A new journal's directory entry must be durable too, as the unix VFS does. */
        if (acsqlSyncDirectoryOf(f->path) != 0) {
            f->lastErrno = errno;
            return SQLITE_IOERR_DIR_FSYNC;
        }
        f->needsDirSync = 0;
    }
    return SQLITE_OK;
}

static int acsqlFileSize(sqlite3_file *file, sqlite3_int64 *size) {
    ACSQLFile *f = (ACSQLFile *)file;
    if (f->isWAL) acsqlWALFileMode(f);
    int frc = acsqlFlushPending(f);
    if (frc != SQLITE_OK) return frc;
    /* The engine's length, without the fstat(2) ACSecureFstat makes for the other fields (the
     * descriptor's offset moves, but the VFS only uses pread and pwrite). */
    off_t length = ACSecureFileLseek(acsqlFD(f), 0, SEEK_END);
    if (length < 0) {
        f->lastErrno = errno;
        return SQLITE_IOERR_FSTAT;
    }
    /* Cached chunks past the file's end count (in a "-wal" file: the frames they hold). */
    sqlite3_int64 physical = (sqlite3_int64)length;
    if (f->cache.count > 0 && f->cache.end > physical) physical = f->cache.end;
    if (f->isWAL) acsqlWALLearnPageSize(f);
    *size = f->isWAL ? acsqlWALLogicalSize(f, physical) : physical;
    return SQLITE_OK;
}

/* Where temporary files go, as the unix VFS looks: $SQLITE_TMPDIR, $TMPDIR, /var/tmp, /tmp. */
static const char *acsqlTemporaryDirectory(void) {
    const char *dir = getenv("SQLITE_TMPDIR");
    if (dir == NULL || access(dir, W_OK | X_OK) != 0) dir = getenv("TMPDIR");
    if (dir == NULL || access(dir, W_OK | X_OK) != 0) dir = "/var/tmp";
    if (access(dir, W_OK | X_OK) != 0) dir = "/tmp";
    return dir;
}

static int acsqlFileControl(sqlite3_file *file, int op, void *arg) {
    ACSQLFile *f = (ACSQLFile *)file;
    switch (op) {
    case SQLITE_FCNTL_LOCKSTATE:
        *(int *)arg = f->lockLevel;
        return SQLITE_OK;
    case SQLITE_FCNTL_SYNC:            /* before the database's sync at a commit, or in its place */
    case SQLITE_FCNTL_COMMIT_PHASETWO: /* the journal is finalized: the transaction is committed */
        return f->inode != NULL ? acsqlFlushAll(f) : SQLITE_OK;  /* a temporary database needs no commit */
    case SQLITE_FCNTL_VFSNAME:
        *(char **)arg = sqlite3_mprintf("%s", ACSECURE_SQLITE_VFS_NAME);
        return SQLITE_OK;
    case SQLITE_FCNTL_PERSIST_WAL:
        /* As the unix VFS answers it: a negative value asks, any other sets. Applications set it
         * when they open a database (GRDB does), also in rollback mode: refusing it made their open
         * fail. It has no effect while WAL is refused. */
        if (*(int *)arg < 0) *(int *)arg = f->persistWAL; else f->persistWAL = *(int *)arg != 0;
        return SQLITE_OK;
    case SQLITE_FCNTL_HAS_MOVED: {
        /* As the unix VFS: the name no longer leads to this file (deleted, renamed or replaced).
         * The descriptor's own device and inode are compared with the path's (lstat, no key). */
        struct stat open, named;
        int moved = 1;
        if (f->path != NULL && ACSecureFstat(acsqlFD(f), &open) == 0 && stat(f->path, &named) == 0)
            moved = open.st_dev != named.st_dev || open.st_ino != named.st_ino;
        else if (f->path == NULL)
            moved = 0;
        *(int *)arg = moved;
        return SQLITE_OK;
    }
    case SQLITE_FCNTL_LAST_ERRNO:
        *(int *)arg = f->lastErrno;
        return SQLITE_OK;
    case SQLITE_FCNTL_CHUNK_SIZE:
        /* As the unix VFS: the file grows (SIZE_HINT) and is cut (xTruncate) in whole such chunks. */
        f->chunkSize = *(int *)arg > 0 ? *(int *)arg : 0;
        return SQLITE_OK;
    case SQLITE_FCNTL_SIZE_HINT: {
        /* As the unix VFS: with a chunk size, the file is extended now to the hint rounded up to
         * whole chunks (through the engine: a sparse extension, its holes read as zeros); without
         * one, nothing is done. Never shrinks. */
        if (f->chunkSize <= 0) return SQLITE_OK;
        sqlite3_int64 now = 0, want = acsqlRoundedLength(f, *(sqlite3_int64 *)arg);
        int rc = acsqlFileSize(file, &now);
        if (rc != SQLITE_OK || want <= now) return rc;
        return acsqlTruncate(file, want);
    }
    case SQLITE_FCNTL_TEMPFILENAME: {
        /* As the unix VFS: a name for a new temporary file, in the directory the VFS uses for them. */
        char *name = sqlite3_malloc(4096);
        if (name == NULL) return SQLITE_NOMEM;
        unsigned long long r;
        sqlite3_randomness((int)sizeof r, &r);
        sqlite3_snprintf(4096, name, "%s/etilqs_acsecure_%016llx", acsqlTemporaryDirectory(), r);
        *(char **)arg = name;
        return SQLITE_OK;
    }
    case SQLITE_FCNTL_MMAP_SIZE:
        /* Memory mapping stays off (a mapping would expose ciphertext, not pages): the limit is 0
         * whatever is asked, as the unix VFS answers when mmap is not available. */
        *(sqlite3_int64 *)arg = 0;
        return SQLITE_OK;
    case SQLITE_FCNTL_EXTERNAL_READER: {
        /* As the unix VFS: whether another connection holds a read-mark lock of the WAL index (the
         * unix VFS's process locks see other processes; these per-connection locks see other
         * connections, of this process too). 0 outside WAL mode. */
        *(int *)arg = 0;
        if (f->shmFD < 0) return SQLITE_OK;
        if (acsqlLockHeldElsewhere(f->shmFD, ACSQL_SHM_BASE + 3, SQLITE_SHM_NLOCK - 3, (int *)arg) != 0) {
            f->lastErrno = errno;
            return SQLITE_IOERR_LOCK;
        }
        return SQLITE_OK;
    }
    case SQLITE_FCNTL_POWERSAFE_OVERWRITE:
        /* Asked, the answer is 0 (xDeviceCharacteristics): a chunk rewrite is not powersafe, a torn
         * one fails authentication as a whole. Setting 0 is accepted; setting 1 is accepted as the
         * unix VFS does, but not honoured, and said so in the log: claiming it would be false. */
        if (*(int *)arg < 0) {
            *(int *)arg = 0;
        } else if (*(int *)arg != 0) {
            sqlite3_log(SQLITE_OK, "acsecure: %s: SQLITE_FCNTL_POWERSAFE_OVERWRITE=1 is not honoured (a torn chunk write fails as a whole)",
                        f->path ? f->path : "(temporary file)");
        }
        return SQLITE_OK;
    default:
        return SQLITE_NOTFOUND;
    }
}

static int acsqlSectorSize(sqlite3_file *file) {
    (void)file;
    return ACSQL_CHUNK_SIZE;
}

static int acsqlDeviceCharacteristics(sqlite3_file *file) {
    (void)file;
    /* No ATOMIC*, SAFE_APPEND or POWERSAFE_OVERWRITE: a write re-encrypts whole chunks, and a torn
     * chunk fails authentication as a whole. */
    return 0;
}

/*
 * WAL. The "-wal" file holds page images: it is a secure file like the database. The wal-index
 * ("<db>-shm") holds no content (page numbers, frame counts, salts and checksums, read marks and
 * locks) and is shared memory exactly as the unix VFS provides it: a plain file mapped MAP_SHARED
 * in 32 KiB regions, its locks open-file-description locks at the unix VFS's offsets (so each
 * connection owns its locks), a "dead man switch" lock that resets a stale index when the first
 * connection maps it, and the file removed when the last connection closes it.
 *
 * Several processes. The engine keeps one state per file and process (length, end, cached
 * chunks, read cache). In WAL mode a reader of one process reads while a writer or checkpointer of
 * another changes the files, and no SQLite lock tells the VFS to reread (the rollback modes' change
 * mark). The engine's coordinated mode (ACSECURE_OPEN_SHARED: each call takes a record lock and
 * takes up what others changed) makes that safe, but costs a lock and a length check per call and
 * turns the read cache off. It is needed only while another process uses the database, so each
 * process switches its state of the database and of its "-wal" file (ACSecureFileSetShared)
 * between coordinated and solo (the default mode, with the read cache) by what it sees at the
 * start of each transaction:
 *   - presence: a process that uses the database in WAL mode holds a read lock on the presence
 *     byte of "<db>-aclock" (through one descriptor per process: acsqlWALAdmit), from before its
 *     first file access in WAL mode until its last connection unmaps the index (or it dies);
 *   - solo transactions: every transaction (a connection's first WAL-index lock until it holds
 *     none: SQLite takes one before it reads or writes either file, and keeps one until it is
 *     done) begun in solo mode holds a read lock on the solo byte (one per process, while any);
 *   - the WAL mark (bytes 16..23 of "<db>-aclock"): a process stores a new random one when it
 *     starts using the database in WAL mode.
 * A process that starts (acsqlWALAdmit) first takes its presence lock, then waits until no other
 * process holds the solo byte, then stores a new mark, and only then touches the files: in
 * coordinated mode if another process is present, else in solo mode (its state reread first).
 * A transaction (acsqlWALBegin) first takes the solo byte, then looks for other processes'
 * presence locks and at the mark. Both sides lock first and look second (the kernel orders the
 * lock operations on one file), so either the newcomer sees the solo byte held and waits for that
 * transaction to end, or the transaction sees the newcomer and turns coordinated before it touches
 * the files; no file access of a process in solo mode overlaps one of another process. A process
 * that came, changed the files and left while this one was idle changed the mark: the next
 * transaction then rereads both files (ACSecureFileSetShared(fd, 0)) and stays solo. A process
 * that found another one turns coordinated at once (a transaction it has under way is then
 * coordinated from its next call; the newcomer waits for it anyway), and back to solo at the start
 * of a transaction when no other process is present and no other connection of its own is in a
 * transaction (so every transaction running in solo mode holds the solo byte), rereading both files
 * then. The "-wal" state is switched by the next call of any of the process's "-wal" handles
 * (acsqlWALFileMode), always inside a transaction. A process that dies releases its locks.
 * What is outside transactions: SQLite reads 32 bytes of the WAL header when it opens the "-wal"
 * file (a torn read there only leaves the page size unknown), and a connection closing the
 * database in WAL mode checkpoints without WAL-index locks, but holding the database's EXCLUSIVE
 * lock, which no process can hold while another uses the database in WAL mode (each of its
 * connections keeps SHARED). A process that cannot write "<db>-aclock" stores no mark (it changes
 * neither file) and otherwise works the same.
 */

/* This process's presence descriptor's lock at `byte` held by another process (OFD locks: one
 * description per process and database). */
static int acsqlWALOthers(ACSQLInode *node, off_t byte, int *held) {
    *held = 1;  /* unknown counts as present: coordinated is always safe */
    return acsqlLockHeldElsewhere(node->walPresenceFD, byte, 1, held);
}

/* Switches the database's state (under walLock); the "-wal" state follows at its next call. A
 * failure to go solo leaves it coordinated (its next call reports what failed). */
static void acsqlWALSetMode(ACSQLInode *node, int solo) {
    int fd = __atomic_load_n(&node->fd, __ATOMIC_ACQUIRE);
    if (fd >= 0 && ACSecureFileSetShared(fd, !solo) != 0) {
        sqlite3_log(SQLITE_WARNING, "acsecure: %s: cannot take up the database's state: %s", node->path, strerror(errno));
        (void)ACSecureFileSetShared(fd, 1);
        solo = 0;
    }
    node->walSolo = solo;
    __atomic_store_n(&node->walModeGen, node->walModeGen + 1, __ATOMIC_RELEASE);
}

static uint64_t acsqlWALReadMark(ACSQLInode *node) {
    uint64_t mark = 0;
    if (acsqlReadLockWord(node->walPresenceFD, ACSQL_WAL_MARK_OFFSET, &mark) < 0) mark = 0;
    return mark;
}

/* This process starts using the database in WAL mode (its first connection that maps the index):
 * presence, wait for other processes' solo transactions, a new mark, then the mode. Under walLock. */
static int acsqlWALAdmit(ACSQLFile *f) {
    ACSQLInode *node = f->inode;
    int writable = 1;
    if (node->walPresenceFD < 0) {
        char *lockPath = sqlite3_mprintf("%s%s", node->path, ACSQL_LOCK_SUFFIX);
        if (lockPath == NULL) return SQLITE_NOMEM;
        int fd = open(lockPath, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0) { writable = 0; fd = open(lockPath, O_RDONLY | O_CLOEXEC | O_NOFOLLOW); }
        sqlite3_free(lockPath);
        if (fd < 0) { f->lastErrno = errno; return SQLITE_IOERR_SHMOPEN; }
        if (acsqlSetLock(fd, F_RDLCK, ACSQL_PRESENCE_BYTE, 1) != 0) {
            f->lastErrno = errno;
            close(fd);
            return SQLITE_IOERR_LOCK;
        }
        node->walPresenceFD = fd;
    } else {
        writable = (fcntl(node->walPresenceFD, F_GETFL) & O_ACCMODE) == O_RDWR;
    }
    /* Presence first, then the solo byte (see above). Held, the other process is inside a solo
     * transaction and turns coordinated at its next one: wait for the one under way. */
    int64_t deadline = acsqlNowMilliseconds() + ACSQL_ADMIT_MS;
    for (;;) {
        int held;
        if (acsqlWALOthers(node, ACSQL_SOLO_BYTE, &held) != 0) { f->lastErrno = errno; return SQLITE_IOERR_LOCK; }
        if (!held) break;
        if (acsqlNowMilliseconds() >= deadline) {
            /* The presence lock stays: SQLite retries (WAL_RETRY), the other process stays coordinated. */
            sqlite3_log(SQLITE_BUSY, "acsecure: %s: another process's transaction keeps the WAL busy", node->path);
            return SQLITE_BUSY;
        }
        usleep(500);
    }
    uint64_t mark = acsqlWALReadMark(node);
    if (writable) {
        uint64_t fresh = 0;
        while (fresh == 0 || fresh == mark) sqlite3_randomness((int)sizeof fresh, &fresh);
        if (acsqlWriteLockWord(node->walPresenceFD, ACSQL_WAL_MARK_OFFSET, fresh) == 8) mark = fresh;
        else writable = 0;
    }
    int others;
    if (acsqlWALOthers(node, ACSQL_PRESENCE_BYTE, &others) != 0) others = 1;
    /* A process that could not store its mark changes nothing; one that could not and writes
     * anyway (an unexpected write error on the lock file) is coordinated. */
    node->walMark = mark;
    node->walAdmitted = 1;
    acsqlWALSetMode(node, !others && writable);
    return SQLITE_OK;
}

/* A connection's first WAL-index lock of a transaction (see above). */
static int acsqlWALBegin(ACSQLFile *f) {
    ACSQLInode *node = f->inode;
    if (node == NULL || f->walInTransaction) return SQLITE_OK;
    pthread_mutex_lock(&node->walLock);
    f->walInTransaction = 1;
    node->walActive++;
    if (node->walAdmitted && (node->walSolo || node->walActive == 1)) {
        /* The solo byte first (this process's one read lock on it while any such transaction runs). */
        int token = node->walTokens > 0 || acsqlSetLock(node->walPresenceFD, F_RDLCK, ACSQL_SOLO_BYTE, 1) == 0;
        int others = 1;
        if (token) {
            node->walTokens++;
            f->walToken = 1;
            if (acsqlWALOthers(node, ACSQL_PRESENCE_BYTE, &others) != 0) others = 1;
        }
        if (others) {
            if (node->walSolo) acsqlWALSetMode(node, 0);
        } else {
            uint64_t mark = acsqlWALReadMark(node);
            if (!node->walSolo || mark != node->walMark) {
                /* Back to solo, or another process came and went: reread both files. */
                node->walMark = mark;
                acsqlWALSetMode(node, 1);
            }
        }
        if (!node->walSolo && f->walToken) {
            f->walToken = 0;
            if (--node->walTokens == 0) (void)acsqlSetLock(node->walPresenceFD, F_UNLCK, ACSQL_SOLO_BYTE, 1);
        }
    }
    pthread_mutex_unlock(&node->walLock);
    return SQLITE_OK;
}

/* The connection holds no WAL-index lock any more: its transaction is over. */
static void acsqlWALEnd(ACSQLFile *f) {
    ACSQLInode *node = f->inode;
    if (node == NULL || !f->walInTransaction) return;
    pthread_mutex_lock(&node->walLock);
    f->walInTransaction = 0;
    node->walActive--;
    if (f->walToken) {
        f->walToken = 0;
        if (--node->walTokens == 0) (void)acsqlSetLock(node->walPresenceFD, F_UNLCK, ACSQL_SOLO_BYTE, 1);
    }
    pthread_mutex_unlock(&node->walLock);
}

/* A connection stops using the WAL index: after the process's last one, it is no longer present
 * (its states stay as they are: coordinated is always safe, and a solo state is current). */
static void acsqlReleaseWALUse(ACSQLFile *f) {
    ACSQLInode *node = f->inode;
    acsqlWALEnd(f);
    pthread_mutex_lock(&node->walLock);
    pthread_mutex_lock(&acsqlInodesMutex);
    int last = --node->walUsers == 0;
    pthread_mutex_unlock(&acsqlInodesMutex);
    if (last && node->walAdmitted) {
        node->walAdmitted = 0;
        node->walSolo = 0;
        __atomic_store_n(&node->walModeGen, node->walModeGen + 1, __ATOMIC_RELEASE);
        if (node->walPresenceFD >= 0) close(node->walPresenceFD);  /* releases presence and solo */
        node->walPresenceFD = -1;
        node->walTokens = 0;
    }
    pthread_mutex_unlock(&node->walLock);
}

static int acsqlShmOpen(ACSQLFile *f) {
    ACSQLInode *node = f->inode;
    if (node == NULL || f->path == NULL) return SQLITE_IOERR_SHMOPEN;
    int rc = SQLITE_OK;
    pthread_mutex_lock(&node->walLock);
    /* Counted first: from now on acsqlRefresh leaves the database's descriptor alone. */
    pthread_mutex_lock(&acsqlInodesMutex);
    node->walUsers++;
    pthread_mutex_unlock(&acsqlInodesMutex);
    if (!node->walAdmitted) rc = acsqlWALAdmit(f);
    pthread_mutex_unlock(&node->walLock);
    if (rc != SQLITE_OK) {
        acsqlReleaseWALUse(f);
        return rc;
    }

    char *shmPath = sqlite3_mprintf("%s%s", f->path, ACSQL_SHM_SUFFIX);
    if (shmPath == NULL) rc = SQLITE_NOMEM;
    struct stat st;
    mode_t mode = 0644;
    if (stat(f->path, &st) == 0) mode = st.st_mode & 0777;
    int fd = -1;
    if (rc == SQLITE_OK) {
        fd = open(shmPath, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, mode);
        if (fd < 0) { f->lastErrno = errno; rc = SQLITE_CANTOPEN; }
    }
    if (rc == SQLITE_OK) {
        /* The first user of the index (no one holds the dead man switch) starts it empty: what a
         * process that died left there is stale. The others only share it. */
        if (acsqlSetLock(fd, F_WRLCK, ACSQL_SHM_DMS, 1) == 0) {
            if (ftruncate(fd, 0) != 0) { f->lastErrno = errno; rc = SQLITE_IOERR_SHMOPEN; }
        } else if (errno != EAGAIN && errno != EACCES) {
            f->lastErrno = errno;
            rc = SQLITE_IOERR_LOCK;
        }
        if (rc == SQLITE_OK && acsqlSetLock(fd, F_RDLCK, ACSQL_SHM_DMS, 1) != 0) rc = acsqlLockFailure(f, SQLITE_IOERR_LOCK);
    }
    if (rc != SQLITE_OK) {
        sqlite3_log(rc, "acsecure: cannot open the WAL index %s: %s", shmPath ? shmPath : f->path, strerror(f->lastErrno));
        if (fd >= 0) close(fd);
        sqlite3_free(shmPath);
        acsqlReleaseWALUse(f);
        return rc;
    }
    sqlite3_free(shmPath);
    f->shmFD = fd;
    /* Readers run beside a checkpoint in WAL mode, so the database's pages are written through: a
     * page this connection held back would be missing for the others once the checkpoint is done. */
    rc = acsqlCacheFlush(f);
    acsqlCacheFree(f);
    f->cache.capacity = 0;
    return rc;
}

static int acsqlShmMap(sqlite3_file *file, int region, int size, int extend, void volatile **out) {
    ACSQLFile *f = (ACSQLFile *)file;
    *out = NULL;
    if (f->shmFD < 0) {
        int rc = acsqlShmOpen(f);
        if (rc != SQLITE_OK) return rc;
    }
    if (f->shmRegionCount > 0 && f->shmRegionSize != size) return SQLITE_IOERR_SHMMAP;
    f->shmRegionSize = size;
    if (region < f->shmRegionCount && f->shmRegions[region] != NULL) {
        *out = f->shmRegions[region];
        return SQLITE_OK;
    }
    struct stat st;
    if (fstat(f->shmFD, &st) != 0) { f->lastErrno = errno; return SQLITE_IOERR_SHMSIZE; }
    off_t need = (off_t)(region + 1) * size;
    if (st.st_size < need) {
        if (!extend) return SQLITE_OK;  /* not there yet: SQLite reads it as absent */
        if (ftruncate(f->shmFD, need) != 0) { f->lastErrno = errno; return SQLITE_IOERR_SHMSIZE; }
    }
    if (region >= f->shmRegionCount) {
        void **regions = sqlite3_realloc(f->shmRegions, (int)sizeof(void *) * (region + 1));
        if (regions == NULL) return SQLITE_NOMEM;
        for (int i = f->shmRegionCount; i <= region; i++) regions[i] = NULL;
        f->shmRegions = regions;
        f->shmRegionCount = region + 1;
    }
    void *p = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, f->shmFD, (off_t)region * size);
    if (p == MAP_FAILED) { f->lastErrno = errno; return SQLITE_IOERR_SHMMAP; }
    f->shmRegions[region] = p;
    *out = p;
    return SQLITE_OK;
}

/* The "-wal" handle whose write cache holds frames, if this connection holds the WAL write lock
 * (only that connection writes the "-wal" file: the handle is its own). */
static ACSQLFile *acsqlWALCacheOfWriter(ACSQLFile *f) {
    if (f->inode == NULL || !(f->shmHeld & 1)) return NULL;  /* lock 0: SQLite's WAL_WRITE_LOCK */
    pthread_mutex_lock(&acsqlInodesMutex);
    ACSQLFile *wal = f->inode->walCacheOwner;
    pthread_mutex_unlock(&acsqlInodesMutex);
    return wal;
}

static int acsqlShmLock(sqlite3_file *file, int offset, int n, int flags) {
    ACSQLFile *f = (ACSQLFile *)file;
    if (f->shmFD < 0) return SQLITE_IOERR_SHMLOCK;
    int unlock = (flags & SQLITE_SHM_UNLOCK) != 0, mask = ((1 << n) - 1) << offset;
    if (!unlock && f->shmHeld == 0) acsqlWALBegin(f);  /* a transaction starts (acsqlWALBegin) */
    if (unlock && offset == 0 && (f->shmHeld & 1)) {
        /* The write lock goes: frames still cached belong to a transaction that did not commit. */
        ACSQLFile *wal = acsqlWALCacheOfWriter(f);
        if (wal != NULL) acsqlCacheClear(wal);
    }
    short type = unlock ? F_UNLCK : (flags & SQLITE_SHM_SHARED) ? F_RDLCK : F_WRLCK;
    int rc = SQLITE_OK;
    if (acsqlSetLock(f->shmFD, type, ACSQL_SHM_BASE + offset, n) != 0) rc = acsqlLockFailure(f, SQLITE_IOERR_SHMLOCK);
    else if (unlock) f->shmHeld &= ~mask;
    else f->shmHeld |= mask;
    if (f->shmHeld == 0) acsqlWALEnd(f);
    return rc;
}

static void acsqlShmBarrier(sqlite3_file *file) {
    ACSQLFile *f = (ACSQLFile *)file;
    /* SQLite publishing a commit in the index: its frames must be in the file (a safety net: the
     * commit frame's write has flushed them; see the "-wal" write cache). */
    ACSQLFile *wal = acsqlWALCacheOfWriter(f);
    if (wal != NULL && wal->cache.count > 0) {
        int rc = acsqlCacheFlush(wal);
        if (rc != SQLITE_OK) sqlite3_log(rc, "acsecure: %s: cannot write the WAL frames of a commit", wal->path);
    }
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

static int acsqlShmUnmap(sqlite3_file *file, int deleteIndex) {
    ACSQLFile *f = (ACSQLFile *)file;
    if (f->shmFD < 0) return SQLITE_OK;
    for (int i = 0; i < f->shmRegionCount; i++) {
        if (f->shmRegions[i] != NULL) munmap(f->shmRegions[i], (size_t)f->shmRegionSize);
    }
    sqlite3_free(f->shmRegions);
    f->shmRegions = NULL;
    f->shmRegionCount = 0;
    /* The last user (it gets the dead man switch alone) removes the index, as the unix VFS does. */
    if (deleteIndex && f->path != NULL && acsqlSetLock(f->shmFD, F_WRLCK, ACSQL_SHM_DMS, 1) == 0) {
        char *shmPath = sqlite3_mprintf("%s%s", f->path, ACSQL_SHM_SUFFIX);
        if (shmPath != NULL) unlink(shmPath);
        sqlite3_free(shmPath);
    }
    close(f->shmFD);  /* releases this connection's index locks */
    f->shmFD = -1;
    f->shmHeld = 0;
    if (f->inode != NULL) acsqlReleaseWALUse(f);
    return SQLITE_OK;
}

static const sqlite3_io_methods acsqlIOMethods = {
    2,  /* xShm*: WAL; no xFetch (iVersion 3): the file is never memory-mapped */
    acsqlClose,
    acsqlRead,
    acsqlWrite,
    acsqlTruncate,
    acsqlSync,
    acsqlFileSize,
    acsqlLock,
    acsqlUnlock,
    acsqlCheckReservedLock,
    acsqlFileControl,
    acsqlSectorSize,
    acsqlDeviceCharacteristics,
    acsqlShmMap,
    acsqlShmLock,
    acsqlShmBarrier,
    acsqlShmUnmap,
    NULL, NULL,
};

/* ---- The VFS. */

static int acsqlOpenLockFile(ACSQLFile *f, const char *dbPath, int readOnly) {
    char *lockPath = sqlite3_mprintf("%s%s", dbPath, ACSQL_LOCK_SUFFIX);
    if (lockPath == NULL) return SQLITE_NOMEM;
    struct stat st;
    mode_t mode = 0644;
    if (stat(dbPath, &st) == 0) mode = st.st_mode & 0777;
    int fd = open(lockPath, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, mode);
    if (fd < 0 && readOnly) fd = open(lockPath, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        f->lastErrno = errno;
        sqlite3_log(SQLITE_CANTOPEN, "acsecure: cannot open lock file %s: %s", lockPath, strerror(errno));
        sqlite3_free(lockPath);
        return SQLITE_CANTOPEN;
    }
    sqlite3_free(lockPath);
    f->lockFD = fd;
    return SQLITE_OK;
}

/* The node of the database whose "-wal" file is `walName`, with a reference, or NULL. */
static ACSQLInode *acsqlWALDatabaseNode(const char *walName) {
    size_t n = strlen(walName), sn = strlen("-wal");
    ACSQLInode *found = NULL;
    pthread_mutex_lock(&acsqlInodesMutex);
    for (ACSQLInode *node = acsqlInodes; node != NULL && n > sn && found == NULL; node = node->next) {
        if (strlen(node->path) == n - sn && strncmp(node->path, walName, n - sn) == 0) found = node;
    }
    if (found != NULL) found->refs++;
    pthread_mutex_unlock(&acsqlInodesMutex);
    return found;
}

/* Makes f->fd the process's descriptor of its database, or closes it in favour of the one there is. */
static int acsqlShareDescriptor(ACSQLFile *f, int oflag, unsigned int options, uint64_t markBeforeOpen) {
    struct stat st;
    if (ACSecureFstat(f->fd, &st) != 0) { f->lastErrno = errno; return SQLITE_IOERR_FSTAT; }
    int rc = SQLITE_OK, closeFD = -1;
    pthread_mutex_lock(&acsqlInodesMutex);
    ACSQLInode *node = acsqlInodes;
    while (node != NULL && !(node->dev == st.st_dev && node->ino == st.st_ino)) node = node->next;
    if (node == NULL) {
        node = sqlite3_malloc(sizeof *node);
        char *path = sqlite3_mprintf("%s", f->path);
        if (node == NULL || path == NULL) {
            sqlite3_free(node);
            sqlite3_free(path);
            rc = SQLITE_NOMEM;
        } else {
            *node = (ACSQLInode){.dev = st.st_dev, .ino = st.st_ino, .fd = f->fd, .oflag = oflag, .options = options,
                                 .path = path, .seen = markBeforeOpen, .walPresenceFD = -1, .next = acsqlInodes};
            pthread_mutex_init(&node->walLock, NULL);
            acsqlInodes = node;
        }
    } else if ((oflag & O_ACCMODE) == O_RDWR && (node->oflag & O_ACCMODE) != O_RDWR) {
        /* Keep a writable descriptor: the engine moves its state to it when the old one closes. */
        closeFD = node->fd;
        __atomic_store_n(&node->fd, f->fd, __ATOMIC_RELEASE);
        node->oflag = oflag;
        node->options = options;
    } else {
        closeFD = f->fd;
    }
    if (rc == SQLITE_OK) {
        node->refs++;
        f->inode = node;
        f->fd = -1;
    }
    pthread_mutex_unlock(&acsqlInodesMutex);
    if (closeFD >= 0) ACSecureFileClose(closeFD);
    return rc;
}

/* The write cache's size in chunks: ACSECURE_WRITE_CACHE_MIB (whole MiB, 0 to 1024; 16 when unset),
 * and none with ?acsecure_write_cache=0. -1 for a bad size. */
static int acsqlWriteCacheChunks(const char *name) {
    if (name != NULL && !sqlite3_uri_boolean(name, "acsecure_write_cache", 1)) return 0;
    const char *raw = getenv("ACSECURE_WRITE_CACHE_MIB");
    if (raw == NULL || *raw == '\0') return 16 * ((1 << 20) / ACSQL_CHUNK_SIZE);  /* unset or set empty: the default */
    char *end;
    errno = 0;
    long mib = strtol(raw, &end, 10);
    if (*end != '\0' || errno != 0 || mib < 0 || mib > 1024) {
        sqlite3_log(SQLITE_CANTOPEN, "acsecure: ACSECURE_WRITE_CACHE_MIB=%s is not a size (allowed: whole MiB, 0 for none, 1 to 1024; unset or empty for 16): no database is opened",
                    raw);
        return -1;
    }
    return (int)mib * ((1 << 20) / ACSQL_CHUNK_SIZE);
}

static int acsqlOpen(sqlite3_vfs *vfs, const char *name, sqlite3_file *file, int flags, int *outFlags) {
    ACSQLFile *f = (ACSQLFile *)file;
    memset(f, 0, sizeof *f);
    f->fd = -1;
    f->lockFD = -1;
    f->shmFD = -1;

    int type = flags & 0x0FFFFF00;
    int readOnly = (flags & SQLITE_OPEN_READONLY) != 0;
    int oflag = (readOnly ? O_RDONLY : O_RDWR) | O_CLOEXEC;
    if (flags & SQLITE_OPEN_CREATE) oflag |= O_CREAT;
    if (flags & SQLITE_OPEN_EXCLUSIVE) oflag |= O_EXCL;
    /* Files other processes may open (database, journals) are written through; a connection's
     * private temporary files buffer writes. No coordinated mode: see ACSQLInode. */
    int shared = (type & (SQLITE_OPEN_MAIN_DB | SQLITE_OPEN_MAIN_JOURNAL | SQLITE_OPEN_SUPER_JOURNAL | SQLITE_OPEN_WAL)) != 0;
    /* Whole chunks in place, with no copy: SQLite writes whole pages and rewrites a page torn by a
     * kill from its rollback journal or WAL, and this VFS reads a torn chunk of a journal or WAL
     * as zeros (acsqlRead). */
    unsigned int options = shared ? ACSECURE_OPEN_WHOLE_CHUNKS_IN_PLACE : ACSECURE_OPEN_WRITE_BACK;
    /* The -wal file is read by other processes while one appends to it: coordinated mode unless
     * this process uses the database alone (WAL, below; acsqlWALFileMode switches it). */
    ACSQLInode *walOf = NULL;
    if ((type & SQLITE_OPEN_WAL) && name != NULL) {
        walOf = acsqlWALDatabaseNode(name);
        int solo = 0;
        if (walOf != NULL) {
            pthread_mutex_lock(&walOf->walLock);
            solo = walOf->walAdmitted && walOf->walSolo;
            pthread_mutex_unlock(&walOf->walLock);
        }
        if (!solo) options |= ACSECURE_OPEN_SHARED;
        f->cache.capacity = acsqlWriteCacheChunks(name);  /* the frames of a transaction (acsqlWALCachePut) */
        if (f->cache.capacity < 0) {
            if (walOf != NULL) acsqlReleaseInode(walOf);
            return SQLITE_CANTOPEN;
        }
    }
    /* The database keeps decrypted pages in the engine's read cache (ACSECURE_READ_CACHE_MIB, 16 MiB
     * by default), as the kernel's page cache keeps a plain database's; ?acsecure_read_cache=0 turns
     * it off. Journals are read back only to roll back. */
    if ((type & SQLITE_OPEN_MAIN_DB) && name != NULL && sqlite3_uri_boolean(name, "acsecure_read_cache", 1)) {
        options |= ACSECURE_OPEN_READ_CACHE;
    }

    if (type & (SQLITE_OPEN_TEMP_DB | SQLITE_OPEN_TRANSIENT_DB)) {
        /* A temporary database's pages stay in memory up to a quarter of the write cache's size
         * (4 MiB by default), as a plain one's stay in the kernel's page cache: most are never
         * written to the file (speedtest1's SELECT DISTINCT and sorts). */
        f->cache.capacity = acsqlWriteCacheChunks(NULL);
        if (f->cache.capacity > 0) f->cache.capacity /= 4;
        if (f->cache.capacity < 0) return SQLITE_CANTOPEN;
    }
    if (name == NULL) {
        /* An anonymous temporary file: a fresh secure file that is unlinked at once. */
        const char *dir = acsqlTemporaryDirectory();
        for (int attempt = 0; attempt < 100 && f->fd < 0; attempt++) {
            unsigned long long r;
            sqlite3_randomness((int)sizeof r, &r);
            char *tmp = sqlite3_mprintf("%s/etilqs_acsecure_%016llx", dir, r);
            if (tmp == NULL) return SQLITE_NOMEM;
            f->fd = ACSecureFileOpenWithOptions(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600, options);
            int e = errno;
            if (f->fd >= 0) unlink(tmp);
            sqlite3_free(tmp);
            if (f->fd < 0 && e != EEXIST) {
                f->lastErrno = e;
                sqlite3_log(SQLITE_CANTOPEN, "acsecure: cannot create a temporary file in %s: %s", dir, strerror(e));
                return SQLITE_CANTOPEN;
            }
        }
        if (f->fd < 0) return SQLITE_CANTOPEN;
    } else {
        f->path = sqlite3_mprintf("%s", name);
        if (f->path == NULL) return SQLITE_NOMEM;
        struct stat st;
        mode_t mode = 0644;
        if ((type & (SQLITE_OPEN_MAIN_JOURNAL | SQLITE_OPEN_WAL | SQLITE_OPEN_SUPER_JOURNAL)) != 0) {
            /* A journal gets its database's permissions, as with the unix VFS. */
            size_t n = strlen(name);
            const char *suffix = (type & SQLITE_OPEN_WAL) ? "-wal" : "-journal";
            size_t sn = strlen(suffix);
            if ((type & SQLITE_OPEN_SUPER_JOURNAL) == 0 && n > sn && strcmp(name + n - sn, suffix) == 0) {
                char *db = sqlite3_mprintf("%.*s", (int)(n - sn), name);
                if (db != NULL && stat(db, &st) == 0) mode = st.st_mode & 0777;
                sqlite3_free(db);
            }
            if (flags & SQLITE_OPEN_CREATE) f->needsDirSync = 1;
            f->journalKind = (type & (SQLITE_OPEN_MAIN_JOURNAL | SQLITE_OPEN_SUPER_JOURNAL)) != 0;
        }
        /* The change mark before the open: a change after this read makes the first SHARED lock reopen. */
        uint64_t markBeforeOpen = 0;
        if (type & SQLITE_OPEN_MAIN_DB) {
            char *lockPath = sqlite3_mprintf("%s%s", name, ACSQL_LOCK_SUFFIX);
            int lfd = lockPath ? open(lockPath, O_RDONLY | O_CLOEXEC | O_NOFOLLOW) : -1;
            sqlite3_free(lockPath);
            if (lfd >= 0) {
                f->lockFD = lfd;
                if (acsqlReadMark(f, &markBeforeOpen) != 0) markBeforeOpen = 0;
                close(lfd);
                f->lockFD = -1;
            }
        }
        if ((type & (SQLITE_OPEN_MAIN_JOURNAL | SQLITE_OPEN_WAL | SQLITE_OPEN_SUPER_JOURNAL)) != 0 && (flags & SQLITE_OPEN_CREATE)
            && lstat(name, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 0) {
            /* A journal or -wal of 0 bytes: what a power loss leaves of one created and never synced
             * (its name persisted, not its first write). The engine refuses a 0-byte file (it never
             * leaves one; a cut secure file looks so); SQLite takes it for no journal (xAccess says
             * so, as the unix VFS does), so there is nothing in it to keep: it is started anew. */
            sqlite3_log(SQLITE_WARNING, "acsecure: %s: an empty file (a creation a crash interrupted): started anew", name);
            oflag |= O_TRUNC;
        }
        f->fd = ACSecureFileOpenWithOptions(name, oflag, mode, options);
        if (f->fd < 0 && errno == EACCES && !readOnly && (type & SQLITE_OPEN_MAIN_DB)) {
            /* Like the unix VFS: a database we may not write is opened read-only. EACCES without
             * keys fails again below with the same errno. */
            int e = errno;
            f->fd = ACSecureFileOpenWithOptions(name, (oflag & ~(O_RDWR | O_CREAT)) | O_RDONLY, mode, options);
            if (f->fd >= 0) { readOnly = 1; flags = (flags & ~(SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE)) | SQLITE_OPEN_READONLY; }
            else errno = e;
        }
        if (f->fd < 0 && walOf != NULL) acsqlReleaseInode(walOf);
        if (f->fd < 0) {
            int e = errno;
            f->lastErrno = e;
            /* The engine's own words: which file, and why (no store, services locked, another key...). */
            char why[2048];
            ACSecureFileLastErrorMessage(why, sizeof why);
            char *text = sqlite3_mprintf("cannot open %s: %s", why[0] ? why : name, strerror(e));
            if (text != NULL) acsqlLogLong(SQLITE_CANTOPEN, text);
            sqlite3_free(text);
            if ((type & SQLITE_OPEN_MAIN_DB) && e == EIO && lstat(name, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 0) {
                /* Plain SQLite takes a 0-byte file for an empty database; an encrypted one cut to 0
                 * bytes looks the same, so it is refused, never opened empty. What to do about it. */
                sqlite3_log(SQLITE_CANTOPEN, "acsecure: %s is empty: no database to open (cut to 0 bytes, or created and never synced "
                            "before a power loss); delete it to start a new database", name);
            }
            sqlite3_free(f->path);
            f->path = NULL;
            return (e == EIO && (type & SQLITE_OPEN_MAIN_DB)) ? SQLITE_NOTADB : SQLITE_CANTOPEN;
        }
        int endRC = acsqlCheckEnd(f->fd, name, (type & SQLITE_OPEN_MAIN_DB) != 0);
        if (endRC != SQLITE_OK && walOf != NULL) acsqlReleaseInode(walOf);
        if (endRC != SQLITE_OK) {
            ACSecureFileClose(f->fd);
            f->fd = -1;
            sqlite3_free(f->path);
            f->path = NULL;
            return endRC;
        }
        if (flags & SQLITE_OPEN_DELETEONCLOSE) unlink(name);
        if (type & SQLITE_OPEN_WAL) {
            f->isWAL = 1;
            f->walOf = walOf;  /* its mode is applied at its first call (walModeSeen 0) */
            f->walCommitEnd = -1;
            acsqlWALLearnPageSize(f);
        }
        if (type & SQLITE_OPEN_MAIN_JOURNAL) {
            f->pending = sqlite3_malloc(ACSQL_PENDING_CAPACITY);
            if (f->pending == NULL) {
                ACSecureFileClose(f->fd);
                f->fd = -1;
                sqlite3_free(f->path);
                f->path = NULL;
                return SQLITE_NOMEM;
            }
            size_t n = strlen(name), sn = strlen("-journal");
            pthread_mutex_lock(&acsqlInodesMutex);
            for (ACSQLInode *node = acsqlInodes; node != NULL && n > sn; node = node->next) {
                if (strlen(node->path) == n - sn && strncmp(node->path, name, n - sn) == 0) {
                    node->journal = f;
                    f->journalOf = node;
                    break;
                }
            }
            pthread_mutex_unlock(&acsqlInodesMutex);
        }
        if (type & SQLITE_OPEN_MAIN_DB) {
            f->cache.capacity = acsqlWriteCacheChunks(name);
            int rc = f->cache.capacity < 0 ? SQLITE_CANTOPEN : acsqlOpenLockFile(f, name, readOnly);
            if (rc == SQLITE_OK) rc = acsqlShareDescriptor(f, readOnly ? (oflag & ~O_RDWR) | O_RDONLY : oflag, options, markBeforeOpen);
            if (rc != SQLITE_OK) {
                if (f->lockFD >= 0) close(f->lockFD);
                f->lockFD = -1;
                if (f->fd >= 0) ACSecureFileClose(f->fd);
                f->fd = -1;
                sqlite3_free(f->path);
                f->path = NULL;
                return rc;
            }
        }
    }
    (void)vfs;
    if (outFlags) *outFlags = flags;
    f->base.pMethods = &acsqlIOMethods;
    return SQLITE_OK;
}

static int acsqlDelete(sqlite3_vfs *vfs, const char *name, int syncDir) {
    (void)vfs;
    /* A deleted journal is no longer hot: its database's cached chunks must be in the file first. */
    size_t n = strlen(name), sn = strlen("-journal");
    if (n > sn && strcmp(name + n - sn, "-journal") == 0) {
        ACSQLFile *db = NULL;
        pthread_mutex_lock(&acsqlInodesMutex);
        for (ACSQLInode *node = acsqlInodes; node != NULL && db == NULL; node = node->next) {
            if (strlen(node->path) == n - sn && strncmp(node->path, name, n - sn) == 0) db = node->writer;
        }
        pthread_mutex_unlock(&acsqlInodesMutex);
        int rc = db != NULL ? acsqlCacheFlush(db) : SQLITE_OK;
        if (rc != SQLITE_OK) return rc;
    }
    if (unlink(name) != 0) {
        if (errno == ENOENT) return SQLITE_IOERR_DELETE_NOENT;
        sqlite3_log(SQLITE_IOERR_DELETE, "acsecure: delete %s: %s", name, strerror(errno));
        return SQLITE_IOERR_DELETE;
    }
    if (syncDir && acsqlSyncDirectoryOf(name) != 0) return SQLITE_IOERR_DIR_FSYNC;
    return SQLITE_OK;
}

static int acsqlAccess(sqlite3_vfs *vfs, const char *name, int flags, int *out) {
    (void)vfs;
    struct stat st;
    switch (flags) {
    case SQLITE_ACCESS_EXISTS:
        /* As the unix VFS: an empty file does not count (a journal without content is not hot).
         * "Empty" means no plaintext: a secure file's header alone is not content. */
        if (stat(name, &st) != 0) { *out = 0; return SQLITE_OK; }
        if (!S_ISREG(st.st_mode) || st.st_size == 0) { *out = st.st_size > 0 || !S_ISREG(st.st_mode); return SQLITE_OK; }
        if (ACSecureLstat(name, &st) == 0) *out = st.st_size > 0;
        else *out = 1;  /* not a secure file: let the open report it */
        return SQLITE_OK;
    case SQLITE_ACCESS_READWRITE:
        *out = access(name, R_OK | W_OK) == 0;
        return SQLITE_OK;
    default:
        *out = access(name, R_OK) == 0;
        return SQLITE_OK;
    }
}

static int acsqlFullPathname(sqlite3_vfs *vfs, const char *name, int outSize, char *out) {
    (void)vfs;
    if (name[0] == '/') {
        if ((int)strlen(name) >= outSize) return SQLITE_CANTOPEN;
        memcpy(out, name, strlen(name) + 1);
        return SQLITE_OK;
    }
    char cwd[PATH_MAX];
    if (getcwd(cwd, sizeof cwd) == NULL) return SQLITE_CANTOPEN;
    if ((int)(strlen(cwd) + 1 + strlen(name)) >= outSize) return SQLITE_CANTOPEN;
    sqlite3_snprintf(outSize, out, "%s/%s", cwd, name);
    return SQLITE_OK;
}

/* Dynamic loading, randomness, sleep and time: the default VFS's. */
static void *acsqlDlOpen(sqlite3_vfs *vfs, const char *path) { return acsqlDefaultVFS(vfs)->xDlOpen(acsqlDefaultVFS(vfs), path); }
static void acsqlDlError(sqlite3_vfs *vfs, int n, char *msg) { acsqlDefaultVFS(vfs)->xDlError(acsqlDefaultVFS(vfs), n, msg); }
static void (*acsqlDlSym(sqlite3_vfs *vfs, void *h, const char *sym))(void) { return acsqlDefaultVFS(vfs)->xDlSym(acsqlDefaultVFS(vfs), h, sym); }
static void acsqlDlClose(sqlite3_vfs *vfs, void *h) { acsqlDefaultVFS(vfs)->xDlClose(acsqlDefaultVFS(vfs), h); }
static int acsqlRandomness(sqlite3_vfs *vfs, int n, char *out) { return acsqlDefaultVFS(vfs)->xRandomness(acsqlDefaultVFS(vfs), n, out); }
/* SQLite's busy handler sleeping between two attempts: while this thread waits for RESERVED (fair
 * locking, above), the sleep ends once RESERVED is free (checked every 200 µs, with no lock held),
 * never later than asked. */
static int acsqlSleep(sqlite3_vfs *vfs, int us) {
    int fd = acsqlWaitingLockFD;
    if (fd < 0) return acsqlDefaultVFS(vfs)->xSleep(acsqlDefaultVFS(vfs), us);
    int64_t until = acsqlNowMilliseconds() * 1000 + us;
    for (;;) {
        int held = 0;
        if (acsqlLockHeldElsewhere(fd, ACSQL_RESERVED_BYTE, 1, &held) != 0 || !held) return us;
        int64_t left = until - acsqlNowMilliseconds() * 1000;
        if (left <= 0) return us;
        usleep(left < 200 ? (useconds_t)left : 200);
    }
}
static int acsqlCurrentTime(sqlite3_vfs *vfs, double *t) { return acsqlDefaultVFS(vfs)->xCurrentTime(acsqlDefaultVFS(vfs), t); }
static int acsqlGetLastError(sqlite3_vfs *vfs, int n, char *out) {
    (void)vfs;
    if (n > 0) out[0] = '\0';
    return 0;
}
static int acsqlCurrentTimeInt64(sqlite3_vfs *vfs, sqlite3_int64 *t) {
    sqlite3_vfs *d = acsqlDefaultVFS(vfs);
    if (d->iVersion >= 2 && d->xCurrentTimeInt64 != NULL) return d->xCurrentTimeInt64(d, t);
    double r;
    int rc = d->xCurrentTime(d, &r);
    *t = (sqlite3_int64)(r * 86400000.0);
    return rc;
}

static sqlite3_vfs acsqlVFS = {
    2,
    (int)sizeof(ACSQLFile),
    512,
    NULL,
    ACSECURE_SQLITE_VFS_NAME,
    NULL,
    acsqlOpen,
    acsqlDelete,
    acsqlAccess,
    acsqlFullPathname,
    acsqlDlOpen,
    acsqlDlError,
    acsqlDlSym,
    acsqlDlClose,
    acsqlRandomness,
    acsqlSleep,
    acsqlCurrentTime,
    acsqlGetLastError,
    acsqlCurrentTimeInt64,
    NULL, NULL, NULL,
};

int ACSecureSQLiteRegister(int makeDefault) {
#ifndef ACSECURE_SQLITE_EXTENSION
    int rc = sqlite3_initialize();
    if (rc != SQLITE_OK) return rc;
#endif
    if (acsqlVFS.pAppData == NULL) {
        sqlite3_vfs *d = sqlite3_vfs_find(NULL);
        if (d == NULL) return SQLITE_ERROR;
        if (d == &acsqlVFS) return SQLITE_OK;
        acsqlVFS.pAppData = d;
    }
    return sqlite3_vfs_register(&acsqlVFS, makeDefault);
}

#ifdef ACSECURE_SQLITE_EXTENSION
/* The entry point `.load libacsecuresqlite_ext` looks for (SQLite derives it from the file name). */
int sqlite3_acsecuresqliteext_init(sqlite3 *db, char **errorMessage, const sqlite3_api_routines *api) {
    (void)db;
    SQLITE_EXTENSION_INIT2(api);
    int rc = ACSecureSQLiteRegister(0);
    if (rc != SQLITE_OK) {
        if (errorMessage) *errorMessage = sqlite3_mprintf("acsecure: cannot register the VFS (SQLite error %d)", rc);
        return rc;
    }
    /* The VFS outlives the connection that loaded it. */
    return SQLITE_OK_LOAD_PERMANENTLY;
}

int sqlite3_extension_init(sqlite3 *db, char **errorMessage, const sqlite3_api_routines *api) {
    return sqlite3_acsecuresqliteext_init(db, errorMessage, api);
}
#endif
