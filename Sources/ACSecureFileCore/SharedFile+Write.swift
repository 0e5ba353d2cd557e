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
    func write(from buffer: UnsafeRawPointer, count: Int, at offset: Int64, writeBack: Bool) throws(SecureFileError) -> Int {
        try initializeIfNeeded()
        try requireAuthenticatedEnd()
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
    /// not stopped between its two runs by a services lock: the lock flushes it (a hole before it
    /// may still stop at a batch boundary).
    @discardableResult
    func writeSpan(_ buffer: UnsafeRawPointer?, count: Int, at offset: Int64, flushingRun: Bool = false) throws(SecureFileError) -> Int {
        guard count > 0 else { return 0 }
        if runFirst >= 0 && !flushingRun { try flushRun() }
        let shift = Int64(layout.chunkShift)
        let end = offset + Int64(count)
        let boundary = ((diskSize + Int64(chunkSize) - 1) >> shift) << shift
        guard diskSize & Int64(chunkSize - 1) != 0, end > boundary else {
            return try writeRunSpan(buffer, count: count, at: offset)
        }
        var first: Int
        if offset < boundary {
            first = try writeRunSpan(buffer, count: Int(boundary - offset), at: offset)
            guard first == Int(boundary - offset) else { return first }
        } else {
            // Only padding: the first run completes the short last chunk with zeros.
            guard try writeRunSpan(nil, count: Int(boundary - diskSize), at: diskSize) > 0 else {
                throw .ace(.noKeys, "\(path): secure services locked before the write")
            }
            first = 0
        }
        if stopRequested && !flushingRun { return first }
        let restFrom = max(offset, boundary)
        let rest = try writeRunSpan(buffer.map { $0 + Int(restFrom - offset) }, count: Int(end - restFrom), at: restFrom)
        return first + rest
    }

    private func writeRunSpan(_ buffer: UnsafeRawPointer?, count: Int, at offset: Int64) throws(SecureFileError) -> Int {
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
        let firstTarget = single ? cache : work
        if firstNeedsOld { try readChunk(runFirst, into: firstTarget) }
        if lastNeedsOld { try readChunk(lastIndex, into: cache) }
        // From here the cache buffer composes chunks (or its chunk is rewritten): it is re-labelled
        // after the run with the chunk it then holds, if any.
        cacheIndex = -1
        cacheLength = 0
        var cacheHolds: Int64 = -1
        let zeros = ZeroChunk.pointer
        let firstBase = firstTarget.withUnsafeMutableBytes { $0.baseAddress! }
        let cacheBase = self.cacheBase
        let done: Int
        do {
            // The plaintext of chunk `i`. Passed straight to `writeRun` (not kept in a local first):
            // a non-escaping closure lives on the stack, a stored one (and `cacheHolds`, which it
            // changes) would be two heap allocations per call.
            done = try writeRun(first: runFirst, count: Int(lastIndex - runFirst + 1),
                                length: { self.layout.chunkLength($0, size: newSize) }) { (i: Int64) -> UnsafeRawPointer in
                let start = i << shift
                if covered(i) { return buffer.map { $0 + Int(start - offset) } ?? zeros }
                let hasOld = (i == runFirst && firstNeedsOld) || (i == lastIndex && lastNeedsOld)
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
                // The cache holds the chunk's final plaintext: sequential appends read nothing back.
                cacheIndex = lastIndex
                cacheLength = layout.chunkLength(lastIndex, size: diskSize)
            } else {
                dropCache()
            }
        }
        let doneEnd = min(end, (runFirst + Int64(done)) << shift)
        guard doneEnd > offset else {
            throw .ace(.noKeys, "\(path): secure services locked before the write")
        }
        return Int(doneEnd - offset)
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

    /// Seals chunks `first..<first+count` (plaintext from `source`, length from `length`) and writes
    /// them in batches; a batch that reaches the end carries the new trailer in the
    /// same call. Returns how many chunks were written: all, unless services lock between batches.
    func writeRun(first: Int64, count: Int, length: (Int64) -> Int,
                  source: (Int64) -> UnsafeRawPointer) throws(SecureFileError) -> Int {
        precondition(first <= diskChunks, "chunks must be contiguous with the disk")
        guard let cipher, hasHeader else { throw .ace(.noKeys, "\(path): no key") }
        try settleCut()
        let physical = layout.physicalChunkSize
        let maxBatch = max(1, Self.batchBytes >> Int(layout.chunkShift))
        var i = first
        let end = first + Int64(count)
        while i < end {
            if i > first && stopRequested { break }
            let k = Int(min(Int64(maxBatch), end - i))
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
            // The read cache gets each chunk as it is sealed; if the batch does not reach the disk
            // (a failed seal here, a failed write below), its chunks are dropped again.
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
                if touchesEnd {
                    let t = buf + (k - 1) * physical + lastLength + layout.chunkOverhead
                    (t + layout.selectorSize).copyMemory(from: nonces + k * FileLayout.nonceSize, byteCount: FileLayout.nonceSize)
                    try sealTrailer(into: t, size: newDiskSize, nonceIsSet: true)
                }
            } catch {
                readCacheDrop(from: i)
                throw error
            }
            // The last sync's tail copy no longer describes the end once this reaches the disk.
            if lastIndex >= diskSize >> Int64(layout.chunkShift) { tailCopyStale = true }
            do {
                try repairTornTailIfNeeded()
                let start = layout.chunkOffset(i)
                let oldEnd = layout.physicalSize(forPlaintextSize: diskSize)
                if touchesEnd, start < oldEnd, start + Int64(bytes) > oldEnd {
                    // The chunk whose slot the old trailer starts in is rewritten by the second
                    // write. If it is not this batch's last chunk, the end check could not tell
                    // that write is missing (the new end authenticates without it): the header
                    // records the old end first (SharedFile+PendingEnd.swift).
                    let trailerChunk = (oldEnd - Int64(layout.trailerSize) - layout.dataOffset) / Int64(physical)
                    if trailerChunk < lastIndex { try recordPendingEnd(diskSize) }
                    // Beyond the old end first (it ends with the new trailer), then the rest: the old
                    // trailer and last chunk stay intact until the new ones are complete.
                    let split = Int(oldEnd - start)
                    try checkIO(Sys.pwriteFull(ioFD, buf + split, bytes - split, oldEnd), "write")
                    try checkIO(Sys.pwriteFull(ioFD, buf, split, start), "write")
                } else {
                    try checkIO(Sys.pwriteFull(ioFD, buf, bytes, start), "write")
                }
            } catch {
                readCacheDrop(from: i)
                resynchronizeAfterFailedWrite()
                throw error
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
}
