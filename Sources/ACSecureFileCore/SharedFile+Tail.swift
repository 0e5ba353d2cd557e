#if canImport(Glibc)
import Glibc
#endif
import ACCrypto
import ACSystemCalls

/// The authenticated end of the file: checking it, recovering from an interrupted write, and
/// refusing to build on an end that does not authenticate (docs/FORMAT.md "Write order").
///
/// The end is intact when the trailer authenticates the length the physical size implies **and**
/// the last chunk authenticates at that length. Every change that moves the end writes beyond the
/// old end first (new chunks, then the new trailer) and only then the bytes before it, so an
/// interrupted change leaves the old file complete on disk, followed by some new bytes: the old
/// trailer and old last chunk still authenticate. Recovery takes the last such end within one write
/// batch. Bytes after it are never returned; they are reported (`bytesAfterAuthenticatedEnd`) and cut
/// off by the next change. A file whose end cannot be authenticated at all refuses every change but
/// a cut to 0 (`tailFailure`), so a truncation can never be sealed over.
extension SharedFile {
    /// Checks (once after each change of the disk's length) that the file ends where it was
    /// written to end. Throws `ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR` if no end authenticates.
    /// - Parameter physicalSize: the file's length when the caller has just read it (an open).
    func verifyTrailerIfNeeded(physicalSize: Int64? = nil) throws(SecureFileError) {
        if tailVerified { return }
        if let tailFailure { throw tailFailure }
        guard hasHeader, cipher != nil else { return }
        let physical: Int64
        if let physicalSize { physical = physicalSize } else { physical = try checkIO(Sys.fileSize(ioFD), "statx") }
        // An interrupted change recorded where the file ends if it did not complete.
        if let pending = try pendingEndTakesPrecedence(physical: physical) {
            if try takeTailCopyIfNeeded(mainSize: pending.size, lastChunkIntact: true, physical: physical) { return }
            adoptEnd(pending.end, size: pending.size, physical: physical)
            return
        }
        if let cut = pendingEndRecorded, try takeTailCopyOfPendingCut(cut, physical: physical) { return }
        let end = diskEnd
        var trailerOnly = false
        if physical == end {
            switch try endAuthenticates(at: end, size: diskSize, shape: diskShape) {
            case .intact:
                if try takeTailCopyIfNeeded(mainSize: diskSize, lastChunkIntact: true, physical: physical) { return }
                tailVerified = true
                return
            case .lastChunkFails: trailerOnly = true
            case .trailerFails: break
            }
        }
        if let (validEnd, validSize, validShape) = try findLastValidEnd(physical: physical) {
            if try takeTailCopyIfNeeded(mainSize: validSize, lastChunkIntact: true, physical: physical) { return }
            adoptEnd(validEnd, size: validSize, shape: validShape, physical: physical)
            return
        }
        if trailerOnly {
            // The length authenticates but the last chunk does not, and no earlier end does: the
            // chunk itself was damaged (or its rewrite torn: then the last sync's copy has it).
            if try takeTailCopyIfNeeded(mainSize: diskSize, lastChunkIntact: false, physical: physical) { return }
            // Or a torn append from an aligned end left it (version 5): the end before it, visibly.
            if let aligned = try alignedEndBelowATornAppend() {
                adoptEnd(layout.physicalSize(forPlaintextSize: aligned), size: aligned, physical: physical)
                restoredTail = .alignedEnd
                return
            }
            // Reading it fails; the length stands.
            tailVerified = true
            return
        }
        // No end in place: the end of the last sync, if its copy is complete.
        if try takeTailCopyIfNeeded(mainSize: nil, lastChunkIntact: false, physical: physical) { return }
        let failure = SecureFileError.ace(.badKeyOrCorruptData,
                                          "\(path): length check failed (file truncated, extended or damaged at its end)")
        tailFailure = failure
        throw failure
    }

    /// Takes the end at physical offset `end` (plaintext `size`) as the file's end; what follows it
    /// is reported and cut off by the next change.
    private func adoptEnd(_ end: Int64, size validSize: Int64, shape: TailShape = .none, physical: Int64) {
        diskSize = validSize
        diskShape = shape
        size = max(validSize, runEnd)
        if cacheIndex >= diskChunks { dropCache() }
        dropReadCache()  // the end moved: its last chunk may be another length now
        pendingTailRepair = end < physical ? end : nil
        restoredTail = nil
        bytesAfterAuthenticatedEnd = physical - end
        tailVerified = true
    }

    /// Changes need an authenticated end: building on a cut file would seal the cut into a file
    /// that then verifies.
    func requireAuthenticatedEnd() throws(SecureFileError) {
        guard hasHeader else { return }
        try verifyTrailerIfNeeded()
        // An end taken back to a chunk boundary gets its trailer before the change seals anything:
        // the cut that writes it uses the scratch memory.
        if case .alignedEnd = restoredTail { try repairTornTailIfNeeded() }
    }

    enum EndCheck { case intact, lastChunkFails, trailerFails }

    /// One read of the last chunk and the trailer before `end`, both authenticated.
    func endAuthenticates(at end: Int64, size: Int64, shape: TailShape = .none) throws(SecureFileError) -> EndCheck {
        guard let cipher else { return .trailerFails }
        let trailerAt = end - Int64(layout.trailerSize)
        let lastIndex = size > 0 ? (size - 1) >> Int64(layout.chunkShift) : -1
        let from = lastIndex >= 0 ? layout.chunkOffset(lastIndex) : trailerAt
        let count = Int(end - from)
        let buf = ensureScratch(count)
        let got = try checkIO(Sys.preadFull(ioFD, buf, count, from), "read the end of the file")
        guard got == count, trailerAuthenticates(buf + Int(trailerAt - from), size: size, shape: shape) else { return .trailerFails }
        guard lastIndex >= 0 else { return .intact }
        let length = layout.chunkLength(lastIndex, size: size)
        defer { secureZero(UnsafeMutableRawBufferPointer(start: workBase, count: length)) }
        if shape.records > 0 {
            return try openTail(buf, count: Int(trailerAt - from), index: lastIndex, size: size, shape: shape,
                                into: workBase, cipher: cipher) ? .intact : .lastChunkFails
        }
        // (An overwrite of the last chunk torn by a kill, its chunk copy whole: the end is intact.)
        return try openChunkInPlaceOrFromCopy(buf, index: lastIndex, length: length, into: workBase, cipher: cipher) ? .intact : .lastChunkFails
    }

    /// Scans back from the physical end, over at most one write batch, for the last position at
    /// which a trailer authenticates the length that position implies and the last chunk of that
    /// length authenticates too.
    ///
    /// Version 2 writers seal a last chunk that is not full together with its trailer under one
    /// selector (`reserveLastChunkAndTrailerSeals`), so for such a length the two stored selectors
    /// must be equal: a 4-byte comparison rules out almost every position before any GCM. Lengths
    /// that end a full chunk (a trailer may be written alone there, by a shrink) are checked in
    /// full: one per chunk of the window. A damaged end of a large file costs a few hundred GCM
    /// checks, not one per byte.
    private func findLastValidEnd(physical: Int64) throws(SecureFileError) -> (Int64, Int64, TailShape)? {
        guard let cipher else { return nil }
        let minimumEnd = layout.dataOffset + Int64(layout.trailerSize)
        guard physical >= minimumEnd else { return nil }
        let physicalChunk = Int64(layout.physicalChunkSize)
        let lowestEnd = max(minimumEnd, physical - recoveryWindowBytes)
        // One chunk more than the trailers need, so the last chunk of the lowest end is in the buffer.
        let from = max(layout.dataOffset, lowestEnd - Int64(layout.trailerSize) - physicalChunk)
        let count = Int(physical - from)
        let buf = ensureScratch(count)
        let got = try checkIO(Sys.preadFull(ioFD, buf, count, from), "read")
        let top = from + Int64(got)
        let trailerSize = Int64(layout.trailerSize)
        var trailerChecks = 0
        defer { if trailerChecks > 0 { Self.recoveryTrailerChecks.withLock { $0 += trailerChecks } } }

        // Whether the end at `end` (plaintext `size`, last chunk `index` at `chunkAt`) authenticates.
        // Its last chunk may be torn with its chunk copy whole, as at the end check: a kill that cut
        // the rewrite of the old last chunk of a write across a chunk-aligned end, before the head
        // of the next chunk went over the old trailer.
        func authenticates(_ end: Int64, size: Int64, index: Int64, chunkAt: Int64) throws(SecureFileError) -> Bool {
            trailerChecks += 1
            guard trailerAuthenticates(buf + Int(end - trailerSize - from), size: size) else { return false }
            if size == 0 { return true }
            let length = layout.chunkLength(index, size: size)
            defer { secureZero(UnsafeMutableRawBufferPointer(start: workBase, count: length)) }
            return try openChunkInPlaceOrFromCopy(buf + Int(chunkAt - from), index: index, length: length, into: workBase, cipher: cipher)
        }

        // Candidate ends from the highest down, grouped by their last chunk `index`: first the end
        // of the full chunk, then the ends inside it (lengths 2^s-1 down to 1).
        let overhead = Int64(layout.chunkOverhead)
        var index = (top - layout.dataOffset - overhead - 1 - trailerSize) / physicalChunk
        while index >= 0 {
            let chunkAt = layout.chunkOffset(index)
            let fullEnd = chunkAt + physicalChunk + trailerSize
            if fullEnd < lowestEnd { break }
            if chunkAt >= from {
                let fullSize = (index + 1) << Int64(layout.chunkShift)
                if fullEnd <= top, try authenticates(fullEnd, size: fullSize, index: index, chunkAt: chunkAt) {
                    return try endWithRecords(above: fullEnd) ?? (fullEnd, fullSize, .none)
                }
                let lo = max(lowestEnd, chunkAt + overhead + 1 + trailerSize)
                let hi = min(top, fullEnd - 1)
                if lo <= hi {
                    // Version 2: only where the trailer names the chunk's selector (the writer rule).
                    let ends = layout.selectorSize > 0
                        ? selectorMatches(buf + Int(lo - trailerSize - from), count: Int(hi - lo) + 1,
                                          selector: buf + Int(chunkAt - from)).map { lo + Int64($0) }
                        : Array(lo...hi)
                    for end in ends.reversed() {
                        let size = fullSize - (fullEnd - end)
                        if try authenticates(end, size: size, index: index, chunkAt: chunkAt) {
                            return try endWithRecords(above: end) ?? (end, size, .none)
                        }
                    }
                }
            }
            index -= 1
        }
        if minimumEnd >= lowestEnd, minimumEnd <= top, try authenticates(minimumEnd, size: 0, index: -1, chunkAt: 0) {
            return try endWithRecords(above: minimumEnd) ?? (minimumEnd, 0, .none)
        }
        return try endWithRecords(above: lowestEnd - 1)

        // Version 5: the highest end above `floor` whose last chunk is in records (its footer says
        // so, and places the records right after a chunk), if one authenticates. The version 4
        // candidates above are the ends with no records.
        func endWithRecords(above floor: Int64) throws(SecureFileError) -> (Int64, Int64, TailShape)? {
            guard layout.hasTailRecords else { return nil }
            var end = top
            let lowest = max(floor + 1, lowestEnd, from + trailerSize + overhead)
            while end >= lowest {
                let footer = buf + Int(end - from) - TailShape.footerSize
                defer { end -= 1 }
                // Cheap filters first: the reserved bytes are zero, and 1 to 64 records.
                guard footer.loadUnaligned(fromByteOffset: 6, as: UInt16.self) == 0, footer.load(fromByteOffset: 0, as: UInt8.self) == 0,
                      case let n = footer.load(fromByteOffset: 1, as: UInt8.self), n > 0, Int(n) <= TailShape.maximumRecords,
                      let (size, shape) = layout.plaintextSize(forPhysicalSize: end, footer: footer), shape.records > 0 else { continue }
                let index = (size - 1) >> Int64(layout.chunkShift)
                let chunkAt = layout.chunkOffset(index)
                guard chunkAt >= from else { continue }
                trailerChecks += 1
                let trailerAt = buf + Int(end - trailerSize - from)
                guard trailerAuthenticates(trailerAt, size: size, shape: shape) else { continue }
                let length = layout.chunkLength(index, size: size)
                defer { secureZero(UnsafeMutableRawBufferPointer(start: workBase, count: length)) }
                if try openTail(buf + Int(chunkAt - from), count: Int(end - trailerSize - chunkAt), index: index, size: size,
                                shape: shape, into: workBase, cipher: cipher) {
                    return (end, size, shape)
                }
            }
            return nil
        }
    }

    /// How far back from the physical end the recovery scan looks: one write batch and two chunks.
    var recoveryWindowBytes: Int64 {
        Int64((Self.batchBytes >> Int(layout.chunkShift)) + 2) * Int64(layout.physicalChunkSize)
    }

    /// The positions `i` in `0..<count` (ascending) where the 4 bytes at `p + i` equal those at
    /// `selector`; `memchr` finds the first byte, so a scan of a chunk costs microseconds.
    private func selectorMatches(_ p: UnsafeRawPointer, count: Int, selector: UnsafeRawPointer) -> [Int] {
        let first = Int32(selector.load(as: UInt8.self))
        let s = selector.loadUnaligned(as: UInt32.self)
        var found: [Int] = []
        var i = 0
        while i < count, let hit = memchr(p + i, first, count - i) {
            let at = UnsafeRawPointer(hit) - p
            if (p + at).loadUnaligned(as: UInt32.self) == s { found.append(at) }
            i = at + 1
        }
        return found
    }

    /// Trailer candidates the recovery scans of this process authenticated with GCM (for tests).
    static let recoveryTrailerChecks = LockedValue(0)

    /// Cuts off what an interrupted extension left after the last complete file, before the file changes.
    func repairTornTailIfNeeded() throws(SecureFileError) {
        guard let end = pendingTailRepair else { return }
        if case .alignedEnd = restoredTail {
            // No copy to write back: a trailer at the boundary, ordered like any cut's.
            try writeTrailerAndCut(to: diskSize)
            restoredTail = nil
        } else {
            try writeRestoredTailBack()
            try checkIO(Sys.ftruncate(ioFD, end), "truncate torn tail")
        }
        pendingTailRepair = nil
        bytesAfterAuthenticatedEnd = 0
    }

    /// After a failed or partial write the disk may not match what we believed: re-read its length
    /// and authenticate the end again (a failure to do so is kept in `tailFailure`).
    func resynchronizeAfterFailedWrite() {
        tailVerified = false
        restoredTail = nil
        dropReadCache()
        if case .success(let physical) = Sys.fileSize(ioFD) {
            let fallback = diskSize
            do { try adoptSizeOnDisk(physical: physical, otherwise: fallback) } catch { diskSize = fallback }
        }
        size = max(diskSize, runEnd)
        do { try verifyTrailerIfNeeded() } catch {
            // Already recorded in tailFailure (or an I/O error): the next change reports it.
        }
    }
}
