#if canImport(Glibc)
import Glibc
#endif
import CACSecureLinux

// The project's locks, for every module: a pthread mutex, alone (`PThreadMutex`, for a lock held
// across a whole operation) or guarding a value (`LockedValue`), and a reader-writer lock (`RWLock`,
// a secure file's lock: preads share it; a pthread rwlock under ThreadSanitizer).
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

/// A reader-writer lock that prefers writers (a stream of readers cannot starve a writer), a secure
/// file's lock: `lock()`/`unlock()`/`withLock` take it exclusively, as `PThreadMutex` does, so code
/// written for a mutex keeps its meaning; `lockShared()`/`unlockShared()` let readers in together.
/// Not recursive. One futex word (CACSecureLinux's RWLock.c): glibc's writer-preferring rwlock
/// cost a fifth of a 100-byte write-back append, this one a compare-and-swap and an exchange.
/// Built with ThreadSanitizer it is a pthread rwlock, so TSan checks its critical sections too.
package final class RWLock: @unchecked Sendable {
    /// The lock itself, for a caller in another module that must not pay a call (and the lock
    /// object's retain around it) per use: `SecureFile`'s every operation.
    package let raw: OpaquePointer

    package init() {
        guard let raw = CACSecureLinux_rwlockCreate() else { fatalError("RWLock: out of memory") }
        self.raw = raw
    }

    deinit { CACSecureLinux_rwlockDestroy(raw) }

    @inline(__always) package func lock() { CACSecureLinux_rwlockLock(raw) }

    @inline(__always) package func unlock() { CACSecureLinux_rwlockUnlock(raw) }

    @inline(__always) package func lockShared() { CACSecureLinux_rwlockLockShared(raw) }

    @inline(__always) package func unlockShared() { CACSecureLinux_rwlockUnlockShared(raw) }

    @inline(__always) package func withLock<R, E: Error>(_ body: () throws(E) -> R) throws(E) -> R {
        lock()
        defer { unlock() }
        return try body()
    }
}
