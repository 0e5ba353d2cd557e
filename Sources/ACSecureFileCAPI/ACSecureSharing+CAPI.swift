#if canImport(Glibc)
import Glibc
#endif
import CACSecureFile
import ACCrypto
import ACSecureFileCore
import ACSystemCalls
import ACSecureServices
import ACSecureSharingCore

// The functions of ACSecureSharing.h: crypto blocks and extension wrapped files from C, on top of
// ACSecureSharingCore's WrappedFiles (no Foundation, no NSError, no Data copy of reads). Errors become errno and a
// detail in WrappedCError (WrappedDescriptorTable.swift), the one place for this header.

// MARK: the provider app and the extension

@c @implementation
public func ACSecureGetCryptoBlock(_ sharedGroupID: UnsafePointer<CChar>?, _ block: UnsafeMutablePointer<UInt8>?,
                                   _ blockLength: UnsafeMutablePointer<Int>?) -> Int32 {
    WrappedCResult.withoutEntry {
        guard let blockLength else { throw WrappedCError.argument(EFAULT) }
        let size = Int(ACSECURE_CRYPTO_BLOCK_SIZE)
        // size_t arrives as Int: a capacity above SSIZE_MAX is negative here and is plenty.
        let capacity = blockLength.pointee < 0 ? Int.max : blockLength.pointee
        guard capacity >= size else {
            blockLength.pointee = size
            throw WrappedCError.argument(ERANGE)
        }
        guard let block else { throw WrappedCError.argument(EFAULT) }
        let group = try groupID(sharedGroupID)
        let sensitive = try WrappedFiles.cryptoBlock(sharedGroupID: group, services: nil)
        try sensitive.withUnsafeBytes { (bytes: UnsafeRawBufferPointer) throws(WrappedCError) in
            // The header's constant is the ABI: a block of another size is a bug of this library.
            guard bytes.count == size, let base = bytes.baseAddress else {
                throw WrappedCError(.internalError)
            }
            memcpy(block, base, size)
        }
        blockLength.pointee = size
    }
}

@c @implementation
public func ACSecureWrapFile(_ path: UnsafePointer<CChar>?, _ toPath: UnsafePointer<CChar>?, _ block: UnsafePointer<UInt8>?,
                             _ blockLength: Int, _ actualFileName: UnsafePointer<CChar>?) -> Int32 {
    WrappedCResult.withoutEntry {
        let source = try cPath(path, "ACSecureWrapFile")
        let destination = try cPath(toPath, "ACSecureWrapFile")
        guard let block else { throw WrappedCError.argument(EFAULT) }
        guard blockLength >= 0 else { throw WrappedCError.argument(EINVAL) }
        let name = try actualFileName.map { p throws(WrappedCError) -> String in
            guard let s = String(validatingCString: p) else { throw WrappedCError.argument(EINVAL) }
            return s
        }
        // Straight from C memory into guarded memory; no Data or [UInt8] copy of the key.
        let cryptoBlock: SecureBytes
        do throws(CryptoError) { cryptoBlock = try SecureBytes(copying: UnsafeRawBufferPointer(start: block, count: blockLength)) } catch {
            throw SecureFileError.crypto(error, "ACSecureWrapFile(\(source)): crypto block")
        }
        // Needs no secure services: the crypto block carries the key.
        try cryptoBlock.withUnsafeBytes { (b: UnsafeRawBufferPointer) throws(SecureFileError) in
            try WrappedFiles.wrap(atPath: source, toPath: destination, cryptoBlock: b, actualFileName: name)
        }
    }
}

// MARK: the host app

@c @implementation
public func ACSecureWrappedFileOpen(_ path: UnsafePointer<CChar>?, _ sharedGroupID: UnsafePointer<CChar>?,
                                    _ actualFileName: UnsafeMutablePointer<CChar>?, _ nameCapacity: Int,
                                    _ detail: UnsafeMutablePointer<Int32>?) -> Int32 {
    do {
        let fd = try openWrapped(path, sharedGroupID, actualFileName, nameCapacity)
        detail?.pointee = ACErrorCode.noError.aceValue
        return fd
    } catch {
        let e = WrappedCError(error)
        detail?.pointee = e.code
        LastErrorMessage.set(error)
        errno = e.errno
        return -1
    }
}

private func openWrapped(_ path: UnsafePointer<CChar>?, _ sharedGroupID: UnsafePointer<CChar>?,
                         _ actualFileName: UnsafeMutablePointer<CChar>?, _ nameCapacity: Int) throws -> Int32 {
    let path = try cPath(path, "ACSecureWrappedFileOpen")
    let group = try groupID(sharedGroupID)
    if actualFileName == nil && nameCapacity != 0 { throw WrappedCError.argument(EFAULT) }
    let capacity = nameCapacity < 0 ? Int.max : nameCapacity

    let anchor: Int32
    switch Sys.open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY) {
    case .success(let fd): anchor = fd
    case .failure(let e): throw SecureFileError.posix(e.rawValue, path)
    }
    var handle: WrappedFileReader?
    do {
        let st: stat
        switch Sys.fstat(anchor) {
        case .success(let s): st = s
        case .failure(let e): throw SecureFileError.posix(e.rawValue, path)
        }
        switch st.st_mode & S_IFMT {
        case S_IFREG: break
        case S_IFDIR: throw SecureFileError(code: .regularFileOnly, errno: EISDIR, message: "\(path): is a directory")
        default: throw SecureFileError(code: .regularFileOnly, errno: EINVAL, message: "\(path): not a regular file")
        }
        // The same inode as `anchor`, whatever happens to `path` meanwhile.
        let procFD: Bool
        if case .success = Sys.stat("/proc/self/fd") { procFD = true } else { procFD = false }
        let pinned = procFD ? BytePath("/proc/self/fd/\(anchor)") : path
        let opened = try WrappedFiles.open(atPath: pinned, sharedGroupID: group, services: nil)
        handle = opened
        if let actualFileName {
            let name = Array(opened.actualFileName.utf8)
            guard name.count < capacity else { throw WrappedCError.argument(ERANGE) }
            name.withUnsafeBytes { UnsafeMutableRawPointer(actualFileName).copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
            actualFileName[name.count] = 0
        }
        return WrappedDescriptorTable.shared.insert(.init(anchor: anchor, handle: opened))
    } catch {
        try? handle?.close()  // read only: nothing to lose; the first error is reported
        _ = Sys.close(anchor)
        throw error
    }
}

// MARK: reading

@c @implementation
public func ACSecureWrappedFileRead(_ fd: Int32, _ buf: UnsafeMutableRawPointer?, _ nbyte: Int) -> Int {
    WrappedCResult.onEntry(fd) { entry, position in
        let n = try entry.read(into: try readBuffer(buf, nbyte), at: position)
        position += Int64(n)
        return n
    }
}

@c @implementation
public func ACSecureWrappedFilePread(_ fd: Int32, _ buf: UnsafeMutableRawPointer?, _ nbyte: Int, _ offset: off_t) -> Int {
    WrappedCResult.onEntry(fd) { entry, _ in
        guard offset >= 0 else { throw WrappedCError(.negativeFileLength, errno: EINVAL) }
        return try entry.read(into: try readBuffer(buf, nbyte), at: Int64(offset))
    }
}

@c @implementation
public func ACSecureWrappedFileLseek(_ fd: Int32, _ offset: off_t, _ whence: Int32) -> off_t {
    WrappedCResult.onEntry(fd) { entry, position in
        let base: Int64
        switch whence {
        case SEEK_SET: base = 0
        case SEEK_CUR: base = position
        case SEEK_END: base = try entry.handle.length
        default: throw WrappedCError.argument(EINVAL)
        }
        let (target, overflow) = base.addingReportingOverflow(Int64(offset))
        if overflow { throw WrappedCError(.fileTooBig, errno: EOVERFLOW) }
        if target < 0 { throw WrappedCError(.negativeFileLength, errno: EINVAL) }
        if target > SecureFile.maximumFileSize { throw WrappedCError(.fileTooBig, errno: EINVAL) }
        position = target
        return off_t(target)
    }
}

@c @implementation
public func ACSecureWrappedFileFstat(_ fd: Int32, _ buf: UnsafeMutablePointer<stat>?) -> Int32 {
    WrappedCResult.onEntry(fd) { entry, _ -> Int32 in
        guard let buf else { throw WrappedCError.argument(EFAULT) }
        var st: stat
        switch Sys.fstat(entry.anchor) {
        case .success(let s): st = s
        case .failure(let e): throw SecureFileError.posix(e.rawValue, "fstat(\(fd))")
        }
        st.st_size = off_t(try entry.handle.length)
        buf.pointee = st
        return 0
    }
}

// MARK: closing, errors

@c @implementation
public func ACSecureWrappedFileClose(_ fd: Int32) -> Int32 {
    guard let entry = WrappedDescriptorTable.shared.remove(fd) else {
        errno = EBADF
        return -1
    }
    // Nothing to flush (read-only): closing cannot lose data, so its errors are not reported.
    try? entry.handle.close()
    _ = Sys.close(entry.anchor)
    return 0
}

@c @implementation
public func ACSecureWrappedFileLastError(_ fd: Int32) -> Int32 {
    guard let entry = WrappedDescriptorTable.shared.lookup(fd) else {
        errno = EBADF
        return -1
    }
    return entry.lastError.load(ordering: .relaxed)
}

// MARK: C arguments

/// A group ID from C: NULL means none; empty or invalid UTF-8 is EINVAL.
private func groupID(_ p: UnsafePointer<CChar>?) throws(WrappedCError) -> String? {
    guard let p else { return nil }
    guard let s = String(validatingCString: p), !s.isEmpty else { throw WrappedCError.argument(EINVAL) }
    return s
}

/// `read(2)`'s argument checks: a count above SSIZE_MAX (negative as Int) is EINVAL, a NULL buffer
/// with a non-zero count EFAULT.
private func readBuffer(_ base: UnsafeMutableRawPointer?, _ count: Int) throws(WrappedCError) -> UnsafeMutableRawBufferPointer {
    guard count >= 0 else { throw WrappedCError.argument(EINVAL) }
    guard base != nil || count == 0 else { throw WrappedCError.argument(EFAULT) }
    return UnsafeMutableRawBufferPointer(start: base, count: count)
}
