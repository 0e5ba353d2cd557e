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
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef ACSECURE_SQLITE_EXTENSION
#include <sqlite3ext.h>
SQLITE_EXTENSION_INIT1
#else
#include <sqlite3.h>
#endif

#include "ACSecureFile.h"
#include "ACSecureSQLite.h"

/* SQLite's lock bytes (os.h): the same offsets as the unix VFS, in the "-aclock" file. */
#define ACSQL_PENDING_BYTE 0x40000000
#define ACSQL_RESERVED_BYTE (ACSQL_PENDING_BYTE + 1)
#define ACSQL_SHARED_FIRST (ACSQL_PENDING_BYTE + 2)
#define ACSQL_SHARED_SIZE 510

/* The engine's plaintext chunk: a write of part of a chunk rewrites (re-encrypts) the whole chunk. */
#define ACSQL_CHUNK_SIZE 4096

#define ACSQL_LOCK_SUFFIX "-aclock"

typedef struct ACSQLFile {
    sqlite3_file base;
    int fd;              /* secure descriptor (ACSecureFile*) */
    int lockFD;          /* plain descriptor of "<db>-aclock" for OFD locks, -1 for files without locks */
    int lockLevel;       /* SQLITE_LOCK_* held by this connection */
    int needsDirSync;    /* a new journal: sync its directory at the first xSync */
    int lastErrno;
    char *path;          /* sqlite3_malloc'ed full path, NULL for anonymous temporary files */
} ACSQLFile;

static sqlite3_vfs *acsqlDefaultVFS(sqlite3_vfs *vfs) { return (sqlite3_vfs *)vfs->pAppData; }

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

/* SQLITE_BUSY when another connection holds a conflicting lock, else the I/O error code. */
static int acsqlLockFailure(ACSQLFile *f, int ioerr) {
    int e = errno;
    f->lastErrno = e;
    return (e == EAGAIN || e == EACCES) ? SQLITE_BUSY : ioerr;
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
        if (rc == SQLITE_OK) f->lockLevel = SQLITE_LOCK_SHARED;
        return rc;
    }
    if (level == SQLITE_LOCK_RESERVED) {
        if (acsqlSetLock(f->lockFD, F_WRLCK, ACSQL_RESERVED_BYTE, 1) != 0) return acsqlLockFailure(f, SQLITE_IOERR_LOCK);
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

static int acsqlUnlock(sqlite3_file *file, int level) {
    ACSQLFile *f = (ACSQLFile *)file;
    if (f->lockLevel <= level) return SQLITE_OK;
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

static int acsqlCheckReservedLock(sqlite3_file *file, int *out) {
    ACSQLFile *f = (ACSQLFile *)file;
    if (f->lockLevel >= SQLITE_LOCK_RESERVED || f->lockFD < 0) { *out = f->lockLevel >= SQLITE_LOCK_RESERVED; return SQLITE_OK; }
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = ACSQL_RESERVED_BYTE;
    fl.l_len = 1;
    if (fcntl(f->lockFD, F_OFD_GETLK, &fl) != 0) {
        f->lastErrno = errno;
        *out = 0;
        return SQLITE_IOERR_CHECKRESERVEDLOCK;
    }
    *out = fl.l_type != F_UNLCK;
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

static int acsqlClose(sqlite3_file *file) {
    ACSQLFile *f = (ACSQLFile *)file;
    int rc = SQLITE_OK;
    if (f->lockFD >= 0) {
        close(f->lockFD);  /* releases this connection's OFD locks */
        f->lockFD = -1;
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

static int acsqlRead(sqlite3_file *file, void *buf, int amount, sqlite3_int64 offset) {
    ACSQLFile *f = (ACSQLFile *)file;
    char *p = buf;
    size_t done = 0;
    while (done < (size_t)amount) {
        ssize_t n = ACSecureFilePread(f->fd, p + done, (size_t)amount - done, (off_t)(offset + (sqlite3_int64)done));
        if (n < 0) {
            if (errno == EINTR) continue;
            f->lastErrno = errno;
            sqlite3_log(SQLITE_IOERR_READ, "acsecure: read %s at %lld: %s (ACE %d)", f->path ? f->path : "(temporary file)",
                        (long long)offset, strerror(errno), ACSecureFileLastError(f->fd));
            return errno == EACCES ? SQLITE_IOERR_AUTH : SQLITE_IOERR_READ;
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

static int acsqlWrite(sqlite3_file *file, const void *buf, int amount, sqlite3_int64 offset) {
    ACSQLFile *f = (ACSQLFile *)file;
    const char *p = buf;
    size_t done = 0;
    while (done < (size_t)amount) {
        ssize_t n = ACSecureFilePwrite(f->fd, p + done, (size_t)amount - done, (off_t)(offset + (sqlite3_int64)done));
        if (n < 0) {
            if (errno == EINTR) continue;
            f->lastErrno = errno;
            sqlite3_log(SQLITE_IOERR_WRITE, "acsecure: write %s at %lld: %s (ACE %d)", f->path ? f->path : "(temporary file)",
                        (long long)offset, strerror(errno), ACSecureFileLastError(f->fd));
            if (errno == ENOSPC || errno == EDQUOT) return SQLITE_FULL;
            return errno == EACCES ? SQLITE_IOERR_AUTH : SQLITE_IOERR_WRITE;
        }
        if (n == 0) { f->lastErrno = ENOSPC; return SQLITE_FULL; }
        done += (size_t)n;
    }
    return SQLITE_OK;
}

static int acsqlTruncate(sqlite3_file *file, sqlite3_int64 size) {
    ACSQLFile *f = (ACSQLFile *)file;
    if (ACSecureFtruncate(f->fd, (off_t)size) != 0) {
        f->lastErrno = errno;
        sqlite3_log(SQLITE_IOERR_TRUNCATE, "acsecure: truncate %s to %lld: %s", f->path ? f->path : "(temporary file)", (long long)size, strerror(errno));
        return SQLITE_IOERR_TRUNCATE;
    }
    return SQLITE_OK;
}

static int acsqlSync(sqlite3_file *file, int flags) {
    ACSQLFile *f = (ACSQLFile *)file;
    int rc = (flags & SQLITE_SYNC_DATAONLY) ? ACSecureFileFdatasync(f->fd) : ACSecureFileFsync(f->fd);
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
    struct stat st;
    if (ACSecureFstat(f->fd, &st) != 0) {
        f->lastErrno = errno;
        return SQLITE_IOERR_FSTAT;
    }
    *size = (sqlite3_int64)st.st_size;
    return SQLITE_OK;
}

static int acsqlFileControl(sqlite3_file *file, int op, void *arg) {
    ACSQLFile *f = (ACSQLFile *)file;
    switch (op) {
    case SQLITE_FCNTL_LOCKSTATE:
        *(int *)arg = f->lockLevel;
        return SQLITE_OK;
    case SQLITE_FCNTL_VFSNAME:
        *(char **)arg = sqlite3_mprintf("%s", ACSECURE_SQLITE_VFS_NAME);
        return SQLITE_OK;
    case SQLITE_FCNTL_PRAGMA: {
        /* Refuse WAL with a message instead of SQLite's silent fallback to the old journal mode. */
        char **a = arg;
        if (a[1] != NULL && a[2] != NULL && sqlite3_stricmp(a[1], "journal_mode") == 0 && sqlite3_stricmp(a[2], "wal") == 0) {
            a[0] = sqlite3_mprintf("acsecure: journal_mode=WAL is not supported (WAL needs shared memory for its index, "
                                   "which this VFS does not provide); use DELETE, TRUNCATE or PERSIST");
            return SQLITE_ERROR;
        }
        return SQLITE_NOTFOUND;
    }
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

static const sqlite3_io_methods acsqlIOMethods = {
    1,  /* no xShm*: no WAL (see ACSecureSQLite.h) */
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
    NULL, NULL, NULL, NULL, NULL, NULL,
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

static int acsqlOpen(sqlite3_vfs *vfs, const char *name, sqlite3_file *file, int flags, int *outFlags) {
    ACSQLFile *f = (ACSQLFile *)file;
    memset(f, 0, sizeof *f);
    f->fd = -1;
    f->lockFD = -1;

    int type = flags & 0x0FFFFF00;
    int readOnly = (flags & SQLITE_OPEN_READONLY) != 0;
    int oflag = (readOnly ? O_RDONLY : O_RDWR) | O_CLOEXEC;
    if (flags & SQLITE_OPEN_CREATE) oflag |= O_CREAT;
    if (flags & SQLITE_OPEN_EXCLUSIVE) oflag |= O_EXCL;
    /* Files other processes may open (database, journals) use the engine's coordinated mode; a
     * connection's private temporary files buffer writes. */
    int shared = (type & (SQLITE_OPEN_MAIN_DB | SQLITE_OPEN_MAIN_JOURNAL | SQLITE_OPEN_SUPER_JOURNAL | SQLITE_OPEN_WAL)) != 0;
    unsigned int options = shared ? ACSECURE_OPEN_SHARED : ACSECURE_OPEN_WRITE_BACK;

    if (name == NULL) {
        /* An anonymous temporary file: a fresh secure file that is unlinked at once. */
        const char *dir = getenv("SQLITE_TMPDIR");
        if (dir == NULL || access(dir, W_OK | X_OK) != 0) dir = getenv("TMPDIR");
        if (dir == NULL || access(dir, W_OK | X_OK) != 0) dir = "/var/tmp";
        if (access(dir, W_OK | X_OK) != 0) dir = "/tmp";
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
        if (f->fd < 0) {
            int e = errno;
            f->lastErrno = e;
            sqlite3_log(SQLITE_CANTOPEN, "acsecure: cannot open %s: %s%s", name, strerror(e),
                        e == EIO ? " (not a secure file, or encrypted under another key)"
                        : e == EACCES ? " (permission denied, or secure services have no keys)" : "");
            sqlite3_free(f->path);
            f->path = NULL;
            return (e == EIO && (type & SQLITE_OPEN_MAIN_DB)) ? SQLITE_NOTADB : SQLITE_CANTOPEN;
        }
        if (flags & SQLITE_OPEN_DELETEONCLOSE) unlink(name);
        if (type & SQLITE_OPEN_MAIN_DB) {
            int rc = acsqlOpenLockFile(f, name, readOnly);
            if (rc != SQLITE_OK) {
                ACSecureFileClose(f->fd);
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
static int acsqlSleep(sqlite3_vfs *vfs, int us) { return acsqlDefaultVFS(vfs)->xSleep(acsqlDefaultVFS(vfs), us); }
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
