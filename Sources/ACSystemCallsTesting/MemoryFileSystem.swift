#if ACSECURE_SYSCALL_MOCKING  // debug builds and the fuzzers' (Package.swift)
#if canImport(Glibc)
import Glibc
#endif
import ACCrypto
@_spi(Testing) import ACSystemCalls

/// An in-memory file system behind `Sys` (a `SystemCallBackend`), for fuzzing and tests: a table of regular files
/// (path → bytes and inode number) and of descriptors (each with its open file description:
/// offset, access mode, `O_APPEND`; `dup` shares it, as `dup(2)` does).
///
/// It gives the errno values Linux gives for what the engine and the fuzzers do with regular files
/// (`ENOENT`, `EEXIST`, `EBADF`, `EINVAL`, `EISDIR` for a path ending in `/`), checks arguments in
/// the kernel's order, and is checked against the kernel by `MemoryFileSystemTests`. There are no
/// directories, permissions, links or locks between descriptors (one process): `lockFile` succeeds.
/// Descriptors are numbered from `firstDescriptor` up, so a stray real system call on one fails
/// with `EBADF` instead of touching a real file.
///
/// Installed with `MemoryFileSystem.use(_:)`. A test-support module beside the system-call layer it
/// stands in for: no library module depends on it, only tests and the fuzzers.
@_spi(Testing) public final class MemoryFileSystem: SystemCallBackend, @unchecked Sendable {
    /// The first descriptor number handed out (far above what the process holds for real).
    public static let firstDescriptor: Int32 = 1 << 20
    /// The `st_dev` of every file: no real device has it, so the engine's open-file table never
    /// mixes a memory file with a real one.
    public static let device: UInt64 = 0x4D45_4D46_5300_0001
    /// Writes that would make a file larger than this fail with `EFBIG` (bounds a fuzzer's memory).
    public static let maxFileSize: Int64 = 1 << 30

    final class Inode {
        var number: UInt64
        var bytes: [UInt8] = []
        var mode: mode_t
        init(number: UInt64, mode: mode_t) { self.number = number; self.mode = mode }
    }

    /// An open file description.
    final class Description {
        var inode: Inode
        var offset: Int64 = 0
        var statusFlags: Int32  // access mode, O_APPEND, O_NONBLOCK
        init(inode: Inode, statusFlags: Int32) { self.inode = inode; self.statusFlags = statusFlags }
        var readable: Bool { statusFlags & O_ACCMODE != O_WRONLY }
        var writable: Bool { statusFlags & O_ACCMODE != O_RDONLY }
    }

    struct Descriptor {
        var description: Description
        var closeOnExec: Bool
    }

    /// The descriptors by number: `firstDescriptor + i` is slot `i`. Numbers are handed out lowest
    /// first, as the kernel does, so the table is small and dense (a dictionary hashed the number
    /// at every call).
    struct DescriptorSlots {
        private var slots: [Descriptor?] = []
        /// How many slots hold a descriptor.
        private(set) var count = 0

        subscript(fd: Int32) -> Descriptor? {
            get {
                let i = Int(fd) - Int(MemoryFileSystem.firstDescriptor)
                return i >= 0 && i < slots.count ? slots[i] : nil
            }
            set {
                let i = Int(fd) - Int(MemoryFileSystem.firstDescriptor)
                precondition(i >= 0, "not a memory descriptor")
                while slots.count <= i { slots.append(nil) }
                count += (newValue != nil ? 1 : 0) - (slots[i] != nil ? 1 : 0)
                slots[i] = newValue
            }
        }

        mutating func removeValue(forKey fd: Int32) -> Descriptor? {
            let removed = self[fd]
            if removed != nil { self[fd] = nil }
            return removed
        }

        /// Empties the table, keeping its memory.
        mutating func removeAll() {
            slots.removeAll(keepingCapacity: true)
            count = 0
        }
    }

    private let mutex = PThreadMutex()
    private var files: [BytePath: Inode] = [:]
    private var descriptors = DescriptorSlots()
    private var nextInode: UInt64 = 2
    /// Inodes of removed files, emptied, and descriptions of closed descriptors, reused by new ones:
    /// a fuzzer creates, opens and removes its files at every input, and under ASan every allocation
    /// is costly (fresh byte buffers are fresh pages: page faults).
    private var spareInodes: [Inode] = []
    private var spareDescriptions: [Description] = []
    /// What a spare description refers to.
    private let noInode = Inode(number: 0, mode: 0)

    public init() {}

    private func locked<R>(_ body: () -> R) -> R {
        mutex.lock(); defer { mutex.unlock() }
        return body()
    }

    private func lowestFreeDescriptor() -> Int32 {
        var fd = Self.firstDescriptor
        while descriptors[fd] != nil { fd += 1 }
        return fd
    }

    // MARK: Paths

    /// The bytes of the file at `path`, or nil if there is none.
    public func contents(_ path: BytePath) -> [UInt8]? { locked { files[path]?.bytes } }

    /// Creates or replaces the file at `path` (a new inode when it did not exist).
    public func setContents(_ path: BytePath, _ bytes: [UInt8], mode: mode_t = 0o600) {
        locked {
            let inode = files[path] ?? newInode(path, mode: mode)
            inode.bytes.removeAll(keepingCapacity: true)
            inode.bytes.append(contentsOf: bytes)
        }
    }

    /// A new empty inode at `path` (a spare one when there is one).
    private func newInode(_ path: BytePath, mode: mode_t) -> Inode {
        let inode: Inode
        if let spare = spareInodes.popLast() {
            inode = spare
            inode.number = nextInode
            inode.mode = mode
        } else {
            inode = Inode(number: nextInode, mode: mode)
        }
        nextInode += 1
        files[path] = inode
        return inode
    }

    /// `unlink(2)`: open descriptors keep the file.
    public func unlink(_ path: BytePath) -> Result<Void, Errno> {
        locked { files.removeValue(forKey: path) == nil ? .failure(Errno(ENOENT)) : .success(()) }
    }

    /// Removes every file and closes every descriptor.
    public func removeAll() {
        locked {
            // Taken out one by one (a dictionary keeps its capacity when an element is removed), so
            // what nothing else holds is known to be unique.
            var fd = Self.firstDescriptor
            while descriptors.count > 0 {
                if var descriptor = descriptors.removeValue(forKey: fd) { recycle(&descriptor.description) }
                fd += 1
            }
            descriptors.removeAll()
            while case (_, var inode)? = files.popFirst() {
                guard spareInodes.count < 4, isKnownUniquelyReferenced(&inode) else { continue }
                inode.bytes.removeAll(keepingCapacity: true)
                spareInodes.append(inode)
            }
        }
    }

    /// How many descriptors are open (a leak check for tests).
    public var openDescriptorCount: Int { locked { descriptors.count } }

    public func rename(_ old: BytePath, _ new: BytePath) -> Result<Void, Errno> {
        locked {
            guard let inode = files.removeValue(forKey: old) else { return .failure(Errno(ENOENT)) }
            files[new] = inode
            return .success(())
        }
    }

    // MARK: Descriptors

    /// `open(2)` of a regular file: `O_CREAT`, `O_EXCL`, `O_TRUNC` (also with `O_RDONLY`, as Linux
    /// does), `O_APPEND`, `O_CLOEXEC`; `O_NOFOLLOW`, `O_NOCTTY`, `O_NONBLOCK` change nothing here.
    public func open(_ path: BytePath, _ flags: Int32, _ mode: mode_t) -> Result<Int32, Errno> {
        locked {
            if path.isEmpty { return .failure(Errno(ENOENT)) }
            if path.bytes.last == UInt8(ascii: "/") { return .failure(Errno(flags & (O_CREAT | O_ACCMODE) != 0 ? EISDIR : ENOENT)) }
            if flags & O_ACCMODE == O_ACCMODE { return .failure(Errno(EINVAL)) }
            // No unnamed files (O_TMPFILE) here: the engine then creates files by name.
            if flags & Sys.unnamedFileFlag == Sys.unnamedFileFlag { return .failure(Errno(EOPNOTSUPP)) }
            let inode: Inode
            if let existing = files[path] {
                if flags & O_CREAT != 0 && flags & O_EXCL != 0 { return .failure(Errno(EEXIST)) }
                inode = existing
                if flags & O_TRUNC != 0 { inode.bytes.removeAll(keepingCapacity: true) }
            } else {
                guard flags & O_CREAT != 0 else { return .failure(Errno(ENOENT)) }
                inode = newInode(path, mode: mode & 0o7777)
            }
            let fd = lowestFreeDescriptor()
            let status = flags & (O_ACCMODE | O_APPEND | O_NONBLOCK)
            let description: Description
            if let spare = spareDescriptions.popLast() {
                description = spare
                description.inode = inode
                description.offset = 0
                description.statusFlags = status
            } else {
                description = Description(inode: inode, statusFlags: status)
            }
            descriptors[fd] = Descriptor(description: description, closeOnExec: flags & O_CLOEXEC != 0)
            return .success(fd)
        }
    }

    public func close(_ fd: Int32) -> Result<Void, Errno> {
        locked {
            guard var removed = descriptors.removeValue(forKey: fd) else { return .failure(Errno(EBADF)) }
            recycle(&removed.description)
            return .success(())
        }
    }

    /// Keeps a description no other descriptor shares (`dup`) for the next open; it lets go of its inode.
    private func recycle(_ description: inout Description) {
        guard spareDescriptions.count < 8, isKnownUniquelyReferenced(&description) else { return }
        description.inode = noInode
        spareDescriptions.append(description)
    }

    /// `fcntl(fd, F_DUPFD_CLOEXEC, 0)`.
    public func dup(_ fd: Int32) -> Result<Int32, Errno> {
        locked {
            guard let d = descriptors[fd] else { return .failure(Errno(EBADF)) }
            let n = lowestFreeDescriptor()
            descriptors[n] = Descriptor(description: d.description, closeOnExec: true)
            return .success(n)
        }
    }

    public func clearNonblocking(_ fd: Int32) -> Result<Void, Errno> {
        locked {
            guard let d = descriptors[fd] else { return .failure(Errno(EBADF)) }
            d.description.statusFlags &= ~O_NONBLOCK
            return .success(())
        }
    }

    public func clearCloseOnExec(_ fd: Int32) -> Result<Void, Errno> {
        locked {
            guard descriptors[fd] != nil else { return .failure(Errno(EBADF)) }
            descriptors[fd]!.closeOnExec = false
            return .success(())
        }
    }

    private func description(_ fd: Int32) -> Description? { descriptors[fd]?.description }

    /// Every file belongs to the process's user and group, read once (two system calls per `fstat`
    /// were a fuzzer's largest share of real system calls).
    private static let owner = (uid: getuid(), gid: getgid())

    public func fstat(_ fd: Int32) -> Result<stat, Errno> {
        locked {
            guard let d = description(fd) else { return .failure(Errno(EBADF)) }
            var st = stat()
            st.st_dev = dev_t(truncatingIfNeeded: Self.device)
            st.st_ino = ino_t(d.inode.number)
            st.st_mode = S_IFREG | d.inode.mode
            st.st_nlink = files.values.contains { $0 === d.inode } ? 1 : 0
            st.st_uid = Self.owner.uid
            st.st_gid = Self.owner.gid
            st.st_size = off_t(d.inode.bytes.count)
            st.st_blksize = 4096
            st.st_blocks = blkcnt_t((d.inode.bytes.count + 511) / 512)
            return .success(st)
        }
    }

    /// `stat(2)` (no links: `lstat(2)` too).
    public func pathStat(_ path: BytePath) -> Result<stat, Errno> {
        let fd: Int32
        switch open(path, O_RDONLY, 0) {
        case .success(let f): fd = f
        case .failure(let e): return .failure(e)
        }
        defer { _ = close(fd) }
        return fstat(fd)
    }

    /// Free bytes: what a file may still grow to.
    public func availableBytes(_ fd: Int32) -> Result<Int64, Errno> { sync(fd).map { Self.maxFileSize } }

    /// `read(2)` (no array for its one buffer: a fuzzer calls it at every step).
    public func read(_ fd: Int32, _ buf: UnsafeMutableRawBufferPointer) -> Result<Int, Errno> { readv(fd, CollectionOfOne(buf)) }

    /// `write(2)`.
    public func write(_ fd: Int32, _ buf: UnsafeRawBufferPointer) -> Result<Int, Errno> { writev(fd, CollectionOfOne(buf)) }

    /// `fsync(2)` / `fdatasync(2)`: nothing to flush.
    public func sync(_ fd: Int32) -> Result<Void, Errno> {
        locked { description(fd) == nil ? .failure(Errno(EBADF)) : .success(()) }
    }

    public func ftruncate(_ fd: Int32, _ length: Int64) -> Result<Void, Errno> {
        locked {
            if length < 0 { return .failure(Errno(EINVAL)) }
            guard let d = description(fd) else { return .failure(Errno(EBADF)) }
            guard d.writable else { return .failure(Errno(EINVAL)) }
            if length > Self.maxFileSize { return .failure(Errno(EFBIG)) }
            resize(d.inode, Int(length))
            return .success(())
        }
    }

    private func resize(_ inode: Inode, _ n: Int) {
        let old = inode.bytes.count
        if n < old { inode.bytes.removeSubrange(n...) } else if n > old {
            // Geometric growth from 64 KiB: appending in small steps must not copy the whole file
            // each time, and the fuzzers' files (tens of KiB) are then allocated once.
            if n > inode.bytes.capacity { inode.bytes.reserveCapacity(max(n, 2 * inode.bytes.capacity, Self.zeros.count)) }
            // Zeros copied from a zeroed block (a memcpy; appending a repeated element is a loop per byte).
            var left = n - old
            while left > 0 {
                let k = min(left, Self.zeros.count)
                inode.bytes.append(contentsOf: UnsafeBufferPointer(rebasing: Self.zeros[0..<k]))
                left -= k
            }
        }
    }

    nonisolated(unsafe) private static let zeros: UnsafeBufferPointer<UInt8> = {
        let p = UnsafeMutableBufferPointer<UInt8>.allocate(capacity: 64 << 10)
        p.initialize(repeating: 0)
        return UnsafeBufferPointer(p)
    }()

    /// One transfer at `offset` (nil: the description's offset, advanced).
    private func read(_ d: Description, _ buf: UnsafeMutableRawBufferPointer, _ offset: Int64) -> Int {
        let size = Int64(d.inode.bytes.count)
        guard offset < size, buf.count > 0 else { return 0 }
        let n = Int(min(Int64(buf.count), size - offset))
        d.inode.bytes.withUnsafeBytes { src in buf.baseAddress!.copyMemory(from: src.baseAddress! + Int(offset), byteCount: n) }
        return n
    }

    private func write(_ d: Description, _ buf: UnsafeRawBufferPointer, _ offset: Int64) -> Result<Int, Errno> {
        guard buf.count > 0 else { return .success(0) }
        let end = offset + Int64(buf.count)
        if end > Self.maxFileSize { return .failure(Errno(EFBIG)) }
        if end > Int64(d.inode.bytes.count) { resize(d.inode, Int(end)) }
        d.inode.bytes.withUnsafeMutableBytes { dst in (dst.baseAddress! + Int(offset)).copyMemory(from: buf.baseAddress!, byteCount: buf.count) }
        return .success(buf.count)
    }

    /// `pread(2)`.
    public func pread(_ fd: Int32, _ buf: UnsafeMutableRawBufferPointer, _ offset: Int64) -> Result<Int, Errno> {
        locked {
            if offset < 0 { return .failure(Errno(EINVAL)) }
            guard let d = description(fd) else { return .failure(Errno(EBADF)) }
            guard d.readable else { return .failure(Errno(EBADF)) }
            return .success(read(d, buf, offset))
        }
    }

    /// `pwrite(2)`; on an `O_APPEND` descriptor it appends, as on Linux.
    public func pwrite(_ fd: Int32, _ buf: UnsafeRawBufferPointer, _ offset: Int64) -> Result<Int, Errno> {
        locked {
            if offset < 0 { return .failure(Errno(EINVAL)) }
            guard let d = description(fd) else { return .failure(Errno(EBADF)) }
            guard d.writable else { return .failure(Errno(EBADF)) }
            return write(d, buf, d.statusFlags & O_APPEND != 0 ? Int64(d.inode.bytes.count) : offset)
        }
    }

    /// `readv(2)` at the description's offset.
    public func readv(_ fd: Int32, _ bufs: [UnsafeMutableRawBufferPointer]) -> Result<Int, Errno> { readv(fd, bufs[...]) }

    /// `writev(2)` at the description's offset, or at the end with `O_APPEND`.
    public func writev(_ fd: Int32, _ bufs: [UnsafeRawBufferPointer]) -> Result<Int, Errno> { writev(fd, bufs[...]) }

    private func readv<Buffers: Collection<UnsafeMutableRawBufferPointer>>(_ fd: Int32, _ bufs: Buffers) -> Result<Int, Errno> {
        locked {
            guard let d = description(fd) else { return .failure(Errno(EBADF)) }
            guard d.readable else { return .failure(Errno(EBADF)) }
            guard bufs.count <= 1024 /* IOV_MAX */ else { return .failure(Errno(EINVAL)) }
            var total = 0
            for b in bufs {
                let n = read(d, b, d.offset)
                d.offset += Int64(n)
                total += n
                if n < b.count { break }
            }
            return .success(total)
        }
    }

    private func writev<Buffers: Collection<UnsafeRawBufferPointer>>(_ fd: Int32, _ bufs: Buffers) -> Result<Int, Errno> {
        locked {
            guard let d = description(fd) else { return .failure(Errno(EBADF)) }
            guard d.writable else { return .failure(Errno(EBADF)) }
            guard bufs.count <= 1024 /* IOV_MAX */ else { return .failure(Errno(EINVAL)) }
            // With O_APPEND the write goes to the end; the offset moves only if bytes were written.
            var position = d.statusFlags & O_APPEND != 0 ? Int64(d.inode.bytes.count) : d.offset
            var total = 0
            defer { if total > 0 { d.offset = position } }
            for b in bufs {
                switch write(d, b, position) {
                case .success(let n): position += Int64(n); total += n
                case .failure(let e): return total > 0 ? .success(total) : .failure(e)
                }
            }
            return .success(total)
        }
    }

    /// `lseek(2)` with `SEEK_SET`, `SEEK_CUR` or `SEEK_END`.
    public func lseek(_ fd: Int32, _ offset: Int64, _ whence: Int32) -> Result<Int64, Errno> {
        locked {
            guard let d = description(fd) else { return .failure(Errno(EBADF)) }
            let base: Int64
            switch whence {
            case SEEK_SET: base = 0
            case SEEK_CUR: base = d.offset
            case SEEK_END: base = Int64(d.inode.bytes.count)
            default: return .failure(Errno(EINVAL))
            }
            let (target, overflow) = base.addingReportingOverflow(offset)
            guard !overflow, target >= 0 else { return .failure(Errno(EINVAL)) }
            d.offset = target
            return .success(target)
        }
    }
}

extension MemoryFileSystem {
    /// Routes every system call of every module (`Sys`) to `fileSystem` (nil: back to the kernel).
    /// For tests and fuzzers; set it only while no other thread makes file-system calls and no file
    /// is open. Release builds of the library have no such hook (Package.swift).
    public static func use(_ fileSystem: MemoryFileSystem?) {
        SystemCallBackends.installed = fileSystem
    }

    /// The in-memory file system in use, if any.
    public static var current: MemoryFileSystem? { SystemCallBackends.installed as? MemoryFileSystem }
}
#endif

// Text names, as tests and the fuzzers write them.
extension MemoryFileSystem {
    public func contents(_ path: String) -> [UInt8]? { contents(BytePath(path)) }
    public func setContents(_ path: String, _ bytes: [UInt8], mode: mode_t = 0o600) { setContents(BytePath(path), bytes, mode: mode) }
    public func unlink(_ path: String) -> Result<Void, Errno> { unlink(BytePath(path)) }
    public func rename(_ old: String, _ new: String) -> Result<Void, Errno> { rename(BytePath(old), BytePath(new)) }
    public func open(_ path: String, _ flags: Int32, _ mode: mode_t) -> Result<Int32, Errno> { open(BytePath(path), flags, mode) }
}
