#if canImport(Glibc)
import Glibc
#endif
import ACCrypto

/// ftruncate semantics. Growing is a span of zeros (one run, like a write past the end). Shrinking
/// writes the new trailer before cutting, and a cut inside a chunk first cuts at the end of that
/// chunk, so after every system call either the old or the new end authenticates and every byte
/// below the new length reads back.
extension SharedFile {
    func truncate(to length: Int64) throws(SecureFileError) {
        if length == 0, tailFailure != nil {
            // A file whose end does not authenticate may still be emptied: nothing authentic is lost.
            tailFailure = nil
            tailVerified = true
            pendingTailRepair = nil
            bytesAfterAuthenticatedEnd = 0
            diskSize = 0
            if header != nil { try cut(to: 0) }
            dropCache()
            size = 0
            return
        }
        try initializeIfNeeded()
        try requireAuthenticatedEnd()
        try flushCache()
        try repairTornTailIfNeeded()
        dropCache()
        let shift = Int64(layout.chunkShift)
        if length > diskSize {
            let growth = Int(length - diskSize)
            guard try writeSpan(nil, count: growth, at: diskSize) == growth else {
                throw .ace(.noKeys, "\(path): secure services locked while growing the file")
            }
        } else if length < diskSize {
            let lastIndex = (length - 1) >> shift
            if length > 0 && layout.chunkLength(lastIndex, size: length) != layout.chunkLength(lastIndex, size: diskSize) {
                // Inside a chunk: first cut after that chunk (a new trailer over bytes being cut),
                // then rewrite it shorter with its trailer, then cut again.
                let chunkEnd = min(diskSize, (lastIndex + 1) << shift)
                if chunkEnd < diskSize { try cut(to: chunkEnd) }
                work.wipe()
                try readChunksFromDisk(first: lastIndex, count: 1) { _ in self.workBase }
                let lastLength = Int(length - lastIndex << shift)
                secureZero(UnsafeMutableRawBufferPointer(start: workBase + lastLength, count: chunkSize - lastLength))
                let bytes = lastLength + FileLayout.chunkOverhead + FileLayout.trailerSize
                let buf = ensureScratch(bytes)
                guard let cipher else { throw .ace(.noKeys, "\(path): no key") }
                NonceGenerator.fill(UnsafeMutableRawBufferPointer(start: buf, count: FileLayout.nonceSize))
                try sealChunk(buf, index: lastIndex, plaintext: workBase, count: lastLength, cipher: cipher)
                work.wipe()
                try sealTrailer(into: buf + lastLength + FileLayout.chunkOverhead, size: length)
                try changeDisk(length) { () throws(SecureFileError) in
                    try checkIO(Sys.pwriteFull(ioFD, buf, bytes, layout.chunkOffset(lastIndex)), "write")
                    try checkIO(Sys.ftruncate(ioFD, layout.physicalSize(forPlaintextSize: length)), "truncate")
                }
            } else {
                try cut(to: length)
            }
        }
        size = length
    }

    /// Cuts the file at a chunk boundary (or to 0): the new trailer first, over bytes being cut, then
    /// the physical cut.
    private func cut(to length: Int64) throws(SecureFileError) {
        let end = layout.physicalSize(forPlaintextSize: length)
        let t = ensureScratch(FileLayout.trailerSize)
        try sealTrailer(into: t, size: length)
        try changeDisk(length) { () throws(SecureFileError) in
            try checkIO(Sys.pwriteFull(ioFD, t, FileLayout.trailerSize, end - Int64(FileLayout.trailerSize)), "write trailer")
            try checkIO(Sys.ftruncate(ioFD, end), "truncate")
        }
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
