#if canImport(Glibc)
import Glibc
#endif

/// The kinds of call `Sys` makes: what a test's `SystemCallDriver` is asked about.
public enum SystemCall: String, Sendable, CaseIterable {
    case open, read, write, pread, pwrite, fsync, fdatasync, ftruncate, fstat, stat, rename, link, unlink,
         chmod, mkdir, rmdir, readdir, fcntl, close
}

/// What `Sys` can run on instead of the kernel (in builds with `ACSECURE_SYSCALL_MOCKING`): the
/// calls of the engine's descriptors and files. Calls outside it (directories, links, modes) fail with `ENOSYS` while a backend is installed.
@_spi(Testing) public protocol SystemCallBackend: AnyObject, Sendable {
    func open(_ path: BytePath, _ flags: Int32, _ mode: mode_t) -> Result<Int32, Errno>
    func close(_ fd: Int32) -> Result<Void, Errno>
    func pread(_ fd: Int32, _ buf: UnsafeMutableRawBufferPointer, _ offset: Int64) -> Result<Int, Errno>
    func pwrite(_ fd: Int32, _ buf: UnsafeRawBufferPointer, _ offset: Int64) -> Result<Int, Errno>
    func read(_ fd: Int32, _ buf: UnsafeMutableRawBufferPointer) -> Result<Int, Errno>
    func write(_ fd: Int32, _ buf: UnsafeRawBufferPointer) -> Result<Int, Errno>
    func fstat(_ fd: Int32) -> Result<stat, Errno>
    /// `stat` and `lstat` of a path (a backend without links has no difference).
    func pathStat(_ path: BytePath) -> Result<stat, Errno>
    func ftruncate(_ fd: Int32, _ length: Int64) -> Result<Void, Errno>
    /// `fsync` and `fdatasync`.
    func sync(_ fd: Int32) -> Result<Void, Errno>
    func rename(_ old: BytePath, _ new: BytePath) -> Result<Void, Errno>
    func unlink(_ path: BytePath) -> Result<Void, Errno>
    func dup(_ fd: Int32) -> Result<Int32, Errno>
    func clearNonblocking(_ fd: Int32) -> Result<Void, Errno>
    func clearCloseOnExec(_ fd: Int32) -> Result<Void, Errno>
    func availableBytes(_ fd: Int32) -> Result<Int64, Errno>
}

extension Sys {
    package typealias Call = SystemCall
}
