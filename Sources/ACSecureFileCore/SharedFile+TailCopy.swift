#if canImport(Glibc)
import Glibc
#endif
import ACCrypto
import ACSystemCalls

/// The end as it was at the application's last sync (version 4; docs/FORMAT.md "Tail copies").
///
/// An append rewrites the short last chunk in place: the only copy of bytes an earlier `fsync` may
/// have made durable. A power loss can tear that rewrite, or put it on the device without the
/// extension that goes with it, and the chunk is lost. So every application sync (`fsync`,
/// `fdatasync`, an `O_DSYNC` write) first copies the file's last chunk and trailer, as they are on
/// disk, into one of two slots after the header — the one the newest copy is not in — with a
/// sealed descriptor (sequence number, size): the sync's own flush puts it on the device with the
/// data. Until the next sync completes, nothing writes over that copy. A reader that finds the
/// chunk a copy holds unreadable in place, or no end at all, takes the newest complete copy's end:
/// the file as it was at the last sync, every synced byte readable, the rest reported as bytes
/// after the authenticated end and cut off (the copy written back in place) at the next change.
enum RestoredTail {
    /// The slot whose copies are the file's last chunk and trailer until they are written back.
    case copy(slot: Int)
    /// A chunk boundary the file had in place below a failing last chunk, its trailer torn (version
    /// 5, `alignedEndBelowATornAppend`): a trailer is sealed there anew and the file cut after it.
    case alignedEnd
}

extension SharedFile {
    /// Bytes after a slot's descriptor for a file of `size`: a copy of its last chunk when that is
    /// not full, then of its trailer.
    func tailCopyLength(size: Int64) -> (chunk: Int, total: Int) {
        let remainder = Int(size & Int64(chunkSize - 1))
        let chunk = remainder > 0 ? remainder + layout.chunkOverhead : 0
        return (chunk, chunk + layout.trailerSize)
    }

    /// Bytes after the descriptor of a slot: those of an end (`tailCopyLength`), or a chunk copy's
    /// sealed chunk alone (kind 3: `size` is where that chunk ends).
    func copyLength(_ descriptor: TailCopyDescriptor) -> (chunk: Int, total: Int) {
        guard descriptor.kind == .chunk else { return tailCopyLength(size: descriptor.size) }
        let chunk = layout.chunkLength(copiedChunkIndex(descriptor), size: descriptor.size) + layout.chunkOverhead
        return (chunk, chunk)
    }

    /// The index of the chunk a slot's copy holds: a chunk copy's ends at its `size`, an end's last
    /// chunk (when not full) holds the byte at it.
    func copiedChunkIndex(_ descriptor: TailCopyDescriptor) -> Int64 {
        (descriptor.kind == .chunk ? descriptor.size - 1 : descriptor.size) >> Int64(layout.chunkShift)
    }

    /// Before an application's sync: a copy of the end the sync makes durable, unless the newest
    /// copy already is one.
    func writeTailCopyIfNeeded() throws(SecureFileError) {
        // A read-only state changed nothing (and cannot write): the newest copy stands.
        guard layout.hasTailCopies, hasHeader, ioFDWritable, tailVerified, tailFailure == nil, restoredTail == nil else { return }
        let readNow = tailCopyStale == nil || coordinated
        if readNow {
            // Whether the newest complete copy on disk is of this end (another process, or this one
            // before it reopened, may have written it): else this sync writes one.
            tailCopyStale = try !newestCompleteCopyIsTheEnd()
        }
        guard tailCopyStale == true else { return }
        try writeTailCopy(size: diskSize, sequenceIsCurrent: readNow)
    }

    /// Copies the end of a file of `size` bytes, as it is on disk (its last chunk if not full, and
    /// its trailer), into the slot the newest copy is not in; only an end that authenticates. A cut
    /// to a chunk boundary calls it for its new end before the barrier that precedes its
    /// `ftruncate`: so the newest copy on the device never claims more than the file's durable
    /// length, or a crash's chunks (`takeTailCopyIfNeeded`).
    /// `sequenceIsCurrent`: the caller has just read the newest complete copy's sequence from disk.
    func writeTailCopy(size: Int64, sequenceIsCurrent: Bool = false) throws(SecureFileError) {
        guard layout.hasTailCopies, hasHeader, let cipher else { return }
        // A chunk copy's chunk, torn in place, is written back before the end is read (it may be
        // the last chunk) and before this copy goes over it.
        try learnTheNewestCopy(sequenceIsCurrent: sequenceIsCurrent)
        try settleChunkCopy(fileEnd: size)
        let (chunkBytes, total) = tailCopyLength(size: size)
        let buf = ensureScratch(total)
        let end = layout.physicalSize(forPlaintextSize: size)
        let got = try checkIO(Sys.preadFull(ioFD, buf, total, end - Int64(total)), "read the end of the file for its tail copy")
        guard got == total, trailerAuthenticates(buf + chunkBytes, size: size) else { return }
        if chunkBytes > 0 {
            let length = chunkBytes - layout.chunkOverhead
            let ok = openChunk(buf, index: size >> Int64(layout.chunkShift), length: length, into: workBase, cipher: cipher)
            secureZero(UnsafeMutableRawBufferPointer(start: workBase, count: length))
            guard ok else { return }
        }
        try writeTailCopy(size: size, sealedEnd: buf, sequenceIsCurrent: true)
    }

    /// Writes `sealedEnd` (the sealed last chunk if not full, then the trailer, of a file of `size`
    /// bytes; for a chunk copy, kind 3, the sealed chunk that ends at `size`) as the next copy. A
    /// cut inside a chunk writes its shortened chunk so, before it rewrites that chunk in place.
    ///
    /// Slots: a copy goes into the slot the newest copy is not in, unless the newest is a rewrite's
    /// or a chunk copy (kinds 2 and 3): then over it, a chunk copy once its chunk is whole in place
    /// (`settleChunkCopy`). So the newest sync's copy is never written over before the next sync's
    /// copy is (the sequence keeps the slot: slot = sequence mod 2, stepping 2 over a copy that is
    /// not a sync's).
    func writeTailCopy(size: Int64, sealedEnd: UnsafeRawPointer, sequenceIsCurrent: Bool = false,
                       kind: TailCopyDescriptor.Kind = .sync) throws(SecureFileError) {
        try writeTailCopy(size: size, sequenceIsCurrent: sequenceIsCurrent, kind: kind) { (copy, count) throws(SecureFileError) in
            copy.copyMemory(from: sealedEnd, byteCount: count)
        }
    }

    /// `writeTailCopy`, with the copy's bytes (`count` of them) put into the slot's staging by
    /// `fill`: read from the file there, they need no buffer of their own.
    private func writeTailCopy(size: Int64, sequenceIsCurrent: Bool, kind: TailCopyDescriptor.Kind,
                               filling fill: (_ copy: UnsafeMutableRawPointer, _ count: Int) throws(SecureFileError) -> Void) throws(SecureFileError) {
        guard layout.hasTailCopies, hasHeader else { return }
        try learnTheNewestCopy(sequenceIsCurrent: sequenceIsCurrent)
        let descriptor = TailCopyDescriptor(sequence: tailCopySequence &+ (tailCopyNewestIsNotASyncs ? 2 : 1), size: size, kind: kind)
        let (chunkBytes, total) = copyLength(descriptor)
        let slot = Int(descriptor.sequence & 1)
        // A sync's copy (also a cut's) is of the end the file is being given; the others are of writes.
        if tailCopyNewestIsNotASyncs { try settleChunkCopy(fileEnd: kind == .sync ? size : diskSize) }
        let count = TailCopyDescriptor.size + total
        let d = slotStaging.atLeast(count)
        let copy = d + TailCopyDescriptor.size
        try fill(copy, total)
        descriptor.write(into: d)
        try sealTailCopy(d, descriptor, slot: slot, copies: copy, chunkBytes: chunkBytes)
        // Until its chunk is written whole in place (the caller then clears this), the copy
        // may be the only whole version of that chunk.
        unconfirmedChunkCopy = kind == .chunk ? (slot, size) : nil
        try checkIO(Sys.pwriteFull(ioFD, d, count, layout.tailCopyOffset(slot)), "write the tail copy")
        tailCopySequence = descriptor.sequence
        tailCopyNewestIsNotASyncs = kind != .sync
        // A rewrite's copy is not the end a sync makes durable: the next sync writes its own.
        if kind == .sync { tailCopyStale = false }
    }

    /// The sequence goes on from the newest complete copy on disk (another process may have written
    /// one since, in coordinated mode). `sequenceIsCurrent`: the caller has just read it.
    private func learnTheNewestCopy(sequenceIsCurrent: Bool) throws(SecureFileError) {
        guard !sequenceIsCurrent else { return }
        var reread = !tailCopySequenceKnown
        if !reread && coordinated && !tailCopiesCheckedUnderLock { reread = try !newestDescriptorIsTheKnownOne() }
        if reread { _ = try newestCompleteCopy() }
        // Under the lock no other process writes a copy: the next copy of this operation needs no check.
        tailCopiesCheckedUnderLock = coordinated
    }

    /// Whether the newest descriptor on disk, parsed but not authenticated, has the sequence and
    /// kind this state last wrote or read: then no other process wrote a copy since (each goes on
    /// from the newest sequence), and the slots need not be read and authenticated again. One
    /// `pread` of both descriptors, for coordinated appends that copy their end.
    private func newestDescriptorIsTheKnownOne() throws(SecureFileError) -> Bool {
        let from = layout.tailCopyOffset(0)
        let count = Int(layout.tailCopyOffset(1) - from) + TailCopyDescriptor.size
        let b = slotStaging.atLeast(count)
        guard try checkIO(Sys.preadFull(ioFD, b, count, from), "read the tail copies") == count else { return false }
        let first = TailCopyDescriptor.parse(UnsafeRawBufferPointer(start: b, count: TailCopyDescriptor.size))
        let second = TailCopyDescriptor.parse(UnsafeRawBufferPointer(start: b + count - TailCopyDescriptor.size, count: TailCopyDescriptor.size))
        guard let newest = [first, second].compactMap({ $0 }).max(by: { $0.sequence < $1.sequence }) else { return false }
        return newest.sequence == tailCopySequence && (newest.kind != .sync) == tailCopyNewestIsNotASyncs
    }

    /// Before an in-place rewrite of the last chunk that a kill could cut between two pages, when
    /// the rewrite makes no end a copy can hold (a full last chunk, or the same length): a copy of
    /// the end as it is on disk (kind 2, not synced). An interrupted rewrite then loses only its
    /// own call's bytes: the reader takes the copy when that chunk no longer authenticates in place
    /// (`takeTailCopyIfNeeded`), as after a torn append under a power loss. The end is not
    /// authenticated again here: it was at open or written by this state, and a copy whose chunk
    /// does not authenticate is never taken. (An append inside the chunk copies the end it makes
    /// instead, from the sealed bytes it is about to write: no read.)
    func writeTailCopyOfTheEndBeforeRewrite() throws(SecureFileError) {
        try learnTheNewestCopy(sequenceIsCurrent: false)
        try settleChunkCopy(fileEnd: diskSize)
        let end = layout.physicalSize(forPlaintextSize: diskSize)
        // Read straight into the slot's staging (not the scratch memory: it holds the sealed chunk
        // about to be written).
        try writeTailCopy(size: diskSize, sequenceIsCurrent: true, kind: .rewrite) { (copy, total) throws(SecureFileError) in
            let got = try checkIO(Sys.preadFull(ioFD, copy, total, end - Int64(total)), "read the end of the file for its tail copy")
            guard got == total else {
                throw .ace(.badKeyOrCorruptData, "\(path): the file ends before its authenticated end (cut by another process?)")
            }
        }
    }

    /// The first copy of a new file or generation (sequence 0, slot 0, size 0): its descriptor and
    /// trailer copy, written with the header in the first sector. `trailer` is the empty file's.
    func writeFirstTailCopy(into d: UnsafeMutableRawPointer, trailer: UnsafeRawPointer) throws(SecureFileError) {
        let descriptor = TailCopyDescriptor(sequence: 0, size: 0)
        descriptor.write(into: d)
        (d + TailCopyDescriptor.size).copyMemory(from: trailer, byteCount: layout.trailerSize)
        try sealTailCopy(d, descriptor, slot: 0, copies: d + TailCopyDescriptor.size, chunkBytes: 0)
        tailCopySequence = 0
        tailCopyNewestIsNotASyncs = false
        unconfirmedChunkCopy = nil
        tailCopySequenceKnown = true
        tailCopyStale = false
    }

    private func sealTailCopy(_ d: UnsafeMutableRawPointer, _ descriptor: TailCopyDescriptor, slot: Int,
                              copies: UnsafeRawPointer, chunkBytes: Int) throws(SecureFileError) {
        guard let cipher else { throw .ace(.noKeys, "\(path): no key") }
        let t = d + TailCopyDescriptor.sealOffset
        let n = t + layout.selectorSize
        NonceGenerator.fill(UnsafeMutableRawBufferPointer(start: n, count: FileLayout.nonceSize))
        do {
            try withTailCopyAAD(descriptor, slot: slot, copies: copies, chunkBytes: chunkBytes) { (aad) throws(CryptoError) in
                let (s, context) = try cipher.nextWrite()
                t.storeBytes(of: s.bigEndian, as: UInt32.self)
                try context.seal(nonce: n, aad: aad, plaintext: UnsafeRawBufferPointer(start: nil, count: 0),
                                 ciphertext: n + FileLayout.nonceSize, tag: n + FileLayout.nonceSize)
            }
        } catch {
            throw .crypto(error, "\(path): sealing the tail copy failed")
        }
    }

    private func withTailCopyAAD<R, E: Error>(_ descriptor: TailCopyDescriptor, slot: Int, copies: UnsafeRawPointer, chunkBytes: Int,
                                              _ body: (UnsafeRawBufferPointer) throws(E) -> R) throws(E) -> R {
        try withUnsafeTemporaryAllocation(byteCount: TailCopyDescriptor.aadSize, alignment: 8) { (aad) throws(E) -> R in
            let tag = FileLayout.tagSize
            descriptor.writeAAD(aad.baseAddress!, fileID: fileID, slot: slot,
                                chunkTag: chunkBytes > 0 ? copies + chunkBytes - tag : nil,
                                trailerTag: descriptor.kind == .chunk ? nil : copies + chunkBytes + layout.trailerSize - tag)
            return try body(UnsafeRawBufferPointer(aad))
        }
    }

    /// A slot's descriptor, authenticated (it binds the tags of the copies after it: a torn slot
    /// fails here). `s` holds the slot's bytes (`tailCopySlotSize` of them). The copies themselves are
    /// authenticated only when one is taken (`copiesAuthenticate`): an open that finds its end in
    /// place needs no GCM over them.
    func tailCopy(in s: UnsafeRawPointer, slot: Int) -> TailCopyDescriptor? {
        guard let cipher, let descriptor = TailCopyDescriptor.parse(UnsafeRawBufferPointer(start: s, count: TailCopyDescriptor.size)) else { return nil }
        let (chunkBytes, _) = copyLength(descriptor)
        let copies = s + TailCopyDescriptor.size
        let t = s + TailCopyDescriptor.sealOffset
        guard let context = cipher.context(forSelector: selector(at: t)) else { return nil }
        let n = t + layout.selectorSize
        let sealed = withTailCopyAAD(descriptor, slot: slot, copies: copies, chunkBytes: chunkBytes) { aad in
            context.open(nonce: n, aad: aad, ciphertext: UnsafeRawBufferPointer(start: nil, count: 0),
                         tag: n + FileLayout.nonceSize, plaintext: workBase)
        }
        return sealed ? descriptor : nil
    }

    /// Whether the copies in `slot` (a descriptor that authenticated) authenticate as the last chunk
    /// and the trailer of a file of its size (or, a chunk copy, as the chunk that ends there): one
    /// `pread` and one or two GCM checks, before a copy is taken.
    private func copiesAuthenticate(_ descriptor: TailCopyDescriptor, slot: Int) throws(SecureFileError) -> Bool {
        guard let cipher else { return false }
        let (chunkBytes, total) = copyLength(descriptor)
        let at = layout.tailCopyOffset(slot) + Int64(TailCopyDescriptor.size)
        return try withUnsafeTemporaryAllocation(byteCount: total, alignment: 16) { (b) throws(SecureFileError) -> Bool in
            let copies = b.baseAddress!
            guard try checkIO(Sys.preadFull(ioFD, copies, total, at), "read the tail copy") == total,
                  descriptor.kind == .chunk || trailerAuthenticates(copies + chunkBytes, size: descriptor.size) else { return false }
            guard chunkBytes > 0 else { return true }
            let length = chunkBytes - layout.chunkOverhead
            let ok = openChunk(copies, index: copiedChunkIndex(descriptor), length: length, into: workBase, cipher: cipher)
            secureZero(UnsafeMutableRawBufferPointer(start: workBase, count: length))
            return ok
        }
    }

    /// Reads both slots: the sequence the next copy follows, and the copies that authenticate, newest
    /// first, each with the tag of its chunk copy (nil when the size ends a full chunk).
    private func tailCopies() throws(SecureFileError) -> [(descriptor: TailCopyDescriptor, slot: Int, chunkTag: [UInt8]?)] {
        let slotSize = layout.tailCopySlotSize
        let bytes = 2 * slotSize
        // Not the scratch memory: a cut calls this (through `writeTailCopy`) with its sealed chunk there.
        return try withUnsafeTemporaryAllocation(byteCount: bytes, alignment: 16) { (b) throws(SecureFileError) in
            try tailCopies(in: b.baseAddress!, slotSize: slotSize)
        }
    }

    private func tailCopies(in buf: UnsafeMutableRawPointer, slotSize: Int) throws(SecureFileError) -> [(descriptor: TailCopyDescriptor, slot: Int, chunkTag: [UInt8]?)] {
        let got = try checkIO(Sys.preadFull(ioFD, buf, 2 * slotSize, layout.tailCopyOffset(0)), "read the tail copies")
        var found: [(descriptor: TailCopyDescriptor, slot: Int, chunkTag: [UInt8]?)] = []
        for slot in 0..<2 where got >= slot * slotSize + TailCopyDescriptor.size {
            let s = buf + slot * slotSize
            // The copy's own bytes must have been read, not the whole slot: a creation torn by a
            // power loss can leave a file that ends right after copy 0 (the header's first write).
            guard let parsed = TailCopyDescriptor.parse(UnsafeRawBufferPointer(start: s, count: TailCopyDescriptor.size)),
                  got >= slot * slotSize + TailCopyDescriptor.size + copyLength(parsed).total else { continue }
            if let d = tailCopy(in: s, slot: slot) {
                let (chunkBytes, _) = copyLength(d)
                let tag = chunkBytes > 0 && d.kind != .chunk ? Array(UnsafeRawBufferPointer(start: s + TailCopyDescriptor.size + chunkBytes - FileLayout.tagSize, count: FileLayout.tagSize)) : nil
                found.append((d, slot, tag))
            }
        }
        return found.sorted { $0.descriptor.sequence > $1.descriptor.sequence }
    }

    /// Whether the newest complete copy on disk holds the end in place (its size, and its chunk copy's
    /// tag that of the last chunk in place); also sets `tailCopySequence` from the disk.
    private func newestCompleteCopyIsTheEnd() throws(SecureFileError) -> Bool {
        // A rewrite's copy is written over by the next copy: a sync writes its own.
        guard let newest = try newestCompleteCopy(), newest.descriptor.kind == .sync else { return false }
        return try tailCopy(newest.descriptor, newest.chunkTag, isTheEndAt: diskSize)
    }

    /// The newest complete copy on disk; its sequence (0 when there is none) is the one the next copy
    /// follows into the other slot. Only a copy that authenticates whole counts: a slot of an earlier
    /// generation, a forged one, or one a crash tore must not send the next copy over the newest
    /// complete one.
    private func newestCompleteCopy() throws(SecureFileError) -> (descriptor: TailCopyDescriptor, slot: Int, chunkTag: [UInt8]?)? {
        var newest: (descriptor: TailCopyDescriptor, slot: Int, chunkTag: [UInt8]?)?
        for c in try tailCopies() where c.descriptor.sequence >= newest?.descriptor.sequence ?? 0 {
            if try copiesAuthenticate(c.descriptor, slot: c.slot) { newest = c }
        }
        tailCopySequence = newest?.descriptor.sequence ?? 0
        tailCopyNewestIsNotASyncs = newest.map { $0.descriptor.kind != .sync } ?? false
        // Another process (or this one before it reopened) may have been killed between a chunk
        // copy and the chunk's rewrite: the copy is settled before anything goes over it.
        unconfirmedChunkCopy = newest.flatMap { $0.descriptor.kind == .chunk ? ($0.slot, $0.descriptor.size) : nil }
        tailCopySequenceKnown = true
        return newest
    }

    /// After the end check: whether a tail copy is the file's end instead of `mainSize` (the end
    /// found in place, nil when none authenticates), and if so takes it. Copies are considered newest
    /// first; one that claims more than the file holds (longer than `mainSize`, or than the chunks
    /// in place) is a sync's that did not complete — every sync that completes, and every cut, leave
    /// a copy no longer than the durable file — and the one before it is considered. The copy is
    /// taken when no end authenticates in place, or when the chunk it holds no longer
    /// authenticates in place below that end (an append that filled it was torn). Consulted at a
    /// state's first end check, and whenever no end authenticates in place.
    func takeTailCopyIfNeeded(mainSize: Int64?, lastChunkIntact: Bool, physical: Int64) throws(SecureFileError) -> Bool {
        guard layout.hasTailCopies, hasHeader, cipher != nil, mainSize == nil || !tailCopiesChecked else { return false }
        tailCopiesChecked = true
        let shift = Int64(layout.chunkShift)
        let mask = Int64(chunkSize - 1)
        // Chunk copies hold no end (`SharedFile+ChunkCopy.swift`).
        let all = try tailCopies()
        let candidates = all.filter { $0.descriptor.kind != .chunk }
        var taken: (copy: TailCopyDescriptor, slot: Int)?
        for (i, c) in candidates.enumerated() {
            let copy = c.descriptor
            let index = copy.size >> shift
            if let mainSize {
                // A rewrite's copy may hold the end that rewrite was making: longer, in the same chunk.
                guard copy.size <= mainSize || (copy.kind == .rewrite && index == (mainSize - 1) >> shift) else { continue }
            } else {
                guard index == 0 || physical >= layout.chunkOffset(index) else { continue }
            }
            // The chunk the copy before this one holds was synced; if it is below this copy's last
            // chunk and does not authenticate in place, this copy's sync did not complete.
            if i + 1 < candidates.count {
                let prior = candidates[i + 1].descriptor.size
                if prior & mask != 0, prior >> shift < index,
                   try !chunkAuthenticatesInPlace(prior >> shift, size: copy.size) { continue }
            }
            if let mainSize {
                // The end in place holds what this copy holds (its chunk intact in place), or the copy
                // holds no chunk: nothing to restore. Version 5's 40-byte trailer may span two
                // sectors: a power loss may keep the new end of an append from a chunk-aligned end,
                // and its chunk's head not, with the old trailer it was written over torn. When the
                // end's last chunk fails, starts where such a trailer was, and is the copy's chunk or
                // the next one, the copy is taken (also one of that aligned end: a trailer alone):
                // that chunk holds nothing synced the copy does not.
                let lastIndex = (mainSize - 1) >> shift
                let overATornTrailer = !lastChunkIntact && (lastIndex == index || lastIndex == index + 1)
                    && trailerSpansTwoSectors(size: lastIndex << shift)
                guard copy.size & mask != 0 || overATornTrailer else { return false }
                if index == lastIndex && lastChunkIntact { return false }
                if index < lastIndex, !overATornTrailer, try chunkAuthenticatesInPlace(index, size: mainSize) { return false }
            }
            // A copy torn inside its ciphertext (its descriptor and tags whole) is no copy either.
            guard try copiesAuthenticate(copy, slot: c.slot) else { continue }
            taken = (copy, c.slot)
            break
        }
        guard let (copy, slot) = taken else { return false }
        let end = layout.physicalSize(forPlaintextSize: copy.size)
        diskSize = copy.size
        size = max(copy.size, runEnd)
        dropCache()
        dropReadCache()
        restoredTail = .copy(slot: slot)
        tailCopySequence = copy.sequence
        // Written back in place before the next copy (`repairTornTailIfNeeded` comes first), which
        // may then go over it if it is a rewrite's.
        tailCopyNewestIsNotASyncs = copy.kind == .rewrite
        // A newer chunk copy is in the other slot: the next copy goes on from it (re-read).
        tailCopySequenceKnown = all.first.map { $0.descriptor.kind != .chunk } ?? true
        pendingTailRepair = end
        bytesAfterAuthenticatedEnd = max(0, physical - end)
        tailVerified = true
        tailFailure = nil
        tailCopyStale = false
        return true
    }

    /// Whether the trailer of a file of `size` bytes (its last chunk sealed whole) spans two 512-byte
    /// sectors, so a power loss may tear it: never in versions 2 to 4 (32 bytes at multiples of 32).
    func trailerSpansTwoSectors(size: Int64) -> Bool {
        let end = layout.physicalSize(forPlaintextSize: size)
        return (end - Int64(layout.trailerSize)) / 512 != (end - 1) / 512
    }

    /// A cut to `x` (a chunk boundary, chunks after it) recorded as pending whose trailer does not
    /// authenticate at its place: a power loss tore it (a version 5 trailer may span two sectors),
    /// and the head of the chunk it was written over with it. The cut puts its copy of that end on
    /// the device before the trailer, so when the newest complete copy is of `x` and that chunk no
    /// longer authenticates in place, the end is taken from the copy and the cut completes (the next
    /// change writes it back). The record is a hint, never trusted alone: an intact file whose
    /// record an attacker set changes nothing (its chunk at `x` authenticates).
    func takeTailCopyOfPendingCut(_ x: Int64, physical: Int64) throws(SecureFileError) -> Bool {
        let index = x >> Int64(layout.chunkShift)
        guard layout.hasTailRecords, hasHeader, cipher != nil, !tailCopiesChecked, x > 0, x & Int64(chunkSize - 1) == 0,
              trailerSpansTwoSectors(size: x), physical >= layout.chunkOffset(index + 1),
              let newest = try newestCompleteCopy(), newest.descriptor.kind == .sync, newest.descriptor.size == x,
              try !chunkAuthenticatesInPlace(index, size: x + Int64(chunkSize)) else { return false }
        return try takeTailCopyIfNeeded(mainSize: nil, lastChunkIntact: false, physical: physical)
    }

    /// The end in place authenticates but its last chunk does not, and no copy holds an end to
    /// return to (`takeTailCopyIfNeeded` found none). In version 5 that is what a power loss leaves
    /// of an append from a chunk-aligned end whose 40-byte trailer spans two sectors, more than one
    /// chunk after the last sync: the append's new end down, its chunk's head not, and the old
    /// trailer under that head torn (its second sector written back). The chunk boundary where
    /// the failing chunk starts was then the file's end, every chunk below it in place: when the
    /// chunk before it authenticates and the last sync ended at or below the boundary (its copy
    /// says so: the failing chunk holds no byte a sync made durable), that boundary is returned,
    /// and `verifyTrailerIfNeeded` takes the file back to it, visibly (as from a copy:
    /// `endRestoredFromTailCopy`); the next change seals a trailer there and cuts the failing chunk
    /// off (`repairTornTailIfNeeded`). Only at such boundaries: elsewhere a trailer never tears. A
    /// last chunk holding synced bytes that fails stays at its length, reading as corrupt until a
    /// whole-chunk write repairs it (issue 24 item 4: damage never moves the end over synced bytes).
    ///
    /// An attacker who damages such a chunk gets the same: the file shorter by bytes no sync
    /// covered, reported, where it would read them as corrupt — never silently, and never below an
    /// end the chunks in place authenticate.
    func alignedEndBelowATornAppend() throws(SecureFileError) -> Int64? {
        guard layout.hasTailRecords, hasHeader, cipher != nil, diskSize > 0 else { return nil }
        let shift = Int64(layout.chunkShift)
        let lastIndex = (diskSize - 1) >> shift
        let aligned = lastIndex << shift
        guard lastIndex > 0, trailerSpansTwoSectors(size: aligned),
              let synced = try newestSyncCopySize(), synced <= aligned,
              try chunkAuthenticatesInPlace(lastIndex - 1, size: aligned) else { return nil }
        return aligned
    }

    /// The size the newest sync's copy that authenticates holds (a sync's, a cut's or the
    /// creation's: what was last made durable), nil when none does. One longer than the file is a
    /// sync's that did not complete (its copy went first): the one before it is the last sync.
    private func newestSyncCopySize() throws(SecureFileError) -> Int64? {
        for c in try tailCopies() where c.descriptor.kind == .sync && c.descriptor.size <= diskSize {
            if try copiesAuthenticate(c.descriptor, slot: c.slot) { return c.descriptor.size }
        }
        return nil
    }

    /// Whether `copy` (its chunk copy's tag `chunkTag`) holds the end of a file of `size` as it is in place.
    private func tailCopy(_ copy: TailCopyDescriptor, _ chunkTag: [UInt8]?, isTheEndAt size: Int64) throws(SecureFileError) -> Bool {
        guard copy.size == size else { return false }
        guard let chunkTag else { return true }
        let remainder = Int(size & Int64(chunkSize - 1))
        let at = layout.chunkOffset(size >> Int64(layout.chunkShift)) + Int64(layout.selectorSize + FileLayout.nonceSize + remainder)
        var tag = [UInt8](repeating: 0, count: FileLayout.tagSize)
        let read = tag.withUnsafeMutableBytes { Sys.preadFull(ioFD, $0.baseAddress!, $0.count, at) }
        let got = try checkIO(read, "read")
        return got == tag.count && tag == chunkTag
    }

    /// Whether full chunk `index` of a file of `size` authenticates where it is.
    private func chunkAuthenticatesInPlace(_ index: Int64, size: Int64) throws(SecureFileError) -> Bool {
        guard let cipher else { return false }
        let length = layout.chunkLength(index, size: size)
        let count = length + layout.chunkOverhead
        let buf = ensureScratch(count)
        let got = try checkIO(Sys.preadFull(ioFD, buf, count, layout.chunkOffset(index)), "read")
        defer { secureZero(UnsafeMutableRawBufferPointer(start: workBase, count: length)) }
        guard got == count else { return false }
        // (Torn by a kill, its chunk copy whole: it reads.)
        return try openChunkInPlaceOrFromCopy(buf, index: index, length: length, into: workBase, cipher: cipher)
    }

    /// The last chunk while it is read from a tail copy (nil when the file's size ends a full chunk:
    /// then only the trailer is restored).
    var restoredChunkIndex: Int64? {
        guard case .copy = restoredTail, diskSize & Int64(chunkSize - 1) != 0 else { return nil }
        return diskSize >> Int64(layout.chunkShift)
    }

    /// The restored last chunk, read from its copy (`readChunksFromDisk`): `buf` gets its
    /// `chunkOverhead + length` sealed bytes.
    func readRestoredChunk(into buf: UnsafeMutableRawPointer, count: Int) throws(SecureFileError) -> Bool {
        guard case .copy(let slot) = restoredTail else { return false }
        let got = try checkIO(Sys.preadFull(ioFD, buf, count, layout.tailCopyOffset(slot) + Int64(TailCopyDescriptor.size)), "read the tail copy")
        return got == count
    }

    /// Writes the restored end back in place (the copies of the last chunk and trailer, where the
    /// end of a file of `diskSize` bytes has them); the caller then cuts the file there.
    func writeRestoredTailBack() throws(SecureFileError) {
        guard case .copy(let slot) = restoredTail else { return }
        let (_, total) = tailCopyLength(size: diskSize)
        let from = layout.tailCopyOffset(slot) + Int64(TailCopyDescriptor.size)
        let end = layout.physicalSize(forPlaintextSize: diskSize)
        // Not in the scratch memory: the write path calls this with its sealed chunks there.
        try withUnsafeTemporaryAllocation(byteCount: total, alignment: 16) { (buf) throws(SecureFileError) in
            let got = try checkIO(Sys.preadFull(ioFD, buf.baseAddress!, total, from), "read the tail copy")
            guard got == total else { throw .ace(.badKeyOrCorruptData, "\(path): the tail copy was cut") }
            try checkIO(Sys.pwriteFull(ioFD, buf.baseAddress!, total, end - Int64(total)), "write the tail copy back")
        }
        self.restoredTail = nil
    }
}
