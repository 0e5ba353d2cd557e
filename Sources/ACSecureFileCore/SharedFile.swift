#if canImport(Glibc)
import Glibc
#endif
import ACCrypto
import ACSecureServices
import ACSystemCalls

/// The state of one secure file (one inode) shared by every handle this process has open on it,
/// as the kernel's page cache is shared: each handle sees the others' writes at once.
///
/// This file owns the state, the keys and the errors deferred to the next call; reading, writing,
/// the chunk codec, the authenticated end and multi-process coordination are extensions in
/// `SharedFile+*.swift`. Everything is guarded by `lock`; the methods assume it is held exclusively,
/// except `readConcurrently` (`SharedFile+Read.swift`), which runs with it held shared and changes
/// nothing here (docs/ARCHITECTURE.md "Locks").
///
/// Invariants:
/// - After every system call the engine makes, the disk holds a file that opens: a prefix of
///   complete chunks ending in a trailer that authenticates its length, possibly followed by bytes
///   of an interrupted extension (see `SharedFile+Tail.swift` for how they are recovered).
/// - At most one chunk is cached (`cacheIndex`), always as it is on disk; its buffer is zero beyond
///   `cacheLength`. The opt-in read cache (`readCache`) holds more, also as they are on disk.
/// - Writes of write-back handles that are not on disk yet are in the write-back run
///   (`SharedFile+WriteBack.swift`): at most `writeBackRunBytes` of contiguous chunks. A
///   write-through call writes it out before it changes the file.
/// - `size == diskSize` unless the run holds writes, in which case `size == max(diskSize, runEnd)`.
final class SharedFile: @unchecked Sendable {
    struct Identity: Hashable { var device: UInt64; var inode: UInt64 }

    let identity: Identity
    /// Held exclusively by every operation, except reads that `concurrentReadKeys` lets in shared.
    let lock = RWLock()
    let services: any KeyProvider
    var keySelection: KeySelection
    /// Path at first open, for messages only.
    var path: BytePath
    /// Handles open on this state (guarded by the open-files table, not by `lock`).
    var refCount = 0
    /// Set when the first open failed to load the file: waiters retry instead of using it.
    var loadFailed = false

    /// nil for an empty (0-byte) file that has no header yet.
    var header: FileHeader? {
        didSet {
            hasHeader = header != nil
            header?.withFileID { fileID.copyMemory(from: $0.baseAddress!, byteCount: 16) }
        }
    }
    /// `header != nil`, for the checks of every call: testing the optional copies the header (three
    /// arrays: six reference-count operations).
    private(set) var hasHeader = false
    /// The file ID as raw memory, for the per-chunk AAD.
    let fileID: UnsafeMutableRawPointer
    var layout: FileLayout
    /// The chunk and trailer keys (derived from the data key per selector in version 2).
    var cipher: ChunkKeys?
    /// The file's data key (guarded memory), kept for re-wrapping; dropped with `cipher` on lock.
    var dataKey: SecureBytes?
    var keyGeneration: UInt64 = 0

    /// The descriptor used for all I/O (-1 until loaded); writable as soon as any handle is.
    var ioFD: Int32 = -1
    var ioFDWritable = false

    var size: Int64 = 0
    /// The plaintext size of the file on disk (as far as this process knows).
    var diskSize: Int64 = 0 { didSet { diskShape = .none } }
    /// How the end on disk is laid out (version 5): records after the last chunk, or none. Every
    /// change of `diskSize` resets it; an append of a record sets it after.
    var diskShape = TailShape.none
    /// The end of the file on disk has been authenticated (or recovered) since it last changed.
    var tailVerified = false
    /// Why the end did not authenticate: every change is refused until the file is cut to 0, so a
    /// truncation can never be sealed into a file that then verifies ("laundered").
    var tailFailure: SecureFileError?
    /// The physical end of the last complete file when bytes of an interrupted extension follow
    /// it; they are cut off before the next change.
    var pendingTailRepair: Int64?
    /// How many bytes follow the authenticated end (0 normally): an interrupted extension, or tampering.
    var bytesAfterAuthenticatedEnd: Int64 = 0
    /// The newest tail copy's sequence number on disk, as far as this process knows (version 4:
    /// `SharedFile+TailCopy.swift`); the next copy gets the next number and the other slot.
    var tailCopySequence: UInt64 = 0
    /// The copy with `tailCopySequence` is a rewrite's or a chunk copy (kind 2 or 3): the next copy
    /// goes over it, not over the sync's copy in the other slot.
    var tailCopyNewestIsNotASyncs = false
    /// The newest copy is a chunk copy (kind 3: its slot, and where its chunk ends) whose chunk is not
    /// known to be whole in place: it is settled (`settleChunkCopy`) before a copy goes over it.
    var unconfirmedChunkCopy: (slot: Int, end: Int64)?
    /// `tailCopySequence` was read from disk (at the first copy this state writes) or set by a write.
    var tailCopySequenceKnown = false
    /// Coordinated mode: the slots were checked (or written) since this operation took the lock, so
    /// no other process can have written a copy since.
    var tailCopiesCheckedUnderLock = false
    /// The file changed at or after its last chunk since the newest tail copy: the next sync writes
    /// one. nil until this state knows (its first sync then compares the newest copy with the end).
    var tailCopyStale: Bool?
    /// The tail copies were consulted at the first check of the end (a power loss can only have hit
    /// the file before this process opened it).
    var tailCopiesChecked = false
    /// The end was taken from a tail copy: its last chunk is read from the copy until the next
    /// change writes it back in place (`repairTornTailIfNeeded`).
    var restoredTail: RestoredTail?
    /// The pending end the header on disk records, as far as this process knows (nil: none):
    /// `SharedFile+PendingEnd.swift`.
    var pendingEndRecorded: Int64?
    /// What the last cut (a shrink or emptying) leaves to do before the next change: its pending-end
    /// record to clear, after a barrier if the cut must be on the device first (`settleCut`); the
    /// application's sync settles it too (`makeDurable`).
    var cutSettlement = CutSettlement.none
    /// The directory this process created the file in, until a sync has made the new name durable
    /// too (`makeDurable`): an application that fsyncs a file it just created expects to find it.
    var directoryToSync: BytePath?
    /// The end was checked without the record lock (in default mode, or by a forked child) and the
    /// state has since turned coordinated: the first locked operation checks it again, whatever
    /// the length (another process may have been between the two writes of a change then).
    var endCheckedWithoutLock = false
    /// Other processes may write this file: every operation takes a record lock and rereads.
    var coordinated = false
    /// Coordinated mode: this operation holds the record lock exclusively (no other process reads
    /// or writes the file until it ends).
    var holdsExclusiveRecordLock = false
    /// A handle asked for double writes (`SecureFile.PartialOverwrites.doubleWrite`): a chunk copy is
    /// on the device before its chunk is rewritten, and the rewrite before the call returns.
    var doubleWrite = false
    /// Whole chunks that a write rewrites in place get a chunk copy first, as
    /// chunks rewritten in part do, so a kill never leaves one unreadable. False only when every
    /// handle of the process opened the file with `SecureFile.WholeChunkOverwrites.inPlace`.
    var copiesWholeChunks = true
    /// The fork count this state was last used at: a forked child adopts it first (`adoptAfterForkIfNeeded`).
    var forkGeneration: Int
    /// `ioFD` is still the open file description a forked child inherited (its reopen failed in
    /// default mode): coordinated mode must not lock through it (`ownDescription`).
    var ioFDSharedWithParent = false

    /// A write that had returned success could not reach the disk later (a write-back flush when
    /// services locked, or at exit): every handle reports it once, at its next call or close.
    var deferredError: SecureFileError?
    var deferredErrorGeneration: UInt64 = 0

    // The one-chunk read cache (clean: it holds a chunk as it is on disk). Readers that hold `lock`
    // shared use it under `cacheLock`; holders of `lock` exclusively need not take that.
    let cacheLock = PThreadMutex()
    var cacheIndex: Int64 = -1
    var cacheLength = 0
    var cache: SecureBuffer
    // The opt-in read cache (`SharedFile+ReadCache.swift`): many chunks as they are on disk.
    /// The size the handles asked for (the largest), 0 for none.
    var readCacheBytes = 0
    var readCache: ChunkReadCache?
    /// Its guarded memory could not be allocated: read without it.
    var readCacheUnavailable = false
    // The write-back run: chunks `runFirst...` written by write-back handles, not yet on disk.
    /// Guarded plaintext, allocated at the first write-back write (`writeBackRunBytes`).
    var run: SecureBuffer? {
        didSet { runBase = run?.withUnsafeMutableBytes { $0.baseAddress } }
    }
    /// The run's memory, kept so a small write does not retain the buffer to reach it.
    private(set) var runBase: UnsafeMutableRawPointer?
    /// The run's first chunk, -1 when it holds nothing.
    var runFirst: Int64 = -1
    /// Plaintext bytes of the run from the start of `runFirst`; the buffer is zero beyond them.
    var runLength = 0
    /// The writes that went into the run since it started (how it is sealed: `writeRun`).
    var runWrites = 0
    /// A second chunk buffer for read-modify-write of a chunk that is not the cached one.
    var work: SecureBuffer

    // Ciphertext staging, grown on demand up to one batch.
    var scratch: UnsafeMutableRawPointer?
    var scratchCapacity = 0
    /// A tail-copy slot on its way to disk, or both slots' descriptors read back (descriptors and
    /// sealed bytes: nothing secret). Kept: a temporary allocation that large (over 1 KiB) cost
    /// two `malloc`s per chunk copy, i.e. per page write.
    var slotStaging = GrowingBuffer(alignment: 16)
    let aad: UnsafeMutableRawPointer
    let trailerAAD: UnsafeMutableRawPointer
    /// Nonces for one batch (every chunk of the smallest chunk size, and the trailer): one
    /// RAND_bytes call per batch, as a call costs about as much as encrypting a 4 KiB chunk.
    let nonces: UnsafeMutableRawPointer
    /// `fileID`, `aad`, `trailerAAD` and `nonces` share one allocation (a state is made at every
    /// first open of a file), one after the other at these offsets.
    private static let aadOffset = 16
    private static let trailerAADOffset = aadOffset + max(FileLayout.chunkAADSize, TailShape.recordAADSize)
    private static let noncesOffset = trailerAADOffset + FileLayout.trailerAADSize + TailShape.footerSize
    private static let noncesSize = ((batchBytes >> Int(FileLayout.chunkShiftRange.lowerBound)) + 1) * FileLayout.nonceSize

    /// Larger requests are split into batches of this many plaintext bytes per system call; a
    /// services lock stops a long request between batches.
    static let batchBytes = 1 << 20

    /// A state with no file behind it yet: `OpenFiles` creates it under its table lock (no I/O)
    /// and loads it afterwards with only this file's lock held.
    /// - Throws: `ENOMEM` + `ACE_LOW_MEMORY_ERROR` when no guarded memory is left for its buffers.
    init(identity: Identity, services: any KeyProvider, keySelection: KeySelection, path: BytePath) throws(SecureFileError) {
        self.identity = identity
        self.services = services
        self.keySelection = keySelection
        self.path = path
        self.layout = FileLayout()
        ForkGeneration.installed
        self.forkGeneration = ForkGeneration.current
        let block = UnsafeMutableRawPointer.allocate(byteCount: Self.noncesOffset + Self.noncesSize, alignment: 16)
        fileID = block
        aad = block + Self.aadOffset
        trailerAAD = block + Self.trailerAADOffset
        nonces = block + Self.noncesOffset
        do throws(CryptoError) {
            self.cache = try SecureBuffer(count: layout.chunkSize)
            self.work = try SecureBuffer(count: layout.chunkSize)
        } catch {
            block.deallocate()  // deinit does not run for a state that was never complete
            throw .crypto(error, "\(path): chunk buffers")
        }
    }

    deinit {
        releaseScratchAndDescriptor()
        slotStaging.deallocate()
        fileID.deallocate()  // with aad, trailerAAD and nonces
    }

    /// Adopts the chunk size of the file's header (the buffers were made for the default).
    func setLayout(_ newLayout: FileLayout) throws(SecureFileError) {
        guard newLayout.chunkSize != layout.chunkSize else { layout = newLayout; return }
        precondition(runFirst < 0, "the write-back run is written before the file changes")
        dropReadCache()
        run = nil  // allocated again for the new chunk size when needed
        do throws(CryptoError) {
            let newCache = try SecureBuffer(count: newLayout.chunkSize)
            let newWork = try SecureBuffer(count: newLayout.chunkSize)
            (cache, work) = (newCache, newWork)
        } catch {
            throw .crypto(error, "\(path): chunk buffers")
        }
        layout = newLayout
    }

    var chunkSize: Int { layout.chunkSize }
    var diskChunks: Int64 { layout.chunkCount(forSize: diskSize) }
    var cacheBase: UnsafeMutableRawPointer { cache.withUnsafeMutableBytes { $0.baseAddress! } }
    var workBase: UnsafeMutableRawPointer { work.withUnsafeMutableBytes { $0.baseAddress! } }

    // MARK: keys

    /// Fails with `ACE_NO_KEYS_ERROR` while services are unavailable; reloads the file key after an unlock.
    func ensureKeys() throws(SecureFileError) {
        let generation = services.keyGeneration
        guard generation != 0 else { throw noKeysError }
        services.noteActivity()
        if generation == keyGeneration, cipher != nil || !hasHeader { return }
        guard let header else { keyGeneration = generation; return }
        let kek: KeyEncryptionKey
        do { kek = try services.keyEncryptionKey(for: keySelection) } catch {
            throw error.code == .noKeys ? noKeysError : .services(error, path)
        }
        guard let dataKey = try header.unwrap(with: kek, path: path) else {
            throw .ace(.badKeyOrCorruptData, "\(path): the file key does not unwrap with the \(keySelection) key")
        }
        do { cipher = try ChunkKeys(dataKey: dataKey, selectors: header.layout.selectorSize > 0) } catch {
            throw .crypto(error, "\(path): cannot set up AES-GCM")
        }
        self.dataKey = dataKey
        keyGeneration = generation
    }

    /// The error of every call while services are locked, made once per file: building it was a
    /// heap allocation per refused call.
    private lazy var noKeysError = SecureFileError.servicesUnavailable(path)

    /// Services are locking: a long operation stops at its next batch boundary.
    @inline(__always) var stopRequested: Bool { services.keyGeneration != keyGeneration }

    /// Drops keys and plaintext: called when services lock. The write-back run is written first
    /// with the key still held; if that fails, the error is kept for every handle's next call and
    /// close (the plaintext is wiped all the same: nothing secret outlives the lock).
    func wipeSecrets() {
        dropInheritedRun()
        if runFirst >= 0 {
            do { try flushRun() } catch { deferError(error, "buffered data could not be written when secure services locked") }
        }
        forgetSecrets()
    }

    /// Wipes the write-back run, the cached chunks and the work buffer, and drops the keys: when
    /// services lock (`wipeSecrets`), and at the last close, after which no open reaches this state
    /// (the next one makes a new state), so its keys go then, not when the closed handle objects
    /// are released (docs/FORMAT.md "Keys in memory"). The close has written the run, or reported why not.
    func forgetSecrets() {
        dropRun()
        dropCache()
        dropReadCache()
        work.wipe()
        cipher = nil
        dataKey = nil
        keyGeneration = 0
    }

    /// At the last close (no open can reach this state again): the secrets go (`forgetSecrets`),
    /// and so do the descriptor and the larger buffers, which the closed handles would otherwise
    /// keep until they are released: the C API's per-thread lookup cache may hold a closed
    /// descriptor's handle until that thread's next call, and an open descriptor would keep a
    /// deleted file's blocks allocated.
    func releaseAtLastClose() {
        forgetSecrets()
        run = nil
        releaseScratchAndDescriptor()
    }

    /// Gives the scratch memory back for the next state and closes `ioFD`: at the last close, and
    /// at deinit for a state no handle closed (an open that failed).
    private func releaseScratchAndDescriptor() {
        if let scratch {
            SpareScratch.give(scratch, capacity: scratchCapacity)
            self.scratch = nil
            scratchCapacity = 0
        }
        if ioFD >= 0 {
            _ = Sys.close(ioFD)
            ioFD = -1
        }
    }

    /// Makes the cache buffer chunk `index` as it is on disk, `length` bytes (copied from `source`
    /// if given, else already in the buffer), and keeps the buffer's invariant: zero after `length`.
    /// A write that pads the chunk later seals those bytes, so stale ones there would reach the file
    /// (FuzzOperationSequence, fuzz/FailCases). `tailIsZero` skips the zeroing where the caller has
    /// just composed the chunk over zeros (the append path: 4 KiB of memset per call); debug
    /// builds check the claim.
    func keepInCache(_ index: Int64, length: Int, from source: UnsafeRawPointer? = nil, tailIsZero: Bool = false) {
        let base = cacheBase
        if let source, source != UnsafeRawPointer(base) { base.copyMemory(from: source, byteCount: length) }
        if length < chunkSize {
            if tailIsZero {
                assert(memcmp(base + length, ZeroChunk.pointer, chunkSize - length) == 0, "the cache buffer is zero after the chunk's length")
            } else {
                secureZero(UnsafeMutableRawBufferPointer(start: base + length, count: chunkSize - length))
            }
        }
        cacheLength = length
        cacheIndex = index
    }

    /// The cache buffer is about to compose chunks (its content is no chunk on disk any more): it
    /// holds no chunk until `keepInCache` or `dropCache`. Not wiped: the caller overwrites it.
    func unlabelCache() {
        cacheIndex = -1
        cacheLength = 0
    }

    /// Forgets the cached chunk (its plaintext is wiped).
    func dropCache() {
        cacheIndex = -1
        cacheLength = 0
        cache.wipe()
    }

    /// Writes buffered data, then forces it to the device: `fsync(2)` or `fdatasync(2)`.
    /// The first sync of a file this process created also fsyncs its directory, so the new name
    /// survives a power loss with the data (a failure fails the sync, which tries it again next time).
    func makeDurable(_ durability: SecureFile.Durability) throws(SecureFileError) {
        try flushRun()
        // A tail copy holds one sealed chunk: records are sealed whole first (version 5; in
        // coordinated mode a sync of a writable state holds the record lock exclusively for it).
        if ioFDWritable && diskShape.records > 0 && (!coordinated || holdsExclusiveRecordLock) { try compactTail() }
        try writeTailCopyIfNeeded()
        switch durability {
        case .full: try checkIO(Sys.fsync(ioFD), "fsync")
        case .data: try checkIO(Sys.fdatasync(ioFD), "fdatasync")
        }
        if cutSettlement != .none {
            // The cut is on the device now: its record has done its work.
            cutSettlement = .none
            try clearPendingEnd()
        }
        if let directory = directoryToSync {
            try checkIO(Sys.syncDirectory(directory), "fsync of its directory \(directory) (the new file's name)")
            directoryToSync = nil
        }
    }

    /// Records the failure of a write that had already returned success.
    func deferError(_ error: SecureFileError, _ context: String) {
        deferredError = SecureFileError(code: error.code, errno: error.errno, message: "\(error.message) (\(context))")
        deferredErrorGeneration &+= 1
        // The lost writes are gone: what the disk holds is the truth now.
        dropRun()
        size = diskSize
    }

    /// Writes a header and an empty trailer into a 0-byte file.
    func initializeIfNeeded() throws(SecureFileError) {
        guard !hasHeader else { return }
        let kek: KeyEncryptionKey
        do { kek = try services.keyEncryptionKey(for: keySelection) } catch { throw .services(error, path) }
        let dataKey: SecureBytes
        do { dataKey = try SecureBytes(randomCount: 32) } catch { throw .crypto(error, "\(path): data key") }
        let newHeader = try FileHeader.create(layout: layout, kek: kek, dataKey: dataKey)
        do { cipher = try ChunkKeys(dataKey: dataKey, selectors: layout.selectorSize > 0) } catch {
            throw .crypto(error, "\(path): cannot set up AES-GCM")
        }
        self.dataKey = dataKey
        header = newHeader
        keyGeneration = services.keyGeneration
        let start = try newFileStart(newHeader)
        try checkIO(Sys.pwriteFull(ioFD, start.sector.baseAddress!, start.sector.count, 0), "write header")
        if let trailer = start.trailer {
            try checkIO(Sys.pwriteFull(ioFD, trailer, layout.trailerSize, layout.dataOffset), "write the empty trailer")
        }
        size = 0
        diskSize = 0
        tailVerified = true
        tailFailure = nil
    }

    @discardableResult
    func checkIO<T>(_ result: Result<T, Errno>, _ what: @autoclosure () -> String) throws(SecureFileError) -> T {
        switch result {
        case .success(let v): return v
        case .failure(let e): throw .posix(e.rawValue, "\(path): \(what())")
        }
    }
}
