#if canImport(Glibc)
import Glibc
#endif

// The project's locks, for every module: a pthread mutex, alone (`PThreadMutex`, for a lock held
// across a whole operation) or guarding a value (`LockedValue`), and a pthread reader-writer lock
// (`PThreadRWLock`, a secure file's lock: preads share it).
//
// Why pthread: ThreadSanitizer intercepts `pthread_mutex_lock`/`unlock`, so a TSan run checks every
// critical section (scripts/test.d/45-tsan.sh, with no suppressions). It does not see
// `Synchronization.Mutex` on Linux (the stdlib's futex-based lock is not instrumented) and reports
// races between critical sections of one Mutex; `NSLock` would bring Foundation into modules that
// must not load it (the C API's library). It lives here, in the lowest module, so all can use it.

/// A pthread mutex. Not recursive; `lock()`/`unlock()` for a lock held across a whole operation,
/// `withLock` for a scope.
package final class PThreadMutex: @unchecked Sendable {
    @usableFromInline let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)

    package init() { pthread_mutex_init(mutex, nil) }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    @inlinable @inline(__always) package func lock() { pthread_mutex_lock(mutex) }

    @inlinable @inline(__always) package func unlock() { pthread_mutex_unlock(mutex) }

    @inlinable @inline(__always) package func withLock<R, E: Error>(_ body: () throws(E) -> R) throws(E) -> R {
        lock()
        defer { unlock() }
        return try body()
    }
}

/// A value reached only under its `PThreadMutex`. The `sending` annotations are those of
/// `Synchronization.Mutex`, so the compiler checks what goes in and out exactly as it did there.
///
/// `withLock` is inlinable, so callers in other modules get it specialised for their value (a
/// generic call per lookup was most of the C API's descriptor-table cost), and the value is
/// exempt from the runtime's dynamic exclusivity checks: the mutex already makes every access
/// exclusive.
package final class LockedValue<Value>: @unchecked Sendable {
    @usableFromInline let mutex = PThreadMutex()
    @usableFromInline @exclusivity(unchecked) nonisolated(unsafe) var value: Value

    package init(_ value: sending Value) { self.value = value }

    @inlinable @inline(__always)
    package func withLock<R, E: Error>(_ body: (inout sending Value) throws(E) -> sending R) throws(E) -> sending R {
        mutex.lock()
        defer { mutex.unlock() }
        return try body(&value)
    }
}

/// A pthread reader-writer lock that prefers writers (a stream of readers cannot starve a writer):
/// `lock()`/`unlock()`/`withLock` take it exclusively, as `PThreadMutex` does, so code written for a
/// mutex keeps its meaning; `lockShared()`/`unlockShared()` let readers in together. Not recursive.
package final class PThreadRWLock: @unchecked Sendable {
    /// The lock itself, for a caller in another module that must not pay a call (and the lock
    /// object's retain around it) per use: `SecureFile`'s every operation.
    package let rwlock = UnsafeMutablePointer<pthread_rwlock_t>.allocate(capacity: 1)

    package init() {
        var attributes = pthread_rwlockattr_t()
        pthread_rwlockattr_init(&attributes)
        pthread_rwlockattr_setkind_np(&attributes, Int32(PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP))
        pthread_rwlock_init(rwlock, &attributes)
        pthread_rwlockattr_destroy(&attributes)
    }

    deinit {
        pthread_rwlock_destroy(rwlock)
        rwlock.deallocate()
    }

    @inline(__always) package func lock() { pthread_rwlock_wrlock(rwlock) }

    @inline(__always) package func unlock() { pthread_rwlock_unlock(rwlock) }

    @inline(__always) package func lockShared() { pthread_rwlock_rdlock(rwlock) }

    @inline(__always) package func unlockShared() { pthread_rwlock_unlock(rwlock) }

    @inline(__always) package func withLock<R, E: Error>(_ body: () throws(E) -> R) throws(E) -> R {
        lock()
        defer { unlock() }
        return try body()
    }
}
