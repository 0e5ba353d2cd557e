#if canImport(Glibc)
import Glibc
#endif
import CACSecureLinux

/// Every file-system call of every module goes through here: one place that retries `EINTR`,
/// finishes short reads and writes and, in builds with `ACSECURE_SYSCALL_MOCKING` (debug builds and
/// the fuzzers'; see Mocking.swift), asks the calling thread's `SystemCallDriver` for a fault on each
/// attempt — inside the retry loop, so an injected `EINTR` is retried like a real one — and can
/// route calls to an in-memory backend. Release builds compile neither: each call is the kernel's.
///
/// Results are `Result<_, Errno>`; callers turn an `Errno` into their own error naming the path.
package enum Sys {
    /// One attempt of a call: the test driver's fault, else the in-memory backend, else the kernel.
    @inline(__always)
    static func attempt<T>(_ call: SystemCall, backend: (any SystemCallBackend) -> Result<T, Errno>,
                           kernel: () -> Result<T, Errno>) -> Result<T, Errno> {
        #if ACSECURE_SYSCALL_MOCKING
        if case .fail(let e)? = injectedFault(call) { return .failure(Errno(e)) }
        if let b = installedBackend { return backend(b) }
        #endif
        return kernel()
    }

    /// `attempt`, repeated while it fails with `EINTR`.
    @inline(__always)
    static func retried<T>(_ call: SystemCall, backend: (any SystemCallBackend) -> Result<T, Errno>,
                           kernel: () -> Result<T, Errno>) -> Result<T, Errno> {
        retryingOnInterrupt { attempt(call, backend: backend, kernel: kernel) }
    }

    /// For calls the in-memory backend has no notion of (directories, links, modes).
    static func unsupported<T>(_ b: any SystemCallBackend) -> Result<T, Errno> { .failure(Errno(ENOSYS)) }

    // MARK: descriptors

    package static func open(_ path: BytePath, _ flags: Int32, _ mode: mode_t = 0) -> Result<Int32, Errno> {
        let opened = retried(.open, backend: { $0.open(path, flags, mode) }, kernel: { withPath(path) { valueOrErrno(Glibc.open($0, flags, mode)) } })
        #if ACSECURE_SYSCALL_MOCKING
        if flags & (O_CREAT | O_TRUNC) != 0 || flags & unnamedFileFlag == unnamedFileFlag {
            return recorded(opened) { .open(path: path, flags: flags, file: identity($0)) }
        }
        #endif
        return opened
    }

    @_disfavoredOverload
    package static func open(_ path: String, _ flags: Int32, _ mode: mode_t = 0) -> Result<Int32, Errno> {
        open(BytePath(path), flags, mode)
    }

    /// `path` as a C string for `body`; `EINVAL` for a path holding NUL (no file has such a name).
    @inline(__always)
    static func withPath<T>(_ path: BytePath, _ body: (UnsafePointer<CChar>) -> Result<T, Errno>) -> Result<T, Errno> {
        path.withPlatformString(body) ?? .failure(Errno(EINVAL))
    }

    /// Closes once; `EINTR` from close is not retried (on Linux the descriptor is already gone) and
    /// counts as success. An injected fault still closes the descriptor.
    package static func close(_ fd: Int32) -> Result<Void, Errno> {
        #if ACSECURE_SYSCALL_MOCKING
        if let b = installedBackend {
            let closed = b.close(fd)
            if case .fail(let e)? = injectedFault(.close), e != EINTR { return .failure(Errno(e)) }
            return closed
        }
        if case .fail(let e)? = injectedFault(.close) {
            let closed = Glibc.close(fd)
            return e == EINTR ? (closed == 0 ? .success(()) : .failure(Errno(errno))) : .failure(Errno(e))
        }
        #endif
        return Glibc.close(fd) == 0 || errno == EINTR ? .success(()) : .failure(Errno(errno))
    }

    /// Reads at `offset` until `count` bytes or end of file. Returns the bytes read.
    package static func preadFull(_ fd: Int32, _ buf: UnsafeMutableRawPointer, _ count: Int, _ offset: Int64) -> Result<Int, Errno> {
        transferringAll(count) { done, remaining in
            retryingOnInterrupt {
                var want = remaining
                #if ACSECURE_SYSCALL_MOCKING
                switch injectedTransfer(.pread, want, offset + Int64(done)) {
                case .failure(let e): return .failure(e)
                case .success(let n): want = n
                }
                if let b = installedBackend { return b.pread(fd, UnsafeMutableRawBufferPointer(start: buf + done, count: want), offset + Int64(done)) }
                #endif
                return valueOrErrno(Glibc.pread(fd, buf + done, want, off_t(offset) + off_t(done)))
            }
        }
    }

    /// Writes all `count` bytes at `offset`.
    package static func pwriteFull(_ fd: Int32, _ buf: UnsafeRawPointer, _ count: Int, _ offset: Int64) -> Result<Void, Errno> {
        transferringAll(count) { done, remaining in
            retryingOnInterrupt {
                var want = remaining
                #if ACSECURE_SYSCALL_MOCKING
                switch injectedTransfer(.pwrite, want, offset + Int64(done)) {
                case .failure(let e): return .failure(e)
                case .success(let n): want = n
                }
                if let b = installedBackend {
                    return recordedWrite(b.pwrite(fd, UnsafeRawBufferPointer(start: buf + done, count: want), offset + Int64(done)), fd, buf + done, offset + Int64(done))
                }
                return recordedWrite(valueOrErrno(Glibc.pwrite(fd, buf + done, want, off_t(offset) + off_t(done))), fd, buf + done, offset + Int64(done))
                #else
                return valueOrErrno(Glibc.pwrite(fd, buf + done, want, off_t(offset) + off_t(done)))
                #endif
            }
        }.map { _ in () }
    }

    /// Reads at the descriptor's offset until `count` bytes or end of input (a pipe or terminal
    /// included). Returns the bytes read.
    package static func readFull(_ fd: Int32, _ buf: UnsafeMutableRawPointer, _ count: Int) -> Result<Int, Errno> {
        transferringAll(count) { done, remaining in
            retryingOnInterrupt {
                var want = remaining
                #if ACSECURE_SYSCALL_MOCKING
                switch injectedTransfer(.read, want) {
                case .failure(let e): return .failure(e)
                case .success(let n): want = n
                }
                if let b = installedBackend { return b.read(fd, UnsafeMutableRawBufferPointer(start: buf + done, count: want)) }
                #endif
                return valueOrErrno(Glibc.read(fd, buf + done, want))
            }
        }
    }

    /// Writes all `count` bytes at the descriptor's offset.
    package static func writeFull(_ fd: Int32, _ buf: UnsafeRawPointer, _ count: Int) -> Result<Void, Errno> {
        transferringAll(count) { done, remaining in
            retryingOnInterrupt {
                var want = remaining
                #if ACSECURE_SYSCALL_MOCKING
                switch injectedTransfer(.write, want) {
                case .failure(let e): return .failure(e)
                case .success(let n): want = n
                }
                if let b = installedBackend { return recordedWrite(b.write(fd, UnsafeRawBufferPointer(start: buf + done, count: want)), fd, buf + done, nil) }
                return recordedWrite(valueOrErrno(Glibc.write(fd, buf + done, want)), fd, buf + done, nil)
                #else
                // write(2) returns 0 only for a 0-byte request: never an end here.
                return valueOrErrno(Glibc.write(fd, buf + done, want))
                #endif
            }
        }.map { _ in () }
    }

    package static func fstat(_ fd: Int32) -> Result<stat, Errno> {
        retried(.fstat, backend: { $0.fstat(fd) }, kernel: {
            var st = Glibc.stat()
            return valueOrErrno(Glibc.fstat(fd, &st)).map { _ in st }
        })
    }

    /// The processors this process may run on (its affinity mask; at least 1).
    package static var processorsAvailable: Int { max(1, Int(CACSecureLinux_processorsAvailable())) }

    /// The size of the file behind `fd`: `statx` asking for the size only. An `fstat` asks for the
    /// timestamps too, and on filesystems with multigrain timestamps (ext4, xfs, btrfs and tmpfs on
    /// Linux ≥ 6.13) a file whose timestamps were asked for gets a fine-grained time, so a dirtied
    /// inode, at its next write: about 1.5 µs more for each write that follows one.
    package static func fileSize(_ fd: Int32) -> Result<Int64, Errno> {
        retried(.fstat, backend: { $0.fstat(fd).map { Int64($0.st_size) } }, kernel: {
            var size: Int64 = 0
            return valueOrErrno(CACSecureLinux_fileSize(fd, &size)).map { _ in size }
        })
    }

    package static func ftruncate(_ fd: Int32, _ length: Int64) -> Result<Void, Errno> {
        let done = retried(.ftruncate, backend: { $0.ftruncate(fd, length) }, kernel: { valueOrErrno(Glibc.ftruncate(fd, off_t(length))).map { _ in () } })
        #if ACSECURE_SYSCALL_MOCKING
        return recorded(done) { .truncate(file: identity(fd), length: length) }
        #else
        return done
        #endif
    }

    package static func fsync(_ fd: Int32) -> Result<Void, Errno> {
        let done = retried(.fsync, backend: { $0.sync(fd) }, kernel: { valueOrErrno(Glibc.fsync(fd)).map { _ in () } })
        #if ACSECURE_SYSCALL_MOCKING
        return recorded(done) { .sync(file: identity(fd), full: true) }
        #else
        return done
        #endif
    }

    package static func fdatasync(_ fd: Int32) -> Result<Void, Errno> {
        let done = retried(.fdatasync, backend: { $0.sync(fd) }, kernel: { valueOrErrno(Glibc.fdatasync(fd)).map { _ in () } })
        #if ACSECURE_SYSCALL_MOCKING
        return recorded(done) { .sync(file: identity(fd), full: false) }
        #else
        return done
        #endif
    }

    package static func fchmod(_ fd: Int32, _ mode: mode_t) -> Result<Void, Errno> {
        retried(.chmod, backend: unsupported, kernel: { valueOrErrno(Glibc.fchmod(fd, mode)).map { _ in () } })
    }

    /// Clears `O_NONBLOCK` on a descriptor opened with it as its only file status flag (no
    /// `O_APPEND`, `O_DIRECT`, `O_NOATIME`, `O_ASYNC`), as every open of this package that uses it
    /// is: one `F_SETFL` of 0, without reading the flags first (a system call less per open).
    package static func clearNonblocking(_ fd: Int32) -> Result<Void, Errno> {
        retried(.fcntl, backend: { $0.clearNonblocking(fd) }, kernel: { valueOrErrno(fcntl(fd, F_SETFL, 0)).map { _ in () } })
    }

    package static func clearCloseOnExec(_ fd: Int32) -> Result<Void, Errno> {
        retried(.fcntl, backend: { $0.clearCloseOnExec(fd) }, kernel: { valueOrErrno(fcntl(fd, F_SETFD, 0)).map { _ in () } })
    }

    /// `fcntl(F_DUPFD_CLOEXEC)`.
    package static func dup(_ fd: Int32) -> Result<Int32, Errno> {
        retried(.fcntl, backend: { $0.dup(fd) }, kernel: { valueOrErrno(fcntl(fd, F_DUPFD_CLOEXEC, 0)) })
    }

    /// Takes (or with F_UNLCK releases) an open-file-description lock on the whole file, waiting.
    /// OFD locks belong to the descriptor, so threads and other descriptors of this process are
    /// excluded too (the engine's own mutex already serialises them).
    package static func lockFile(_ fd: Int32, _ type: Int16) -> Result<Void, Errno> {
        retried(.fcntl, backend: { $0.sync(fd) /* one process: only the descriptor is checked */ }, kernel: {
            var fl = flock()
            fl.l_type = type
            fl.l_whence = Int16(SEEK_SET)
            fl.l_start = 0
            fl.l_len = 0
            let F_OFD_SETLKW: Int32 = 38  // <fcntl.h>, _GNU_SOURCE only
            return valueOrErrno(fcntl(fd, F_OFD_SETLKW, &fl)).map { _ in () }
        })
    }

    /// Free bytes for an unprivileged writer on the file system of `fd`.
    package static func availableBytes(_ fd: Int32) -> Result<Int64, Errno> {
        retried(.fstat, backend: { $0.availableBytes(fd) }, kernel: {
            var s = statvfs()
            return valueOrErrno(fstatvfs(fd, &s)).map { _ in Int64(s.f_bavail) * Int64(s.f_frsize) }
        })
    }

    // MARK: paths
    // Each takes a `BytePath` (every name the kernel accepts); the `String` forms are for names the
    // library makes itself.

    package static func stat(_ path: BytePath) -> Result<stat, Errno> {
        retried(.stat, backend: { $0.pathStat(path) }, kernel: {
            var st = Glibc.stat()
            return withPath(path) { valueOrErrno(kernelStat($0, &st)) }.map { _ in st }
        })
    }

    package static func lstat(_ path: BytePath) -> Result<stat, Errno> {
        retried(.stat, backend: { $0.pathStat(path) }, kernel: {
            var st = Glibc.stat()
            return withPath(path) { valueOrErrno(Glibc.lstat($0, &st)) }.map { _ in st }
        })
    }

    package static func rename(_ old: BytePath, _ new: BytePath) -> Result<Void, Errno> {
        let done = retried(.rename, backend: { $0.rename(old, new) }, kernel: {
            withPath(old) { o in withPath(new) { n in valueOrErrno(Glibc.rename(o, n)).map { _ in () } } }
        })
        #if ACSECURE_SYSCALL_MOCKING
        return recorded(done) { .rename(from: old, to: new) }
        #else
        return done
        #endif
    }

    /// `link(2)`: like `rename` but refuses (`EEXIST`) an existing `new`.
    package static func link(_ old: BytePath, _ new: BytePath) -> Result<Void, Errno> {
        let done: Result<Void, Errno> = retried(.link, backend: unsupported, kernel: {
            withPath(old) { o in withPath(new) { n in valueOrErrno(Glibc.link(o, n)).map { _ in () } } }
        })
        #if ACSECURE_SYSCALL_MOCKING
        return recorded(done) { .link(from: old, to: new) }
        #else
        return done
        #endif
    }

    /// Gives the file open on `fd` (an unnamed `O_TMPFILE` file) the name `path`: `linkat(2)` of
    /// `/proc/self/fd/<fd>` with `AT_SYMLINK_FOLLOW`, which needs no privilege (`AT_EMPTY_PATH`
    /// does). Fails with `EEXIST` when `path` exists, as `link(2)`.
    package static func linkDescriptor(_ fd: Int32, to path: BytePath) -> Result<Void, Errno> {
        let done: Result<Void, Errno> = retried(.link, backend: unsupported, kernel: {
            withPath(path) { valueOrErrno(Glibc.linkat(AT_FDCWD, "/proc/self/fd/\(fd)", AT_FDCWD, $0, AT_SYMLINK_FOLLOW)).map { _ in () } }
        })
        #if ACSECURE_SYSCALL_MOCKING
        return recorded(done) { .link(from: BytePath("/proc/self/fd/\(fd)"), to: path) }
        #else
        return done
        #endif
    }

    /// The directory whose entry `path` is (what an fsync makes a new or renamed name durable in):
    /// "." for a bare name, "/" for a name in the root.
    package static func directory(of path: BytePath) -> BytePath { path.directory }

    @_disfavoredOverload
    package static func directory(of path: String) -> String {
        // BytePath's rule; the bytes before a "/" of UTF-8 text are UTF-8 text.
        String(decoding: BytePath(path).directory.bytes, as: UTF8.self)
    }

    /// `O_TMPFILE` (`__O_TMPFILE | O_DIRECTORY`, a macro Swift does not import): an unnamed file in
    /// the directory given to `open`.
    package static let unnamedFileFlag: Int32 = 0o20_200_000

    package static func unlink(_ path: BytePath) -> Result<Void, Errno> {
        let done = retried(.unlink, backend: { $0.unlink(path) }, kernel: { withPath(path) { valueOrErrno(Glibc.unlink($0)).map { _ in () } } })
        #if ACSECURE_SYSCALL_MOCKING
        return recorded(done) { .unlink(path: path) }
        #else
        return done
        #endif
    }

    package static func chmod(_ path: BytePath, _ mode: mode_t) -> Result<Void, Errno> {
        retried(.chmod, backend: unsupported, kernel: { withPath(path) { valueOrErrno(Glibc.chmod($0, mode)).map { _ in () } } })
    }

    package static func mkdir(_ path: BytePath, _ mode: mode_t) -> Result<Void, Errno> {
        retried(.mkdir, backend: unsupported, kernel: { withPath(path) { valueOrErrno(Glibc.mkdir($0, mode)).map { _ in () } } })
    }

    package static func rmdir(_ path: BytePath) -> Result<Void, Errno> {
        retried(.rmdir, backend: unsupported, kernel: { withPath(path) { valueOrErrno(Glibc.rmdir($0)).map { _ in () } } })
    }

    /// The names in a directory, without "." and "..", as bytes.
    package static func directoryEntryNames(_ path: BytePath) -> Result<[BytePath], Errno> {
        retried(.readdir, backend: unsupported, kernel: {
            withPath(path) { cPath in
                guard let dir = opendir(cPath) else { return .failure(Errno(errno)) }
                defer { closedir(dir) }
                var names: [BytePath] = []
                while true {
                    errno = 0
                    guard let entry = readdir(dir) else { break }
                    let name = withUnsafePointer(to: entry.pointee.d_name) {
                        BytePath(platformString: UnsafeRawPointer($0).assumingMemoryBound(to: CChar.self))
                    }
                    if name != "." && name != ".." { names.append(name) }
                }
                return errno == 0 ? .success(names) : .failure(Errno(errno))
            }
        })
    }

    /// The names in a directory that are text (the library's own files), without "." and "..".
    package static func directoryEntries(_ path: BytePath) -> Result<[String], Errno> {
        directoryEntryNames(path).map { $0.compactMap(\.string) }
    }

    /// Makes the entries of `directory` (a rename or a new name in it) durable: open, fsync, close.
    package static func syncDirectory(_ directory: BytePath) -> Result<Void, Errno> {
        #if ACSECURE_SYSCALL_MOCKING
        // The in-memory backend has directories only in names, and nothing to lose to a power loss.
        if installedBackend != nil { return .success(()) }
        #endif
        return open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC).flatMap { fd in
            let synced = fsync(fd)
            _ = close(fd)
            return synced
        }
    }
}

// The library's own names (store files, temporary names built from text).
extension Sys {
    @_disfavoredOverload package static func stat(_ path: String) -> Result<stat, Errno> { stat(BytePath(path)) }
    @_disfavoredOverload package static func lstat(_ path: String) -> Result<stat, Errno> { lstat(BytePath(path)) }
    @_disfavoredOverload package static func rename(_ old: String, _ new: String) -> Result<Void, Errno> { rename(BytePath(old), BytePath(new)) }
    @_disfavoredOverload package static func link(_ old: String, _ new: String) -> Result<Void, Errno> { link(BytePath(old), BytePath(new)) }
    @_disfavoredOverload package static func unlink(_ path: String) -> Result<Void, Errno> { unlink(BytePath(path)) }
    @_disfavoredOverload package static func chmod(_ path: String, _ mode: mode_t) -> Result<Void, Errno> { chmod(BytePath(path), mode) }
    @_disfavoredOverload package static func mkdir(_ path: String, _ mode: mode_t) -> Result<Void, Errno> { mkdir(BytePath(path), mode) }
    @_disfavoredOverload package static func rmdir(_ path: String) -> Result<Void, Errno> { rmdir(BytePath(path)) }
    @_disfavoredOverload package static func directoryEntries(_ path: String) -> Result<[String], Errno> { directoryEntries(BytePath(path)) }
    @_disfavoredOverload package static func syncDirectory(_ directory: String) -> Result<Void, Errno> { syncDirectory(BytePath(directory)) }
}

/// `stat(2)` (inside `Sys`, the name is `Sys.stat`, and `Glibc.stat` is also the struct).
private func kernelStat(_ path: UnsafePointer<CChar>, _ st: inout stat) -> Int32 { stat(path, &st) }
