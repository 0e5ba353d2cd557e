#if canImport(Glibc)
import Glibc
#endif
import ACCrypto
import ACSystemCalls

/// Tail records (format version 5, docs/FORMAT.md "Version 5"): an append inside the last chunk
/// seals only its own bytes, as a record after the last chunk's sealed bytes, and writes it with
/// the new trailer over the old trailer. No sealed byte is ever rewritten by an append, so an
/// append needs no copy of the end and seals only what it adds.
///
/// Only appends make records. Every other change first seals the last chunk whole again
/// (`compactTail`: the version 4 layout, whose paths then run unchanged), and so does a sync, whose
/// tail copy holds one sealed chunk.
extension SharedFile {
    /// Where the file on disk ends (its physical length when nothing follows the end).
    var diskEnd: Int64 { layout.physicalSize(forPlaintextSize: diskSize, shape: diskShape) }

    /// Size and end shape of a file of `physical` bytes on `fd` (version 5: read from the footer
    /// its last 8 bytes hold), or nil when the length is not a valid end. A version 5 footer that
    /// names no end (a cut or damaged end) falls back to the length read as an end with no records,
    /// as a version 4 length is: an unauthenticated size, which the end check then corrects.
    static func sizeOnDisk(_ layout: FileLayout, fd: Int32, physical: Int64) -> Result<(size: Int64, shape: TailShape)?, Errno> {
        guard layout.hasTailRecords else { return .success(layout.plaintextSize(forPhysicalSize: physical).map { ($0, .none) }) }
        guard physical >= layout.dataOffset + Int64(layout.trailerSize) else { return .success(nil) }
        var footer: UInt64 = 0
        let got = withUnsafeMutableBytes(of: &footer) { Sys.preadFull(fd, $0.baseAddress!, TailShape.footerSize, physical - Int64(TailShape.footerSize)) }
        return got.map { n in
            let end = n == TailShape.footerSize
                ? withUnsafeBytes(of: footer) { layout.plaintextSize(forPhysicalSize: physical, footer: $0.baseAddress!) } : nil
            return end ?? layout.plaintextSize(forPhysicalSize: physical).map { ($0, .none) }
        }
    }

    /// Takes the size and shape of the file on disk from its physical length (`diskSize` unchanged
    /// when the length is not a valid end: the end check then recovers it).
    func adoptSizeOnDisk(physical: Int64, otherwise fallback: Int64) throws(SecureFileError) {
        if let (size, shape) = try checkIO(Self.sizeOnDisk(layout, fd: ioFD, physical: physical), "read the end of the file") {
            diskSize = size
            diskShape = shape
        } else {
            diskSize = fallback
        }
    }

    /// Opens the end region of a file of `size` bytes shaped `shape` — its base chunk and records,
    /// `count` sealed bytes at `region` (the last chunk's place up to the trailer) — into
    /// `plaintext`. False when any part fails, or the records do not fill the region exactly.
    func openTail(_ region: UnsafeRawPointer, count: Int, index: Int64, size: Int64, shape: TailShape,
                  into plaintext: UnsafeMutableRawPointer, cipher: ChunkKeys) throws(SecureFileError) -> Bool {
        let remainder = layout.chunkLength(index, size: size)
        let base = remainder - shape.recordBytes
        var at = 0
        if base > 0 {
            guard count >= base + layout.chunkOverhead,
                  try openChunkInPlaceOrFromCopy(region, index: index, length: base, into: plaintext, cipher: cipher) else { return false }
            at = base + layout.chunkOverhead
        }
        var offset = base
        for _ in 0..<shape.records {
            guard count - at >= TailShape.recordOverhead else { return false }
            let r = region + at
            let length = Int(UInt16(bigEndian: r.loadUnaligned(fromByteOffset: 16, as: UInt16.self)))
            guard length > 0, length <= remainder - offset, count - at >= length + TailShape.recordOverhead,
                  let context = cipher.context(forSelector: selector(at: r)) else { return false }
            TailShape.writeRecordAAD(aad, fileID: fileID, index: index, offset: offset, count: length)
            guard context.open(nonce: r + 4, aad: UnsafeRawBufferPointer(start: aad, count: TailShape.recordAADSize),
                               ciphertext: UnsafeRawBufferPointer(start: r + 18, count: length),
                               tag: r + 18 + length, plaintext: plaintext + offset) else {
                secureZero(UnsafeMutableRawBufferPointer(start: plaintext, count: offset))
                return false
            }
            at += length + TailShape.recordOverhead
            offset += length
        }
        guard offset == remainder, at == count else {
            secureZero(UnsafeMutableRawBufferPointer(start: plaintext, count: offset))
            return false
        }
        return true
    }

    /// Reads the last chunk, laid out as records (`diskShape`), from disk into `plaintext`.
    func readTailFromDisk(into plaintext: UnsafeMutableRawPointer, cipher: ChunkKeys) throws(SecureFileError) {
        let index = diskChunks - 1
        let from = layout.chunkOffset(index)
        let count = Int(diskEnd - Int64(layout.trailerSize) - from)
        let buf = ensureScratch(count)
        let got = try checkIO(Sys.preadFull(ioFD, buf, count, from), "read")
        guard got == count, try openTail(buf, count: count, index: index, size: diskSize, shape: diskShape,
                                          into: plaintext, cipher: cipher) else {
            throw .ace(.badKeyOrCorruptData, "\(path): chunk \(index) (its records) failed authentication")
        }
    }

    /// Whether an append at `offset` may build on the end as it is (records or not): write-through,
    /// at the end, inside a short last chunk whose plaintext is cached, nothing pending on the end.
    @inline(__always)
    func canAppendToRecords(at offset: Int64) -> Bool {
        guard layout.hasTailRecords, offset == diskSize, size == diskSize, runFirst < 0, !coordinated, !doubleWrite,
              tailVerified, tailFailure == nil, restoredTail == nil, pendingTailRepair == nil,
              diskShape.records < TailShape.maximumRecords, pendingEndRecorded == nil, unconfirmedChunkCopy == nil,
              case .none = cutSettlement else { return false }
        let remainder = Int(diskSize & Int64(chunkSize - 1))
        // The chunk's plaintext cached shows it authenticated (or was written here) since its last change.
        return remainder > 0 && cacheIndex == diskSize >> Int64(layout.chunkShift) && cacheLength == remainder
    }

    /// Appends `count` bytes as one record and a new trailer, written over the old trailer: one
    /// `pwrite` when all of it lies in one page (a kill stops a write only between pages), else
    /// first what lies beyond the old end, then the rest (the old trailer's place). A kill between
    /// the two leaves the old end whole. Returns false, having written nothing, when the old
    /// trailer's place spans two pages (a kill could tear it: the caller's path, which copies the
    /// end first, writes it instead).
    func appendRecord(_ buffer: UnsafeRawPointer, count: Int) throws(SecureFileError) -> Bool {
        guard let cipher else { throw .ace(.noKeys, "\(path): no key") }
        let oldEnd = diskEnd
        let trailerSize = layout.trailerSize
        let at = oldEnd - Int64(trailerSize)
        guard Self.withinOnePage(at, Int64(trailerSize)) else { return false }
        let index = diskChunks - 1
        let offset = Int(diskSize & Int64(chunkSize - 1))
        let total = count + TailShape.recordOverhead + trailerSize
        let buf = ensureScratch(total)
        try reserveLastChunkAndTrailerSeals(cipher: cipher)
        NonceGenerator.fill(UnsafeMutableRawBufferPointer(start: buf + 4, count: FileLayout.nonceSize))
        buf.storeBytes(of: UInt16(count).bigEndian, toByteOffset: 16, as: UInt16.self)
        TailShape.writeRecordAAD(aad, fileID: fileID, index: index, offset: offset, count: count)
        do {
            let (s, context) = try cipher.nextWrite()
            buf.storeBytes(of: s.bigEndian, as: UInt32.self)
            try context.seal(nonce: buf + 4, aad: UnsafeRawBufferPointer(start: aad, count: TailShape.recordAADSize),
                             plaintext: UnsafeRawBufferPointer(start: buffer, count: count),
                             ciphertext: buf + 18, tag: buf + 18 + count)
        } catch {
            throw .crypto(error, "\(path): encryption of a record of chunk \(index) failed")
        }
        let newSize = diskSize + Int64(count)
        let newShape = TailShape(records: diskShape.records + 1, recordBytes: diskShape.recordBytes + count)
        try sealTrailer(into: buf + count + TailShape.recordOverhead, size: newSize, shape: newShape)
        do {
            if Self.withinOnePage(at, Int64(total)) {
                try checkIO(Sys.pwriteFull(ioFD, buf, total, at), "write")
            } else {
                try checkIO(Sys.pwriteFull(ioFD, buf + trailerSize, total - trailerSize, oldEnd), "write")
                try checkIO(Sys.pwriteFull(ioFD, buf, trailerSize, at), "write")
            }
        } catch {
            resynchronizeAfterFailedWrite()
            throw error
        }
        diskSize = newSize
        diskShape = newShape
        size = newSize
        tailCopyStale = true
        // The cache holds the chunk (`canAppendToRecords`): its plaintext grows by these bytes.
        (cacheBase + offset).copyMemory(from: buffer, byteCount: count)
        cacheLength = offset + count
        readCacheDrop(from: index)
        return true
    }

    /// An append that fills a last chunk held in records: the chunk is sealed whole with the
    /// append's first bytes and written at its place with its trailer, after a copy of the end as it
    /// was (sealed as one chunk: a kill may cut the chunk's write between its pages, and the copy
    /// then gives the old end back); then the file is cut after the new end if the records reached
    /// further. The rest of the append goes on from the chunk-aligned end. Returns the bytes written.
    func appendFillingRecords(_ buffer: UnsafeRawPointer, count: Int) throws(SecureFileError) -> Int {
        guard let cipher else { throw .ace(.noKeys, "\(path): no key") }
        let index = diskChunks - 1
        let remainder = Int(diskSize & Int64(chunkSize - 1))
        let fill = chunkSize - remainder
        let oldEnd = diskEnd
        let physicalChunk = layout.physicalChunkSize
        let count0 = remainder + layout.chunkOverhead + layout.trailerSize
        let total = physicalChunk + layout.trailerSize
        let buf = ensureScratch(count0 + total)
        let copy = buf + total
        // The old end as one sealed chunk and its trailer, for the copy.
        try sealLastChunkAndTrailer(into: copy, index: index, plaintext: cacheBase, length: remainder, size: diskSize, cipher: cipher)
        // The full chunk and the trailer of the new end.
        (cacheBase + remainder).copyMemory(from: buffer, byteCount: fill)
        let newSize = diskSize + Int64(fill)
        do {
            try sealLastChunkAndTrailer(into: buf, index: index, plaintext: cacheBase, length: chunkSize, size: newSize, cipher: cipher)
        } catch {
            dropCache()
            throw error
        }
        let at = layout.chunkOffset(index)
        do {
            try writeTailCopy(size: diskSize, sealedEnd: copy, kind: .rewrite)
            try checkIO(Sys.pwriteFull(ioFD, buf, total, at), "write")
            if oldEnd > at + Int64(total) { try checkIO(Sys.ftruncate(ioFD, at + Int64(total)), "truncate") }
        } catch {
            dropCache()
            resynchronizeAfterFailedWrite()
            throw error
        }
        diskSize = newSize
        size = newSize
        tailCopyStale = true
        keepInCache(index, length: chunkSize)
        readCacheDrop(from: index)
        guard count > fill else { return count }
        return fill + (try writeSpan(buffer + fill, count: count - fill, at: newSize))
    }

    /// Seals the last chunk whole again, as version 4 lays it out, when it is in records: the
    /// caller is about to change the file otherwise (or sync it). A copy of the end it makes goes
    /// first (a kill may cut the rewrite between pages: the copy then holds the same bytes), then
    /// the chunk and its trailer over the base chunk's place, then the file is cut after them.
    func compactTail() throws(SecureFileError) {
        guard diskShape.records > 0, let cipher else { return }
        try settleCut()
        try repairTornTailIfNeeded()
        let index = diskChunks - 1
        let length = layout.chunkLength(index, size: diskSize)
        if !(cacheIndex == index && cacheLength == length) {
            dropCache()
            try readTailFromDisk(into: cacheBase, cipher: cipher)
            keepInCache(index, length: length)
        }
        let count = length + layout.chunkOverhead + layout.trailerSize
        let buf = ensureScratch(count)
        try sealLastChunkAndTrailer(into: buf, index: index, plaintext: cacheBase, length: length, size: diskSize, cipher: cipher)
        let from = layout.chunkOffset(index)
        let newEnd = layout.physicalSize(forPlaintextSize: diskSize)
        do {
            try writeTailCopy(size: diskSize, sealedEnd: buf, kind: .rewrite)
            try checkIO(Sys.pwriteFull(ioFD, buf, count, from), "write")
            try checkIO(Sys.ftruncate(ioFD, newEnd), "truncate")
        } catch {
            resynchronizeAfterFailedWrite()
            throw error
        }
        diskShape = .none
        tailCopyStale = true
    }
}
