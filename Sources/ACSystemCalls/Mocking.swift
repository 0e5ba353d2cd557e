// Fault injection and the in-memory backend: compiled only with ACSECURE_SYSCALL_MOCKING, which
// Package.swift sets for debug builds and scripts/test.d/40-fuzz-smoke.sh passes to the fuzzers'
// release build (-Xswiftc -DACSECURE_SYSCALL_MOCKING). A release build of the library has none of
// it: no hook, no per-call check (compare swift-system's Internals/Mocking.swift).
#if ACSECURE_SYSCALL_MOCKING
#if canImport(Glibc)
import Glibc
#endif

/// What a driver does to one attempt of a call.
public enum SystemCallFault: Sendable, Equatable {
    /// The attempt fails with this errno. `EINTR` is retried by `Sys` like a real interruption
    /// (the driver is asked again), except on `close`, where Linux has already closed the descriptor.
    case fail(Int32)
    /// A read or write transfers at most this many bytes (at least 1); `Sys` finishes the rest.
    case short(Int)
}

/// A test's control over the system calls of the thread that installs it (`current`, `with`) or of
/// a task and its child tasks (`with(_:_:) async`, for async code that may resume on any thread):
/// asked before every attempt of every call `Sys` makes there, in every module. Other threads are
/// untouched, so tests running in parallel do not see each other's faults.
public final class SystemCallDriver: @unchecked Sendable {
    public typealias Decide = (SystemCall, _ count: Int, _ offset: Int64) -> SystemCallFault?

    /// Given the call, the byte count and file offset of a transfer (0 for other calls; the
    /// offset is 0 for `read`/`write`).
    public let decide: Decide
    /// Attempts per kind of call so far, retries included.
    public private(set) var attempts: [SystemCall: Int] = [:]

    public init(_ decide: @escaping Decide) { self.decide = decide }

    func fault(_ call: SystemCall, _ count: Int, _ offset: Int64) -> SystemCallFault? {
        attempts[call, default: 0] += 1
        return decide(call, count, offset)
    }

    /// The calling thread's driver, else the current task's (nil: none).
    public static var current: SystemCallDriver? {
        get { pthread_getspecific(key).map { Unmanaged<SystemCallDriver>.fromOpaque($0).takeUnretainedValue() } ?? taskDriver }
        set {
            if let old = pthread_getspecific(key) { Unmanaged<SystemCallDriver>.fromOpaque(old).release() }
            pthread_setspecific(key, newValue.map { Unmanaged.passRetained($0).toOpaque() })
        }
    }

    /// Runs `body` with `driver` installed on this thread, then restores the previous one.
    public static func with<R, E: Error>(_ driver: SystemCallDriver, _ body: () throws(E) -> R) throws(E) -> R {
        let previous = current
        current = driver
        defer { current = previous }
        return try body()
    }

    /// Runs `body` with `driver` installed for the current task and its child tasks, on whatever
    /// threads they run.
    public static func with<R>(_ driver: SystemCallDriver, _ body: () async throws -> R) async rethrows -> R {
        try await $taskDriver.withValue(driver) { try await body() }
    }

    @TaskLocal private static var taskDriver: SystemCallDriver?

    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        let created = pthread_key_create(&key) { if let p = $0 { Unmanaged<SystemCallDriver>.fromOpaque(p).release() } }
        precondition(created == 0, "pthread_key_create: \(created)")
        return key
    }()
}

/// The process-wide in-memory backend (fuzzers, tests). Set it only while no other thread makes
/// file-system calls and no descriptor of the other side is open.
@_spi(Testing) public enum SystemCallBackends {
    public static var installed: (any SystemCallBackend)? {
        get { Sys.installedBackend }
        set { Sys.installedBackend = newValue }
    }
}

extension Sys {
    package typealias Fault = SystemCallFault

    nonisolated(unsafe) static var installedBackend: (any SystemCallBackend)?

    @inline(__always)
    static func injectedFault(_ call: SystemCall, _ count: Int = 0, _ offset: Int64 = 0) -> SystemCallFault? {
        SystemCallDriver.current?.fault(call, count, offset)
    }

    /// A transfer's injected fault: the error to return, or how many of `count` bytes to move (all
    /// of them, or fewer for an injected short transfer — at least one, so the loop progresses).
    static func injectedTransfer(_ call: SystemCall, _ count: Int, _ offset: Int64 = 0) -> Result<Int, Errno> {
        switch injectedFault(call, count, offset) {
        case .fail(let e)?: return .failure(Errno(e))
        case .short(let n)?: return .success(min(count, max(n, 1)))
        case nil: return .success(count)
        }
    }
}
#endif
