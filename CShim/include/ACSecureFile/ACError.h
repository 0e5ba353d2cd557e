/*
 * ACError.h — the extra error detail of the AppConnect secure file I/O API.
 *
 * Every ACSecureFile* call reports failure like its POSIX counterpart (a -1 return and errno).
 * When the call was given a valid, open secure descriptor, ACSecureFileLastError(fd) returns one
 * of these values as well: the detail errno cannot express (see ACSecureFile.h for which call
 * sets which value). After a successful call on a valid descriptor it is ACE_NO_ERROR.
 *
 * The values are part of the ABI and never change.
 */
#ifndef ACERROR_H
#define ACERROR_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ACError {
    /** No error occurred (or only errno applies, e.g. EINVAL for a bad whence). */
    ACE_NO_ERROR = 0,
    /** Encryption keys are not available: secure services are locked, retired or never unlocked. */
    ACE_NO_KEYS_ERROR = 1,
    /** The operation would make the file larger than the maximum plaintext size (2^44 bytes). */
    ACE_FILE_TOO_BIG_ERROR = 2,
    /** The operation would result in a negative file size or offset. */
    ACE_NEGATIVE_FILE_LEN_ERROR = 3,
    /** A memory allocation failed while performing the operation. */
    ACE_LOW_MEMORY_ERROR = 4,
    /** Decryption or authentication failed: a wrong key, corrupt data, or a file that was written
     *  with plain (non-secure) I/O. */
    ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR = 5,
    /** One of the arguments had an invalid value. */
    ACE_INVALID_ARG = 6,
    /** The operation is allowed only on regular files. */
    ACE_REGULAR_FILE_ONLY_ERROR = 7,
    /** An error occurred in the encryption layer; the file is possibly no longer accessible. */
    ACE_INTERNAL_ERROR = 8,
    /** A read on a descriptor opened O_WRONLY (errno is EBADF, as POSIX). */
    ACE_READ_ON_WRITEONLY_ERROR = 9,
    /** A write on a descriptor opened O_RDONLY (errno is EBADF, as POSIX). */
    ACE_WRITE_ON_READONLY_ERROR = 10,
    /** A truncate on a descriptor opened O_RDONLY (errno is EINVAL or EBADF, as POSIX). */
    ACE_TRUNC_ON_READONLY_ERROR = 11,
} ACError;

#ifdef __cplusplus
}
#endif

#endif /* ACERROR_H */
