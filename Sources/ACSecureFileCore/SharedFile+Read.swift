#if canImport(Glibc)
import Glibc
#endif

/// The read path: pread semantics on the logical file, from the write-back run, from the chunk
/// cache, straight from disk for whole chunks (decrypted into the caller's buffer, a batch per
/// system call), or through the cache for partial chunks.
extension SharedFile {
    /// pread semantics on the logical file.
    func read(into buffer: UnsafeMutableRawPointer, count: Int, at offset: Int64) throws(SecureFileError) -> Int {
        if offset >= size || count == 0 {
            if offset >= size, hasHeader { try verifyTrailerIfNeeded() }
            return 0
        }
        let end = offset + min(Int64(count), size - offset)
        var pos = offset
        while pos < end {
            // Services are locking: stop between batches (a short read), the rest fails with no keys.
            if pos > offset && stopRequested { break }
            let index = pos >> Int64(layout.chunkShift)
            let inChunk = Int(pos - index << Int64(layout.chunkShift))
            let m = Int(min(Int64(chunkSize - inChunk), end - pos))
            let dst = buffer + Int(pos - offset)
            if runHolds(index) {
                dst.copyMemory(from: runSlot(index) + inChunk, byteCount: m)
                pos += Int64(m)
                continue
            }
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
            if let slot = readCacheSlot(index) {
                dst.copyMemory(from: slot + inChunk, byteCount: m)
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
                    guard next < onDisk, next != cacheIndex, !runHolds(next), readCache?.holds(next) != true,
                          nextPos + Int64(layout.chunkLength(next, size: diskSize)) <= end else { break }
                    run += 1
                }
                try readChunksFromDisk(first: index, count: run) { i in
                    buffer + Int((i << Int64(self.layout.chunkShift)) - offset)
                }
                if readCacheBytes > 0 {
                    for i in index..<index + Int64(run) {
                        readCacheStore(i, from: buffer + Int((i << Int64(layout.chunkShift)) - offset),
                                       length: layout.chunkLength(i, size: diskSize))
                    }
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
        return Int(pos - offset)
    }

    /// Makes chunk `index` (on disk) the cached chunk, read from disk (the caller has found it in
    /// neither cache), and keeps it in the read cache too.
    func loadCache(_ index: Int64) throws(SecureFileError) {
        if index == cacheIndex { return }
        precondition(index < diskChunks, "the read cache holds chunks as they are on disk")
        cacheIndex = -1
        cache.wipe()
        cacheLength = 0
        try readChunksFromDisk(first: index, count: 1) { _ in self.cacheBase }
        cacheLength = layout.chunkLength(index, size: diskSize)
        cacheIndex = index
        readCacheStore(index, from: cacheBase, length: cacheLength)
    }
}
