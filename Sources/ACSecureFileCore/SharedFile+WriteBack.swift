#if canImport(Glibc)
import Glibc
#endif
import ACCrypto

/// Write-back buffering (opt-in per handle; docs/FORMAT.md "Caching, durability, concurrency and
/// crashes"). Small writes collect in the *run*: up to `writeBackRunBytes` of contiguous chunks of
/// plaintext in guarded memory. The run is written as one span — every chunk sealed with a fresh
/// nonce, one batch, one trailer, in the write order of any multi-chunk write — when a write goes
/// past a full run or to a chunk that does not continue it, before any write-through change, and at
/// flush, sync, close, truncation, the end of a coordinated operation, a services lock and exit.
/// Reads are served from it. So small appends cost one seal per chunk and two `pwrite`s per run,
/// not two `pwrite`s per chunk.
extension SharedFile {
    /// The most plaintext the run holds: whole chunks, at least one. Each run written costs about
    /// 9 µs beyond its chunks (two `pwrite`s, the trailer, a nonce draw): 128 KiB makes that
    /// 0.03 µs per 512-byte write, and is what every write-back file keeps in guarded memory.
    static let writeBackRunBytes = 128 << 10

    /// How many chunks the run may hold.
    @inline(__always) var runCapacity: Int { max(1, Self.writeBackRunBytes >> Int(layout.chunkShift)) }
    /// How many chunks the run holds (the last one may be partial).
    @inline(__always) var runChunks: Int { (runLength + chunkSize - 1) >> Int(layout.chunkShift) }
    /// The logical end of the run (0 when it is empty).
    var runEnd: Int64 { runFirst < 0 ? 0 : runFirst << Int64(layout.chunkShift) + Int64(runLength) }

    func runHolds(_ index: Int64) -> Bool {
        runFirst >= 0 && index >= runFirst && index < runFirst + Int64(runChunks)
    }

    /// The plaintext of chunk `index` of the run (valid for the run's chunks and the one after).
    func runSlot(_ index: Int64) -> UnsafeMutableRawPointer {
        runBase! + Int(index - runFirst) << Int(layout.chunkShift)
    }

    /// pwrite semantics for a write-back handle: the bytes go into the run, except that a call of at
    /// least a run's worth of whole chunks is sealed straight from the caller's buffer (after the
    /// run is written out). Returns the bytes written: all, or fewer when services lock.
    func writeBuffered(_ buffer: UnsafeRawPointer, count: Int, at offset: Int64) throws(SecureFileError) -> Int {
        let shift = Int64(layout.chunkShift)
        let end = offset + Int64(count)
        var pos = offset
        while pos < end {
            if pos > offset && stopRequested { break }
            let index = pos >> shift
            let inChunk = Int(pos - index << shift)
            let whole = ((end - pos) >> shift) << shift
            if inChunk == 0 && whole >= Int64(runCapacity) << shift {
                let n = try writeSpan(buffer + Int(pos - offset), count: Int(whole), at: pos)
                pos += Int64(n)
                size = max(size, pos)
                if n < Int(whole) { break }
                continue
            }
            let m = Int(min(Int64(chunkSize - inChunk), end - pos))
            try addToRun(index)
            (runSlot(index) + inChunk).copyMemory(from: buffer + Int(pos - offset), byteCount: m)
            runLength = max(runLength, Int(index - runFirst) << Int(shift) + inChunk + m)
            pos += Int64(m)
            size = max(size, pos)
        }
        if runFirst >= 0 { runWrites += 1 }
        return Int(pos - offset)
    }

    /// The fast path of a write-back handle's write: one that lands in the run as it stands (from
    /// inside it or its end, up to its capacity, each chunk it adds beyond the disk's so that
    /// nothing is read back) is copied in, without the general path's steps, which would each find
    /// nothing to do (`write(from:...)`: the header exists, the end is verified, no repair is due).
    /// Returns false, having changed nothing, for any other write. `count` > 0.
    @inline(__always)
    func appendToRunIfItFits(_ buffer: UnsafeRawPointer, count: Int, at offset: Int64) -> Bool {
        guard runFirst >= 0, tailVerified, pendingTailRepair == nil, let runBase else { return false }
        let shift = Int64(layout.chunkShift)
        let runStart = runFirst << shift
        let end = offset + Int64(count)
        guard offset >= runStart, offset <= runStart + Int64(runLength), end <= runStart + Int64(runCapacity) << shift,
              end <= SecureFile.maximumFileSize else { return false }
        let held = runFirst + Int64(runChunks)
        guard (end - 1) >> shift < held || held >= diskChunks else { return false }
        (runBase + Int(offset - runStart)).copyMemory(from: buffer, byteCount: count)
        runLength = max(runLength, Int(end - runStart))
        size = max(size, end)
        runWrites += 1
        return true
    }

    /// Makes chunk `index` part of the run. A chunk that continues a run with room joins it (the
    /// chunks before it are then whole); any other chunk writes the run out and starts a new one. A
    /// chunk that is on disk is decrypted into its slot first, since a write may cover only part of it.
    private func addToRun(_ index: Int64) throws(SecureFileError) {
        if runHolds(index) { return }
        let joins = runFirst >= 0 && index == runFirst + Int64(runChunks) && runChunks < runCapacity
        if !joins {
            try flushRun()
            if run == nil {
                do throws(CryptoError) { run = try SecureBuffer(count: runCapacity * chunkSize) } catch {
                    throw .crypto(error, "\(path): write-back buffer")
                }
            }
            runFirst = index
            runLength = 0
            runWrites = 0
        }
        let start = Int(index - runFirst) << Int(layout.chunkShift)
        if index < diskChunks {
            // The slot is zero (the run's buffer is zero beyond runLength).
            let slot = runSlot(index)
            if index == cacheIndex {
                slot.copyMemory(from: cacheBase, byteCount: cacheLength)
            } else if let cached = readCacheSlot(index) {
                slot.copyMemory(from: cached, byteCount: layout.chunkLength(index, size: diskSize))
            } else {
                do { try readChunksFromDisk(first: index, count: 1) { _ in slot } } catch {
                    secureZero(UnsafeMutableRawBufferPointer(start: slot, count: chunkSize))
                    if runLength == 0 { runFirst = -1 }
                    throw error
                }
            }
            runLength = start + layout.chunkLength(index, size: diskSize)
        } else {
            runLength = max(runLength, start)
        }
    }

    /// Writes the run to the file as one span and empties it. Its last chunk stays decrypted in the
    /// read cache, so appending after a flush reads nothing back. On failure the run is kept: the
    /// next call that needs it written, and close, try again and report the error.
    func flushRun() throws(SecureFileError) {
        guard runFirst >= 0 else { return }
        guard runLength > 0 else { dropRun(); return }
        try requireAuthenticatedEnd()
        let base = runSlot(runFirst)
        let n = try writeSpan(base, count: runLength, at: runFirst << Int64(layout.chunkShift), flushingRun: true)
        guard n == runLength else { throw .ace(.noKeys, "\(path): secure services locked while writing buffered data") }
        let last = runFirst + Int64(runChunks) - 1
        keepInCache(last, length: layout.chunkLength(last, size: diskSize), from: runSlot(last))
        dropRun()
    }

    /// Forgets the run (its plaintext is wiped).
    func dropRun() {
        runFirst = -1
        runLength = 0
        runWrites = 0
        run?.wipe()
    }
}
