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
        get { installed.value ?? taskDriver }
        set { installed.value = newValue }
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

    private static let installed = ThreadLocalObject<SystemCallDriver>()
}

/// One object per thread, retained while it is installed and released when it is replaced or the
/// thread ends (a pthread key): the hooks a test installs on the thread that runs it.
struct ThreadLocalObject<Object: AnyObject>: @unchecked Sendable {
    private let key: pthread_key_t

    init() {
        var key = pthread_key_t()
        let created = pthread_key_create(&key) { if let p = $0 { Unmanaged<AnyObject>.fromOpaque(p).release() } }
        precondition(created == 0, "pthread_key_create: \(created)")
        self.key = key
    }

    var value: Object? {
        get { pthread_getspecific(key).map { Unmanaged<Object>.fromOpaque($0).takeUnretainedValue() } }
        nonmutating set {
            if let old = pthread_getspecific(key) { Unmanaged<Object>.fromOpaque(old).release() }
            pthread_setspecific(key, newValue.map { Unmanaged.passRetained($0).toOpaque() })
        }
    }
}

/// A test's record of the file-changing calls of the thread that installs it (`current`, `with`):
/// every completed `pwrite`/`write` attempt with its bytes, `ftruncate`, `fsync`, `fdatasync`, an
/// `open` that can create or empty a file, and the name calls (`rename`, `link`, `unlink`). A crash-state
/// enumerator replays them (Tests/ACSecureFileCoreTests/CrashStateEnumeratorTests.swift). Calls
/// that failed are not recorded: they changed nothing.
public final class SystemCallRecorder: @unchecked Sendable {
    /// The device and inode of a descriptor's file when the call completed (nil: `fstat` failed).
    public struct FileIdentity: Hashable, Sendable {
        public var device: UInt64
        public var inode: UInt64
        public init(device: UInt64, inode: UInt64) { self.device = device; self.inode = inode }
    }

    public enum Event: Sendable {
        /// A transfer that reached the file: `offset` is the file offset (for `write`, where the
        /// descriptor's offset was before it).
        case write(file: FileIdentity?, offset: Int64, bytes: [UInt8])
        case truncate(file: FileIdentity?, length: Int64)
        /// `fsync` (`full`) or `fdatasync`.
        case sync(file: FileIdentity?, full: Bool)
        /// An `open` with `O_CREAT` or `O_TRUNC`, or of an unnamed file.
        case open(path: BytePath, flags: Int32, file: FileIdentity?)
        case rename(from: BytePath, to: BytePath)
        case link(from: BytePath, to: BytePath)
        case unlink(path: BytePath)
    }

    public let record: (Event) -> Void
    public init(_ record: @escaping (Event) -> Void) { self.record = record }

    /// The calling thread's recorder (nil: none).
    public static var current: SystemCallRecorder? {
        get { installed.value }
        set { installed.value = newValue }
    }

    /// Runs `body` with `recorder` installed on this thread, then restores the previous one.
    public static func with<R, E: Error>(_ recorder: SystemCallRecorder, _ body: () throws(E) -> R) throws(E) -> R {
        let previous = current
        current = recorder
        defer { current = previous }
        return try body()
    }

    private static let installed = ThreadLocalObject<SystemCallRecorder>()
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
extension Sys {
    /// The file behind `fd` for a recorder: the backend's or the kernel's `fstat`, outside the
    /// driver (a recorded call must not count as one of the workload's attempts).
    static func identity(_ fd: Int32) -> SystemCallRecorder.FileIdentity? {
        if let b = installedBackend {
            guard case .success(let st) = b.fstat(fd) else { return nil }
            return .init(device: UInt64(st.st_dev), inode: UInt64(st.st_ino))
        }
        var st = Glibc.stat()
        guard Glibc.fstat(fd, &st) == 0 else { return nil }
        return .init(device: UInt64(st.st_dev), inode: UInt64(st.st_ino))
    }

    /// A completed transfer for the recorder: `offset` nil for `write`, whose offset is the
    /// descriptor's (read back after the call).
    @inline(__always)
    static func recordedWrite(_ result: Result<Int, Errno>, _ fd: Int32, _ buf: UnsafeRawPointer, _ offset: Int64?) -> Result<Int, Errno> {
        recorded(result) { n in
            let at = offset ?? (installedBackend == nil ? Int64(lseek(fd, 0, SEEK_CUR)) - Int64(n) : -1)
            return .write(file: identity(fd), offset: at, bytes: Array(UnsafeRawBufferPointer(start: buf, count: n)))
        }
    }

    /// Hands a completed call to the thread's recorder, if any; returns `result` unchanged.
    @inline(__always)
    static func recorded<T>(_ result: Result<T, Errno>, _ event: (T) -> SystemCallRecorder.Event?) -> Result<T, Errno> {
        if let recorder = SystemCallRecorder.current, case .success(let value) = result, let e = event(value) {
            recorder.record(e)
        }
        return result
    }
}
#endif
