import ACCrypto
import Synchronization

/// The AES-GCM keys of one file's chunks and trailer (docs/FORMAT.md "Nonces and chunk keys").
///
/// Version 1: every chunk and trailer is sealed under the data key itself.
/// Version 2: each chunk and trailer names a 32-bit key selector *s* and is sealed under
/// K_s = AES-256(data key, "ACSFkey2" ‖ s ‖ u32 0) ‖ AES-256(data key, "ACSFkey2" ‖ s ‖ u32 1).
/// A writer uses one random *s* for at most `writesPerSelector` seals, then draws another; readers
/// keep the contexts of the last `cachedSelectors` selectors they met. The data key itself is used
/// only as this PRF's key, never for GCM.
///
/// Key material: the data key and each K_s pass through guarded memory (`SecureBytes`), but the
/// expanded AES key schedules (of the PRF and of each cached GCM context) live in OpenSSL's heap,
/// as for every OpenSSL context; they are cleansed when the context is freed (services lock, close).
///
/// Concurrency: everything but `takeReader`/`giveReader` is used under the file's lock held
/// exclusively. Readers that hold it shared (`SharedFile.readConcurrently`) each take a `Reader`
/// of their own (its GCM contexts and buffers are used by one thread at a time); the pool of idle
/// readers and the PRF behind their key derivation are guarded by `readerLock` (one idle reader is
/// kept in an atomic slot besides, for the common case of one thread reading).
final class ChunkKeys {
    static let writesPerSelector = 1 << 16
    static let cachedSelectors = 32

    /// Version 1: the data key's GCM context. Version 2: nil.
    private let single: AESGCMContext?
    private let prf: AESBlockCipher?
    private struct Cached { var selector: UInt32; let context: AESGCMContext }
    /// The read cache: grows as selectors are met (most files meet one or two, so an open allocates
    /// little), up to `cachedSelectors`, then its oldest entry (`hand`) is re-keyed for the next.
    private var cached: [Cached] = []
    private var hand = 0
    /// Where K_s is derived (guarded memory, wiped after each use).
    private let keyScratch: SecureBuffer
    private var lastSelector: UInt32 = 0
    private var lastContext: AESGCMContext?

    private var writeSelector: UInt32 = 0
    private var writeContext: AESGCMContext?
    private(set) var writesLeft = 0
    /// How many selectors this writer has drawn (observable by tests).
    private(set) var selectorsDrawn = 0

    /// Contexts keyed like the writer's (K_s of `batchSelector`, or the data key in version 1) for
    /// the threads that seal a large write's pieces with it (`SealingPool`).
    private var batchContexts: [AESGCMContext] = []
    private var batchSelector: UInt32?

    /// Version 1: the data key, for the readers' own contexts.
    private let singleKey: SecureBytes?
    /// Guards `idleReaders` and, for readers, `prf` (a writer uses it only with the file's lock held
    /// exclusively, when no reader runs).
    private let readerLock = PThreadMutex()
    private var idleReaders: [Reader] = []
    /// One idle reader outside the pool (retained, as `Unmanaged`): a thread reading alone takes and
    /// gives it back with one atomic exchange each, no lock.
    private let idleReader = Atomic<UnsafeMutableRawPointer?>(nil)
    /// Idle readers kept for reuse (more are made while more threads read at once).
    static let keptReaders = 8

    deinit {
        if let idle = idleReader.load(ordering: .acquiring) { Unmanaged<Reader>.fromOpaque(idle).release() }
    }

    init(dataKey: SecureBytes, selectors: Bool) throws(CryptoError) {
        keyScratch = try SecureBuffer(count: 32)
        singleKey = selectors ? nil : dataKey
        if selectors {
            prf = try AESBlockCipher(key: dataKey)
            single = nil
        } else {
            single = try AESGCMContext(key: dataKey)
            prf = nil
        }
    }

    /// K_s for `s` into `key` (guarded memory, allocated once per file: `sodium_malloc` costs more
    /// than the derivation).
    static func derive(_ prf: AESBlockCipher, selector s: UInt32, into key: SecureBuffer) throws(CryptoError) {
        var blocks: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        try withUnsafeMutableBytes(of: &blocks) { (b: UnsafeMutableRawBufferPointer) throws(CryptoError) in
            for j in 0..<2 {
                b.storeBytes(of: UInt64(0x4143_5346_6B65_7932).bigEndian, toByteOffset: 16 * j, as: UInt64.self)  // "ACSFkey2"
                b.storeBytes(of: s.bigEndian, toByteOffset: 16 * j + 8, as: UInt32.self)
                b.storeBytes(of: UInt32(j).bigEndian, toByteOffset: 16 * j + 12, as: UInt32.self)
            }
            try key.withUnsafeMutableBytes { (k: UnsafeMutableRawBufferPointer) throws(CryptoError) in
                try prf.encryptBlocks(UnsafeRawBufferPointer(b), into: k.baseAddress!)
            }
        }
    }

    /// The context that opens a chunk or trailer naming selector `s` (ignored in version 1), or nil
    /// if OpenSSL fails (treated as an authentication failure).
    @inline(__always) func context(forSelector s: UInt32) -> AESGCMContext? {
        if let single { return single }
        if s == lastSelector, let lastContext { return lastContext }
        if s == writeSelector, let writeContext { return writeContext }
        return lookUp(s)
    }

    private func lookUp(_ s: UInt32) -> AESGCMContext? {
        for entry in cached where entry.selector == s {
            lastSelector = s
            lastContext = entry.context
            return entry.context
        }
        guard let prf else { return nil }
        // A miss: derive K_s and re-key the oldest cached context (or make one while the cache fills).
        defer { keyScratch.wipe() }
        lastContext = nil
        do throws(CryptoError) { try Self.derive(prf, selector: s, into: keyScratch) } catch { return nil }
        let context: AESGCMContext
        if cached.count < Self.cachedSelectors {
            guard let fresh = try? AESGCMContext(key: keyScratch) else { return nil }
            context = fresh
            cached.append(Cached(selector: s, context: context))
        } else {
            context = cached[hand].context
            do throws(CryptoError) { try context.rekey(keyScratch) } catch {
                cached.remove(at: hand)  // keyed with who knows what: never used again
                hand = 0
                return nil
            }
            cached[hand].selector = s
            hand = (hand + 1) % Self.cachedSelectors
        }
        lastSelector = s
        lastContext = context
        return context
    }

    /// The selector and context for the next seal: the current selector until it has sealed
    /// `writesPerSelector` times, then a fresh random one.
    @inline(__always) func nextWrite() throws(CryptoError) -> (UInt32, AESGCMContext) {
        if let single { return (0, single) }
        if writesLeft == 0 || writeContext == nil { try drawSelector() }
        writesLeft -= 1
        return (writeSelector, writeContext!)
    }

    /// Makes the next seal draw a fresh selector: a forked child must not go on sealing under the
    /// selector its parent also goes on using (each draw stays within `writesPerSelector` seals).
    func retireWriteSelector() { writesLeft = 0 }

    /// Makes the next `count` seals share one selector, drawing a fresh one now if fewer seals are
    /// left under the current one. A last chunk that is not full and its trailer are sealed as such
    /// a pair: the end-of-file recovery scan skips, without any GCM, the positions where they differ.
    func reserveSeals(_ count: Int) throws(CryptoError) {
        guard single == nil, writesLeft < count || writeContext == nil else { return }
        try drawSelector()
    }

    /// For `count` seals made by `threads` threads at once: one selector for all of them (as
    /// `reserveSeals`), counted as used, and a context per thread keyed for it, the writer's first.
    func batchSeals(_ count: Int, threads: Int) throws(CryptoError) -> (selector: UInt32, contexts: [AESGCMContext]) {
        if let single {
            while batchContexts.count < threads - 1 {
                guard let singleKey else { throw CryptoError.invalidArgument("no data key") }
                batchContexts.append(try AESGCMContext(key: singleKey))
            }
            return (0, [single] + batchContexts.prefix(threads - 1))
        }
        try reserveSeals(count)
        guard let prf, let writeContext else { throw CryptoError.invalidArgument("no write key") }
        writesLeft -= count
        if batchSelector != writeSelector || batchContexts.count < threads - 1 {
            defer { keyScratch.wipe() }
            try Self.derive(prf, selector: writeSelector, into: keyScratch)
            batchSelector = nil
            for context in batchContexts { try context.rekey(keyScratch) }
            while batchContexts.count < threads - 1 { batchContexts.append(try AESGCMContext(key: keyScratch)) }
            batchSelector = writeSelector
        }
        return (writeSelector, [writeContext] + batchContexts.prefix(threads - 1))
    }

    private func drawSelector() throws(CryptoError) {
        var s: UInt32 = 0
        withUnsafeMutableBytes(of: &s) { NonceGenerator.fill($0) }  // public (stored beside each chunk)
        guard let prf else { return }
        defer { keyScratch.wipe() }
        try Self.derive(prf, selector: s, into: keyScratch)
        // Its own context, never one of the read cache's (those are re-keyed as the cache turns over).
        writeContext = try AESGCMContext(key: keyScratch)
        writeSelector = s
        writesLeft = Self.writesPerSelector
        selectorsDrawn += 1
    }

    // MARK: concurrent readers

    /// What one thread needs to open chunks while other threads do the same: GCM contexts of its
    /// own (an OpenSSL context holds the state of one operation), a plaintext chunk for partial
    /// reads (guarded memory, wiped after each use), ciphertext staging and the AAD.
    final class Reader {
        fileprivate let single: AESGCMContext?
        private var cached: [(selector: UInt32, context: AESGCMContext)] = []
        private var hand = 0
        private let keyScratch: SecureBuffer?
        /// Selectors a reader keeps contexts for (most files meet one or two).
        static let cachedSelectors = 4
        /// The AAD of the chunk being opened (`FileLayout.chunkAADSize` bytes).
        let aad: UnsafeMutableRawPointer
        private var ciphertext = GrowingBuffer(alignment: 64)
        private var chunk: SecureBuffer?

        fileprivate init(single: AESGCMContext?) throws(CryptoError) {
            self.single = single
            keyScratch = single == nil ? try SecureBuffer(count: 32) : nil
            aad = .allocate(byteCount: 64, alignment: 16)
        }

        deinit {
            ciphertext.deallocate()
            aad.deallocate()
        }

        /// The context that opens a chunk naming selector `s`, or nil if OpenSSL fails.
        @inline(__always) func context(forSelector s: UInt32, keys: ChunkKeys) -> AESGCMContext? {
            if let single { return single }
            for entry in cached where entry.selector == s { return entry.context }
            guard let keyScratch, let prf = keys.prf else { return nil }
            defer { keyScratch.wipe() }
            let derived: Bool = keys.readerLock.withLock {
                do throws(CryptoError) { try ChunkKeys.derive(prf, selector: s, into: keyScratch) } catch { return false }
                return true
            }
            guard derived else { return nil }
            if cached.count < Self.cachedSelectors {
                guard let fresh = try? AESGCMContext(key: keyScratch) else { return nil }
                cached.append((s, fresh))
                return fresh
            }
            let context = cached[hand].context
            do throws(CryptoError) { try context.rekey(keyScratch) } catch {
                cached.remove(at: hand)
                hand = 0
                return nil
            }
            cached[hand].selector = s
            hand = (hand + 1) % Self.cachedSelectors
            return context
        }

        /// Ciphertext staging of at least `bytes` (not secret: what the disk holds).
        func scratch(_ bytes: Int) -> UnsafeMutableRawPointer { ciphertext.atLeast(bytes) }

        /// A plaintext chunk buffer of at least `bytes` (the caller wipes what it put there).
        func chunk(_ bytes: Int) throws(CryptoError) -> UnsafeMutableRawPointer {
            if let chunk, chunk.count >= bytes { return chunk.withUnsafeMutableBytes { $0.baseAddress! } }
            chunk = nil
            let fresh = try SecureBuffer(count: bytes)
            chunk = fresh
            return fresh.withUnsafeMutableBytes { $0.baseAddress! }
        }
    }

    /// A reader for this thread's call (an idle one, or a new one); give it back with `giveReader`.
    func takeReader() throws(CryptoError) -> Reader {
        if let idle = idleReader.exchange(nil, ordering: .acquiring) { return Unmanaged<Reader>.fromOpaque(idle).takeRetainedValue() }
        if let reader = readerLock.withLock({ idleReaders.popLast() }) { return reader }
        return try Reader(single: singleKey.map { (key: SecureBytes) throws(CryptoError) in try AESGCMContext(key: key) })
    }

    func giveReader(_ reader: Reader) {
        let retained = Unmanaged.passRetained(reader).toOpaque()
        if idleReader.compareExchange(expected: nil, desired: retained, ordering: .releasing).exchanged { return }
        Unmanaged<Reader>.fromOpaque(retained).release()
        let dropped: Reader? = readerLock.withLock {
            guard idleReaders.count < Self.keptReaders else { return reader }
            idleReaders.append(reader)
            return nil
        }
        withExtendedLifetime(dropped) {}  // freed outside the lock
    }
}
