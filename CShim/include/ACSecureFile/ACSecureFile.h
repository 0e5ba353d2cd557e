/*
 * ACSecureFile.h — POSIX-style secure file I/O (AppConnect for iOS SDK, table 19), for Linux.
 *
 * Each function has the parameters, return type and behaviour of its POSIX counterpart, and
 * encrypts on write / decrypts on read. A program that uses open/read/write/lseek/ftruncate/...
 * can rename the calls, link libACSecureFile, and its files are encrypted at rest
 * (chunked AES-256-GCM, 4096-byte plaintext chunks, a maximum plaintext size of 2^44 bytes).
 *
 *     cc prog.c $(pkg-config --cflags --libs acsecurefile)
 *
 * Descriptors
 *   ACSecureFileOpen returns a real kernel file descriptor (of the underlying encrypted file),
 *   so descriptor numbers are allocated and reused as with open(). Each file also holds one more
 *   kernel descriptor while the process has it open (the library's own, shared by all of the
 *   process's secure descriptors of that file): descriptors on N different files use 2N kernel
 *   descriptors, M descriptors on one file M + 1. So with every descriptor on a different file,
 *   ACSecureFileOpen fails with EMFILE at about half of RLIMIT_NOFILE (ENFILE likewise at the
 *   system limit), not at the limit itself: raise RLIMIT_NOFILE (setrlimit, ulimit -n) for a
 *   program that keeps that many files open. A failed open leaves no descriptor behind.
 *   Use such a descriptor only with ACSecure* calls: plain read()/write() see ciphertext and
 *   plain close() leaves the secure state behind (a later ACSecure* call on that number is
 *   undefined). An unknown or closed descriptor gives -1 with errno EBADF, as POSIX does;
 *   ACSecureFileClose on an already closed descriptor gives -1/EBADF.
 *
 * Errors
 *   On failure a function returns -1 and sets errno to what the POSIX call would set on a plain
 *   file (EBADF, EINVAL, ENOENT, EEXIST, EISDIR, ...). Calls that take a descriptor also record
 *   an ACE_* detail (ACError.h), read with ACSecureFileLastError(fd). Decryption failures that
 *   POSIX has no errno for are reported as EIO (ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR or
 *   ACE_INTERNAL_ERROR); missing keys as EACCES (ACE_NO_KEYS_ERROR); a file larger than
 *   2^44 bytes as EFBIG (ACE_FILE_TOO_BIG_ERROR).
 *
 * When written data is in the file
 *   By default (write-through) a write is in the file when ACSecureFileWrite/Pwrite/Writev/
 *   Ftruncate returns, as with write(2): it survives the writer's exit, _exit, abort or SIGKILL,
 *   and a fresh open in any process reads it. ACSecureFileFsync/Fdatasync make it durable
 *   (power loss). A crash in the middle of a call loses at most that call's bytes (the file opens
 *   at its old or new length; docs/FORMAT.md "What a crash can cost").
 *   Write-back buffering is an explicit opt-in (ACSECURE_OPEN_WRITE_BACK, or
 *   ACSECURE_BUFFERING=write-back in the environment for an unmodified program): like stdio,
 *   small writes collect in memory and reach the file at ACSecureFileFlush, Fsync, Fdatasync,
 *   Close, a services lock and normal process exit (exit() or returning from main); _exit, a
 *   crash or SIGKILL lose them. A deferred write that fails is reported by the descriptor's next
 *   call and by its close.
 *   Another process's descriptor that is already open keeps its own cached length and chunk: it
 *   sees this process's writes after it reopens, or at every call when both use the coordinated
 *   mode (ACSECURE_OPEN_SHARED, or ACSECURE_MULTIPROCESS=1).
 *
 * File format
 *   New files are format version 5 (docs/FORMAT.md): an append inside the last chunk is sealed
 *   alone, as a record, so small appends cost one pwrite of their own bytes. Files of versions
 *   1 to 4 keep opening and accepting writes in their own format. A build older than version 5
 *   refuses version 5 files by name; ACSECURE_FORMAT_VERSION=4 in the environment makes this
 *   library create version 4 files, for readers that predate version 5.
 *
 * Processes and fork()
 *   A child inherits the secure descriptors; parent and child are then two processes as above.
 *   In coordinated mode both may read and write (the child takes its own record lock). In the
 *   default mode the child's first call sees what the parent wrote until then (open, fork, the
 *   parent writes and stops, the child goes on); two writers at once lose data. fork() first
 *   writes every write-back buffer, as ACSecureFileFlush would (a failure is reported by the
 *   descriptor's next call and its close), so a parent that leaves with _exit, as daemon(3)'s
 *   does, loses nothing, and the child never writes a copy of the parent's buffer over newer data.
 *   Unlike POSIX, parent and child do not share the file offset.
 *   As with any library, a child of a multithreaded parent should only use inherited descriptors
 *   if no other thread was inside a secure call at the fork.
 *
 * Secure services
 *   Keys come from secure services (ACSecureServices.h). Start them with ACSecureServicesStart (or
 *   ACSecureServicesStartWithOptions). A program that never calls an ACSecureServices* function
 *   starts them from the environment at its first secure call: ACSECURE_APP_ID is required (no app
 *   ID is invented), ACSECURE_HOME names the store; a missing store is created only with
 *   ACSECURE_CREATE_STORE=1; ACSECURE_PASSCODE (tests and CI only) unlocks it and requires it to
 *   be protected by a passcode. Without them the call fails with EACCES (ACE_NO_KEYS_ERROR).
 *
 * Thread safety
 *   - All functions may be called from any thread.
 *   - Different descriptors may be used concurrently from different threads without restriction.
 *     The last error is kept per descriptor (not per thread), so ACSecureFileLastError(fd) is
 *     meaningful when each thread uses its own descriptors.
 *   - Several threads may use the same descriptor, as with POSIX: each call is atomic with
 *     respect to the file offset, but ACSecureFileLastError(fd) then reports the call on that
 *     descriptor that finished last, which may be another thread's.
 *   - As with POSIX, closing a descriptor while another thread is still using it is a bug in the
 *     program: the other call may fail with EBADF or act on a descriptor that was reused.
 *   - errno is thread-local, as always.
 *
 * Linking
 *   libACSecureFile.so needs the Swift runtime (libswiftCore.so, ...). The library carries a
 *   RUNPATH to the toolchain's runtime directory (e.g. /opt/swift/usr/lib/swift/linux); if the
 *   runtime lives elsewhere on the target machine, link with -Wl,-rpath,<swift-runtime-dir> or
 *   set LD_LIBRARY_PATH. `pkg-config --variable=swiftruntimedir acsecurefile` prints it.
 */
#ifndef ACSECUREFILE_H
#define ACSECUREFILE_H

#include <sys/types.h>
#include <sys/stat.h>
#include <sys/uio.h>

#include "ACError.h"

#if !defined(__cplusplus) && defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
_Static_assert(sizeof(off_t) == 8, "ACSecureFile.h needs a 64-bit off_t (64-bit Linux)");
#endif

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Opens (and with O_CREAT creates) a secure file. The corresponding POSIX function is `open`.
 *
 * oflag takes O_RDONLY / O_WRONLY / O_RDWR with O_CREAT, O_EXCL, O_TRUNC, O_APPEND, O_CLOEXEC,
 * O_NOFOLLOW, O_NOCTTY, O_DSYNC and O_SYNC (each write and truncate through the descriptor ends
 * with ACSecureFileFdatasync / ACSecureFileFsync before it returns; a failed sync fails the call
 * with its errno); other flags (O_DIRECT, O_TMPFILE, O_PATH, O_NOATIME, O_NONBLOCK, ...) are
 * refused with EINVAL. The mode argument is read only when oflag contains O_CREAT (or O_TMPFILE),
 * exactly like open(); it is subject to the umask. A new (or O_TRUNC'ed) file is keyed with the
 * app's key; use ACSecureFileOpenWithGroupID (ACSecureServices.h) to share a file through an
 * encryption group.
 *
 * Creation is atomic: a missing file is created unnamed in its directory (O_TMPFILE), given its
 * header, and only then linked under its name, so the name never shows a 0-byte file and a kill
 * leaves none. A 0-byte file is therefore never a secure file: every open of one fails with EIO
 * (ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR: a secure file cut to 0 bytes looks like that), with O_CREAT
 * too; only O_TRUNC, which empties a file on purpose, makes it a new secure file. A power loss
 * before the file's first sync can leave one (the name persisted, not the data written before it):
 * as with a plain file, nothing in it was durable; open it with O_TRUNC to start it anew (the
 * SQLite VFS does so for its journals). A creation torn after its header's write opens as an empty
 * file, reported as restored (ACSecureFileEndRestored).
 *
 * Returns a descriptor >= 0, or -1 with errno:
 *   ENOENT, EEXIST, EACCES, ENOTDIR, ELOOP, EMFILE, ENAMETOOLONG, EROFS, ... as open();
 *   EISDIR     the path is a directory;
 *   EINVAL     the path is another non-regular file (FIFO, device, socket), or an unsupported flag;
 *   EACCES     secure services are unavailable (no keys);
 *   EIO        the file is not a secure file (also a 0-byte file, unless O_TRUNC), or its header
 *              is corrupt or under another key;
 *   EFAULT     path is NULL.
 * Sets no ACE_* value (there is no descriptor yet).
 *
 * Paths are bytes, as open(2) takes them, in every call of this API (open, rename, lstat,
 * truncate, the store directory, wrapped files): a name in Latin-1, Shift-JIS or any other bytes
 * is used exactly as given, never checked for UTF-8 or repaired. The errors are the kernel's
 * (ENAMETOOLONG, ENOENT, ...).
 */
int ACSecureFileOpen(const char *path, int oflag, ...);

/** ACSecureFileOpenWithOptions options (bits). */
enum {
    /** Write-back buffering: see "When written data is in the file". Ignored with ACSECURE_OPEN_SHARED. */
    ACSECURE_OPEN_WRITE_BACK = 1u << 0,
    /** Coordinated mode: other processes read and write the file at the same time (record lock,
     *  reread and write-through per call). */
    ACSECURE_OPEN_SHARED = 1u << 1,
    /** Read cache: decrypted chunks are kept in guarded memory (allocated at the first read), so
     *  a chunk read again costs a copy instead of a pread and a decryption. Its size is
     *  ACSECURE_READ_CACHE_MIB from the environment: whole MiB from 1 to 1024, 0 for no cache,
     *  16 when unset; any other value fails the open with EINVAL. The file's state is shared by
     *  the process's descriptors of it: it gets the largest cache any of them asked for. Ignored
     *  with ACSECURE_OPEN_SHARED (every call would have to drop it). Without guarded memory for it
     *  the file is read without a cache. Like the one-chunk cache, a chunk changed on disk by
     *  someone else while it is cached is not read again (docs/FORMAT.md, threat model). */
    ACSECURE_OPEN_READ_CACHE = 1u << 2,
    /** Double writes: a write that rewrites part of a chunk (4096 plaintext bytes, aligned) puts the
     *  chunk's copy on the device before rewriting it, and the rewrite before it returns (two
     *  fdatasyncs per such write, as InnoDB's doublewrite buffer), so a power loss never costs bytes
     *  a sync made durable. Without it a kill never tears such a chunk either, but a power loss
     *  before the next sync may, when the copy did not reach the device: the chunk then reads EIO,
     *  its synced bytes too, until it is rewritten whole (docs/FORMAT.md "Double write").
     *  Writes of whole chunks, appends, truncation and syncs cost the same as without it. SQLite
     *  does not need it (it writes whole pages and rewrites them from its journal or WAL).
     *  ACSECURE_DOUBLE_WRITE=1 in the environment turns it on for ACSecureFileOpen. The file's state
     *  is shared by the process's descriptors of it: once one asked for it, all of them double-write. */
    ACSECURE_OPEN_DOUBLE_WRITE = 1u << 3,
    /** Whole chunks rewritten in place, with no copy. By default a write first copies each chunk it
     *  rewrites whole in place (4096 plaintext bytes each, aligned: a database's 4 or 8 KiB page is
     *  one or two), as it copies a chunk it rewrites in part: every chunk spans two pages on disk,
     *  and a kill that stops the write between them would leave the chunk half new, half old,
     *  unreadable. Each such chunk then costs a pwrite of its copy and one of its own (a 64 KiB
     *  overwrite in place about 1.8 times the time of one written whole, 1 MiB 2.3 times:
     *  docs/BENCHMARKS.md). With this option the whole chunks go in one pwrite with no copy, and a
     *  kill that cuts it may leave a chunk it rewrote whole failing with EIO until it is written
     *  whole again: for callers that rewrite torn pages from a journal of their own (the acsecure
     *  SQLite VFS opens its database, journals and WAL so). Chunks a write rewrites in part are
     *  copied with or without it (docs/FORMAT.md "A chunk copy"). The
     *  file's state is shared by the process's descriptors of it: chunks are rewritten in place
     *  without a copy only when all of them asked for it. */
    ACSECURE_OPEN_WHOLE_CHUNKS_IN_PLACE = 1u << 4,
};

/**
 * ACSecureFileOpen with explicit options (ACSECURE_OPEN_* bits; 0 is ACSecureFileOpen's default
 * with the environment ignored). mode is used as open() uses it (only with O_CREAT).
 *
 * Returns a descriptor, or -1 with ACSecureFileOpen's errno values; EINVAL for an unknown option bit.
 */
int ACSecureFileOpenWithOptions(const char *path, int oflag, mode_t mode, unsigned int options);

/**
 * Writes the descriptor's buffered data (write-back) to the file, as fflush() does: after it a
 * fresh open anywhere reads it. Nothing is forced to the device. A no-op for write-through
 * descriptors (their data is already in the file).
 *
 * Returns 0, or -1 with errno EBADF (unknown descriptor), EIO, ENOSPC, EDQUOT (the write failed),
 * EACCES (no keys: ACE_NO_KEYS_ERROR).
 */
int ACSecureFileFlush(int fd);

/**
 * Writes buffered data, then forces the file's data and metadata to the device: everything
 * written before the call survives a power loss. The corresponding POSIX function is `fsync`.
 * Unlike fsync(2), the first sync of a file this process created (ACSecureFileFsync, Fdatasync or
 * an O_DSYNC write) also fsyncs its directory, so the new name survives with the data; a failure
 * there fails the call (errno of the directory's fsync), and the next sync tries again. A rename
 * (ACSecureFileRename) is made durable as with rename(2): fsync the directory yourself.
 *
 * Returns 0, or -1 with errno EBADF, EIO, ENOSPC, EDQUOT, EROFS/EINVAL (as fsync), EACCES (no keys
 * for buffered data: ACE_NO_KEYS_ERROR). fsync(fd) on the descriptor itself does not write the
 * engine's buffer; use this.
 */
int ACSecureFileFsync(int fd);

/**
 * As ACSecureFileFsync, without forcing metadata that reading the data does not need.
 * The corresponding POSIX function is `fdatasync`.
 */
int ACSecureFileFdatasync(int fd);

/**
 * Closes a secure descriptor; dirty data is encrypted and written first.
 * The corresponding POSIX function is `close`.
 *
 * Returns 0, or -1 with errno EBADF (unknown or already closed descriptor) or EIO (the final
 * write failed; the descriptor is closed anyway, as with close()). Sets no ACE_* value (the
 * descriptor no longer exists).
 */
int ACSecureFileClose(int fd);

/**
 * Reads up to nbyte plaintext bytes at the file offset and advances it.
 * The corresponding POSIX function is `read`.
 *
 * Returns the number of bytes read (0 at end of file; holes read as zeros), or -1 with errno:
 *   EBADF   unknown descriptor, or opened O_WRONLY (ACE_READ_ON_WRITEONLY_ERROR);
 *   EFAULT  buf is NULL and nbyte > 0, or nbyte > SSIZE_MAX, as Linux (ACE_INVALID_ARG);
 *   EACCES  no keys (ACE_NO_KEYS_ERROR);
 *   EIO     a chunk failed authentication (ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR) or the encryption
 *           layer failed (ACE_INTERNAL_ERROR);
 *   ENOMEM  (ACE_LOW_MEMORY_ERROR).
 */
ssize_t ACSecureFileRead(int fd, void *buf, size_t nbyte);

/**
 * Writes nbyte bytes at the file offset (at the end with O_APPEND) and advances it.
 * The corresponding POSIX function is `write`.
 *
 * Returns nbyte (short only when the disk fills or the write reaches the 2^44-byte limit),
 * or -1 with errno:
 *   EBADF   unknown descriptor, or opened O_RDONLY (ACE_WRITE_ON_READONLY_ERROR);
 *   EFAULT  buf is NULL and nbyte > 0, or nbyte > SSIZE_MAX, as Linux (ACE_INVALID_ARG);
 *   EFBIG   the offset is at or past 2^44 bytes (ACE_FILE_TOO_BIG_ERROR);
 *   EACCES  no keys (ACE_NO_KEYS_ERROR);
 *   EIO     (ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR, ACE_INTERNAL_ERROR); ENOMEM (ACE_LOW_MEMORY_ERROR);
 *   ENOSPC, EDQUOT as write().
 */
ssize_t ACSecureFileWrite(int fd, const void *buf, size_t nbyte);

/**
 * Reads up to nbyte bytes at offset without moving the file offset.
 * The corresponding POSIX function is `pread`.
 *
 * Returns as ACSecureFileRead, plus errno EINVAL for a negative offset
 * (ACE_NEGATIVE_FILE_LEN_ERROR).
 */
ssize_t ACSecureFilePread(int fd, void *buf, size_t nbyte, off_t offset);

/**
 * Writes nbyte bytes at offset without moving the file offset.
 * The corresponding POSIX function is `pwrite`. As on Linux, a descriptor opened with O_APPEND
 * appends the data at the end regardless of offset.
 *
 * Returns as ACSecureFileWrite, plus errno EINVAL for a negative offset
 * (ACE_NEGATIVE_FILE_LEN_ERROR).
 */
ssize_t ACSecureFilePwrite(int fd, const void *buf, size_t nbyte, off_t offset);

/**
 * Reads into iovcnt buffers in order, as one read. The corresponding POSIX function is `readv`.
 *
 * Returns as ACSecureFileRead, plus errno EINVAL when iovcnt < 0 or iovcnt > IOV_MAX, or when
 * the lengths add up to more than SSIZE_MAX (ACE_INVALID_ARG).
 */
ssize_t ACSecureFileReadv(int fd, const struct iovec *iov, int iovcnt);

/**
 * Writes iovcnt buffers in order, as one write. The corresponding POSIX function is `writev`.
 * Buffers under 64 KiB are gathered in guarded memory and written together: a header and a
 * record cost one write of the chunk they share, not one each.
 *
 * Returns as ACSecureFileWrite, plus errno EINVAL when iovcnt < 0 or iovcnt > IOV_MAX, or when
 * the lengths add up to more than SSIZE_MAX (ACE_INVALID_ARG), and ENOMEM when no guarded memory
 * is left to gather them in (ACE_LOW_MEMORY_ERROR).
 */
ssize_t ACSecureFileWritev(int fd, const struct iovec *iov, int iovcnt);

/**
 * Moves the file offset (in plaintext bytes). The corresponding POSIX function is `lseek`.
 * SEEK_SET, SEEK_CUR, SEEK_END, SEEK_DATA and SEEK_HOLE are supported; seeking past the end is
 * allowed and a later write fills the gap with (encrypted) zeros.
 *
 * Returns the new offset, or -1 with errno:
 *   EBADF     unknown descriptor;
 *   EINVAL    unknown whence (ACE_INVALID_ARG), a negative result (ACE_NEGATIVE_FILE_LEN_ERROR),
 *             or a result past 2^44 (ACE_FILE_TOO_BIG_ERROR), as lseek past the file system's limit;
 *   EOVERFLOW the offset computation overflows off_t (ACE_FILE_TOO_BIG_ERROR);
 *   ENXIO     SEEK_DATA / SEEK_HOLE at or past the end (the whole file counts as data);
 *   EACCES    no keys (ACE_NO_KEYS_ERROR).
 */
off_t ACSecureFileLseek(int fd, off_t offset, int whence);

/**
 * Renames a secure file without re-encrypting it; it stays readable under its new name (the
 * file ID, not the path, is bound into the authenticated data). The corresponding POSIX
 * function is `rename`.
 *
 * Returns 0, or -1 with the errno of rename() (ENOENT, EXDEV, EISDIR, ...). Sets no ACE_* value.
 */
int ACSecureFileRename(const char *oldpath, const char *newpath);

/**
 * Gets the status of an open secure file; st_size is the plaintext size.
 * The corresponding POSIX function is `fstat`.
 *
 * Returns 0, or -1 with errno EBADF (unknown descriptor), EFAULT (buf is NULL,
 * ACE_INVALID_ARG), EACCES (ACE_NO_KEYS_ERROR) or EIO (ACE_INTERNAL_ERROR).
 */
int ACSecureFstat(int fd, struct stat *buf);

/**
 * Gets the status of a path without following a final symbolic link; for a secure file
 * st_size is the plaintext size, for anything else the result is that of lstat().
 * The corresponding POSIX function is `lstat`.
 *
 * What it checks: no key is needed, and nothing is authenticated. For a regular file that this
 * process does not have open, st_size is computed from the file's length and its 128-byte header
 * alone; the header must be well-formed (the "ACSF" magic, format version 1, 2 or 3, header size
 * 128, chunk shift 9 to 20, key class 1, 2 or 3, flags and reserved bytes zero, in version 3 a
 * pending-end record of kind 0 or 1) and the length must be
 * one a file of that layout can have (header, whole chunks, a last chunk longer than its overhead,
 * trailer; at most 2^44 plaintext bytes). The file ID, the key fingerprint, the wrapped data key,
 * the chunks and the trailer are not checked: a file cut at a chunk boundary, or a header altered
 * into another well-formed one (another version, chunk shift or key class), still gets a size,
 * computed for what the header now says. Only ACSecureFileOpen and the reads after it (or
 * `acsecure verify`) authenticate a file. For a file this process has open, st_size is the
 * size of the open file, including writes still buffered (ACSECURE_OPEN_WRITE_BACK).
 *
 * Returns 0, or -1 with the errno of lstat() (ENOENT, ENOTDIR, ...), EFAULT when buf is NULL,
 * or EIO for a non-empty regular file that fails the checks above (not a secure file). An empty
 * regular file gives st_size 0. Sets no ACE_* value.
 */
int ACSecureLstat(const char *path, struct stat *buf);

/**
 * Sets the plaintext size of an open secure file; growing adds zeros. Note that the zeros are
 * encrypted and written like data (a secure file has no holes): growing by N bytes costs N bytes
 * of disk and time.
 * The corresponding POSIX function is `ftruncate`.
 *
 * Returns 0, or -1 with errno:
 *   EBADF   unknown descriptor;
 *   EINVAL  opened O_RDONLY (ACE_TRUNC_ON_READONLY_ERROR, as Linux ftruncate) or a negative
 *           length (ACE_NEGATIVE_FILE_LEN_ERROR);
 *   EFBIG   length > 2^44 (ACE_FILE_TOO_BIG_ERROR);
 *   EACCES  no keys (ACE_NO_KEYS_ERROR); EIO (ACE_INTERNAL_ERROR); ENOMEM (ACE_LOW_MEMORY_ERROR).
 */
int ACSecureFtruncate(int fd, off_t length);

/**
 * Sets the plaintext size of a secure file by path. The corresponding POSIX function is
 * `truncate`.
 *
 * Returns 0, or -1 with the errno of truncate() (ENOENT, EACCES, EISDIR, EINVAL for a negative
 * length, EFBIG for more than 2^44 bytes), EACCES when no keys are available, or EIO for a
 * non-secure or corrupt file. Sets no ACE_* value.
 */
int ACSecureTruncate(const char *path, off_t length);

/**
 * The ACE_* detail of the last call on fd (ACError.h): ACE_NO_ERROR after a successful call,
 * the failure's detail after a failed one (ACE_NO_ERROR when errno says it all, e.g. ENOSPC).
 * Right after a successful open it is ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR when the file's end did
 * not authenticate: either an interrupted write was recovered (ACSecureFileRecoveredBytes > 0: the
 * bytes of that write after the last complete end are not read, and the next change of the file
 * removes them), or the end was restored from the file's tail copy (ACSecureFileEndRestored == 1:
 * the file as at its last fsync/fdatasync; a power loss, or a cut or damaged end), or no end
 * authenticates at all, a file cut or damaged at its end with no tail copy to restore (a format
 * version 3 file; ACSecureFileRecoveredBytes fails with EIO: the file reads up to its damaged tail
 * and refuses every change but a cut to 0).
 * Call it right after a call on a valid, open descriptor failed; see "Thread safety" above.
 *
 * Returns the ACError value, or -1 with errno EBADF when fd is not an open secure descriptor.
 */
int ACSecureFileLastError(int fd);

/**
 * How many bytes follow the file's authenticated end: 0 for an intact file; more after a write
 * that was interrupted (a crash) or bytes appended by someone else. They are never read; the
 * next change of the file cuts them off.
 *
 * Returns the count, or -1 with errno EBADF (unknown descriptor), EACCES (no keys), EIO (with
 * ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR when no end authenticates: the file was cut or damaged at its
 * end).
 */
off_t ACSecureFileRecoveredBytes(int fd);

/**
 * Whether the file's end was restored from its tail copy when it was opened: 1 when its end, or
 * the short last chunk its last sync copied, did not authenticate in place (a power loss tore it,
 * or the file was cut or damaged there) and the file is as it was at its last fsync/fdatasync
 * (format version 4 and later: docs/FORMAT.md "Tail copies"); also 1 when a version 5 file was
 * taken back to the chunk boundary where its failing last chunk starts, none of whose bytes a sync
 * covered (a power loss tore the append that wrote it: docs/FORMAT.md "Trailers that span two
 * sectors"). What follows that end is reported by ACSecureFileRecoveredBytes. The next change of
 * the file writes the copy back in place (or seals a trailer at that boundary); 0 from then on,
 * and for an intact end.
 *
 * Returns 1 or 0, or -1 with errno EBADF (unknown descriptor), EACCES (no keys), EIO.
 */
int ACSecureFileEndRestored(int fd);

/**
 * Switches how this process uses the file while it is open (every descriptor of it in this
 * process shares one state). shared != 0: coordinated mode, as if a descriptor had been opened
 * with ACSECURE_OPEN_SHARED (the read cache is dropped; each later call takes up what other
 * processes changed). shared == 0: what other processes changed is taken up now, under the
 * record lock (length, file ID and end reread, cached chunks dropped), and the default mode holds
 * from then on (the read cache, if a descriptor asked for one, comes back); called in the default
 * mode, it only takes up those changes. The caller must make sure that no other process changes
 * the file while it is in the default mode (the SQLite VFS switches by what SQLite's locks say).
 * A descriptor opened later with ACSECURE_OPEN_SHARED turns the state coordinated again.
 *
 * Returns 0, or -1 with errno EBADF (unknown descriptor), EACCES (no keys), EIO (with an ACE_*
 * value) when the file cannot be reread, or the errno of the record lock.
 */
int ACSecureFileSetShared(int fd, int shared);

/**
 * Takes size as the end of a file whose end does not authenticate (ACSecureFileRecoveredBytes
 * failing with EIO), on the word of another authenticated record of its length: a trailer for size
 * is sealed at its place, the file is cut after it, and changes are accepted again. For a caller
 * that can restore what the interrupted write changed, as SQLite's hot rollback journal does (the
 * acsecure VFS uses it for a database torn by a power loss). Chunks below size are not checked;
 * a damaged one still fails when read, and a whole-chunk write repairs it.
 *
 * Returns 0, or -1 with errno EINVAL (the end authenticates: use ACSecureFtruncate; size not a
 * multiple of the chunk size, 4096 bytes by default, or beyond the file's bytes; a read-only
 * descriptor, as ftruncate), EBADF (unknown descriptor), EACCES (no keys), or the errno of the
 * write, fdatasync or ftruncate.
 */
int ACSecureFileAdoptEnd(int fd, off_t size);

/**
 * Why the calling thread's last failed call of this API failed, in words: the message names the
 * file and the reason (e.g. "notes.db: secure services cannot start (no secure services store at
 * /home/you/.local/share/acsecure (no seed file); create one with `acsecure init`,
 * ACSecureServicesStart, or ACSECURE_CREATE_STORE=1)"), as errno names only its class. Kept per
 * thread, like errno, until the thread's next failed call; a successful call leaves it. Never
 * holds file contents or keys (names of files may appear).
 *
 * Copies at most size - 1 bytes and a NUL into buffer (nothing when size is 0) and returns the
 * message's full length, as snprintf does; 0 (and an empty string) when no call of this thread
 * has failed.
 */
size_t ACSecureFileLastErrorMessage(char *buffer, size_t size);

#ifdef __cplusplus
}
#endif

#endif /* ACSECUREFILE_H */
