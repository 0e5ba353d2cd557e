#if canImport(Glibc)
import Glibc
#endif
import ACCrypto
import ACSecureServices

/// The state of one secure file (one inode) shared by every handle this process has open on it,
/// as the kernel's page cache is shared: each handle sees the others' writes at once.
///
/// Everything here is guarded by `lock`; the methods assume it is held.
///
/// Invariants:
/// - The disk holds a valid file of `diskSize` plaintext bytes (header, chunks, trailer) after every
///   system call the engine makes, so a crash between calls leaves a file that opens and reads.
/// - At most one chunk is cached (`cacheIndex`); its buffer is zero beyond `cacheLength`.
/// - `size == diskSize` unless the cache is dirty, in which case `size` may reach into the cached chunk.
final class SharedFile: @unchecked Sendable {
    struct Identity: Hashable { var device: UInt64; var inode: UInt64 }

    let identity: Identity
    let lock = PThreadMutex()
    let services: any KeyProvider
    var keySelection: KeySelection
    /// Path at first open, for messages only.
    var path: String
    var refCount = 0

    /// nil for an empty (0-byte) file that has no header yet.
    var header: FileHeader? {
        didSet { if let header { fileID.copyMemory(from: header.fileID, byteCount: 16) } }
    }
    /// The file ID as raw memory, for the per-chunk AAD.
    private let fileID = UnsafeMutableRawPointer.allocate(byteCount: 16, alignment: 8)
    var layout: FileLayout
    var cipher: AESGCMContext?
    /// The file's data key (guarded memory), kept for re-wrapping; dropped with `cipher` on lock.
    var dataKey: SecureBytes?
    var keyGeneration: UInt64 = 0

    /// The descriptor used for all I/O; writable as soon as any handle is.
    var ioFD: Int32
    var ioFDWritable: Bool

    var size: Int64 = 0
    var diskSize: Int64 = 0
    var tailVerified = false
    /// The physical end of the last complete file when bytes of a torn extension follow it; they are
    /// cut off before the next change.
    var pendingTailRepair: Int64?
    /// How many bytes follow the authenticated end (0 normally): a torn extension, or tampering.
    var bytesAfterAuthenticatedEnd: Int64 = 0
    /// Other processes may write this file: every operation takes a record lock and rereads.
    var coordinated = false

    // The one-chunk cache: a write-back cache for small writes, a read cache for partial reads.
    var cacheIndex: Int64 = -1
    var cacheLength = 0
    var cacheDirty = false
    let cache: SecureBytes
    /// A second chunk buffer for read-modify-write of a chunk that is not the cached one.
    let work: SecureBytes

    // Ciphertext staging, grown on demand up to one batch.
    private var scratch: UnsafeMutableRawPointer?
    private var scratchCapacity = 0
    private let aad = UnsafeMutableRawPointer.allocate(byteCount: FileLayout.chunkAADSize, alignment: 8)
    private let trailerAAD = UnsafeMutableRawPointer.allocate(byteCount: FileLayout.trailerAADSize, alignment: 8)
    /// Nonces for one batch (every chunk of the smallest chunk size, and the trailer): one
    /// RAND_bytes call per batch, as a call costs about as much as encrypting a 4 KiB chunk.
    private let nonces = UnsafeMutableRawPointer.allocate(
        byteCount: ((batchBytes >> Int(FileLayout.chunkShiftRange.lowerBound)) + 1) * FileLayout.nonceSize, alignment: 8)

    /// Larger requests are split into batches of this many plaintext bytes per system call.
    static let batchBytes = 1 << 20

    init(identity: Identity, services: any KeyProvider, keySelection: KeySelection, path: String,
         ioFD: Int32, writable: Bool, layout: FileLayout) {
        self.identity = identity
        self.services = services
        self.keySelection = keySelection
        self.path = path
        self.ioFD = ioFD
        self.ioFDWritable = writable
        self.layout = layout
        self.cache = SecureBytes(count: layout.chunkSize)
        self.work = SecureBytes(count: layout.chunkSize)
    }

    deinit {
        scratch?.deallocate()
        aad.deallocate()
        trailerAAD.deallocate()
        nonces.deallocate()
        fileID.deallocate()
        _ = Sys.close(ioFD)
    }

    var chunkSize: Int { layout.chunkSize }
    var diskChunks: Int64 { layout.chunkCount(forSize: diskSize) }
    var cacheBase: UnsafeMutableRawPointer { cache.withUnsafeMutableBytes { $0.baseAddress! } }
    var workBase: UnsafeMutableRawPointer { work.withUnsafeMutableBytes { $0.baseAddress! } }

    // MARK: keys

    /// Fails with `ACE_NO_KEYS_ERROR` while services are unavailable; reloads the file key after an unlock.
    func ensureKeys() throws(SecureFileError) {
        let generation = services.keyGeneration
        guard generation != 0 else { throw .ace(.noKeys, "\(path): secure services are unavailable") }
        services.noteActivity()
        if generation == keyGeneration, cipher != nil || header == nil { return }
        guard let header else { keyGeneration = generation; return }
        let kek: KeyEncryptionKey
        do { kek = try services.keyEncryptionKey(for: keySelection) } catch {
            throw error.code == .noKeys ? .ace(.noKeys, "\(path): secure services are unavailable")
                                        : .ace(.invalidArgument, "\(path): \(error.message)")
        }
        guard let dataKey = header.unwrap(with: kek) else {
            throw .ace(.badKeyOrCorruptData, "\(path): the file key does not unwrap with the \(keySelection) key")
        }
        do { cipher = try AESGCMContext(key: dataKey) } catch {
            throw .ace(.internalError, "\(path): cannot set up AES-GCM")
        }
        self.dataKey = dataKey
        keyGeneration = generation
    }

    /// Drops keys and plaintext (after flushing): called when services lock.
    func wipeSecrets() {
        if cacheDirty { _ = try? flushCache() }
        cacheDirty = false
        cacheIndex = -1
        cacheLength = 0
        cache.wipe()
        work.wipe()
        cipher = nil
        dataKey = nil
        keyGeneration = 0
    }

    /// Writes a header and an empty trailer into a 0-byte file.
    func initializeIfNeeded() throws(SecureFileError) {
        guard header == nil else { return }
        let kek: KeyEncryptionKey
        do { kek = try services.keyEncryptionKey(for: keySelection) } catch {
            throw .ace(error.code == .noKeys ? .noKeys : .invalidArgument, "\(path): \(error.message)")
        }
        let dataKey = SecureBytes(randomCount: 32)
        let newHeader = try FileHeader.create(layout: layout, kek: kek, dataKey: dataKey)
        do { cipher = try AESGCMContext(key: dataKey) } catch {
            throw .ace(.internalError, "\(path): cannot set up AES-GCM")
        }
        self.dataKey = dataKey
        header = newHeader
        keyGeneration = services.keyGeneration
        var bytes = newHeader.encoded()
        bytes += try trailerBytes(size: 0)
        let written = bytes.withUnsafeBytes { Sys.pwriteFull(ioFD, $0.baseAddress!, $0.count, 0) }
        try checkIO(written, "write header")
        size = 0
        diskSize = 0
        tailVerified = true
    }

    // MARK: reading

    /// pread semantics on the logical file.
    func read(into buffer: UnsafeMutableRawPointer, count: Int, at offset: Int64) throws(SecureFileError) -> Int {
        if offset >= size || count == 0 {
            if offset >= size, header != nil { try verifyTrailerIfNeeded() }
            return 0
        }
        let end = offset + min(Int64(count), size - offset)
        var pos = offset
        while pos < end {
            let index = pos >> Int64(layout.chunkShift)
            let inChunk = Int(pos - index << Int64(layout.chunkShift))
            let m = Int(min(Int64(chunkSize - inChunk), end - pos))
            let dst = buffer + Int(pos - offset)
            if index == cacheIndex {
                dst.copyMemory(from: cacheBase + inChunk, byteCount: m)
                pos += Int64(m)
                continue
            }
            let onDisk = diskChunks
            if index >= onDisk {
                // Inside the logical size but past the disk: a hole before a dirty cached chunk.
                dst.initializeMemory(as: UInt8.self, repeating: 0, count: m)
                pos += Int64(m)
                continue
            }
            let diskLength = layout.chunkLength(index, size: diskSize)
            if inChunk == 0 && m >= diskLength {
                // Whole chunks: decrypt straight into the caller's buffer, many per system call.
                var run = 1
                let maxRun = Self.batchBytes >> Int(layout.chunkShift)
                while run < maxRun {
                    let next = index + Int64(run)
                    let nextPos = pos + Int64(run) << Int64(layout.chunkShift)
                    guard next < onDisk, next != cacheIndex,
                          nextPos + Int64(layout.chunkLength(next, size: diskSize)) <= end else { break }
                    run += 1
                }
                try readChunksFromDisk(first: index, count: run) { i in
                    buffer + Int((i << Int64(self.layout.chunkShift)) - offset)
                }
                let runEnd = min(end, (index + Int64(run)) << Int64(layout.chunkShift))
                // A chunk shorter than the span asked for (the disk's last chunk, with a hole after it
                // up to a dirty cached chunk) reads as zeros beyond its end.
                let covered = min(runEnd, (index + Int64(run) - 1) << Int64(layout.chunkShift)
                                  + Int64(layout.chunkLength(index + Int64(run) - 1, size: diskSize)))
                if covered < runEnd {
                    (buffer + Int(covered - offset)).initializeMemory(as: UInt8.self, repeating: 0, count: Int(runEnd - covered))
                }
                pos = runEnd
                continue
            }
            try loadCache(index)
            dst.copyMemory(from: cacheBase + inChunk, byteCount: m)
            pos += Int64(m)
        }
        return Int(end - offset)
    }

    /// Reads and authenticates chunks `first..<first+count` from disk; chunk `i` goes to `destination(i)`.
    private func readChunksFromDisk(first: Int64, count: Int, destination: (Int64) -> UnsafeMutableRawPointer) throws(SecureFileError) {
        guard let cipher else { throw .ace(.noKeys, "\(path): no key") }
        let last = first + Int64(count) - 1
        if last == diskChunks - 1 { try verifyTrailerIfNeeded() }
        let physical = layout.physicalChunkSize
        let lastLength = layout.chunkLength(last, size: diskSize)
        let total = (count - 1) * physical + lastLength + FileLayout.chunkOverhead
        let buf = ensureScratch(total)
        let got = try checkIO(Sys.preadFull(ioFD, buf, total, layout.chunkOffset(first)), "read")
        guard got == total else {
            throw .ace(.badKeyOrCorruptData, "\(path): file is shorter than its chunks (truncated?)")
        }
        for j in 0..<count {
            let index = first + Int64(j)
            let length = j == count - 1 ? lastLength : chunkSize
            let c = buf + j * physical
            FileLayout.writeChunkAAD(aad, fileID: fileID, index: index)
            let ok = cipher.open(nonce: c, aad: UnsafeRawBufferPointer(start: aad, count: FileLayout.chunkAADSize),
                                 ciphertext: UnsafeRawBufferPointer(start: c + FileLayout.nonceSize, count: length),
                                 tag: c + FileLayout.nonceSize + length, plaintext: destination(index))
            guard ok else {
                throw .ace(.badKeyOrCorruptData, "\(path): chunk \(index) failed authentication")
            }
        }
    }

    /// Checks the trailer: that the file has exactly the length it was written with.
    ///
    /// An extension of the file is written beyond the old end first, so a torn extension (power loss,
    /// a kill inside a large write) leaves the previous complete file followed by some of the new
    /// bytes. When the trailer at the end does not authenticate, the last end within one write batch
    /// at which a trailer does is taken as the file's end; the bytes after it are never returned and
    /// are cut off before the next change. Truncation is still detected: a cut never leaves a
    /// trailer that authenticates (only a complete write puts one there).
    func verifyTrailerIfNeeded() throws(SecureFileError) {
        guard !tailVerified, header != nil, cipher != nil else { return }
        let end = layout.physicalSize(forPlaintextSize: diskSize)
        var t = [UInt8](repeating: 0, count: FileLayout.trailerSize)
        let got = try checkIO(t.withUnsafeMutableBytes { Sys.preadFull(ioFD, $0.baseAddress!, $0.count, end - Int64(FileLayout.trailerSize)) }, "read trailer")
        let physical = try checkIO(Sys.fstat(ioFD), "fstat").st_size
        if got == t.count, Int64(physical) == end, t.withUnsafeBytes({ trailerAuthenticates($0.baseAddress!, size: diskSize) }) {
            tailVerified = true
            return
        }
        guard let (validEnd, validSize) = try findLastValidEnd(physical: Int64(physical)) else {
            throw .ace(.badKeyOrCorruptData, "\(path): length check failed (file truncated, extended or torn)")
        }
        diskSize = validSize
        size = max(validSize, cacheDirty ? cacheIndex << Int64(layout.chunkShift) + Int64(cacheLength) : 0)
        if cacheIndex >= diskChunks && !cacheDirty { cacheIndex = -1 }
        pendingTailRepair = validEnd < Int64(physical) ? validEnd : nil
        bytesAfterAuthenticatedEnd = Int64(physical) - validEnd
        tailVerified = true
    }

    private func trailerAuthenticates(_ t: UnsafeRawPointer, size: Int64) -> Bool {
        guard let cipher else { return false }
        FileLayout.writeTrailerAAD(trailerAAD, fileID: fileID, size: size)
        return cipher.open(nonce: t, aad: UnsafeRawBufferPointer(start: trailerAAD, count: FileLayout.trailerAADSize),
                           ciphertext: UnsafeRawBufferPointer(start: nil, count: 0),
                           tag: t + FileLayout.nonceSize, plaintext: workBase)
    }

    /// Scans back from the physical end, over at most one write batch, for the last position at
    /// which a trailer authenticates the length that position implies.
    private func findLastValidEnd(physical: Int64) throws(SecureFileError) -> (Int64, Int64)? {
        let minimumEnd = Int64(FileLayout.headerSize + FileLayout.trailerSize)
        guard physical >= minimumEnd else { return nil }
        let window = Int64((Self.batchBytes >> Int(layout.chunkShift)) + 2) * Int64(layout.physicalChunkSize)
        let lowestEnd = max(minimumEnd, physical - window)
        let from = lowestEnd - Int64(FileLayout.trailerSize)
        let count = Int(physical - from)
        let buf = ensureScratch(count)
        let got = try checkIO(Sys.preadFull(ioFD, buf, count, from), "read")
        var end = from + Int64(got)
        while end >= lowestEnd {
            if let size = layout.plaintextSize(forPhysicalSize: end),
               trailerAuthenticates(buf + Int(end - from) - FileLayout.trailerSize, size: size) {
                return (end, size)
            }
            end -= 1
        }
        return nil
    }

    /// Cuts off what a torn extension left after the last complete file, before the file changes.
    private func repairTornTailIfNeeded() throws(SecureFileError) {
        guard let end = pendingTailRepair else { return }
        try checkIO(Sys.ftruncate(ioFD, end), "truncate torn tail")
        pendingTailRepair = nil
        bytesAfterAuthenticatedEnd = 0
    }

    /// Makes chunk `index` the cached chunk (flushing a dirty one first).
    func loadCache(_ index: Int64) throws(SecureFileError) {
        if index == cacheIndex { return }
        if cacheDirty { try flushCache() }
        cacheIndex = -1
        cache.wipe()
        cacheLength = 0
        if index < diskChunks {
            try readChunksFromDisk(first: index, count: 1) { _ in self.cacheBase }
            cacheLength = layout.chunkLength(index, size: diskSize)
        }
        cacheIndex = index
    }

    // MARK: writing

    /// pwrite semantics on the logical file; the caller has checked limits and access.
    func write(from buffer: UnsafeRawPointer, count: Int, at offset: Int64) throws(SecureFileError) {
        try initializeIfNeeded()
        let end = offset + Int64(count)
        var pos = offset
        let shift = Int64(layout.chunkShift)
        while pos < end {
            let index = pos >> shift
            let inChunk = Int(pos - index << shift)
            let m = Int(min(Int64(chunkSize - inChunk), end - pos))
            let src = buffer + Int(pos - offset)
            if inChunk == 0 && m == chunkSize && index != cacheIndex {
                // Whole chunks: encrypt straight from the caller's buffer.
                var run = 1
                while Int64(run) < (end - pos) >> shift, index + Int64(run) != cacheIndex { run += 1 }
                try materialize(upTo: index)
                if !cacheDirty, cacheIndex >= index, cacheIndex < index + Int64(run) { cacheIndex = -1 }
                try writeRun(first: index, count: run, length: { _ in self.chunkSize }) { i in
                    UnsafeRawPointer(buffer + Int((i << shift) - offset))
                }
                pos += Int64(run) << shift
            } else {
                try loadCache(index)
                (cacheBase + inChunk).copyMemory(from: src, byteCount: m)
                cacheDirty = true
                cacheLength = max(cacheLength, inChunk + m)
                pos += Int64(m)
            }
            size = max(size, pos)
        }
    }

    /// Writes the cached chunk to disk if it is dirty.
    func flushCache() throws(SecureFileError) {
        guard cacheDirty else { return }
        let index = cacheIndex
        try materialize(upTo: index)
        let length = cacheLength
        try writeRun(first: index, count: 1, length: { _ in length }) { _ in UnsafeRawPointer(self.cacheBase) }
        cacheDirty = false
    }

    /// Makes chunks `0..<index` exist on disk at full length: pads a short last chunk and fills the
    /// gap with encrypted zeros (a hole reads as authenticated zeros, never as unauthenticated bytes).
    func materialize(upTo index: Int64) throws(SecureFileError) {
        let shift = Int64(layout.chunkShift)
        if cacheDirty, cacheIndex < index, cacheIndex >= diskChunks - 1 { try flushCache() }
        guard diskSize < index << shift else { return }
        let onDisk = diskChunks
        let partialLast = diskSize & Int64(chunkSize - 1) != 0
        let first = partialLast ? onDisk - 1 : onDisk
        if partialLast {
            // The short last chunk becomes a full one: its bytes, then zeros.
            if !cacheDirty && cacheIndex == first { cacheIndex = -1 }
            work.wipe()
            try readChunksFromDisk(first: first, count: 1) { _ in self.workBase }
        }
        // Holes take real space: refuse up front, before writing anything, when they cannot fit.
        let needed = (index - first) * Int64(layout.physicalChunkSize)
        if needed > 64 << 20, case .success(let available) = Sys.availableBytes(ioFD), needed > available {
            throw SecureFileError(code: .noError, errno: ENOSPC,
                                  message: "\(path): a hole of \(needed) bytes does not fit in \(available) free bytes (holes are stored as encrypted zeros)")
        }
        let zeros = ZeroChunk.pointer(chunkSize)
        try writeRun(first: first, count: Int(index - first), length: { _ in self.chunkSize }) { i in
            i == first && partialLast ? UnsafeRawPointer(self.workBase) : zeros
        }
    }

    /// Encrypts chunks `first..<first+count` (plaintext from `source`, length from `length`) and writes
    /// them in batches. A batch that reaches the end of the file carries the new trailer in the same
    /// system call, so the file on disk is complete after every call.
    func writeRun(first: Int64, count: Int, length: (Int64) -> Int,
                  source: (Int64) -> UnsafeRawPointer) throws(SecureFileError) {
        precondition(first <= diskChunks, "chunks must be contiguous with the disk")
        guard let cipher, header != nil else { throw .ace(.noKeys, "\(path): no key") }
        let physical = layout.physicalChunkSize
        let maxBatch = max(1, Self.batchBytes >> Int(layout.chunkShift))
        var i = first
        let end = first + Int64(count)
        while i < end {
            let k = Int(min(Int64(maxBatch), end - i))
            let lastIndex = i + Int64(k) - 1
            let lastLength = length(lastIndex)
            let reachesEnd = lastIndex >= diskChunks - 1
            let newDiskSize = reachesEnd ? lastIndex << Int64(layout.chunkShift) + Int64(lastLength) : diskSize
            // The trailer only authenticates the length: rewriting the last chunk in place leaves it be.
            let touchesEnd = reachesEnd && (newDiskSize != diskSize || !tailVerified)
            let bytes = (k - 1) * physical + lastLength + FileLayout.chunkOverhead + (touchesEnd ? FileLayout.trailerSize : 0)
            let buf = ensureScratch(bytes)
            // A fresh random nonce for every chunk written, even when rewriting the same chunk.
            let nonceCount = k + (touchesEnd ? 1 : 0)
            NonceGenerator.fill(UnsafeMutableRawBufferPointer(start: nonces, count: nonceCount * FileLayout.nonceSize))
            for j in 0..<k { (buf + j * physical).copyMemory(from: nonces + j * FileLayout.nonceSize, byteCount: FileLayout.nonceSize) }
            for j in 0..<k {
                let index = i + Int64(j)
                let n = j == k - 1 ? lastLength : chunkSize
                let c = buf + j * physical
                FileLayout.writeChunkAAD(aad, fileID: fileID, index: index)
                do {
                    try cipher.seal(nonce: c, aad: UnsafeRawBufferPointer(start: aad, count: FileLayout.chunkAADSize),
                                    plaintext: UnsafeRawBufferPointer(start: source(index), count: n),
                                    ciphertext: c + FileLayout.nonceSize, tag: c + FileLayout.nonceSize + n)
                } catch {
                    throw .ace(.internalError, "\(path): encryption failed")
                }
            }
            if touchesEnd {
                let t = buf + (k - 1) * physical + lastLength + FileLayout.chunkOverhead
                t.copyMemory(from: nonces + k * FileLayout.nonceSize, byteCount: FileLayout.nonceSize)
                try sealTrailer(into: t, size: newDiskSize, nonceIsSet: true)
            }
            do {
                try repairTornTailIfNeeded()
                let start = layout.chunkOffset(i)
                let oldEnd = layout.physicalSize(forPlaintextSize: diskSize)
                if touchesEnd, start < oldEnd, start + Int64(bytes) > oldEnd {
                    // Beyond the old end first (it ends with the new trailer), then the rest: a
                    // trailer that authenticates stays on disk throughout, even if a write is torn.
                    let split = Int(oldEnd - start)
                    try checkIO(Sys.pwriteFull(ioFD, buf + split, bytes - split, oldEnd), "write")
                    try checkIO(Sys.pwriteFull(ioFD, buf, split, start), "write")
                } else {
                    try checkIO(Sys.pwriteFull(ioFD, buf, bytes, start), "write")
                }
            } catch {
                resynchronizeAfterFailedWrite()
                throw error
            }
            if touchesEnd {
                diskSize = newDiskSize
                tailVerified = true
            }
            i += Int64(k)
        }
    }

    /// Sets the file to `length` plaintext bytes (ftruncate semantics).
    func truncate(to length: Int64) throws(SecureFileError) {
        try initializeIfNeeded()
        try flushCache()
        try repairTornTailIfNeeded()
        cacheIndex = -1
        cacheLength = 0
        cache.wipe()
        let shift = Int64(layout.chunkShift)
        if length > diskSize {
            let lastIndex = (length - 1) >> shift
            try materialize(upTo: lastIndex)
            // The new last chunk: existing bytes (if it was the short last chunk) then zeros.
            let lastLength = Int(length - lastIndex << shift)
            var src = ZeroChunk.pointer(chunkSize)
            if lastIndex < diskChunks {
                work.wipe()
                try readChunksFromDisk(first: lastIndex, count: 1) { _ in self.workBase }
                src = UnsafeRawPointer(workBase)
            }
            try writeRun(first: lastIndex, count: 1, length: { _ in lastLength }) { _ in src }
        } else if length < diskSize {
            try verifyTrailerIfNeeded()
            if length == 0 {
                let t = ensureScratch(FileLayout.trailerSize)
                try sealTrailer(into: t, size: 0)
                try checkIO(Sys.pwriteFull(ioFD, t, FileLayout.trailerSize, Int64(FileLayout.headerSize)), "write trailer")
            } else {
                let lastIndex = (length - 1) >> shift
                let lastLength = Int(length - lastIndex << shift)
                let oldLength = layout.chunkLength(lastIndex, size: diskSize)
                let at = layout.chunkOffset(lastIndex)
                if lastLength == oldLength {
                    // Cut at the end of an intact chunk: only a new trailer is needed.
                    let t = ensureScratch(FileLayout.trailerSize)
                    try sealTrailer(into: t, size: length)
                    try checkIO(Sys.pwriteFull(ioFD, t, FileLayout.trailerSize, at + Int64(FileLayout.chunkOverhead + oldLength)), "write trailer")
                } else {
                    work.wipe()
                    try readChunksFromDisk(first: lastIndex, count: 1) { _ in self.workBase }
                    secureZero(UnsafeMutableRawBufferPointer(start: workBase + lastLength, count: chunkSize - lastLength))
                    let bytes = lastLength + FileLayout.chunkOverhead + FileLayout.trailerSize
                    let buf = ensureScratch(bytes)
                    try sealChunk(into: buf, index: lastIndex, plaintext: workBase, count: lastLength)
                    try sealTrailer(into: buf + lastLength + FileLayout.chunkOverhead, size: length)
                    try checkIO(Sys.pwriteFull(ioFD, buf, bytes, at), "write")
                }
            }
            try checkIO(Sys.ftruncate(ioFD, layout.physicalSize(forPlaintextSize: length)), "truncate")
            diskSize = length
            tailVerified = true
        }
        size = length
    }

    // MARK: several processes

    /// Starts an operation in coordinated mode: an open-file-description lock on the whole file
    /// (shared for reads, exclusive for changes), then the length is reread and the chunk cache
    /// dropped, since another process may have changed both.
    func beginCoordinated(exclusive: Bool) throws(SecureFileError) {
        try checkIO(Sys.lockFile(ioFD, exclusive ? Int16(F_WRLCK) : Int16(F_RDLCK)), "lock")
        cacheIndex = -1
        cacheLength = 0
        cacheDirty = false
        cache.wipe()
        var needsRefresh = false
        let physical: Int64
        switch Sys.fstat(ioFD) {
        case .success(let st): physical = Int64(st.st_size)
        case .failure(let e): endCoordinated(); throw .posix(e.rawValue, "\(path): fstat")
        }
        if header == nil, physical > 0 {
            // Another process gave the empty file its header: read it.
            var bytes = [UInt8](repeating: 0, count: FileLayout.headerSize)
            let got = bytes.withUnsafeMutableBytes { Sys.preadFull(ioFD, $0.baseAddress!, $0.count, 0) }
            guard case .success(let n) = got, n == bytes.count, case .success(let h) = FileHeader.parse(bytes) else {
                endCoordinated()
                throw .ace(.badKeyOrCorruptData, "\(path): not a secure file")
            }
            header = h
            keyGeneration = 0
            do { try ensureKeys() } catch { endCoordinated(); throw error }
            needsRefresh = true
        }
        let expected = layout.physicalSize(forPlaintextSize: diskSize) + (pendingTailRepair == nil ? 0 : bytesAfterAuthenticatedEnd)
        if header != nil, needsRefresh || physical != expected {
            diskSize = layout.plaintextSize(forPhysicalSize: physical) ?? max(0, diskSize)
            size = diskSize
            tailVerified = false
            pendingTailRepair = nil
            bytesAfterAuthenticatedEnd = 0
            do { try verifyTrailerIfNeeded() } catch { if error.code != .badKeyOrCorruptData { endCoordinated(); throw error } }
        }
    }

    /// Ends a coordinated operation: the change is written through, then the lock released.
    func finishCoordinated() throws(SecureFileError) {
        defer { endCoordinated() }
        try flushCache()
    }

    func endCoordinated() {
        if cacheDirty { cacheDirty = false; cacheIndex = -1; cacheLength = 0; cache.wipe() }
        _ = Sys.lockFile(ioFD, Int16(F_UNLCK))
    }

    // MARK: helpers

    private func sealChunk(into c: UnsafeMutableRawPointer, index: Int64, plaintext: UnsafeRawPointer, count: Int) throws(SecureFileError) {
        guard let cipher, header != nil else { throw .ace(.noKeys, "\(path): no key") }
        NonceGenerator.fill(UnsafeMutableRawBufferPointer(start: c, count: FileLayout.nonceSize))
        FileLayout.writeChunkAAD(aad, fileID: fileID, index: index)
        do {
            try cipher.seal(nonce: c, aad: UnsafeRawBufferPointer(start: aad, count: FileLayout.chunkAADSize),
                            plaintext: UnsafeRawBufferPointer(start: plaintext, count: count),
                            ciphertext: c + FileLayout.nonceSize, tag: c + FileLayout.nonceSize + count)
        } catch {
            throw .ace(.internalError, "\(path): encryption failed")
        }
    }

    /// Seals the trailer for `size` at `t` (nonce ‖ tag); `nonceIsSet` when the caller already put a
    /// fresh nonce there.
    private func sealTrailer(into t: UnsafeMutableRawPointer, size: Int64, nonceIsSet: Bool = false) throws(SecureFileError) {
        guard let cipher, header != nil else { throw .ace(.noKeys, "\(path): no key") }
        if !nonceIsSet { NonceGenerator.fill(UnsafeMutableRawBufferPointer(start: t, count: FileLayout.nonceSize)) }
        FileLayout.writeTrailerAAD(trailerAAD, fileID: fileID, size: size)
        do {
            try cipher.seal(nonce: t, aad: UnsafeRawBufferPointer(start: trailerAAD, count: FileLayout.trailerAADSize),
                            plaintext: UnsafeRawBufferPointer(start: nil, count: 0),
                            ciphertext: t + FileLayout.nonceSize, tag: t + FileLayout.nonceSize)
        } catch {
            throw .ace(.internalError, "\(path): encryption failed")
        }
    }

    private func trailerBytes(size: Int64) throws(SecureFileError) -> [UInt8] {
        let t = ensureScratch(FileLayout.trailerSize)
        try sealTrailer(into: t, size: size)
        return Array(UnsafeRawBufferPointer(start: t, count: FileLayout.trailerSize))
    }

    private func ensureScratch(_ bytes: Int) -> UnsafeMutableRawPointer {
        if let scratch, scratchCapacity >= bytes { return scratch }
        scratch?.deallocate()
        let capacity = max(bytes, 2 * layout.physicalChunkSize + FileLayout.trailerSize)
        let p = UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 64)
        scratch = p
        scratchCapacity = capacity
        return p
    }

    /// After a failed or partial write the disk may not match what we believed: re-read its length.
    private func resynchronizeAfterFailedWrite() {
        tailVerified = false
        if case .success(let st) = Sys.fstat(ioFD) {
            let physical = Int64(st.st_size)
            diskSize = layout.plaintextSize(forPhysicalSize: physical) ?? diskSize
        }
        size = max(diskSize, cacheDirty ? cacheIndex << Int64(layout.chunkShift) + Int64(cacheLength) : 0)
        _ = try? verifyTrailerIfNeeded()
    }

    @discardableResult
    func checkIO<T>(_ result: Result<T, Errno>, _ what: @autoclosure () -> String) throws(SecureFileError) -> T {
        switch result {
        case .success(let v): return v
        case .failure(let e): throw .posix(e.rawValue, "\(path): \(what())")
        }
    }
}

/// A shared, read-only chunk of zeros (the largest chunk size), for holes.
enum ZeroChunk {
    nonisolated(unsafe) private static let zeros: UnsafeMutableRawPointer = {
        let count = 1 << Int(FileLayout.chunkShiftRange.upperBound)
        let p = UnsafeMutableRawPointer.allocate(byteCount: count, alignment: 64)
        p.initializeMemory(as: UInt8.self, repeating: 0, count: count)
        return p
    }()

    static func pointer(_ count: Int) -> UnsafeRawPointer { UnsafeRawPointer(zeros) }
}

/// A plain pthread mutex (held across a whole operation, so not a scoped `Mutex`).
final class PThreadMutex: @unchecked Sendable {
    private let m = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    init() { pthread_mutex_init(m, nil) }
    deinit { pthread_mutex_destroy(m); m.deallocate() }
    @inline(__always) func lock() { pthread_mutex_lock(m) }
    @inline(__always) func unlock() { pthread_mutex_unlock(m) }
    @inline(__always) func withLock<R, E: Error>(_ body: () throws(E) -> R) throws(E) -> R {
        lock(); defer { unlock() }
        return try body()
    }
}

extension FileLayout {
    static let trailerAADSize = 32

    /// `trailerAAD(fileID:size:)` ("ACSF end" ‖ file ID ‖ u64 size) written into caller memory,
    /// so sealing a trailer on every flush of the last chunk allocates nothing.
    @inline(__always) static func writeTrailerAAD(_ out: UnsafeMutableRawPointer, fileID: UnsafeRawPointer, size: Int64) {
        out.storeBytes(of: UInt64(0x4143_5346_2065_6E64).bigEndian, as: UInt64.self)  // "ACSF end"
        (out + 8).copyMemory(from: fileID, byteCount: 16)
        out.storeBytes(of: UInt64(size).bigEndian, toByteOffset: 24, as: UInt64.self)
    }
}
