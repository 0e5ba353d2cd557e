#if canImport(Glibc)
import Glibc
#endif
import ACCrypto
import ACSystemCalls
import Synchronization

/// Threads that seal chunks of a large write next to the thread that makes it, so that the write
/// uses more than one core (docs/ARCHITECTURE.md "Parallel sealing").
///
/// One pool per process, with one thread fewer than the process may run on (its affinity mask, at
/// most `largestPool`), started at the first large write; none with one processor. The pool
/// works on one write at a time: a write offered while it is busy with another is sealed by its
/// own thread alone, as every small write is. The helpers never write to the file and never hold
/// a file's lock: the writing thread holds it throughout, claims pieces of its batch as the
/// helpers do, and writes the sealed pieces in order as they complete.
final class SealingPool: @unchecked Sendable {
    static let largestPool = 3

    /// The pool of this process, or nil on a one-processor machine. A forked child gets a pool of
    /// its own (the parent's threads are not in the child, and its mutex may have been copied held).
    static var shared: SealingPool? {
        let generation = ForkGeneration.current
        while true {
            let seen = current.load(ordering: .acquiring)
            if seen != 0 {
                let pool = Unmanaged<SealingPool>.fromOpaque(UnsafeRawPointer(bitPattern: seen)!).takeUnretainedValue()
                if pool.forkGeneration == generation { return pool }
            }
            let helpers = min(Sys.processorsAvailable - 1, largestPool)
            guard helpers > 0 else { return nil }
            let fresh = Unmanaged.passRetained(SealingPool(helpers: helpers, forkGeneration: generation))
            // The pool a forked child inherited is left as it is (its threads are gone): never released.
            if current.compareExchange(expected: seen, desired: Int(bitPattern: fresh.toOpaque()), ordering: .acquiringAndReleasing).exchanged {
                return fresh.takeUnretainedValue()
            }
            fresh.release()
        }
    }
    /// The pool's address (retained forever), 0 before the first large write.
    private static let current = Atomic<Int>(0)
    /// Pieces the helpers have sealed in this process (observable by tests).
    static let piecesSealedByHelpers = Atomic<Int>(0)
    /// Batches offered to the helpers in this process (observable by tests).
    static let batchesOffered = Atomic<Int>(0)

    /// Helper threads (the writing thread seals too).
    let helpers: Int
    private let forkGeneration: Int
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let wake = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    // Guarded by `mutex`.
    private var job: SealJob?
    private var offered: UInt64 = 0
    private var started = false
    private var sleepers = 0
    /// `offered`, for helpers that watch it without the mutex.
    private let published = Atomic<UInt64>(0)
    /// How long a helper watches for the next write before it sleeps: a program writing a large
    /// file offers the next call within microseconds, and waking a sleeping thread (on a virtual
    /// machine, a sleeping processor) takes longer than sealing a piece.
    static let watchNanoseconds = 200_000

    private init(helpers: Int, forkGeneration: Int) {
        self.helpers = helpers
        self.forkGeneration = forkGeneration
        pthread_mutex_init(mutex, nil)
        pthread_cond_init(wake, nil)
    }

    /// Lets the helpers join `job`; false when they are working on another write (the caller then
    /// seals all of its pieces itself). Starts the threads at the first offer.
    func offer(_ job: SealJob) -> Bool {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        guard self.job == nil else { return false }
        if !started {
            started = true
            for _ in 0..<helpers { startThread() }
        }
        self.job = job
        offered &+= 1
        Self.batchesOffered.add(1, ordering: .relaxed)
        published.store(offered, ordering: .releasing)
        if sleepers > 0 { pthread_cond_broadcast(wake) }
        return true
    }

    /// The caller has every piece of `job`: a helper that wakes only now does not look at it.
    func withdraw(_ job: SealJob) {
        pthread_mutex_lock(mutex)
        if self.job === job { self.job = nil }
        pthread_mutex_unlock(mutex)
    }

    private func startThread() {
        var thread = pthread_t()
        let me = Unmanaged.passRetained(self).toOpaque()
        let made = pthread_create(&thread, nil, { argument in
            Unmanaged<SealingPool>.fromOpaque(argument!).takeRetainedValue().helperLoop()
        }, me)
        if made == 0 {
            pthread_detach(thread)
        } else {
            Unmanaged<SealingPool>.fromOpaque(me).release()  // fewer helpers: the writers seal more
        }
    }

    private func helperLoop() -> Never {
        var seen: UInt64 = 0
        while true {
            watch(past: seen)
            pthread_mutex_lock(mutex)
            while job == nil || offered == seen {
                sleepers += 1
                pthread_cond_wait(wake, mutex)
                sleepers -= 1
            }
            let job = self.job!
            seen = offered
            pthread_mutex_unlock(mutex)
            job.help()
        }
    }
}

extension SealingPool {
    /// Returns when a write after `seen` is offered, or after `watchNanoseconds`.
    fileprivate func watch(past seen: UInt64) {
        var t = timespec()
        clock_gettime(CLOCK_MONOTONIC, &t)
        let deadline = Int(t.tv_sec) * 1_000_000_000 + Int(t.tv_nsec) + Self.watchNanoseconds
        while true {
            for _ in 0..<256 where published.load(ordering: .relaxed) != seen { return }
            clock_gettime(CLOCK_MONOTONIC, &t)
            if Int(t.tv_sec) * 1_000_000_000 + Int(t.tv_nsec) >= deadline { return }
        }
    }
}

/// One batch of a write, sealed in pieces by its writer and the pool's helpers. The writer made the
/// plaintext of every chunk reachable (`sources`), put the nonces in place and sealed the trailer
/// before offering it; each thread seals the pieces it claims with a GCM context of its own, under
/// the batch's one key selector.
final class SealJob: @unchecked Sendable {
    struct Batch {
        /// Where chunk j of the batch is sealed: `buffer + j * physicalChunkSize`.
        var buffer: UnsafeMutableRawPointer
        var firstIndex: Int64
        var chunks: Int
        var chunkSize: Int
        var lastLength: Int
        var physicalChunkSize: Int
        var selectorSize: Int
        var selector: UInt32
        /// Fresh nonces, 12 bytes per chunk.
        var nonces: UnsafeRawPointer
        var fileID: UnsafeRawPointer
        /// Chunks per piece.
        var piece: Int
    }

    let batch: Batch
    let pieces: Int
    /// Context 0 is the writer's; helper n uses context n.
    private let contexts: [AESGCMContext]
    /// The plaintext of chunk j (kept alive by the writer until the job is complete).
    let sources: UnsafeMutablePointer<UnsafeRawPointer>
    private let nextPiece = Atomic<Int>(0)
    private let nextHelper = Atomic<Int>(1)
    /// Bit p: piece p is sealed (or failed, then `failed` is set first).
    private let done = Atomic<UInt64>(0)
    private let failed = Atomic<Bool>(false)
    /// Helpers between joining and leaving: the writer waits for none before the job's memory goes.
    private let working = Atomic<Int>(0)

    static let largestPieceCount = 64

    init(batch: Batch, contexts: [AESGCMContext]) {
        self.batch = batch
        self.contexts = contexts
        pieces = (batch.chunks + batch.piece - 1) / batch.piece
        precondition(pieces <= Self.largestPieceCount)
        sources = .allocate(capacity: batch.chunks)
    }

    deinit { sources.deallocate() }

    /// A helper's part: the pieces it can claim, then it leaves.
    fileprivate func help() {
        // Sequentially consistent with `finish` (a helper that joins late must see every piece
        // claimed, or the writer must see it working).
        working.add(1, ordering: .sequentiallyConsistent)
        defer { working.subtract(1, ordering: .releasing) }
        let n = nextHelper.add(1, ordering: .relaxed).oldValue
        guard n < contexts.count else { return }
        while let p = claim() {
            seal(piece: p, context: contexts[n])
            SealingPool.piecesSealedByHelpers.add(1, ordering: .relaxed)
        }
    }

    /// The next piece nobody has claimed yet.
    @inline(__always) func claim() -> Int? {
        let p = nextPiece.add(1, ordering: .sequentiallyConsistent).oldValue
        return p < pieces ? p : nil
    }

    /// Seals a piece the writer claimed.
    func sealAsWriter(piece p: Int) { seal(piece: p, context: contexts[0]) }

    private func seal(piece p: Int, context: AESGCMContext) {
        let b = batch
        var aad: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        let ok = withUnsafeMutableBytes(of: &aad) { (aad: UnsafeMutableRawBufferPointer) -> Bool in
            for j in p * b.piece..<min((p + 1) * b.piece, b.chunks) {
                let c = b.buffer + j * b.physicalChunkSize
                (c + b.selectorSize).copyMemory(from: b.nonces + j * FileLayout.nonceSize, byteCount: FileLayout.nonceSize)
                do throws(CryptoError) {
                    try FileLayout.sealChunk(c, selector: b.selector, selectorSize: b.selectorSize, context: context,
                                             aad: aad.baseAddress!, fileID: b.fileID, index: b.firstIndex + Int64(j),
                                             plaintext: sources[j], count: j == b.chunks - 1 ? b.lastLength : b.chunkSize)
                } catch {
                    return false
                }
            }
            return true
        }
        if !ok { failed.store(true, ordering: .relaxed) }
        done.bitwiseOr(1 << UInt64(p), ordering: .releasing)
    }

    /// Pieces sealed so far (acquiring their bytes), as a bit set.
    @inline(__always) var sealed: UInt64 { done.load(ordering: .acquiring) }

    var sealFailed: Bool { failed.load(ordering: .relaxed) }

    /// Claims every piece nobody has claimed (the writer gives up on the batch) and waits until the
    /// helpers are out: after this the job's memory is the writer's alone.
    func finish() {
        nextPiece.store(pieces, ordering: .sequentiallyConsistent)
        while working.load(ordering: .sequentiallyConsistent) > 0 { sched_yield() }
    }

    /// The bytes of the batch's buffer that piece p covers (the last piece runs to `end`).
    func bytes(ofPiece p: Int, end: Int) -> Range<Int> {
        let step = batch.piece * batch.physicalChunkSize
        return p * step..<(p == pieces - 1 ? end : (p + 1) * step)
    }
}
