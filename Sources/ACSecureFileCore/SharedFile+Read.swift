#if canImport(Glibc)
import Glibc
#endif
import ACCrypto
import ACSystemCalls

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
        dropCache()
        try readChunksFromDisk(first: index, count: 1) { _ in self.cacheBase }
        keepInCache(index, length: layout.chunkLength(index, size: diskSize), tailIsZero: true)
        readCacheStore(index, from: cacheBase, length: cacheLength)
    }
}

/// Reads with the lock held shared: any number of threads at once, each with a `ChunkKeys.Reader`
/// of its own (GCM contexts, ciphertext staging, a plaintext chunk for partial reads). Nothing of
/// the state is changed here; the read cache has its own mutex.
extension SharedFile {
    /// The keys a read may use with the lock held shared, or nil when it must take the lock
    /// exclusively: it would change the state (check the end, load keys, allocate the read cache,
    /// adopt a fork), or read what only the exclusive path handles (the write-back run, another
    /// process's changes in coordinated mode).
    var concurrentReadKeys: ChunkKeys? {
        // (An end restored from a tail copy reads its last chunk from the copy: the exclusive path.)
        guard tailVerified, restoredTail == nil, diskShape.records == 0, !coordinated, runFirst < 0, hasHeader, forkGeneration == ForkGeneration.current,
              keyGeneration != 0, keyGeneration == services.keyGeneration,
              readCacheBytes == 0 || readCache != nil || readCacheUnavailable
        else { return nil }
        return cipher
    }

    /// pread semantics on the logical file, with the lock held shared (`concurrentReadKeys` gave `keys`).
    func readConcurrently(into buffer: UnsafeMutableRawPointer, count: Int, at offset: Int64,
                          reader: ChunkKeys.Reader, keys: ChunkKeys) throws(SecureFileError) -> Int {
        guard offset < size, count > 0 else { return 0 }
        let shift = Int64(layout.chunkShift)
        let end = offset + min(Int64(count), size - offset)
        let onDisk = diskChunks
        var pos = offset
        while pos < end {
            if pos > offset && stopRequested { break }
            let index = pos >> shift
            let inChunk = Int(pos - index << shift)
            let m = Int(min(Int64(chunkSize - inChunk), end - pos))
            let dst = buffer + Int(pos - offset)
            if index >= onDisk {
                dst.initializeMemory(as: UInt8.self, repeating: 0, count: m)
                pos += Int64(m)
                continue
            }
            if let readCache, readCache.copy(index, from: inChunk, count: m, to: dst) {
                pos += Int64(m)
                continue
            }
            let diskLength = layout.chunkLength(index, size: diskSize)
            // The one-chunk cache is as the disk is (no write runs now): whole chunks need not look at it.
            if inChunk == 0 && m >= diskLength {
                var run = 1
                let maxRun = Self.batchBytes >> Int(shift)
                while run < maxRun {
                    let next = index + Int64(run)
                    let nextPos = pos + Int64(run) << shift
                    guard next < onDisk, readCache?.holds(next) != true,
                          nextPos + Int64(layout.chunkLength(next, size: diskSize)) <= end else { break }
                    run += 1
                }
                try readChunksConcurrently(first: index, count: run, reader: reader, keys: keys) { i in
                    buffer + Int((i << shift) - offset)
                }
                if let readCache {
                    for i in index..<index + Int64(run) {
                        readCache.store(i, from: buffer + Int((i << shift) - offset), length: layout.chunkLength(i, size: diskSize))
                    }
                }
                let runEnd = min(end, (index + Int64(run)) << shift)
                let covered = min(runEnd, (index + Int64(run) - 1) << shift
                                  + Int64(layout.chunkLength(index + Int64(run) - 1, size: diskSize)))
                if covered < runEnd {
                    (buffer + Int(covered - offset)).initializeMemory(as: UInt8.self, repeating: 0, count: Int(runEnd - covered))
                }
                pos = runEnd
                continue
            }
            try readPartConcurrently(index, from: inChunk, count: m, length: diskLength, into: dst, reader: reader, keys: keys)
            pos += Int64(m)
        }
        return Int(pos - offset)
    }

    /// Part of chunk `index` (`length` bytes on disk): from the one-chunk cache, or decrypted in the
    /// reader's own buffer, then kept in the one-chunk cache (under `cacheLock`: other readers use it
    /// too), so that small reads of one chunk decrypt it once, as on the exclusive path.
    private func readPartConcurrently(_ index: Int64, from inChunk: Int, count m: Int, length: Int, into dst: UnsafeMutableRawPointer,
                                      reader: ChunkKeys.Reader, keys: ChunkKeys) throws(SecureFileError) {
        // As the one-chunk cache, zero beyond the chunk's length.
        let available = max(0, min(m, length - inChunk))
        if available < m { (dst + available).initializeMemory(as: UInt8.self, repeating: 0, count: m - available) }
        let cached: Bool = cacheLock.withLock {
            guard index == cacheIndex else { return false }
            dst.copyMemory(from: cacheBase + inChunk, byteCount: available)
            return true
        }
        if cached { return }
        let chunk: UnsafeMutableRawPointer
        do { chunk = try reader.chunk(chunkSize) } catch { throw .crypto(error, "\(path): chunk buffer") }
        defer { secureZero(UnsafeMutableRawBufferPointer(start: chunk, count: length)) }
        try readChunksConcurrently(first: index, count: 1, reader: reader, keys: keys) { _ in chunk }
        dst.copyMemory(from: chunk + inChunk, byteCount: available)
        readCache?.store(index, from: chunk, length: length)
        cacheLock.withLock { keepInCache(index, length: length, from: chunk) }
    }

    /// `readChunksFromDisk` for `readConcurrently`: the reader's staging, contexts and AAD; the end
    /// is already authenticated. A chunk that fails is not looked for in a chunk copy here: the
    /// read is retried on the exclusive path (`SecureFile.preadConcurrently`).
    private func readChunksConcurrently(first: Int64, count: Int, reader: ChunkKeys.Reader, keys: ChunkKeys,
                                        destination: (Int64) -> UnsafeMutableRawPointer) throws(SecureFileError) {
        try readAndOpenChunks(first: first, count: count, staging: reader.scratch, destination: destination, open: { c, index, length, plaintext in
            let n = c + layout.selectorSize
            FileLayout.writeChunkAAD(reader.aad, fileID: fileID, index: index)
            guard let context = reader.context(forSelector: selector(at: c), keys: keys) else { return false }
            return context.open(nonce: n, aad: UnsafeRawBufferPointer(start: reader.aad, count: FileLayout.chunkAADSize),
                                ciphertext: UnsafeRawBufferPointer(start: n + FileLayout.nonceSize, count: length),
                                tag: n + FileLayout.nonceSize + length, plaintext: plaintext)
        }, recover: { _, _, _, _ in false })
    }
}
