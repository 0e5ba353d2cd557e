#if canImport(Glibc)
import Glibc
#endif
import ACCrypto
import ACSystemCalls

/// Chunk copies (version 4, kind 3; docs/FORMAT.md "A chunk copy"): what keeps a kill from tearing
/// a chunk that an overwrite rewrites in part.
///
/// Every chunk is 2^s + 32 bytes on disk, so rewriting one in place spans two pages, and Linux
/// stops a `write` between two pages when SIGKILL is pending: the chunk is then half new, half old,
/// and fails authentication, with the bytes earlier calls wrote to it. So before an overwrite
/// rewrites, across two pages, a chunk whose old bytes it keeps in part, it writes that chunk as
/// it is about to seal it in place into the slot the newest sync's copy is not in. A chunk it
/// rewrites whole holds only the call's bytes, but torn it would read as corrupt, not as the old
/// or the new chunk: a write copies those too, however many it rewrites in place (each written
/// right after its own copy: two `pwrite`s per chunk), unless every handle said it repairs torn
/// chunks itself (`SecureFile.WholeChunkOverwrites.inPlace`, the SQLite VFS). A reader that
/// finds the chunk failing in place takes the copy when a sector's worth of the chunk in place is
/// the copy's (`sharesASector`): every write has a fresh nonce, so its ciphertext is its own, and
/// some of it in place means the torn write is the copy's (a kill leaves the first page, with the
/// head; a power loss any sectors). A copy of an earlier write of the chunk has none of a later
/// write's bytes, so nothing has to invalidate it. The copy stays valid until its chunk is whole in place: the writer knows that when its
/// `pwrite` returns; anyone else (a process after a kill) checks the chunk, and writes the copy
/// back if it is torn, before a copy goes over it (`settleChunkCopy`).
///
/// A power loss is another matter: neither the copy nor the rewrite need reach the device, in
/// either order. With double writes (`doubleWrite`, docs/FORMAT.md "Double write") a barrier puts
/// the copy on the device before the rewrite, and another the rewrite before the call returns (so
/// no later copy, of this process or another, goes over the only whole version of the chunk); a
/// chunk rewritten in part is then copied even where it lies in one page, which a power loss tears
/// at a sector.
extension SharedFile {
    /// Writes the sealed chunks of an overwrite inside the file (`bytes` bytes at `buf`: `k` chunks
    /// from `first`, no trailer) in place. Each chunk a kill could tear (it spans two pages) gets a
    /// chunk copy first when it keeps old bytes (`keepsOldBytes`: the batch's first and last), or
    /// when it is rewritten whole and `copiesWholeChunks` is on; then a `pwrite` that holds no other
    /// chunk copied, so each copy is there while its chunk is written, and no copy goes over one
    /// whose chunk is not yet whole in place. So a batch of whole chunks costs two `pwrite`s per
    /// chunk: the price of no chunk ever left torn (handles that repair torn chunks themselves say
    /// `.inPlace`, and write the batch in one `pwrite` but for its partial ends).
    func writeInPlace(_ buf: UnsafeRawPointer, bytes: Int, first: Int64, chunks k: Int,
                      keepsOldBytes: (Int64) -> Bool) throws(SecureFileError) {
        let physical = layout.physicalChunkSize
        let start = layout.chunkOffset(first)
        func keepsOld(_ j: Int) -> Bool { keepsOldBytes(first + Int64(j)) }
        func sealedBytes(_ j: Int) -> Int { j == k - 1 ? bytes - j * physical : physical }
        func needsCopy(_ j: Int) -> Bool {
            let spansPages = !Self.withinOnePage(start + Int64(j * physical), Int64(sealedBytes(j)))
            return keepsOld(j) ? doubleWrite || spansPages : copiesWholeChunks && spansPages
        }
        var from = 0
        var copied = (0..<k).first(where: needsCopy)
        while let j = copied {
            let next = (j + 1..<k).first(where: needsCopy)
            try writeChunkCopy(buf + j * physical, index: first + Int64(j), sealedBytes: sealedBytes(j), keepsOldBytes: keepsOld(j))
            let to = next.map { $0 * physical } ?? bytes
            try checkIO(Sys.pwriteFull(ioFD, buf + from, to - from, start + Int64(from)), "write")
            try ownChunkCopySettled(next == nil ? "a chunk rewritten in part before the call returns"
                                                : "a chunk rewritten in part before the next chunk copy",
                                    keepsOldBytes: keepsOld(j))
            from = to
            copied = next
        }
        if from < bytes { try checkIO(Sys.pwriteFull(ioFD, buf + from, bytes - from, start + Int64(from)), "write") }  // nothing copied
    }

    /// Writes the sealed chunks of a batch that moves the end (`bytes` bytes at `buf`: `k` chunks
    /// from `first`, then the trailer for `newDiskSize`; `split` > 0: the first `split` bytes lie
    /// before the old end) in the write order of docs/FORMAT.md ("Write order": beyond the old
    /// end first, then before it), copying first what a kill could tear:
    /// - the old short last chunk, when its rewrite in place spans two pages: a rewrite's tail
    ///   copy (of the end the batch makes, from its sealed bytes, or when that end is a full chunk
    ///   of the end as it is); a one-chunk batch then goes in one `pwrite`, as does one that lies in
    ///   one page (a kill never cuts it), while one whose part before the old end lies in one page
    ///   keeps the split, whole at every kill;
    /// - the batch's first chunk, when it is a full chunk rewritten across two pages (an overwrite
    ///   across the end) in part, or whole (and `copiesWholeChunks`): a chunk copy; so is the
    ///   second of two full chunks in place from a chunk-aligned end. When the first and another
    ///   are copied, the first chunk is written alone, before the next copy goes over its own.
    /// A batch that moves the end rewrites at most two chunks in place when `copiesWholeChunks`
    /// (`writeRun` writes the ones before in a batch of its own); with `.inPlace` handles, more,
    /// of which only a first rewritten in part is copied.
    func writeMovingTheEnd(_ buf: UnsafeRawPointer, bytes: Int, split: Int, first: Int64, chunks k: Int, newDiskSize: Int64,
                           keepsOldBytes: (Int64) -> Bool) throws(SecureFileError) {
        let physical = layout.physicalChunkSize
        let start = layout.chunkOffset(first)
        let lastIndex = first + Int64(k) - 1
        let oldEnd = layout.physicalSize(forPlaintextSize: diskSize)
        let mask = Int64(chunkSize - 1)
        let lastStart = layout.chunkOffset(lastIndex)
        let copiesTheEnd = lastIndex == diskChunks - 1 && diskSize & mask != 0 && !Self.withinOnePage(lastStart, oldEnd - lastStart)
        let firstKeepsOld = keepsOldBytes(first)
        // Whole chunks are copied (`writeRun` leaves at most two in place below the old end then).
        let inPlaceChunks = max(0, diskChunks - first)
        let copiesWhole = copiesWholeChunks && inPlaceChunks <= 2
        let copiesTheFirst = k > 1 && first < diskSize >> Int64(layout.chunkShift) && (firstKeepsOld || copiesWhole)
            && ((firstKeepsOld && doubleWrite) || !Self.withinOnePage(start, Int64(physical)))
        // From a chunk-aligned end, the second of two full chunks in place (the first's copy goes first).
        let copiesTheSecond = copiesWhole && inPlaceChunks == 2 && diskSize & mask == 0
            && !Self.withinOnePage(start + Int64(physical), Int64(physical))
        func copyTheEnd() throws(SecureFileError) {
            if newDiskSize & mask != 0 {
                try writeTailCopy(size: newDiskSize, sealedEnd: buf + (k - 1) * physical, kind: .rewrite)
            } else {
                try writeTailCopyOfTheEndBeforeRewrite()
            }
        }
        func copyTheSecond() throws(SecureFileError) {
            try writeChunkCopy(buf + physical, index: first + 1, sealedBytes: physical, keepsOldBytes: false)
        }
        func write(_ from: Int, _ to: Int) throws(SecureFileError) {
            try checkIO(Sys.pwriteFull(ioFD, buf + from, to - from, start + Int64(from)), "write")
        }
        if copiesTheFirst { try writeChunkCopy(buf, index: first, sealedBytes: physical, keepsOldBytes: firstKeepsOld) }
        if k == 1 && copiesTheEnd {
            try copyTheEnd()
            try write(0, bytes)
        } else if split == 0 || (k == 1 && Self.withinOnePage(start, Int64(bytes))) {
            try write(0, bytes)
        } else if copiesTheFirst && (copiesTheEnd || copiesTheSecond) {
            try write(split, bytes)
            try write(0, physical)
            try ownChunkCopySettled("a chunk rewritten in part before the next copy", keepsOldBytes: firstKeepsOld)
            if copiesTheEnd { try copyTheEnd() } else { try copyTheSecond() }
            try write(physical, split)
            if copiesTheSecond { try ownChunkCopySettled("a whole chunk rewritten", keepsOldBytes: false) }
            return
        } else {
            if copiesTheEnd { try copyTheEnd() }
            if copiesTheSecond { try copyTheSecond() }
            try write(split, bytes)
            try write(0, split)
            if copiesTheSecond { try ownChunkCopySettled("a whole chunk rewritten", keepsOldBytes: false) }
        }
        if copiesTheFirst { try ownChunkCopySettled("a chunk rewritten in part before the call returns", keepsOldBytes: firstKeepsOld) }
    }

    /// Writes the sealed chunk `index` (`sealedBytes` of it) as a chunk copy. With double writes,
    /// on the device before its chunk is rewritten, when the chunk keeps old bytes (a chunk
    /// rewritten whole holds only the call's bytes, which a power loss before a sync may cost).
    private func writeChunkCopy(_ sealed: UnsafeRawPointer, index: Int64, sealedBytes: Int, keepsOldBytes: Bool) throws(SecureFileError) {
        let end = index << Int64(layout.chunkShift) + Int64(sealedBytes - layout.chunkOverhead)
        try writeTailCopy(size: end, sealedEnd: sealed, kind: .chunk)
        if doubleWrite && keepsOldBytes { try orderingBarrier("a chunk copy before its chunk is rewritten") }
    }

    /// This call's chunk copy has done its work: its chunk is whole in place (with double writes and
    /// a chunk that kept old bytes, on the device: `why` names the barrier). Only this call's own
    /// copy is settled so: one learned from disk and not yet settled (a failed rewrite's, another
    /// process's) stays until a copy is about to go over it.
    private func ownChunkCopySettled(_ why: String, keepsOldBytes: Bool) throws(SecureFileError) {
        if doubleWrite && keepsOldBytes { try orderingBarrier(why) }
        unconfirmedChunkCopy = nil
    }

    /// Opens the sealed chunk `index` read in place (`length` plaintext bytes, into `plaintext`),
    /// or, when it fails there, from its chunk copy (`openChunkFromCopy`).
    func openChunkInPlaceOrFromCopy(_ sealed: UnsafeRawPointer, index: Int64, length: Int, into plaintext: UnsafeMutableRawPointer,
                                    cipher: ChunkKeys) throws(SecureFileError) -> Bool {
        if openChunk(sealed, index: index, length: length, into: plaintext, cipher: cipher) { return true }
        return try openChunkFromCopy(index, length: length, inPlace: sealed, into: plaintext, cipher: cipher)
    }

    /// Opens chunk `index` (`length` plaintext bytes) from a chunk copy into `plaintext`, after it
    /// failed in place (`inPlace`: its sealed bytes as read there), when the copy is of the write
    /// that left it so: a chunk copy of that chunk, of that length, sharing a sector with the chunk
    /// in place, its descriptor authentic (the copy authenticates as the chunk itself). False when
    /// no copy is.
    func openChunkFromCopy(_ index: Int64, length: Int, inPlace: UnsafeRawPointer, into plaintext: UnsafeMutableRawPointer,
                           cipher: ChunkKeys) throws(SecureFileError) -> Bool {
        guard layout.hasTailCopies, hasHeader else { return false }
        let end = index << Int64(layout.chunkShift) + Int64(length)
        let slotSize = layout.tailCopySlotSize
        // Not the scratch memory: `inPlace` may be in it.
        return try withUnsafeTemporaryAllocation(byteCount: 2 * slotSize, alignment: 16) { (b) throws(SecureFileError) -> Bool in
            let base = b.baseAddress!
            let got = try checkIO(Sys.preadFull(ioFD, base, 2 * slotSize, layout.tailCopyOffset(0)), "read the chunk copies")
            for slot in 0..<2 where got >= slot * slotSize + TailCopyDescriptor.size + length + layout.chunkOverhead {
                let s = base + slot * slotSize
                let copy = s + TailCopyDescriptor.size
                guard let parsed = TailCopyDescriptor.parse(UnsafeRawBufferPointer(start: s, count: TailCopyDescriptor.size)),
                      parsed.kind == .chunk, parsed.size == end,
                      sharesASector(copy, inPlace, count: length + layout.chunkOverhead, at: layout.chunkOffset(index)),
                      tailCopy(in: s, slot: slot) != nil else { continue }
                if openChunk(copy, index: index, length: length, into: plaintext, cipher: cipher) { return true }
            }
            return false
        }
    }

    /// Before a copy goes over the newest copy when that is a chunk copy whose chunk is not known
    /// to be whole in place (its writer was killed, or its `pwrite` failed): if the chunk fails in
    /// place sharing a sector with the copy, the copy is written back in place first. A chunk that
    /// the file does not have at that length, now or at `fileEnd` (the end a cut is making: its
    /// trailer may already lie over the chunk's head), needs nothing.
    func settleChunkCopy(fileEnd: Int64) throws(SecureFileError) {
        guard let (slot, end) = unconfirmedChunkCopy else { return }
        guard let cipher else { throw .ace(.noKeys, "\(path): no key") }
        let index = (end - 1) >> Int64(layout.chunkShift)
        let length = layout.chunkLength(index, size: end)
        let count = length + layout.chunkOverhead
        let kept = min(diskSize, fileEnd)
        if index < layout.chunkCount(forSize: kept), layout.chunkLength(index, size: kept) == length,
           layout.chunkLength(index, size: diskSize) == length {
            let at = layout.chunkOffset(index)
            try withUnsafeTemporaryAllocation(byteCount: 2 * count, alignment: 16) { (b) throws(SecureFileError) in
                let inPlace = b.baseAddress!, copy = inPlace + count
                defer { secureZero(UnsafeMutableRawBufferPointer(start: workBase, count: length)) }
                guard try checkIO(Sys.preadFull(ioFD, inPlace, count, at), "read") == count,
                      !openChunk(inPlace, index: index, length: length, into: workBase, cipher: cipher),
                      try checkIO(Sys.preadFull(ioFD, copy, count, layout.tailCopyOffset(slot) + Int64(TailCopyDescriptor.size)),
                                  "read the chunk copy") == count,
                      sharesASector(copy, inPlace, count: count, at: at),
                      openChunk(copy, index: index, length: length, into: workBase, cipher: cipher) else { return }
                try checkIO(Sys.pwriteFull(ioFD, copy, count, at), "write the chunk copy back")
            }
        }
        unconfirmedChunkCopy = nil
    }

    /// Whether the sealed chunk `a` (a copy) and `b` (the chunk in place at file offset `at`), `count`
    /// bytes each, are equal over some 512-byte sector of the file (over the part of it the chunk
    /// has, at least 16 bytes: chunks start at multiples of 32). Sealed bytes are a write's own —
    /// a fresh nonce for every write — so an equal sector is that write's. A kill that cut a write
    /// after its first page left its first sector (the head); a power loss may have kept any.
    func sharesASector(_ a: UnsafeRawPointer, _ b: UnsafeRawPointer, count: Int, at: Int64) -> Bool {
        let sector = 512
        var from = 0
        while from < count {
            let to = min(count, Int((at + Int64(from)) / Int64(sector) + 1) * sector - Int(at))
            if to - from >= 16, memcmp(a + from, b + from, to - from) == 0 { return true }
            from = to
        }
        return false
    }
}
