/*
 * CACSecureLinux — Linux calls Swift cannot make directly (C varargs, _GNU_SOURCE-only declarations),
 * for ACCrypto, ACSecureServices and ACSystemCalls.
 * Thin wrappers: each returns what the system call returns (-1 with errno on failure).
 */
#ifndef CACSECURELINUX_H
#define CACSECURELINUX_H

/** prctl(PR_SET_DUMPABLE, dumpable, 0, 0, 0). */
int CACSecureLinux_setDumpable(int dumpable);

/** prctl(PR_GET_DUMPABLE, 0, 0, 0, 0): 0 or 1 (2: suid_dumpable), or -1 with errno. */
int CACSecureLinux_getDumpable(void);

/** statx(fd, "", AT_EMPTY_PATH, STATX_SIZE): the file's size into *size; 0, or -1 with errno. */
int CACSecureLinux_fileSize(int fd, long long *size);

/** CPU_COUNT of sched_getaffinity(0): the processors this process may run on (taskset, a cpuset),
 *  or sysconf(_SC_NPROCESSORS_ONLN) if the mask cannot be read. */
int CACSecureLinux_processorsAvailable(void);

/** mlock2(addr, length, MLOCK_ONFAULT): pages are locked as they are touched. */
int CACSecureLinux_lockOnFault(void *addr, unsigned long length);

/* A reader-writer lock on one futex word, for a secure file's lock (every file call takes it): the
 * uncontended writer pays one compare-and-swap to lock and one exchange to unlock, where glibc's
 * writer-preferring rwlock cost about a fifth of a 100-byte write-back append. It prefers writers
 * (a waiting writer keeps new readers out), is not recursive, and is private to the process.
 * Built with ThreadSanitizer, it is a pthread rwlock instead, so TSan sees every critical section.
 * The lock lives in memory of its own (the futex word on a 64-byte line of its own). */
typedef struct CACSecureLinux_rwlock CACSecureLinux_rwlock;

/** A new unlocked lock, or NULL when memory is exhausted. */
CACSecureLinux_rwlock *CACSecureLinux_rwlockCreate(void);
void CACSecureLinux_rwlockDestroy(CACSecureLinux_rwlock *lock);
void CACSecureLinux_rwlockLock(CACSecureLinux_rwlock *lock);
void CACSecureLinux_rwlockUnlock(CACSecureLinux_rwlock *lock);
void CACSecureLinux_rwlockLockShared(CACSecureLinux_rwlock *lock);
void CACSecureLinux_rwlockUnlockShared(CACSecureLinux_rwlock *lock);

#endif /* CACSECURELINUX_H */
