#if canImport(Glibc)
import Glibc
#endif
import CACSecureFile
import ACSecureFileCore
import ACSecureServices
import ACSystemCalls

// The functions of ACSecureFile.h. Each is `@c @implementation`: the compiler checks its Swift
// signature against the C declaration in CShim/include. `ACSecureFileOpen` itself is variadic
// and lives in CShim/ACSecureFileOpen.c (module CACSecureFile), which forwards to `ACSecureFile_openWithMode`.

/// Linux's `UIO_MAXIOV` (`IOV_MAX`), the most iovecs `readv`/`writev` accept.
let iovMax: Int32 = 1024

// MARK: open and close

@c @implementation
public func ACSecureFile_openWithMode(_ path: UnsafePointer<CChar>?, _ oflag: Int32, _ mode: mode_t) -> Int32 {
    CResult.withoutFile { () throws(SecureFileError) -> Int32 in
        let path = try cPath(path, "ACSecureFileOpen")
        return try insertOpened(try SecureFile.open(path, flags: oflag, mode: mode))
    }
}

@c @implementation
public func ACSecureFileOpenWithOptions(_ path: UnsafePointer<CChar>?, _ oflag: Int32, _ mode: mode_t, _ options: UInt32) -> Int32 {
    CResult.withoutFile { () throws(SecureFileError) -> Int32 in
        let path = try cPath(path, "ACSecureFileOpenWithOptions")
        let known = UInt32(ACSECURE_OPEN_WRITE_BACK | ACSECURE_OPEN_SHARED | ACSECURE_OPEN_READ_CACHE | ACSECURE_OPEN_DOUBLE_WRITE
            | ACSECURE_OPEN_WHOLE_CHUNKS_IN_PLACE)
        guard options & ~known == 0 else {
            throw .cArgument(EINVAL, "ACSecureFileOpenWithOptions(\(path)): unknown option bits \(String(options & ~known, radix: 16))")
        }
        let sharing: SecureFile.Sharing = options & UInt32(ACSECURE_OPEN_SHARED) != 0 ? .processes : .thisProcess
        let buffering: SecureFile.Buffering = options & UInt32(ACSECURE_OPEN_WRITE_BACK) != 0 ? .writeBack : .writeThrough
        let readCache = options & UInt32(ACSECURE_OPEN_READ_CACHE) != 0 ? try readCacheFromEnvironment(path) : .off
        let partialOverwrites: SecureFile.PartialOverwrites = options & UInt32(ACSECURE_OPEN_DOUBLE_WRITE) != 0 ? .doubleWrite : .chunkCopy
        let wholeChunkOverwrites: SecureFile.WholeChunkOverwrites =
            options & UInt32(ACSECURE_OPEN_WHOLE_CHUNKS_IN_PLACE) != 0 ? .inPlace : .chunkCopy
        return try insertOpened(try SecureFile.open(path, flags: oflag, mode: mode, sharing: sharing, buffering: buffering,
                                                    readCache: readCache, partialOverwrites: partialOverwrites,
                                                    wholeChunkOverwrites: wholeChunkOverwrites))
    }
}

/// `ACSECURE_READ_CACHE_MIB`: whole MiB from 1 to 1024, 0 for no cache; 16 when unset or empty.
private func readCacheFromEnvironment(_ path: BytePath) throws(SecureFileError) -> SecureFile.ReadCache {
    // Unset or set empty: the default.
    guard let raw = getenv("ACSECURE_READ_CACHE_MIB"), raw[0] != 0 else { return .bytes(SecureFile.ReadCache.defaultMiB << 20) }
    let text = String(cString: raw)
    let maxMiB = SecureFile.ReadCache.validBytes.upperBound >> 20
    guard text.utf8.count <= 5, text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
          let mib = Int(text), mib <= maxMiB else {
        throw .cArgument(EINVAL, "ACSecureFileOpenWithOptions(\(path)): ACSECURE_READ_CACHE_MIB=\(text) is not a size (allowed: whole MiB, 0 for none, 1 to \(maxMiB); unset or empty for \(SecureFile.ReadCache.defaultMiB))")
    }
    return mib == 0 ? .off : .bytes(mib << 20)
}

/// The end's report, right after the open (ACSecureFileLastError = ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR):
/// an interrupted write recovered (bytes after the authenticated end), an end restored from the last
/// sync's tail copy, or no end that authenticates at all (a cut or damaged end: the file opens for
/// reading, every change is refused). Any other failure to check the end fails the open.
private func insertOpened(_ file: SecureFile) throws(SecureFileError) -> Int32 {
    let endIntact: Bool
    do {
        let after = try file.bytesAfterAuthenticatedEnd
        let restored = try file.endRestoredFromTailCopy
        endIntact = after == 0 && !restored
    } catch where error.code == .badKeyOrCorruptData {
        endIntact = false
    } catch {
        do { try file.close() } catch let closeError { throw error.withMessage("\(error.message); closing it failed too: \(closeError.message)") }
        throw error
    }
    return DescriptorTable.shared.insert(file, lastError: endIntact ? .noError : .badKeyOrCorruptData)
}

@c @implementation
public func ACSecureFileFlush(_ fd: Int32) -> Int32 {
    CResult.onFile(fd) { file throws(SecureFileError) -> Int32 in
        try file.flush()
        return 0
    }
}

@c @implementation
public func ACSecureFileFsync(_ fd: Int32) -> Int32 {
    CResult.onFile(fd) { file throws(SecureFileError) -> Int32 in
        try file.sync()
        return 0
    }
}

@c @implementation
public func ACSecureFileFdatasync(_ fd: Int32) -> Int32 {
    CResult.onFile(fd) { file throws(SecureFileError) -> Int32 in
        try file.datasync()
        return 0
    }
}

@c @implementation
public func ACSecureFileRecoveredBytes(_ fd: Int32) -> off_t {
    CResult.onFile(fd) { file throws(SecureFileError) -> off_t in
        off_t(try file.bytesAfterAuthenticatedEnd)
    }
}

@c @implementation
public func ACSecureFileEndRestored(_ fd: Int32) -> Int32 {
    CResult.onFile(fd) { file throws(SecureFileError) -> Int32 in
        try file.endRestoredFromTailCopy ? 1 : 0
    }
}

@c @implementation
public func ACSecureFileSetShared(_ fd: Int32, _ shared: Int32) -> Int32 {
    CResult.onFile(fd) { file throws(SecureFileError) -> Int32 in
        try file.setCoordinated(shared != 0)
        return 0
    }
}

@c @implementation
public func ACSecureFileAdoptEnd(_ fd: Int32, _ size: off_t) -> Int32 {
    CResult.onFile(fd) { file throws(SecureFileError) -> Int32 in
        try file.adoptEnd(vouchedSize: Int64(size))
        return 0
    }
}

@c @implementation
public func ACSecureFileLastErrorMessage(_ buffer: UnsafeMutablePointer<CChar>?, _ size: Int) -> Int {
    LastErrorMessage.copy(into: buffer, size: size)
}

@c @implementation
public func ACSecureFileClose(_ fd: Int32) -> Int32 {
    CResult.closing(fd)
}

// MARK: reading and writing

@c @implementation
public func ACSecureFileRead(_ fd: Int32, _ buf: UnsafeMutableRawPointer?, _ nbyte: Int) -> Int {
    CResult.onFile(fd) { file throws(SecureFileError) in
        try file.read(into: try mutableBuffer(buf, nbyte, file, "ACSecureFileRead"))
    }
}

@c @implementation
public func ACSecureFileWrite(_ fd: Int32, _ buf: UnsafeRawPointer?, _ nbyte: Int) -> Int {
    CResult.onFile(fd) { file throws(SecureFileError) in
        try file.write(try buffer(buf, nbyte, file, "ACSecureFileWrite"))
    }
}

@c @implementation
public func ACSecureFilePread(_ fd: Int32, _ buf: UnsafeMutableRawPointer?, _ nbyte: Int, _ offset: off_t) -> Int {
    CResult.onFile(fd, before: negativeOffset(offset, "ACSecureFilePread: negative offset")) { file throws(SecureFileError) in
        try file.pread(into: try mutableBuffer(buf, nbyte, file, "ACSecureFilePread"), at: Int64(offset))
    }
}

@c @implementation
public func ACSecureFilePwrite(_ fd: Int32, _ buf: UnsafeRawPointer?, _ nbyte: Int, _ offset: off_t) -> Int {
    CResult.onFile(fd, before: negativeOffset(offset, "ACSecureFilePwrite: negative offset")) { file throws(SecureFileError) in
        try file.pwrite(try buffer(buf, nbyte, file, "ACSecureFilePwrite"), at: Int64(offset))
    }
}

@c @implementation
public func ACSecureFileReadv(_ fd: Int32, _ iov: UnsafePointer<iovec>?, _ iovcnt: Int32) -> Int {
    CResult.onFile(fd) { file throws(SecureFileError) in
        let vectors = try iovecs(iov, iovcnt, file, .read, "ACSecureFileReadv")
        return try file.readv(vectors)
    }
}

@c @implementation
public func ACSecureFileWritev(_ fd: Int32, _ iov: UnsafePointer<iovec>?, _ iovcnt: Int32) -> Int {
    CResult.onFile(fd) { file throws(SecureFileError) in
        let vectors = try iovecs(iov, iovcnt, file, .write, "ACSecureFileWritev")
        return try file.writev(vectors)
    }
}

// MARK: offset, size, status

@c @implementation
public func ACSecureFileLseek(_ fd: Int32, _ offset: off_t, _ whence: Int32) -> off_t {
    CResult.onFile(fd) { file throws(SecureFileError) in
        off_t(try file.seek(Int64(offset), whence: whence))
    }
}

@c @implementation
public func ACSecureFtruncate(_ fd: Int32, _ length: off_t) -> Int32 {
    CResult.onFile(fd, before: negativeOffset(length, "ACSecureFtruncate: negative length")) { file throws(SecureFileError) -> Int32 in
        try file.truncate(to: Int64(length))
        return 0
    }
}

@c @implementation
public func ACSecureFstat(_ fd: Int32, _ buf: UnsafeMutablePointer<stat>?) -> Int32 {
    CResult.onFile(fd) { file throws(SecureFileError) -> Int32 in
        guard let buf else { throw .cArgument(EFAULT, "ACSecureFstat(\(fd)): NULL stat buffer") }
        buf.pointee = try file.stat()
        return 0
    }
}

@c @implementation
public func ACSecureFileLastError(_ fd: Int32) -> Int32 {
    guard let entry = DescriptorTable.shared.lookup(fd) else {
        errno = EBADF
        return -1
    }
    return entry.lastError.load(ordering: .relaxed)
}

// MARK: path calls

@c @implementation
public func ACSecureFileRename(_ oldpath: UnsafePointer<CChar>?, _ newpath: UnsafePointer<CChar>?) -> Int32 {
    CResult.withoutFile { () throws(SecureFileError) -> Int32 in
        try SecureFileSystem.rename(try cPath(oldpath, "ACSecureFileRename"), try cPath(newpath, "ACSecureFileRename"))
        return 0
    }
}

@c @implementation
public func ACSecureLstat(_ path: UnsafePointer<CChar>?, _ buf: UnsafeMutablePointer<stat>?) -> Int32 {
    CResult.withoutFile { () throws(SecureFileError) -> Int32 in
        let path = try cPath(path, "ACSecureLstat")
        guard let buf else { throw .cArgument(EFAULT, "ACSecureLstat(\(path)): NULL stat buffer") }
        buf.pointee = try SecureFileSystem.lstat(path)
        return 0
    }
}

@c @implementation
public func ACSecureTruncate(_ path: UnsafePointer<CChar>?, _ length: off_t) -> Int32 {
    CResult.withoutFile { () throws(SecureFileError) -> Int32 in
        try SecureFileSystem.truncate(try cPath(path, "ACSecureTruncate"), to: Int64(length))
        return 0
    }
}

// MARK: C arguments → Swift buffers

/// `pread(2)`/`pwrite(2)` reject a negative offset, and `ftruncate(2)` a negative length, before
/// looking at the descriptor. The message is a literal: only the errno and code reach C, and an
/// interpolated one was a heap allocation per refused call.
@inline(__always)
private func negativeOffset(_ offset: off_t, _ message: String) -> SecureFileError? {
    offset < 0 ? SecureFileError(code: .negativeFileLength, errno: EINVAL, message: message) : nil
}

private enum Access { case read, write }

/// Throws `error` about a bad argument, but only after the checks POSIX makes first: `read(2)` on
/// a write-only descriptor is EBADF whatever its buffer. A zero-length transfer makes exactly the
/// engine's descriptor checks (mode, closed, keys) and nothing else.
private func argumentError(_ error: SecureFileError, _ file: SecureFile, _ access: Access) throws(SecureFileError) -> Never {
    switch access {
    case .read: _ = try file.readv([])
    case .write: _ = try file.writev([])
    }
    throw error
}

/// `size_t` arrives as `Int`: a count above `SSIZE_MAX` is negative here. Linux's `read(2)` and
/// `write(2)` reject it with EFAULT (no buffer that large fits in the address space; found by
/// FuzzCAPIArguments against the kernel). A NULL buffer with a non-zero count is EFAULT too.
@inline(__always)
private func checkedCount(_ base: UnsafeRawPointer?, _ count: Int, _ file: SecureFile, _ access: Access,
                          _ what: String) throws(SecureFileError) {
    if count < 0 { try argumentError(.cArgument(EFAULT, "\(what): count exceeds SSIZE_MAX (no buffer is that large)"), file, access) }
    if base == nil && count != 0 { try argumentError(.cArgument(EFAULT, "\(what): NULL buffer"), file, access) }
}

@inline(__always)
private func mutableBuffer(_ base: UnsafeMutableRawPointer?, _ count: Int, _ file: SecureFile,
                           _ what: String) throws(SecureFileError) -> UnsafeMutableRawBufferPointer {
    try checkedCount(base, count, file, .read, what)
    return UnsafeMutableRawBufferPointer(start: base, count: count)
}

@inline(__always)
private func buffer(_ base: UnsafeRawPointer?, _ count: Int, _ file: SecureFile,
                    _ what: String) throws(SecureFileError) -> UnsafeRawBufferPointer {
    try checkedCount(base, count, file, .write, what)
    return UnsafeRawBufferPointer(start: base, count: count)
}

/// Validates an iovec array as `readv(2)`/`writev(2)` do: 0...IOV_MAX entries, no NULL base with a
/// non-zero length, and a total that fits in `ssize_t`.
private func iovecs(_ iov: UnsafePointer<iovec>?, _ iovcnt: Int32, _ file: SecureFile, _ access: Access,
                    _ what: String) throws(SecureFileError) -> UnsafeBufferPointer<iovec> {
    guard iovcnt >= 0, iovcnt <= iovMax else {
        try argumentError(.cArgument(EINVAL, "\(what): iovcnt \(iovcnt) is not in 0...\(iovMax)"), file, access)
    }
    if iovcnt == 0 { return UnsafeBufferPointer(start: nil, count: 0) }
    guard let iov else { try argumentError(.cArgument(EFAULT, "\(what): NULL iovec array"), file, access) }
    let vectors = UnsafeBufferPointer(start: iov, count: Int(iovcnt))
    var total = 0
    for v in vectors {
        let len = v.iov_len
        guard len >= 0 else { try argumentError(.cArgument(EINVAL, "\(what): an iov_len exceeds SSIZE_MAX"), file, access) }
        let (sum, overflow) = total.addingReportingOverflow(len)
        if overflow { try argumentError(.cArgument(EINVAL, "\(what): the lengths add up to more than SSIZE_MAX"), file, access) }
        total = sum
        if v.iov_base == nil && len != 0 { try argumentError(.cArgument(EFAULT, "\(what): NULL iov_base"), file, access) }
    }
    return vectors
}
