/* CACSecureLinux_rwlock (CACSecureLinux.h): a writer-preferring reader-writer lock on one futex word.
 *
 * The word: bits 0-28 count the readers inside; WRITER is set while a writer is inside; WAITING_WRITER
 * while a writer waits (new readers then wait too); SLEEPERS while any thread sleeps on the futex.
 * Every change is an atomic read-modify-write of the word, so each thread that goes to sleep does so
 * on a value with SLEEPERS set, and whoever then lets threads in (a writer leaving, the last reader
 * leaving) sees SLEEPERS, clears it and wakes them all; they retry. Contention is rare (a file's
 * threads mostly take turns), so waking all is simpler than queueing and costs nothing uncontended. */
#define _GNU_SOURCE
#include "CACSecureLinux.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <pthread.h>
#include <unistd.h>
#include <linux/futex.h>
#include <sys/syscall.h>

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define ACS_RWLOCK_PTHREAD 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define ACS_RWLOCK_PTHREAD 1
#endif

#ifdef ACS_RWLOCK_PTHREAD

struct CACSecureLinux_rwlock { pthread_rwlock_t rwlock; };

CACSecureLinux_rwlock *CACSecureLinux_rwlockCreate(void) {
    CACSecureLinux_rwlock *lock = malloc(sizeof *lock);
    if (lock == NULL) return NULL;
    pthread_rwlockattr_t attributes;
    pthread_rwlockattr_init(&attributes);
    pthread_rwlockattr_setkind_np(&attributes, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&lock->rwlock, &attributes);
    pthread_rwlockattr_destroy(&attributes);
    return lock;
}
void CACSecureLinux_rwlockDestroy(CACSecureLinux_rwlock *lock) {
    pthread_rwlock_destroy(&lock->rwlock);
    free(lock);
}
void CACSecureLinux_rwlockLock(CACSecureLinux_rwlock *lock) { pthread_rwlock_wrlock(&lock->rwlock); }
void CACSecureLinux_rwlockUnlock(CACSecureLinux_rwlock *lock) { pthread_rwlock_unlock(&lock->rwlock); }
void CACSecureLinux_rwlockLockShared(CACSecureLinux_rwlock *lock) { pthread_rwlock_rdlock(&lock->rwlock); }
void CACSecureLinux_rwlockUnlockShared(CACSecureLinux_rwlock *lock) { pthread_rwlock_unlock(&lock->rwlock); }

#else

struct CACSecureLinux_rwlock { uint32_t word; };

enum {
    READERS = 0x1fffffffu,
    SLEEPERS = 0x20000000u,
    WAITING_WRITER = 0x40000000u,
    WRITER = 0x80000000u,
    /* Compare-and-swap rounds a thread spins before it sleeps: a critical section of the engine is
     * usually shorter than going to sleep and being woken. */
    SPINS = 64,
};

static inline uint32_t load(CACSecureLinux_rwlock *lock) { return __atomic_load_n(&lock->word, __ATOMIC_RELAXED); }

static inline int swap(CACSecureLinux_rwlock *lock, uint32_t expected, uint32_t desired) {
    return __atomic_compare_exchange_n(&lock->word, &expected, desired, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED);
}

static inline void cpuRelax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Sleeps while the word is `seen` | SLEEPERS (sets SLEEPERS first); returns at once if it changed. */
static void sleepOn(CACSecureLinux_rwlock *lock, uint32_t seen) {
    uint32_t flagged = seen | SLEEPERS;
    if (seen != flagged && !swap(lock, seen, flagged)) return;
    syscall(SYS_futex, &lock->word, FUTEX_WAIT_PRIVATE, flagged, NULL, NULL, 0);
}

static void wakeAll(CACSecureLinux_rwlock *lock) {
    syscall(SYS_futex, &lock->word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

CACSecureLinux_rwlock *CACSecureLinux_rwlockCreate(void) {
    CACSecureLinux_rwlock *lock = aligned_alloc(64, 64);
    if (lock != NULL) lock->word = 0;
    return lock;
}

void CACSecureLinux_rwlockDestroy(CACSecureLinux_rwlock *lock) { free(lock); }

void CACSecureLinux_rwlockLock(CACSecureLinux_rwlock *lock) {
    if (swap(lock, 0, WRITER)) return;
    for (int spins = 0;; spins++) {
        uint32_t seen = load(lock);
        if ((seen & (WRITER | READERS)) == 0) {
            /* Free: enter, keeping SLEEPERS (they are woken when this writer leaves). A waiting
             * writer's flag goes with it; writers still waiting set it again. */
            if (swap(lock, seen, WRITER | (seen & SLEEPERS))) return;
        } else if (spins < SPINS) {
            cpuRelax();
        } else if ((seen & WAITING_WRITER) == 0) {
            swap(lock, seen, seen | WAITING_WRITER);
        } else {
            sleepOn(lock, seen);
        }
    }
}

void CACSecureLinux_rwlockUnlock(CACSecureLinux_rwlock *lock) {
    /* No reader is inside while a writer is: the word goes back to 0 and every sleeper retries. */
    if (__atomic_exchange_n(&lock->word, 0, __ATOMIC_RELEASE) & SLEEPERS) wakeAll(lock);
}

void CACSecureLinux_rwlockLockShared(CACSecureLinux_rwlock *lock) {
    for (int spins = 0;; spins++) {
        uint32_t seen = load(lock);
        if ((seen & (WRITER | WAITING_WRITER)) == 0) {
            if (swap(lock, seen, seen + 1)) return;
        } else if (spins < SPINS) {
            cpuRelax();
        } else {
            sleepOn(lock, seen);
        }
    }
}

void CACSecureLinux_rwlockUnlockShared(CACSecureLinux_rwlock *lock) {
    uint32_t seen = __atomic_sub_fetch(&lock->word, 1, __ATOMIC_RELEASE);
    /* The last reader out wakes the sleepers, unless a writer got in first (it wakes them). */
    while ((seen & (READERS | WRITER)) == 0 && (seen & SLEEPERS) != 0) {
        if (__atomic_compare_exchange_n(&lock->word, &seen, seen & ~SLEEPERS, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
            wakeAll(lock);
            return;
        }
    }
}

#endif
