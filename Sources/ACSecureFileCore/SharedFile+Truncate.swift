#if canImport(Glibc)
import Glibc
#endif
import ACCrypto
import ACSecureServices
import ACSystemCalls

/// ftruncate semantics. Growing is a span of zeros (one run, like a write past the end). Shrinking
/// and emptying are ordered for a power loss, not only for a kill: the page cache writes pages back
/// in any order, and the length (`ftruncate`, metadata) may reach the device before or after the
/// data written around it. So the steps that must persist in order are separated by barriers
/// (`fdatasync`), and the cut itself is made durable before anything else changes the file
/// (`settleCut`). Whichever steps reach the device, the file opens at its old or its new length with
/// every byte below that length readable (docs/FORMAT.md "Power loss").
extension SharedFile {
    func truncate(to length: Int64) throws(SecureFileError) {
        try settleCut()
        tailCopyStale = true
        if length == 0, hasHeader, tailFailure != nil || size > 0 || diskSize > 0 || pendingTailRepair != nil {
            // Emptying a file starts a new generation (new file ID and data key): no chunk of the old
            // contents authenticates in the new file, and the nonce budget starts afresh. A file
            // whose end does not authenticate may be emptied too: nothing authentic is lost.
            // Buffered writes are cut with the rest (startNewGeneration drops the read cache).
            dropRun()
            dropCache()
            try startNewGeneration()
            return
        }
        try initializeIfNeeded()
        try requireAuthenticatedEnd()
        try flushRun()
        try repairTornTailIfNeeded()
        if length < diskSize { try compactTail() }
        dropCache()
        let shift = Int64(layout.chunkShift)
        if length > diskSize {
            let growth = Int(length - diskSize)
            guard try writeSpan(nil, count: growth, at: diskSize) == growth else {
                throw .ace(.noKeys, "\(path): secure services locked while growing the file")
            }
        } else if length < diskSize {
            let lastIndex = (length - 1) >> shift
            // The chunk the new end is in (rewritten shorter) and every chunk after it.
            readCacheDrop(from: lastIndex)
            if length > 0 && layout.chunkLength(lastIndex, size: length) != layout.chunkLength(lastIndex, size: diskSize) {
                // Inside a chunk: the chunk is rewritten shorter with its trailer, then the file is
                // cut after them. When chunks follow it, the old end still authenticates around the
                // rewritten chunk: the record (on the device first) tells a reader the cut was under
                // way. Version 1 files have no record: they first cut after the chunk.
                let chunkEnd = min(diskSize, (lastIndex + 1) << shift)
                let announced = chunkEnd < diskSize && layout.version >= 2  // (version 2 becomes 3 as it records)
                if !announced && chunkEnd < diskSize { try cut(to: chunkEnd) }
                work.wipe()
                try readChunksFromDisk(first: lastIndex, count: 1) { _ in self.workBase }
                let lastLength = Int(length - lastIndex << shift)
                secureZero(UnsafeMutableRawBufferPointer(start: workBase + lastLength, count: chunkSize - lastLength))
                let bytes = lastLength + layout.chunkOverhead + layout.trailerSize
                let buf = ensureScratch(bytes)
                guard let cipher else { throw .ace(.noKeys, "\(path): no key") }
                defer { work.wipe() }
                try sealLastChunkAndTrailer(into: buf, index: lastIndex, plaintext: workBase, length: lastLength, size: length, cipher: cipher)
                try changeDisk(length) { () throws(SecureFileError) in
                    // On the device before the chunk is rewritten: the record, when chunks follow it
                    // (the old end still authenticates around the rewritten chunk: the record tells a
                    // reader the cut was under way), and in version 4 the new end's tail copy (the
                    // rewrite is of synced bytes in place: a torn one is completed from the copy).
                    if announced { try recordPendingEnd(length) }
                    if layout.hasTailCopies { try writeTailCopy(size: length, sealedEnd: buf) }
                    if announced && layout.hasPendingEndRecord || layout.hasTailCopies {
                        try orderingBarrier("the pending end and the tail copy before the shortened chunk")
                    }
                    try checkIO(Sys.pwriteFull(ioFD, buf, bytes, layout.chunkOffset(lastIndex)), "write")
                    // The chunk and its trailer on the device before the cut: cut first, the chunk
                    // would end in its old bytes with no trailer.
                    try orderingBarrier("the shortened chunk before the cut")
                    try checkIO(Sys.ftruncate(ioFD, layout.physicalSize(forPlaintextSize: length)), "truncate")
                }
                // Without chunks after it, the old end's last chunk is this one: a reader finds the new end.
                if announced { cutSettlement = .barrierFirst }
            } else {
                try cut(to: length)
            }
        }
        size = length
    }

    /// Replaces the file by an empty one under a new header (new file ID, new data key wrapped under
    /// the same key-encryption key). One 160-byte `pwrite` puts the new header, recording 0 as its
    /// pending end, and its empty trailer at offset 0; then `ftruncate` cuts the old chunks, and
    /// the record is cleared. A crash before the cut leaves the new empty file followed by
    /// old-generation bytes that no longer authenticate, however many: the record says the file
    /// ends at 0 (docs/FORMAT.md "Empty files").
    func startNewGeneration() throws(SecureFileError) {
        let kek: KeyEncryptionKey
        do { kek = try services.keyEncryptionKey(for: keySelection) } catch { throw .services(error, path) }
        let newKey: SecureBytes
        do { newKey = try SecureBytes(randomCount: 32) } catch { throw .crypto(error, "\(path): data key") }
        // A new generation is a new file: a version 1 file becomes a current-version file here.
        let newLayout = FileLayout.forNewFile(chunkShift: layout.chunkShift)
        var newHeader = try FileHeader.create(layout: newLayout, kek: kek, dataKey: newKey)
        let newCipher: ChunkKeys
        do { newCipher = try ChunkKeys(dataKey: newKey, selectors: newLayout.selectorSize > 0) } catch {
            throw .crypto(error, "\(path): cannot set up AES-GCM")
        }
        // (Unknown, the later change waits for the cut: see `cutSettlement` below.)
        let oldPhysical: Int64?
        if case .success(let length) = Sys.fileSize(ioFD) { oldPhysical = length } else { oldPhysical = nil }
        try setLayout(newLayout)
        dropReadCache()
        cipher = newCipher
        dataKey = newKey
        header = newHeader
        keyGeneration = services.keyGeneration
        newHeader.pendingEnd = 0
        let start = try newFileStart(newHeader)
        tailFailure = nil
        pendingTailRepair = nil
        restoredTail = nil
        bytesAfterAuthenticatedEnd = 0
        pendingEndRecorded = 0
        try changeDisk(0) { () throws(SecureFileError) in
            try checkIO(Sys.pwriteFull(ioFD, start.sector.baseAddress!, start.sector.count, 0), "write header")
            // The new header on the device before the cut: cut first, the old header would be
            // left over 32 bytes of its first chunk, with no end at all. (Version 4: the header's
            // sector holds the empty file's tail copy, so the trailer after the slots, which lands
            // on old bytes, waits for the barrier too.)
            try orderingBarrier("the new header before the cut")
            if let trailer = start.trailer {
                try checkIO(Sys.pwriteFull(ioFD, trailer, layout.trailerSize, layout.dataOffset), "write the empty trailer")
            }
            try checkIO(Sys.ftruncate(ioFD, layout.physicalSize(forPlaintextSize: 0)), "truncate")
        }
        // Until the cut is on the device, a later change landing without it leaves the new end among
        // old-generation bytes: the recovery scan finds it only within its window of the old end.
        cutSettlement = oldPhysical.map { $0 <= newLayout.dataOffset + recoveryWindowBytes } == true ? .clearRecord : .barrierFirst
        size = 0
    }

    /// Cuts the file at a chunk boundary (or to 0): the new trailer first, over bytes being cut, then
    /// the physical cut.
    ///
    /// The new trailer lands on the head of a chunk the old end may still claim. When chunks follow
    /// that one, the old end authenticates around it, so the header records the new length first,
    /// on the device before the trailer: the record is how a reader knows the cut was under way (it
    /// completes it), and it stays until the cut is on the device (`settleCut`). When that chunk is
    /// the last one, the old end no longer authenticates once the trailer is down and the recovery
    /// scan finds the new end: no record is needed. Either way the trailer is on the device before
    /// the cut (cut first, the file would end without one). The 32-byte trailer of versions 2 to 4
    /// never spans two sectors (chunk slots start at multiples of 32), so no torn write splits it;
    /// version 5's 40-byte one may, so its copy goes to the device first (`writeTrailerAndCut`).
    private func cut(to length: Int64) throws(SecureFileError) {
        let shift = Int64(layout.chunkShift)
        let announced = diskSize > 0 && (diskSize - 1) >> shift > length >> shift
        if announced { try recordPendingEndDurably(length) }
        try writeTrailerAndCut(to: length)
        if announced && layout.hasPendingEndRecord { cutSettlement = .barrierFirst }
    }

    /// What every cut to a chunk boundary writes (also an end taken on another's word,
    /// `adoptVouchedEnd`): the trailer for `length` at its place, on the device, then the cut after it.
    func writeTrailerAndCut(to length: Int64) throws(SecureFileError) {
        let end = layout.physicalSize(forPlaintextSize: length)
        let t = ensureScratch(layout.trailerSize)
        try sealTrailer(into: t, size: length)
        try changeDisk(length) { () throws(SecureFileError) in
            if layout.hasTailRecords {
                // A torn trailer (it may span two sectors) leaves the cut's copy to take the end from.
                // (The trailer is kept outside the scratch memory, which writing the copy may use.)
                try withUnsafeTemporaryAllocation(byteCount: layout.trailerSize, alignment: 8) { (kept) throws(SecureFileError) in
                    kept.baseAddress!.copyMemory(from: t, byteCount: layout.trailerSize)
                    try writeTailCopy(size: length, sealedEnd: kept.baseAddress!)
                    try orderingBarrier("the cut's tail copy before its trailer")
                    try checkIO(Sys.pwriteFull(ioFD, kept.baseAddress!, layout.trailerSize, end - Int64(layout.trailerSize)), "write trailer")
                }
            } else {
                try checkIO(Sys.pwriteFull(ioFD, t, layout.trailerSize, end - Int64(layout.trailerSize)), "write trailer")
                try writeTailCopy(size: length)
            }
            try orderingBarrier("the new trailer before the cut")
            try checkIO(Sys.ftruncate(ioFD, end), "truncate")
        }
    }

    /// Records the pending end and puts it on the device before the change it announces.
    /// Version 1 files have no record, and no barrier would help them: they keep their old order.
    private func recordPendingEndDurably(_ length: Int64) throws(SecureFileError) {
        try recordPendingEnd(length)
        if layout.hasPendingEndRecord { try orderingBarrier("the pending end before the cut") }
    }

    /// An ordering point between two steps of a change: `fdatasync(2)`, so every step before it is on
    /// the device before any step after it is written. Cuts and emptying use them (a power loss
    /// must not find the length changed around data that is not there yet), and double writes.
    func orderingBarrier(_ why: String) throws(SecureFileError) {
        try checkIO(Sys.fdatasync(ioFD), "fdatasync (\(why))")
    }

    /// What a cut leaves to do before anything else changes the file (`settleCut`).
    enum CutSettlement {
        case none
        /// Its record can be cleared: wherever the cut and the next change land, a reader finds the end.
        case clearRecord
        /// The cut must be on the device first: a later change reaching the device without it could
        /// be read around the old length (an append over bytes the old end still claims, or a new
        /// end beyond the recovery scan's reach among old-generation bytes).
        case barrierFirst
    }

    /// Before anything else changes the file after a cut: the cut on the device if it must be, then
    /// its record cleared. The application's own sync settles it too (`makeDurable`).
    func settleCut() throws(SecureFileError) {
        switch cutSettlement {
        case .none: return
        case .clearRecord: break
        case .barrierFirst: try orderingBarrier("a cut before the next change")
        }
        cutSettlement = .none
        try clearPendingEnd()
    }

    private func changeDisk(_ length: Int64, _ body: () throws(SecureFileError) -> Void) throws(SecureFileError) {
        do { try body() } catch {
            resynchronizeAfterFailedWrite()
            throw error
        }
        diskSize = length
        tailVerified = true
    }
}
