#if canImport(Glibc)
import Glibc
#endif
import ACCrypto
import ACSystemCalls

/// The write path. A write-through call (the default) is one *span*: every chunk it changes,
/// including the padding of a short last chunk and the encrypted zeros of a hole, sealed in order
/// and written as one run, so the disk changes length once per call (once per 1 MiB batch for
/// larger calls). Write-back handles collect small writes in the write-back run and write it as
/// one span (`SharedFile+WriteBack.swift`).
///
/// Order on disk (what makes an interrupted change recoverable, see `SharedFile+Tail.swift`):
/// a run that moves the end writes everything beyond the old end first, ending with the new
/// trailer, then the bytes before the old end; a shrink writes the new trailer before cutting.
extension SharedFile {
    /// pwrite semantics on the logical file; the caller has checked limits and access. Returns the
    /// bytes written: all of them, or fewer when services lock during a long write.
    /// `records`: an append may be a record (version 5), i.e. no sync follows at once.
    func write(from buffer: UnsafeRawPointer, count: Int, at offset: Int64, writeBack: Bool, records: Bool = true) throws(SecureFileError) -> Int {
        try initializeIfNeeded()
        try requireAuthenticatedEnd()
        // Version 5: an append inside the last chunk is sealed alone, as a record.
        if !writeBack, records, canAppendToRecords(at: offset) {
            if Int(diskSize & Int64(chunkSize - 1)) + count < chunkSize {
                if try appendRecord(buffer, count: count) { return count }
            } else if diskShape.records > 0 {
                return try appendFillingRecords(buffer, count: count)
            }
        }
        guard writeBack else { return try writeSpan(buffer, count: count, at: offset) }
        return try writeBuffered(buffer, count: count, at: offset)
    }

    /// Writes `count` bytes (zeros when `buffer` is nil) at `offset` as one span and returns how many
    /// were written (fewer only when services lock between batches). The file grows to cover them;
    /// a gap between the old end and `offset` becomes encrypted zeros in the same run.
    ///
    /// A span that grows the file past a short last chunk is written in two runs: first up to the
    /// end of that chunk, then the rest. So the chunk rewritten over a short last chunk's end is
    /// its run's last chunk, which the end check authenticates; a run that starts at a chunk-aligned
    /// end and writes more than one chunk records the old end in the header first (`writeRun`). An
    /// interrupted run is always recognised and recovered (the file then ends at the old end, or
    /// at that chunk's end, with the call's first bytes written: a short write).
    ///
    /// Any other span writes the write-back run out first. The run's own span (`flushingRun`) is
    /// not stopped between its two runs, nor between batches, by a services lock: the lock flushes it.
    @discardableResult
    func writeSpan(_ buffer: UnsafeRawPointer?, count: Int, at offset: Int64, flushingRun: Bool = false) throws(SecureFileError) -> Int {
        guard count > 0 else { return 0 }
        if runFirst >= 0 && !flushingRun { try flushRun() }
        // Version 5: records become one sealed chunk again before anything else changes the end.
        if diskShape.records > 0 { try compactTail() }
        let shift = Int64(layout.chunkShift)
        let end = offset + Int64(count)
        let boundary = ((diskSize + Int64(chunkSize) - 1) >> shift) << shift
        guard diskSize & Int64(chunkSize - 1) != 0, end > boundary else {
            return try writeRunSpan(buffer, count: count, at: offset, flushingRun: flushingRun)
        }
        var first: Int
        if offset < boundary {
            first = try writeRunSpan(buffer, count: Int(boundary - offset), at: offset, flushingRun: flushingRun)
            guard first == Int(boundary - offset) else { return first }
        } else {
            // Only padding: the first run completes the short last chunk with zeros.
            guard try writeRunSpan(nil, count: Int(boundary - diskSize), at: diskSize, flushingRun: flushingRun) > 0 else {
                throw .ace(.noKeys, "\(path): secure services locked before the write")
            }
            first = 0
        }
        if stopRequested && !flushingRun { return first }
        let restFrom = max(offset, boundary)
        let rest = try writeRunSpan(buffer.map { $0 + Int(restFrom - offset) }, count: Int(end - restFrom), at: restFrom,
                                    flushingRun: flushingRun)
        return first + rest
    }

    private func writeRunSpan(_ buffer: UnsafeRawPointer?, count: Int, at offset: Int64, flushingRun: Bool) throws(SecureFileError) -> Int {
        let shift = Int64(layout.chunkShift)
        let end = offset + Int64(count)
        let newSize = max(diskSize, end)
        let firstIndex = offset >> shift
        let lastIndex = (end - 1) >> shift
        let onDisk = diskChunks
        // Beyond the end: start at the short last chunk (to pad it) or at the first missing chunk.
        let runFirst = offset > diskSize ? (diskSize & Int64(chunkSize - 1) != 0 ? onDisk - 1 : onDisk) : firstIndex
        precondition(runFirst <= onDisk, "chunks must be contiguous with the disk")

        if lastIndex - runFirst > (64 << 20) >> shift, case .success(let available) = Sys.availableBytes(ioFD),
           (lastIndex - runFirst + 1) * Int64(layout.physicalChunkSize) > available {
            throw SecureFileError(code: .noError, errno: ENOSPC,
                                  message: "\(path): \(lastIndex - runFirst + 1) chunks do not fit in \(available) free bytes (holes are stored as encrypted zeros)")
        }

        // A chunk that keeps some of its old bytes or is only partly written is composed in a
        // guarded buffer: in the cache when it is the only one, else the run's first chunk in
        // `work` and the others (at most one at a time, sealed in order) in the cache.
        func covered(_ i: Int64) -> Bool {
            let start = i << shift
            return start >= offset && start + Int64(layout.chunkLength(i, size: newSize)) <= end
        }
        let single = runFirst == lastIndex
        let firstNeedsOld = runFirst < onDisk && !covered(runFirst)
        let lastNeedsOld = !single && lastIndex < onDisk && !covered(lastIndex)
        /// The run's chunks that keep some of their old bytes (composed over the old chunk).
        func keepsOldBytes(_ i: Int64) -> Bool { (i == runFirst && firstNeedsOld) || (i == lastIndex && lastNeedsOld) }
        let firstTarget = single ? cache : work
        if firstNeedsOld { try readChunk(runFirst, into: firstTarget) }
        if lastNeedsOld { try readChunk(lastIndex, into: cache) }
        // From here the cache buffer composes chunks (or its chunk is rewritten): it is re-labelled
        // after the run with the chunk it then holds, if any.
        unlabelCache()
        var cacheHolds: Int64 = -1
        let zeros = ZeroChunk.pointer
        let firstBase = firstTarget.withUnsafeMutableBytes { $0.baseAddress! }
        let cacheBase = self.cacheBase
        let done: Int
        do {
            // The plaintext of chunk `i`. Passed straight to `writeRun` (not kept in a local first):
            // a non-escaping closure lives on the stack, a stored one (and `cacheHolds`, which it
            // changes) would be two heap allocations per call.
            done = try writeRun(first: runFirst, count: Int(lastIndex - runFirst + 1), flushingRun: flushingRun,
                                length: { self.layout.chunkLength($0, size: newSize) },
                                keepsOldBytes: keepsOldBytes) { (i: Int64) -> UnsafeRawPointer in
                let start = i << shift
                if covered(i) { return buffer.map { $0 + Int(start - offset) } ?? zeros }
                let hasOld = keepsOldBytes(i)
                let lo = max(start, offset), hi = min(start + Int64(self.layout.chunkLength(i, size: newSize)), end)
                if !hasOld && hi <= lo { return zeros }  // a chunk of the hole
                let target = i == runFirst ? firstBase : cacheBase
                if !hasOld { target.initializeMemory(as: UInt8.self, repeating: 0, count: self.chunkSize) }
                if hi > lo {
                    if let buffer {
                        (target + Int(lo - start)).copyMemory(from: buffer + Int(lo - offset), byteCount: Int(hi - lo))
                    } else {
                        (target + Int(lo - start)).initializeMemory(as: UInt8.self, repeating: 0, count: Int(hi - lo))
                    }
                }
                if target == cacheBase { cacheHolds = i }
                return UnsafeRawPointer(target)
            }
        } catch {
            dropCache()
            work.wipe()
            throw error
        }
        if firstTarget !== cache { work.wipe() }
        size = max(size, diskSize)
        if cacheHolds >= 0 {
            if done == Int(lastIndex - runFirst + 1) && cacheHolds == lastIndex {
                // The cache holds the chunk's final plaintext (composed over zeros, or over the old
                // chunk, zero after it): sequential appends read nothing back.
                keepInCache(lastIndex, length: layout.chunkLength(lastIndex, size: diskSize), tailIsZero: true)
            } else {
                dropCache()
            }
        } else if let buffer, done == Int(lastIndex - runFirst + 1), lastIndex == diskChunks - 1, covered(lastIndex),
                  case let length = layout.chunkLength(lastIndex, size: diskSize), length < chunkSize {
            // The file's new short last chunk came whole from the caller's buffer (a write from a
            // chunk-aligned end): keep its plaintext too, or the next append reads it back (a pread
            // and a GCM open per chunk of appends).
            keepInCache(lastIndex, length: length, from: buffer + Int((lastIndex << shift) - offset))
        }
        let doneEnd = min(end, (runFirst + Int64(done)) << shift)
        guard doneEnd > offset else {
            throw .ace(.noKeys, "\(path): secure services locked before the write")
        }
        return Int(doneEnd - offset)
    }

    /// Seals the trailer a batch of `k` sealed chunks ends with (right after its last chunk of
    /// `lastLength` bytes), under the batch's nonce after the chunks' (`nonces`: k + 1 of them).
    private func sealBatchTrailer(_ batch: UnsafeMutableRawPointer, chunks k: Int, lastLength: Int,
                                  nonces: UnsafeMutableRawPointer, size: Int64) throws(SecureFileError) {
        let t = batch + (k - 1) * layout.physicalChunkSize + lastLength + layout.chunkOverhead
        (t + layout.selectorSize).copyMemory(from: nonces + k * FileLayout.nonceSize, byteCount: FileLayout.nonceSize)
        try sealTrailer(into: t, size: size, nonceIsSet: true)
    }

    /// Decrypts chunk `index` into `buffer` (zeros beyond its length), from the cache if it is there.
    private func readChunk(_ index: Int64, into buffer: SecureBuffer) throws(SecureFileError) {
        let target = buffer.withUnsafeMutableBytes { $0.baseAddress! }
        if index == cacheIndex, target != cacheBase {
            target.copyMemory(from: cacheBase, byteCount: chunkSize)
            return
        }
        if index == cacheIndex { return }
        buffer.wipe()
        if let slot = readCacheSlot(index) {
            target.copyMemory(from: slot, byteCount: layout.chunkLength(index, size: diskSize))
            return
        }
        try readChunksFromDisk(first: index, count: 1) { _ in target }
    }

    /// Seals chunks `first..<first+count` (plaintext from `source`, length from `length`; those for
    /// which `keepsOldBytes` is true are rewritten in part) and writes them in batches; a batch that
    /// reaches the end carries the new trailer in the same call. Returns how many chunks were
    /// written: all, unless services lock between batches (and it is not `flushingRun`: the
    /// write-back run a lock itself writes, in full, before the keys go).
    func writeRun(first: Int64, count: Int, flushingRun: Bool, length: (Int64) -> Int, keepsOldBytes: (Int64) -> Bool,
                  source: (Int64) -> UnsafeRawPointer) throws(SecureFileError) -> Int {
        precondition(first <= diskChunks, "chunks must be contiguous with the disk")
        guard let cipher, hasHeader else { throw .ace(.noKeys, "\(path): no key") }
        try settleCut()
        let physical = layout.physicalChunkSize
        let maxBatch = max(1, Self.batchBytes >> Int(layout.chunkShift))
        var i = first
        let end = first + Int64(count)
        while i < end {
            if i > first && stopRequested && !flushingRun { break }
            var k = Int(min(Int64(maxBatch), end - i))
            if layout.hasTailCopies && k * chunkSize >= Self.parallelSealBytes {
                // A batch sealed by several threads copies none of its chunks: a chunk rewritten in
                // part goes in a batch of its own instead (one `pwrite` more), which copies it
                // first (SharedFile+ChunkCopy.swift).
                if keepsOldBytes(i) { k = 1 } else if i + Int64(k) == end && keepsOldBytes(end - 1) { k -= 1 }
            }
            if layout.hasTailCopies && copiesWholeChunks && diskChunks - i > 2 && i + Int64(k) > diskChunks - 2 {
                // Every chunk rewritten in place is copied before it is written (a kill could tear
                // it): `writeInPlace` copies any number of them, `writeMovingTheEnd` at most two,
                // so the chunks in place before the old end's last two go in a batch of their own.
                k = Int(diskChunks - 2 - i)
            }
            let lastIndex = i + Int64(k) - 1
            let lastLength = length(lastIndex)
            let reachesEnd = lastIndex >= diskChunks - 1
            let newDiskSize = reachesEnd ? lastIndex << Int64(layout.chunkShift) + Int64(lastLength) : diskSize
            // The trailer only authenticates the length: rewriting the last chunk in place leaves it be.
            let touchesEnd = reachesEnd && newDiskSize != diskSize
            let bytes = (k - 1) * physical + lastLength + layout.chunkOverhead + (touchesEnd ? layout.trailerSize : 0)
            let buf = ensureScratch(bytes)
            // A fresh random nonce for every chunk written, even when rewriting the same chunk.
            let nonceCount = k + (touchesEnd ? 1 : 0)
            NonceGenerator.fill(UnsafeMutableRawBufferPointer(start: nonces, count: nonceCount * FileLayout.nonceSize))
            let start = layout.chunkOffset(i)
            let oldEnd = layout.physicalSize(forPlaintextSize: diskSize)
            // Beyond the old end first (it ends with the new trailer), then the rest: the old
            // trailer and last chunk stay intact until the new ones are complete.
            let split = touchesEnd && start < oldEnd && start + Int64(bytes) > oldEnd ? Int(oldEnd - start) : 0
            let batchFirst = i
            /// Writes the sealed chunks `chunks` of the batch (indices in it; all of them when it
            /// moves the end) as a version 4 file does: each chunk a kill could tear after its copy.
            func writeCopyingFirst(_ chunks: Range<Int>) throws(SecureFileError) {
                if touchesEnd {
                    try writeMovingTheEnd(buf, bytes: bytes, split: split, first: batchFirst, chunks: k, newDiskSize: newDiskSize,
                                          keepsOldBytes: keepsOldBytes)
                } else {
                    let from = chunks.lowerBound * physical
                    let to = chunks.upperBound == k ? bytes : chunks.upperBound * physical
                    try writeInPlace(buf + from, bytes: to - from, first: batchFirst + Int64(chunks.lowerBound),
                                     chunks: chunks.count, keepsOldBytes: keepsOldBytes)
                }
            }
            // A write-back run filled by many small writes is sealed on this thread: waking a
            // helper, and its watch for the next batch after it, cost more than the split saves
            // (100 B write-back appends 0.180 → 0.167 µs a call), and a program that only makes
            // small writes starts no helper thread (a second thread makes each of its own write(2)s
            // dearer: BENCHMARKS.md). Runs of writes of 2 KiB or more gain from the pool.
            if k * chunkSize >= Self.parallelSealBytes, !flushingRun || runWrites <= Self.parallelRunWrites,
               let pool = SealingPool.shared {
                // Chunks rewritten in place are copied one by one before they are written: such a
                // batch is written as the sequential path writes it, chunk by chunk as they are
                // sealed when it stays inside the file (every chunk of it is copied: a full chunk
                // spans two pages, so the calls are the same whatever the timing), once all are
                // sealed when it moves the end.
                let copiesFirst = layout.hasTailCopies && copiesWholeChunks && i < diskChunks
                let order: ParallelWriteOrder = !copiesFirst ? .asSealed : touchesEnd ? .whenAllSealed : .chunksAsSealed
                try sealAndWriteInParallel(pool: pool, buffer: buf, bytes: bytes, split: split, first: i, chunks: k,
                                           lastLength: lastLength, newDiskSize: touchesEnd ? newDiskSize : nil,
                                           cipher: cipher, source: source, order: order, writeChunks: writeCopyingFirst)
            } else {
                // The read cache gets each chunk as it is sealed; if the batch does not reach the
                // disk (a failed seal here, a failed write below), its chunks are dropped again.
                do {
                    for j in 0..<k {
                        let c = buf + j * physical
                        (c + layout.selectorSize).copyMemory(from: nonces + j * FileLayout.nonceSize, byteCount: FileLayout.nonceSize)
                        let index = i + Int64(j)
                        if touchesEnd && j == k - 1 { try reserveLastChunkAndTrailerSeals(cipher: cipher) }
                        let plaintext = source(index)
                        let length = j == k - 1 ? lastLength : chunkSize
                        try sealChunk(c, index: index, plaintext: plaintext, count: length, cipher: cipher)
                        readCacheStore(index, from: plaintext, length: length)
                    }
                    if touchesEnd { try sealBatchTrailer(buf, chunks: k, lastLength: lastLength, nonces: nonces, size: newDiskSize) }
                } catch {
                    readCacheDrop(from: i)
                    throw error
                }
                do {
                    try prepareBatchWrite(split: split, lastIndex: lastIndex)
                    // A kill can cut a write between pages: a version 4 file copies first what it
                    // could tear (SharedFile+ChunkCopy.swift).
                    if !layout.hasTailCopies {
                        if split > 0 { try checkIO(Sys.pwriteFull(ioFD, buf + split, bytes - split, oldEnd), "write") }
                        try checkIO(Sys.pwriteFull(ioFD, buf, split > 0 ? split : bytes, start), "write")
                    } else {
                        try writeCopyingFirst(0..<k)
                    }
                } catch {
                    readCacheDrop(from: i)
                    resynchronizeAfterFailedWrite()
                    throw error
                }
            }
            if touchesEnd {
                diskSize = newDiskSize
                tailVerified = true
            }
            i += Int64(k)
        }
        try clearPendingEnd()
        return Int(i - first)
    }

    /// What every batch does before its first byte reaches the disk. `split` > 0: the batch
    /// overwrites the old trailer, and writes `split...` (beyond the old end) before `..<split`.
    private func prepareBatchWrite(split: Int, lastIndex: Int64) throws(SecureFileError) {
        // The last sync's tail copy no longer describes the end once this reaches the disk.
        if lastIndex >= diskSize >> Int64(layout.chunkShift) { tailCopyStale = true }
        try repairTornTailIfNeeded()
        if split > 0 {
            // The chunk whose slot the old trailer starts in is rewritten by the second write. If
            // it is not this batch's last chunk, the end check could not tell that write is missing
            // (the new end authenticates without it): the header records the old end first
            // (SharedFile+PendingEnd.swift).
            let oldEnd = layout.physicalSize(forPlaintextSize: diskSize)
            let trailerChunk = (oldEnd - Int64(layout.trailerSize) - layout.dataOffset) / Int64(layout.physicalChunkSize)
            if trailerChunk < lastIndex { try recordPendingEnd(diskSize) }
        }
    }

    /// Whether `count` bytes at `offset` lie in one page of the file (of the system's page size;
    /// the kernel never copies less between two of its checks for a fatal signal).
    ///
    /// A run of one chunk that moves the end of a version 4 file is written in one `pwrite`
    /// instead of two (beyond the old end, then before it) when it lies in one page: a kill stops
    /// a write only between pages, so it leaves the run whole or absent, as the two would leave
    /// the new end or the old. A power loss tears pages as they are written back, whichever calls
    /// wrote them; the last sync's tail copy restores that sync's end either way. Where the run
    /// spans pages a kill could cut one `pwrite` between them and lose the chunk (measured: it
    /// doubled such losses), so the split stays where its part before the old end lies in one
    /// page, and elsewhere a rewrite's tail copy goes first (docs/FORMAT.md "One `pwrite` in one
    /// page", "A rewrite's copy").
    static func withinOnePage(_ offset: Int64, _ count: Int64) -> Bool {
        offset / pageBytes == (offset + count - 1) / pageBytes
    }
    private static let pageBytes = Int64(max(4096, sysconf(Int32(_SC_PAGESIZE))))

    /// How a batch sealed by several threads is written (`sealAndWriteInParallel`).
    enum ParallelWriteOrder {
        /// In `pwrite`s ending at 64 KiB boundaries, as the pieces are sealed: no chunk copied.
        case asSealed
        /// Chunk by chunk in order, each after its copy, as they are sealed (a batch inside the file).
        case chunksAsSealed
        /// Once every chunk is sealed, as the sequential path writes the batch (one that moves the end).
        case whenAllSealed
    }

    /// Batches of at least this many plaintext bytes are sealed by the sealing pool's threads too.
    static let parallelSealBytes = 1 << 17
    /// A write-back run is, when at most this many writes filled it (2 KiB or more each, for a
    /// full 128 KiB run).
    static let parallelRunWrites = 64
    /// What one thread claims at a time: small enough that the writer soon has a piece to write
    /// and seldom waits for the last one (measured: 32 KiB beats 64 and 128 KiB; BENCHMARKS.md).
    static let sealPieceBytes = 1 << 15
    /// The batch is written in `pwrite`s that end at multiples of this in the file.
    static let writeUnitBytes = 1 << 16

    /// Seals a batch on this thread and the sealing pool's helpers at once, and writes its pieces
    /// as they are sealed: the bytes `split..<bytes` in order (they end with the new trailer, if
    /// any), then `0..<split`, the order of the sequential path. Between two of its writes the
    /// disk holds what an interrupted single write could leave: a prefix of the same bytes.
    /// `newDiskSize`: the batch ends with a trailer for it (sealed here first, under the chunks'
    /// selector).
    /// `order`: `.asSealed` as above; otherwise `writeChunks` writes the batch's chunks (indices in
    /// the batch), `.chunksAsSealed` each run of them as soon as it and all before it are sealed,
    /// `.whenAllSealed` all of them once every one is.
    private func sealAndWriteInParallel(pool: SealingPool, buffer: UnsafeMutableRawPointer, bytes: Int, split: Int,
                                        first: Int64, chunks k: Int, lastLength: Int, newDiskSize: Int64?,
                                        cipher: ChunkKeys, source: (Int64) -> UnsafeRawPointer, order: ParallelWriteOrder,
                                        writeChunks: (Range<Int>) throws(SecureFileError) -> Void) throws(SecureFileError) {
        let physical = layout.physicalChunkSize
        let contexts: [AESGCMContext]
        let selector: UInt32
        do throws(CryptoError) {
            try cipher.reserveSeals(k + (newDiskSize == nil ? 0 : 1))
        } catch {
            throw .crypto(error, "\(path): cannot derive a chunk key")
        }
        if let newDiskSize { try sealBatchTrailer(buffer, chunks: k, lastLength: lastLength, nonces: nonces, size: newDiskSize) }
        do throws(CryptoError) {
            (selector, contexts) = try cipher.batchSeals(k, threads: pool.helpers + 1)
        } catch {
            throw .crypto(error, "\(path): cannot derive a chunk key")
        }
        let job = SealJob(batch: .init(buffer: buffer, firstIndex: first, chunks: k, chunkSize: chunkSize, lastLength: lastLength,
                                       physicalChunkSize: physical, selectorSize: layout.selectorSize, selector: selector,
                                       nonces: UnsafeRawPointer(nonces), fileID: UnsafeRawPointer(fileID),
                                       piece: max(1, Self.sealPieceBytes >> Int(layout.chunkShift))),
                          contexts: contexts)
        // All at once, before any is sealed: `writeRunSpan` composes at most two chunks of a run
        // (its first in `work`, one other in the cache), so no pointer is reused for another chunk.
        for j in 0..<k { job.sources[j] = source(first + Int64(j)) }
        assert((0..<k).filter { job.sources[$0] == UnsafeRawPointer(cacheBase) }.count <= 1, "two chunks composed in the cache")
        try prepareBatchWrite(split: split, lastIndex: first + Int64(k) - 1)

        let offered = pool.offer(job)
        let start = layout.chunkOffset(first)
        let all: UInt64 = job.pieces == 64 ? ~0 : (1 << UInt64(job.pieces)) - 1
        var written = split
        var failure: SecureFileError?
        /// Writes what follows `written` as far as it is sealed, in `pwrite`s that end at multiples
        /// of `writeUnitBytes` in the file (64 KiB writes that start inside a page cost the kernel
        /// 1.7 times as much as aligned ones; aligned, they cost what 1 MiB writes do). The writes
        /// depend only on the batch's place and size, never on which thread sealed what when: the
        /// crash tests kill a writer before each of its system calls.
        func writeSealed(_ sealed: UInt64) {
            let unit = Int64(Self.writeUnitBytes)
            while written < bytes {
                let end = min(bytes, Int(((start + Int64(written)) / unit + 1) * unit - start))
                let firstPiece = min(written / physical, k - 1) / job.batch.piece
                let lastPiece = min((end - 1) / physical, k - 1) / job.batch.piece
                let needed = (UInt64(2) << UInt64(lastPiece)) &- (UInt64(1) << UInt64(firstPiece))
                guard sealed & needed == needed else { return }
                if case .failure(let e) = Sys.pwriteFull(ioFD, buffer + written, end - written, start + Int64(written)) {
                    failure = .posix(e.rawValue, "\(path): write")
                    return
                }
                written = end
            }
        }
        // The read cache gets the batch before any of it is written, as on the sequential path (a
        // copy's path may use the scratch memory a source is in); a failed batch drops it again.
        for j in 0..<k { readCacheStore(first + Int64(j), from: job.sources[j], length: j == k - 1 ? lastLength : chunkSize) }
        var chunksWritten = 0
        /// Hands `writeChunks` the chunks sealed after those it has, as far as every piece before
        /// them is sealed too.
        func writeSealedChunks(_ sealed: UInt64) {
            let sealedChunks = min(k, (~sealed).trailingZeroBitCount * job.batch.piece)
            guard sealedChunks > chunksWritten else { return }
            do { try writeChunks(chunksWritten..<sealedChunks) } catch {
                failure = error
                return
            }
            chunksWritten = sealedChunks
        }
        func writeWhatIsSealed(_ sealed: UInt64) {
            switch order {
            case .asSealed: writeSealed(sealed)
            case .chunksAsSealed: writeSealedChunks(sealed)
            case .whenAllSealed: break
            }
        }
        var allWritten: Bool {
            switch order {
            case .asSealed: written >= bytes
            case .chunksAsSealed: chunksWritten == k
            case .whenAllSealed: job.sealed == all
            }
        }
        while failure == nil, let p = job.claim() {
            job.sealAsWriter(piece: p)
            let sealed = job.sealed
            if job.sealFailed { break }
            writeWhatIsSealed(sealed)
        }
        while failure == nil && !job.sealFailed && !allWritten {
            let sealed = job.sealed
            if job.sealFailed { break }
            writeWhatIsSealed(sealed)
            if sealed != all { sched_yield() }  // a helper is sealing the rest
        }
        job.finish()
        if offered { pool.withdraw(job) }
        if failure == nil && job.sealFailed {
            // Pieces sealed before may be on disk: as after a failed write.
            failure = .crypto(.openSSL("EVP_EncryptUpdate"), "\(path): encryption of chunks \(first)..<\(first + Int64(k)) failed")
        } else if failure == nil && order == .whenAllSealed {
            do { try writeChunks(0..<k) } catch { failure = error }
        } else if failure == nil && order == .asSealed && split > 0, case .failure(let e) = Sys.pwriteFull(ioFD, buffer, split, start) {
            failure = .posix(e.rawValue, "\(path): write")
        }
        if let failure {
            readCacheDrop(from: first)
            resynchronizeAfterFailedWrite()
            throw failure
        }
    }
}
