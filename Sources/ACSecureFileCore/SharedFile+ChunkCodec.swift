#if canImport(Glibc)
import Glibc
#endif
import ACCrypto
import ACSystemCalls

/// Sealing and opening chunks and trailers (docs/FORMAT.md "Chunks" and "Trailer"), and the
/// scratch memory they use. Nothing here decides what to write where: that is the write path's job.
extension SharedFile {
    /// Reads and authenticates chunks `first..<first+count` from disk; chunk `i` goes to `destination(i)`.
    func readChunksFromDisk(first: Int64, count: Int, destination: (Int64) -> UnsafeMutableRawPointer) throws(SecureFileError) {
        guard let cipher else { throw .ace(.noKeys, "\(path): no key") }
        let last = first + Int64(count) - 1
        if last == diskChunks - 1 { try verifyTrailerIfNeeded() }
        if last == restoredChunkIndex {
            // The last chunk is in its tail copy until the next change writes it back in place.
            if count > 1 { try readChunksFromDisk(first: first, count: count - 1, destination: destination) }
            let length = layout.chunkLength(last, size: diskSize)
            let buf = ensureScratch(length + layout.chunkOverhead)
            guard try readRestoredChunk(into: buf, count: length + layout.chunkOverhead),
                  openChunk(buf, index: last, length: length, into: destination(last), cipher: cipher) else {
                throw .ace(.badKeyOrCorruptData, "\(path): chunk \(last) (its tail copy) failed authentication")
            }
            return
        }
        if last == diskChunks - 1 && diskShape.records > 0 {
            // The last chunk is in records (version 5).
            if count > 1 { try readChunksFromDisk(first: first, count: count - 1, destination: destination) }
            try readTailFromDisk(into: destination(last), cipher: cipher)
            return
        }
        try readAndOpenChunks(first: first, count: count, staging: ensureScratch, destination: destination, open: {
            openChunk($0, index: $1, length: $2, into: $3, cipher: cipher)
        }, recover: { (sealed, index, length, plaintext) throws(SecureFileError) -> Bool in
            // Torn by a kill, its chunk copy whole (SharedFile+ChunkCopy.swift).
            try openChunkFromCopy(index, length: length, inPlace: sealed, into: plaintext, cipher: cipher)
        })
    }

    /// Reads the sealed chunks `first..<first+count` with one `pread` into `staging(bytes)` and opens
    /// chunk `i` into `destination(i)` with `open(sealed, i, length, plaintext)`, or, when that
    /// fails, `recover` (same arguments): the loop of both read paths, which differ only in whose
    /// staging, AAD and contexts they use, and in whether they may look for a chunk copy.
    @inline(__always)
    func readAndOpenChunks(first: Int64, count: Int, staging: (Int) -> UnsafeMutableRawPointer,
                           destination: (Int64) -> UnsafeMutableRawPointer,
                           open: (UnsafeRawPointer, Int64, Int, UnsafeMutableRawPointer) -> Bool,
                           recover: (UnsafeRawPointer, Int64, Int, UnsafeMutableRawPointer) throws(SecureFileError) -> Bool) throws(SecureFileError) {
        let physical = layout.physicalChunkSize
        let lastLength = layout.chunkLength(first + Int64(count) - 1, size: diskSize)
        let total = (count - 1) * physical + lastLength + layout.chunkOverhead
        let buf = staging(total)
        let got = try checkIO(Sys.preadFull(ioFD, buf, total, layout.chunkOffset(first)), "read")
        guard got == total else {
            throw .ace(.badKeyOrCorruptData, "\(path): file is shorter than its chunks (truncated?)")
        }
        for j in 0..<count {
            let index = first + Int64(j)
            let sealed = buf + j * physical, length = j == count - 1 ? lastLength : chunkSize
            if open(sealed, index, length, destination(index)) { continue }
            guard try recover(sealed, index, length, destination(index)) else {
                throw .ace(.badKeyOrCorruptData, "\(path): chunk \(index) failed authentication")
            }
        }
    }

    /// The key selector stored at `p` (version 2), or 0 (version 1, which has none).
    @inline(__always) func selector(at p: UnsafeRawPointer) -> UInt32 {
        layout.selectorSize == 0 ? 0 : UInt32(bigEndian: p.loadUnaligned(as: UInt32.self))
    }

    /// Authenticates and decrypts one sealed chunk ([selector ‖] nonce ‖ ciphertext ‖ tag) of `length` plaintext bytes.
    @inline(__always)
    func openChunk(_ c: UnsafeRawPointer, index: Int64, length: Int, into plaintext: UnsafeMutableRawPointer,
                   cipher: ChunkKeys) -> Bool {
        guard let context = cipher.context(forSelector: selector(at: c)) else { return false }
        let n = c + layout.selectorSize
        FileLayout.writeChunkAAD(aad, fileID: fileID, index: index)
        return context.open(nonce: n, aad: UnsafeRawBufferPointer(start: aad, count: FileLayout.chunkAADSize),
                            ciphertext: UnsafeRawBufferPointer(start: n + FileLayout.nonceSize, count: length),
                            tag: n + FileLayout.nonceSize + length, plaintext: plaintext)
    }

    /// Seals `count` plaintext bytes as chunk `index` at `c`; the nonce (after the selector) must
    /// already be fresh. The selector is the writer's current one.
    @inline(__always)
    func sealChunk(_ c: UnsafeMutableRawPointer, index: Int64, plaintext: UnsafeRawPointer, count: Int,
                   cipher: ChunkKeys) throws(SecureFileError) {
        do {
            let (s, context) = try cipher.nextWrite()
            try FileLayout.sealChunk(c, selector: s, selectorSize: layout.selectorSize, context: context, aad: aad,
                                     fileID: fileID, index: index, plaintext: plaintext, count: count)
        } catch {
            throw .crypto(error, "\(path): encryption of chunk \(index) failed")
        }
    }

    /// Called before sealing the last chunk of a new end and then its trailer: both get one selector
    /// (docs/FORMAT.md "Recovery" relies on it for ends inside a chunk).
    func reserveLastChunkAndTrailerSeals(cipher: ChunkKeys) throws(SecureFileError) {
        do { try cipher.reserveSeals(2) } catch {
            throw .crypto(error, "\(path): cannot derive a chunk key")
        }
    }

    /// Seals `length` bytes of `plaintext` as chunk `index`, the last chunk of a file of `size`
    /// bytes, and its trailer right after it, into `buf` (`length + chunkOverhead + trailerSize`
    /// bytes): an end as version 4 lays it out, chunk and trailer under one selector.
    func sealLastChunkAndTrailer(into buf: UnsafeMutableRawPointer, index: Int64, plaintext: UnsafeRawPointer, length: Int,
                                 size: Int64, cipher: ChunkKeys) throws(SecureFileError) {
        try reserveLastChunkAndTrailerSeals(cipher: cipher)
        NonceGenerator.fill(UnsafeMutableRawBufferPointer(start: buf + layout.selectorSize, count: FileLayout.nonceSize))
        try sealChunk(buf, index: index, plaintext: plaintext, count: length, cipher: cipher)
        try sealTrailer(into: buf + length + layout.chunkOverhead, size: size)
    }

    /// Whether the trailer at `t` authenticates a file of `size` bytes whose end is laid out as
    /// `shape` says (version 5: the footer it ends with must say so too).
    func trailerAuthenticates(_ t: UnsafeRawPointer, size: Int64, shape: TailShape = .none) -> Bool {
        guard let cipher, let context = cipher.context(forSelector: selector(at: t)) else { return false }
        let n = t + layout.selectorSize
        let aadCount = writeTrailerAAD(size: size, shape: shape)
        // The footer stored is the one its AAD names: a footer altered alone must not go unseen.
        if layout.hasTailRecords,
           memcmp(t + layout.trailerSize - TailShape.footerSize, trailerAAD + FileLayout.trailerAADSize, TailShape.footerSize) != 0 {
            return false
        }
        return context.open(nonce: n, aad: UnsafeRawBufferPointer(start: trailerAAD, count: aadCount),
                            ciphertext: UnsafeRawBufferPointer(start: nil, count: 0),
                            tag: n + FileLayout.nonceSize, plaintext: workBase)
    }

    /// Writes the trailer's AAD for a file of `size` bytes into `trailerAAD` and returns its length:
    /// "ACSF end" ‖ file ID ‖ u64 size, and in version 5 the footer for `shape`.
    @inline(__always) private func writeTrailerAAD(size: Int64, shape: TailShape) -> Int {
        FileLayout.writeTrailerAAD(trailerAAD, fileID: fileID, size: size)
        guard layout.hasTailRecords else { return FileLayout.trailerAADSize }
        shape.writeFooter(trailerAAD + FileLayout.trailerAADSize, size: size, chunkShift: layout.chunkShift)
        return FileLayout.trailerAADSize + TailShape.footerSize
    }

    /// Seals the trailer for `size` at `t` ([selector ‖] nonce ‖ tag); `nonceIsSet` when the caller
    /// already put a fresh nonce after the selector.
    func sealTrailer(into t: UnsafeMutableRawPointer, size: Int64, nonceIsSet: Bool = false, shape: TailShape = .none) throws(SecureFileError) {
        guard let cipher, hasHeader else { throw .ace(.noKeys, "\(path): no key") }
        let n = t + layout.selectorSize
        if !nonceIsSet { NonceGenerator.fill(UnsafeMutableRawBufferPointer(start: n, count: FileLayout.nonceSize)) }
        let aadCount = writeTrailerAAD(size: size, shape: shape)
        if layout.hasTailRecords {
            (t + layout.trailerSize - TailShape.footerSize).copyMemory(from: trailerAAD + FileLayout.trailerAADSize, byteCount: TailShape.footerSize)
        }
        do {
            let (s, context) = try cipher.nextWrite()
            if layout.selectorSize > 0 { t.storeBytes(of: s.bigEndian, as: UInt32.self) }
            try context.seal(nonce: n, aad: UnsafeRawBufferPointer(start: trailerAAD, count: aadCount),
                             plaintext: UnsafeRawBufferPointer(start: nil, count: 0),
                             ciphertext: n + FileLayout.nonceSize, tag: n + FileLayout.nonceSize)
        } catch {
            throw .crypto(error, "\(path): sealing the trailer failed")
        }
    }

    /// What starts a file with `header` (or a new generation), composed in the scratch memory (valid
    /// until its next use): the bytes of the first sector — the header, then the empty file's
    /// trailer (versions 1 to 3) or the first tail copy (version 4, whose trailer follows the slots)
    /// — and, in version 4, the trailer to write at the data offset.
    func newFileStart(_ header: FileHeader) throws(SecureFileError) -> (sector: UnsafeRawBufferPointer, trailer: UnsafeRawPointer?) {
        let encoded = header.encoded()
        let tailCopies = header.layout.hasTailCopies
        let trailerAt = encoded.count + (tailCopies ? TailCopyDescriptor.size : 0)
        let count = trailerAt + layout.trailerSize
        let buf = ensureScratch(count)
        encoded.withUnsafeBytes { buf.copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
        try sealTrailer(into: buf + trailerAt, size: 0)
        if tailCopies { try writeFirstTailCopy(into: buf + encoded.count, trailer: buf + trailerAt) }
        return (UnsafeRawBufferPointer(start: buf, count: count), tailCopies ? UnsafeRawPointer(buf + trailerAt) : nil)
    }

    func ensureScratch(_ bytes: Int) -> UnsafeMutableRawPointer {
        if let scratch, scratchCapacity >= bytes { return scratch }
        scratch?.deallocate()
        let capacity = max(bytes, 2 * layout.physicalChunkSize + layout.trailerSize)
        let block = SpareScratch.take(atLeast: capacity)
            ?? SpareScratch.Block(pointer: .allocate(byteCount: capacity, alignment: 64), capacity: capacity)
        scratch = block.pointer
        scratchCapacity = block.capacity
        return block.pointer
    }
}

/// The scratch memory of the last file state released, for the next one made: a process that opens
/// and closes files one after another (a fuzzer's input does so several times) then allocates it
/// once. Scratch memory only ever holds ciphertext (sealed chunks, trailers, bytes read from disk).
enum SpareScratch {
    /// Larger blocks (a long write's batch) are freed, not kept.
    static let largestKept = 1 << 17
    private static let spare = LockedValue<Block?>(nil)

    struct Block: @unchecked Sendable {
        var pointer: UnsafeMutableRawPointer
        var capacity: Int
    }

    static func take(atLeast bytes: Int) -> Block? {
        spare.withLock { (slot: inout Block?) -> Block? in
            guard let block = slot, block.capacity >= bytes else { return nil }
            slot = nil
            return block
        }
    }

    /// Keeps `pointer` for the next state, or frees it.
    static func give(_ pointer: UnsafeMutableRawPointer, capacity: Int) {
        let kept = capacity <= largestKept && spare.withLock { (slot: inout Block?) -> Bool in
            guard slot == nil else { return false }
            slot = Block(pointer: pointer, capacity: capacity)
            return true
        }
        if !kept { pointer.deallocate() }
    }
}

/// A shared, read-only chunk of zeros (the largest chunk size), for holes.
enum ZeroChunk {
    /// Read-only anonymous pages: the kernel maps them all to its one zero page, so the largest
    /// chunk's zeros cost neither memory nor the time to write them (a debug build took milliseconds
    /// per process to fill a megabyte), and a stray write through the pointer faults at once.
    nonisolated(unsafe) private static let zeros: UnsafeRawPointer = {
        let count = 1 << Int(FileLayout.chunkShiftRange.upperBound)
        guard let p = mmap(nil, count, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0), p != MAP_FAILED else {
            fatalError("no address space for \(count) bytes of zeros: \(String(cString: strerror(errno)))")
        }
        return UnsafeRawPointer(p)
    }()

    static var pointer: UnsafeRawPointer { zeros }
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
