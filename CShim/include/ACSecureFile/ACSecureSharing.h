/*
 * ACSecureSharing.h — sharing files from an extension, from C (AppConnect for iOS SDK, tables 32–34:
 * ACWrappedAppKey, ACWrappedFile, ACUnwrappedFile / ACWrappedFileReadHandle).
 *
 * The flow
 *   1. The provider app (secure services started) gets a crypto block for a shared group ID with
 *      ACSecureGetCryptoBlock and hands it to its extension over a private channel (a pipe, a 0600
 *      file). The crypto block is a SECRET KEY: whoever holds it can create wrapped files that the
 *      host apps of that group accept.
 *   2. The extension, a process that never starts secure services, wraps a plain file with the
 *      crypto block: ACSecureWrapFile. The wrapped file is encrypted and authenticated, including
 *      the file name the host app sees.
 *   3. The host app (secure services started, same store) opens the wrapped file with the same
 *      group ID: ACSecureWrappedFileOpen, then ACSecureWrappedFileRead/Pread/Lseek/Fstat/Close.
 *
 * Wrapped file descriptors
 *   ACSecureWrappedFileOpen returns a real kernel descriptor (read-only, close-on-exec) of the
 *   wrapped file, so numbers are allocated, reused and exhausted (EMFILE) as with open(). It is
 *   NOT an ACSecureFile descriptor: ACSecureFileRead & co. give -1/EBADF for it, and the functions
 *   below give -1/EBADF for an ACSecureFile descriptor. Offsets and sizes count from the first byte
 *   of the original file: the encrypted name record in front of it is invisible. The descriptor
 *   is read-only: there is no write, truncate or writev for it.
 *
 * Errors
 *   On failure a function returns -1 and sets errno. The descriptor functions also record an
 *   ACE_* detail (ACError.h) read with ACSecureWrappedFileLastError(fd). ACSecureWrappedFileOpen
 *   has no descriptor yet, so it reports its detail through its `error` out-parameter instead.
 *
 * Thread safety
 *   - All functions may be called from any thread; none keeps per-thread state but errno.
 *   - Different descriptors may be used concurrently without restriction. Calls on the same
 *     descriptor are serialised (each read/pread/lseek is atomic with respect to the offset);
 *     ACSecureWrappedFileLastError(fd) then reports the call that finished last, which may be
 *     another thread's.
 *   - Closing a descriptor while another thread still uses it is a bug in the program, as with
 *     close(): the other call may fail with EBADF or act on a descriptor that was reused.
 */
#ifndef ACSECURESHARING_H
#define ACSECURESHARING_H

#include <stddef.h>
#include <sys/types.h>
#include <sys/stat.h>

#include "ACError.h"

#ifdef __cplusplus
extern "C" {
#endif

/** The size of a crypto block (version 1). ACSecureGetCryptoBlock never writes more. */
#define ACSECURE_CRYPTO_BLOCK_SIZE 56

/** The longest actual file name of a wrapped file, in UTF-8 bytes (without the terminating NUL). */
#define ACSECURE_WRAPPED_FILE_NAME_MAX 1024

/** ACSecureWrappedFileOpen's detail (besides the ACE_* values) for a file that is not a wrapped file. */
typedef enum ACWrappedFileReadError {
    /** The file is not an extension wrapped file (a plain file, or a secure file of another kind);
     *  errno is EILSEQ. Use the file as it is. The value differs from every ACE_* value and equals
     *  the reference's ACWrappedFileReadErrorUnknownWrapperFormat. */
    ACWRAPPEDFILEREADERROR_UNKNOWN_WRAPPER_FORMAT = 1001,
} ACWrappedFileReadError;

/**
 * Copies out the crypto block the provider app hands to its extension
 * (`+[ACWrappedAppKey getCryptoKeysForACFileEncryptionWithSharedGroupID:error:]`). Needs secure
 * services (started from the environment if no ACSecureServices* call started them).
 *
 * sharedGroupID is the MI_AC_SHARED_GROUP_ID value; only ACSecureWrappedFileOpen calls with the
 * same ID can read the wrapped files. NULL: every app of the store can.
 *
 * *blockLength is the capacity of block on entry and the length of the crypto block
 * (ACSECURE_CRYPTO_BLOCK_SIZE) on return.
 *
 * THE CALLER MUST WIPE THE BLOCK: it is key material. Keep it in memory that is not swapped or
 * dumped if you can (e.g. mlock'ed, MADV_DONTDUMP), send it only over a private channel, never
 * log it, and clear it with explicit_bzero() as soon as it has been handed over. This function
 * keeps no copy: its own buffer is guarded memory, wiped before it returns.
 *
 * Returns 0, or -1 with errno:
 *   EFAULT  blockLength is NULL, or block is NULL with a capacity of at least one block;
 *   ERANGE  the capacity is below ACSECURE_CRYPTO_BLOCK_SIZE (*blockLength is set to the size
 *           needed, nothing is written);
 *   EINVAL  sharedGroupID is empty or not valid UTF-8;
 *   EACCES  secure services are unavailable (locked, retired, wrong passcode: no keys);
 *   EIO     an internal error of the encryption layer.
 */
int ACSecureGetCryptoBlock(const char *sharedGroupID, unsigned char *block, size_t *blockLength);

/**
 * Encrypts the plain file at path into a wrapped file at toPath with a crypto block
 * (`+[ACWrappedFile wrapFileAtPath:toPath:withCryptoBlock:actualFileName:error:]`).
 *
 * Works in a process that never starts secure services (an extension): the crypto block carries
 * the key, and this call neither starts services nor reads the environment. The source is read
 * in pieces (bounded memory); the wrapped file is written to a temporary file beside toPath,
 * synced and renamed over toPath (mode 0600), so toPath is never a partial wrapped file, and on
 * failure toPath is unchanged.
 *
 * actualFileName is the name the host app sees (1 to ACSECURE_WRAPPED_FILE_NAME_MAX UTF-8 bytes,
 * no '/', not "." or ".."); NULL means the last component of path. The wrapped file records that
 * name as text: when path's last component is not UTF-8, pass actualFileName (else EINVAL). The
 * paths themselves are bytes, as open(2) takes them.
 *
 * Returns 0, or -1 with errno:
 *   EFAULT  path, toPath or block is NULL;
 *   EINVAL  the crypto block is not a crypto block, damaged or of another length; a bad
 *           actualFileName (or none, and path's last component is not UTF-8); or the source is not a regular file
 *           (FIFO, device, socket);
 *   EISDIR  the source is a directory;
 *   other   the errno of the failed I/O, on the source or on toPath's directory
 *           (ENOENT, EACCES, ENOSPC, EXDEV, ...); EIO for an internal encryption error.
 */
int ACSecureWrapFile(const char *path, const char *toPath, const unsigned char *block, size_t blockLength,
                     const char *actualFileName);

/**
 * Opens the wrapped file at path for reading
 * (`+[ACUnwrappedFile readWrappedFileAtPath:sharedGroupID:error:]`). Needs secure services (started
 * from the environment if no ACSecureServices* call started them).
 *
 * sharedGroupID is the group ID the provider app passed to ACSecureGetCryptoBlock (NULL if it
 * passed NULL). On success the actual file name, NUL-terminated, is copied into actualFileName
 * (nameCapacity bytes; ACSECURE_WRAPPED_FILE_NAME_MAX + 1 always suffices); actualFileName may be
 * NULL with nameCapacity 0 when the name is not wanted.
 *
 * error, when not NULL, receives the detail: ACE_NO_ERROR on success, an ACE_* value, or
 * ACWRAPPEDFILEREADERROR_UNKNOWN_WRAPPER_FORMAT.
 *
 * Returns a descriptor >= 0 (see "Wrapped file descriptors"), or -1 with errno:
 *   EILSEQ  the file is not a wrapped file (ACWRAPPEDFILEREADERROR_UNKNOWN_WRAPPER_FORMAT);
 *   EIO     a wrapped file for another group ID (or none), or a damaged one: no byte of it is
 *           returned (ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR); or an internal error (ACE_INTERNAL_ERROR);
 *   EACCES  secure services are unavailable (ACE_NO_KEYS_ERROR), or open() was refused (ACE_NO_ERROR);
 *   EISDIR  path is a directory (ACE_REGULAR_FILE_ONLY_ERROR);
 *   EINVAL  path is another non-regular file (ACE_REGULAR_FILE_ONLY_ERROR); sharedGroupID is
 *           empty or a path or group ID is not valid UTF-8 (ACE_INVALID_ARG);
 *   ERANGE  the name does not fit in nameCapacity bytes with its NUL (ACE_INVALID_ARG; nothing
 *           is opened);
 *   EFAULT  path is NULL, or actualFileName is NULL with nameCapacity > 0 (ACE_INVALID_ARG);
 *   ENOENT, ENOTDIR, ELOOP, EMFILE, ENAMETOOLONG, ... as open() (ACE_NO_ERROR).
 */
int ACSecureWrappedFileOpen(const char *path, const char *sharedGroupID, char *actualFileName, size_t nameCapacity,
                            int *error);

/**
 * Reads up to nbyte bytes of the original file at the descriptor's offset and advances it.
 * The corresponding POSIX function is `read`.
 *
 * Returns the number of bytes read (0 at the end), or -1 with errno:
 *   EBADF   not an open wrapped file descriptor;
 *   EFAULT  buf is NULL and nbyte > 0 (ACE_INVALID_ARG);
 *   EINVAL  nbyte > SSIZE_MAX (ACE_INVALID_ARG);
 *   EIO     a chunk failed authentication (ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR) or the encryption
 *           layer failed (ACE_INTERNAL_ERROR); no unauthenticated byte is returned;
 *   ENOMEM  (ACE_LOW_MEMORY_ERROR).
 *   EACCES  secure services are locked (ACE_NO_KEYS_ERROR); reads work again after unlock, as for
 *           every secure descriptor.
 */
ssize_t ACSecureWrappedFileRead(int fd, void *buf, size_t nbyte);

/**
 * Reads up to nbyte bytes at offset without moving the descriptor's offset.
 * The corresponding POSIX function is `pread`.
 *
 * Returns as ACSecureWrappedFileRead (0 at or past the end), plus errno EINVAL for a negative
 * offset (ACE_NEGATIVE_FILE_LEN_ERROR).
 */
ssize_t ACSecureWrappedFilePread(int fd, void *buf, size_t nbyte, off_t offset);

/**
 * Moves the descriptor's offset within the original file. The corresponding POSIX function is
 * `lseek`. SEEK_SET, SEEK_CUR and SEEK_END are supported; seeking past the end is allowed (reads
 * there return 0).
 *
 * Returns the new offset, or -1 with errno:
 *   EBADF     not an open wrapped file descriptor;
 *   EINVAL    another whence (ACE_INVALID_ARG), a negative result (ACE_NEGATIVE_FILE_LEN_ERROR),
 *             or a result past 2^44 (ACE_FILE_TOO_BIG_ERROR);
 *   EOVERFLOW the offset computation overflows off_t (ACE_FILE_TOO_BIG_ERROR);
 *   EIO       SEEK_END could not authenticate the length (ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR).
 */
off_t ACSecureWrappedFileLseek(int fd, off_t offset, int whence);

/**
 * Gets the status of the wrapped file behind fd; st_size is the length of the original file.
 * The corresponding POSIX function is `fstat`.
 *
 * Returns 0, or -1 with errno EBADF (not an open wrapped file descriptor), EFAULT (buf is NULL,
 * ACE_INVALID_ARG) or EIO (ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR, ACE_INTERNAL_ERROR).
 */
int ACSecureWrappedFileFstat(int fd, struct stat *buf);

/**
 * Closes a wrapped file descriptor. The corresponding POSIX function is `close`.
 *
 * Returns 0, or -1 with errno EBADF (not an open wrapped file descriptor, or already closed).
 * Sets no ACE_* value (the descriptor no longer exists).
 */
int ACSecureWrappedFileClose(int fd);

/**
 * The ACE_* detail of the last call on a wrapped file descriptor: ACE_NO_ERROR after a successful
 * call, the failure's detail after a failed one. See "Thread safety" above.
 *
 * Returns the ACError value, or -1 with errno EBADF when fd is not an open wrapped file descriptor.
 */
int ACSecureWrappedFileLastError(int fd);

#ifdef __cplusplus
}
#endif

#endif /* ACSECURESHARING_H */
