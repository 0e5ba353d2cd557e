#if canImport(Glibc)
import Glibc
#endif

/// Every system call the engine makes goes through here: one place that retries `EINTR`, finishes
/// short reads and writes, and (for tests) can be made to fail.
public enum Sys {
    /// A system call that can be made to fail by a test.
    public enum Call: String, Sendable, CaseIterable { case open, pread, pwrite, fsync, fdatasync, ftruncate, fstat, rename, close }

    /// What a fault injector does to one call.
    public enum Fault: Sendable { case fail(Int32), short(Int) }

    /// Set by tests (`SecureFileTesting.faultInjector`) to inject errors and short transfers.
    nonisolated(unsafe) public static var faultInjector: (@Sendable (Call) -> Fault?)?

    /// Like `faultInjector`, told the transfer's byte count and file offset (0 for other calls):
    /// crash tests use it to tear a write at a given sector.
    nonisolated(unsafe) public static var transferFaultInjector: (@Sendable (Call, _ count: Int, _ offset: Int64) -> Fault?)?

    /// Set by `SecureFileTesting.useMemoryFileSystem(_:)`: every call below goes to this in-memory
    /// file system instead of the kernel (fault injection still applies first).
    nonisolated(unsafe) static var memory: MemoryFileSystem?

    @inline(__always) static func fault(_ call: Call, _ count: Int = 0, _ offset: Int64 = 0) -> Fault? {
        if let injector = transferFaultInjector, let f = injector(call, count, offset) { return f }
        guard let injector = faultInjector else { return nil }
        return injector(call)
    }

    package static func open(_ path: String, _ flags: Int32, _ mode: mode_t) -> Result<Int32, Errno> {
        if case .fail(let e)? = fault(.open) { return .failure(Errno(e)) }
        if let memory { return memory.open(path, flags, mode) }
        while true {
            let fd = Glibc.open(path, flags, mode)
            if fd >= 0 { return .success(fd) }
            if errno != EINTR { return .failure(Errno(errno)) }
        }
    }

    /// Reads until `count` bytes or end of file. Returns the bytes read.
    package static func preadFull(_ fd: Int32, _ buf: UnsafeMutableRawPointer, _ count: Int, _ offset: Int64) -> Result<Int, Errno> {
        var done = 0
        while done < count {
            var want = count - done
            switch fault(.pread, want, offset + Int64(done)) {
            case .fail(let e)?: return .failure(Errno(e))
            case .short(let n)?: want = min(want, max(n, 1))
            case nil: break
            }
            if let memory {
                switch memory.pread(fd, UnsafeMutableRawBufferPointer(start: buf + done, count: want), offset + Int64(done)) {
                case .success(let n) where n > 0: done += n; continue
                case .success: return .success(done)
                case .failure(let e): return .failure(e)
                }
            }
            let n = Glibc.pread(fd, buf + done, want, off_t(offset) + off_t(done))
            if n > 0 { done += n; continue }
            if n == 0 { break }
            if errno == EINTR { continue }
            return .failure(Errno(errno))
        }
        return .success(done)
    }

    /// Writes all `count` bytes (retrying short writes and `EINTR`).
    static func pwriteFull(_ fd: Int32, _ buf: UnsafeRawPointer, _ count: Int, _ offset: Int64) -> Result<Void, Errno> {
        var done = 0
        while done < count {
            var want = count - done
            switch fault(.pwrite, want, offset + Int64(done)) {
            case .fail(let e)?: return .failure(Errno(e))
            case .short(let n)?: want = min(want, max(n, 1))
            case nil: break
            }
            if let memory {
                switch memory.pwrite(fd, UnsafeRawBufferPointer(start: buf + done, count: want), offset + Int64(done)) {
                case .success(let n): done += n; continue
                case .failure(let e): return .failure(e)
                }
            }
            let n = Glibc.pwrite(fd, buf + done, want, off_t(offset) + off_t(done))
            if n >= 0 { done += n; continue }
            if errno == EINTR { continue }
            return .failure(Errno(errno))
        }
        return .success(())
    }

    package static func fstat(_ fd: Int32) -> Result<stat, Errno> {
        if case .fail(let e)? = fault(.fstat) { return .failure(Errno(e)) }
        if let memory { return memory.fstat(fd) }
        var st = stat()
        return Glibc.fstat(fd, &st) == 0 ? .success(st) : .failure(Errno(errno))
    }

    static func ftruncate(_ fd: Int32, _ length: Int64) -> Result<Void, Errno> {
        if case .fail(let e)? = fault(.ftruncate) { return .failure(Errno(e)) }
        if let memory { return memory.ftruncate(fd, length) }
        while true {
            if Glibc.ftruncate(fd, off_t(length)) == 0 { return .success(()) }
            if errno != EINTR { return .failure(Errno(errno)) }
        }
    }

    static func fsync(_ fd: Int32) -> Result<Void, Errno> {
        if case .fail(let e)? = fault(.fsync) { return .failure(Errno(e)) }
        if let memory { return memory.sync(fd) }
        while true {
            if Glibc.fsync(fd) == 0 { return .success(()) }
            if errno != EINTR { return .failure(Errno(errno)) }
        }
    }

    static func fdatasync(_ fd: Int32) -> Result<Void, Errno> {
        if case .fail(let e)? = fault(.fdatasync) { return .failure(Errno(e)) }
        if let memory { return memory.sync(fd) }
        while true {
            if Glibc.fdatasync(fd) == 0 { return .success(()) }
            if errno != EINTR { return .failure(Errno(errno)) }
        }
    }

    static func clearNonblocking(_ fd: Int32) -> Result<Void, Errno> {
        if let memory { return memory.clearNonblocking(fd) }
        let flags = fcntl(fd, F_GETFL)
        guard flags >= 0, fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) == 0 else { return .failure(Errno(errno)) }
        return .success(())
    }

    static func clearCloseOnExec(_ fd: Int32) -> Result<Void, Errno> {
        if let memory { return memory.clearCloseOnExec(fd) }
        return fcntl(fd, F_SETFD, 0) == 0 ? .success(()) : .failure(Errno(errno))
    }

    static func rename(_ old: String, _ new: String) -> Result<Void, Errno> {
        if case .fail(let e)? = fault(.rename) { return .failure(Errno(e)) }
        if let memory { return memory.rename(old, new) }
        return Glibc.rename(old, new) == 0 ? .success(()) : .failure(Errno(errno))
    }

    /// Closes once; `EINTR` from close is not retried (on Linux the descriptor is already gone).
    package static func close(_ fd: Int32) -> Result<Void, Errno> {
        if let memory {
            let closed = memory.close(fd)
            if case .fail(let e)? = fault(.close) { return .failure(Errno(e)) }
            return closed
        }
        if case .fail(let e)? = fault(.close) { _ = Glibc.close(fd); return .failure(Errno(e)) }
        return Glibc.close(fd) == 0 || errno == EINTR ? .success(()) : .failure(Errno(errno))
    }

    /// Takes (or with F_UNLCK releases) an open-file-description lock on the whole file, waiting.
    /// OFD locks belong to the descriptor, so threads and other descriptors of this process are
    /// excluded too (the engine's own mutex already serialises them).
    static func lockFile(_ fd: Int32, _ type: Int16) -> Result<Void, Errno> {
        if let memory { return memory.sync(fd) }  // one process: only the descriptor is checked
        var fl = flock()
        fl.l_type = type
        fl.l_whence = Int16(SEEK_SET)
        fl.l_start = 0
        fl.l_len = 0
        let F_OFD_SETLKW: Int32 = 38  // <fcntl.h>, _GNU_SOURCE only
        while true {
            if fcntl(fd, F_OFD_SETLKW, &fl) == 0 { return .success(()) }
            if errno != EINTR { return .failure(Errno(errno)) }
        }
    }

    /// Free bytes for an unprivileged writer on the file system of `fd`.
    static func availableBytes(_ fd: Int32) -> Result<Int64, Errno> {
        if let memory { return memory.sync(fd).map { MemoryFileSystem.maxFileSize } }
        var s = statvfs()
        guard fstatvfs(fd, &s) == 0 else { return .failure(Errno(errno)) }
        return .success(Int64(s.f_bavail) * Int64(s.f_frsize))
    }

    static func dup(_ fd: Int32) -> Result<Int32, Errno> {
        if let memory { return memory.dup(fd) }
        let n = fcntl(fd, F_DUPFD_CLOEXEC, 0)
        return n >= 0 ? .success(n) : .failure(Errno(errno))
    }
}

/// A POSIX error number.
@_spi(Testing) public struct Errno: Error, Equatable {
    public var rawValue: Int32
    public init(_ v: Int32) { rawValue = v }
}

/// Test hooks: fault injection into the engine's system calls.
public enum SecureFileTesting {
    public typealias Call = Sys.Call
    public typealias Fault = Sys.Fault

    /// Every engine system call asks this first; returning non-nil injects that fault.
    /// Set it only while no other thread uses the engine.
    public static var faultInjector: (@Sendable (Call) -> Fault?)? {
        get { Sys.faultInjector }
        set { Sys.faultInjector = newValue }
    }

    /// How many trailer positions the end-of-file recovery scans of this process have checked
    /// with GCM (docs/FORMAT.md "Recovery"): a damaged end must not cost one check per byte.
    public static var recoveryTrailerChecks: Int { SharedFile.recoveryTrailerChecks.withLock { $0 } }

    /// As `faultInjector`, with each transfer's byte count and offset (0 for other calls).
    public static var transferFaultInjector: (@Sendable (Call, _ count: Int, _ offset: Int64) -> Fault?)? {
        get { Sys.transferFaultInjector }
        set { Sys.transferFaultInjector = newValue }
    }
}
