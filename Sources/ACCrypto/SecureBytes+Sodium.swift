#if canImport(Glibc)
import Glibc
#endif
import CACSecureSodium

// Guarded memory for secrets, in two types (compare swift-crypto, whose `SecureBytes` is a
// copy-on-write value, so a shared copy is never written):
// - `SecureBytes`: key material, written once while it is created and only read afterwards, so
//   sharing it between threads is safe and it is `Sendable` (no `@unchecked` promise to keep).
// - `SecureBuffer`: scratch memory that is written again and again (a file's chunk cache, a derived
//   key in flight, a stream buffer). Not `Sendable`: its owner serialises every use.
// Both come from `sodium_malloc`: between guard pages, `mlock`ed so they never reach swap, marked
// `MADV_DONTDUMP` so they stay out of core dumps, and zeroed when released (GuardedMemoryPool).
//
// Guarded memory is finite (each buffer is its own mapping with guard pages: the kernel's
// `vm.max_map_count` and `RLIMIT_AS` bound how many a process can hold), so every initializer
// throws `CryptoError.outOfMemory` instead of stopping the program when it runs out.

/// One `sodium_malloc` block of at least one byte, zero-filled.
private func allocateGuarded(_ count: Int) throws(CryptoError) -> UnsafeMutableRawPointer {
    precondition(count >= 0)
    Sodium.ensureInitialized()
    if let p = GuardedMemoryPool.shared.take(max(count, 1)) { return p }  // zeroed when it was given back
    guard !GuardedMemoryPool.shared.simulatingExhaustion, let p = sodium_malloc(max(count, 1)) else {
        throw CryptoError.outOfMemory(count)
    }
    sodium_memzero(p, max(count, 1))
    return p
}

/// Zeroes, then keeps the block for reuse or unmaps it with its guard pages (sodium_free).
private func releaseGuarded(_ p: UnsafeMutableRawPointer, count: Int) {
    GuardedMemoryPool.shared.give(p, size: max(count, 1))
}

/// Key material in guarded memory, immutable once created: thread-safe to share.
///
/// Equality is constant time. Never copy the contents into `Data` or `[UInt8]`. For memory that is
/// written after creation, use `SecureBuffer`.
public final class SecureBytes: Sendable {
    public let count: Int
    // Written only inside `init`; read-only afterwards (which is what makes the type Sendable).
    private nonisolated(unsafe) let base: UnsafeMutableRawPointer

    /// `count` bytes written once by `initialize` (the memory starts zeroed). If it throws, the
    /// memory is zeroed and released, and the error is rethrown.
    /// - Throws: `CryptoError.outOfMemory` when no guarded memory is left; what `initialize` throws.
    public init(count: Int, initializingWith initialize: (UnsafeMutableRawBufferPointer) throws(CryptoError) -> Void) throws(CryptoError) {
        let p = try allocateGuarded(count)
        do { try initialize(UnsafeMutableRawBufferPointer(start: p, count: count)) } catch {
            releaseGuarded(p, count: count)
            throw error
        }
        self.count = count
        self.base = p
    }

    /// `count` zero bytes.
    public convenience init(count: Int) throws(CryptoError) {
        try self.init(count: count) { _ in }
    }

    /// `count` fresh random bytes.
    public convenience init(randomCount count: Int) throws(CryptoError) {
        try self.init(count: count) { SecureRandom.fill($0) }
    }

    /// A copy of `bytes`. The caller remains responsible for wiping its own copy.
    public convenience init(copying bytes: UnsafeRawBufferPointer) throws(CryptoError) {
        try self.init(count: bytes.count) { out in
            if let src = bytes.baseAddress, bytes.count > 0 { out.baseAddress!.copyMemory(from: src, byteCount: bytes.count) }
        }
    }

    public convenience init(copying bytes: [UInt8]) throws(CryptoError) {
        try self.init(count: bytes.count) { out in out.copyBytes(from: bytes) }
    }

    deinit { releaseGuarded(base, count: count) }

    public func withUnsafeBytes<R, E: Error>(_ body: (UnsafeRawBufferPointer) throws(E) -> R) throws(E) -> R {
        try body(UnsafeRawBufferPointer(start: base, count: count))
    }

    /// Bytes `range` as a new guarded buffer.
    public func slice(_ range: Range<Int>) throws(CryptoError) -> SecureBytes {
        precondition(range.lowerBound >= 0 && range.upperBound <= count)
        return try SecureBytes(copying: UnsafeRawBufferPointer(start: base + range.lowerBound, count: range.count))
    }
}

extension SecureBytes: Equatable {
    /// Constant time in the contents (the lengths are not secret).
    public static func == (lhs: SecureBytes, rhs: SecureBytes) -> Bool {
        lhs.withUnsafeBytes { a in rhs.withUnsafeBytes { b in constantTimeEqual(a, b) } }
    }
}

extension SecureBytes {
    /// Tests: while `on`, every new buffer (`SecureBytes` or `SecureBuffer`) fails with
    /// `CryptoError.outOfMemory`, as when the process has run out of mappings or address space.
    /// Set it only while no other thread allocates.
    @_spi(Testing) public static func simulateGuardedMemoryExhaustion(_ on: Bool) {
        GuardedMemoryPool.shared.simulateExhaustion(on)
    }
}

/// Mutable guarded memory: plaintext caches, stream buffers, keys being derived.
///
/// Not thread-safe, and so not `Sendable`: the owner serialises its use (the engine keeps a file's
/// buffers under that file's lock). Zero-filled when created, zeroed when released.
public final class SecureBuffer {
    public let count: Int
    /// Inlinable accessors (below): a call through the module boundary per access cost the write
    /// path of a small append four generic calls, each with its closure context retained.
    @usableFromInline let base: UnsafeMutableRawPointer

    /// A zero-filled buffer of `count` bytes.
    /// - Throws: `CryptoError.outOfMemory` when no guarded memory is left.
    public init(count: Int) throws(CryptoError) {
        self.base = try allocateGuarded(count)
        self.count = count
    }

    /// A copy of `bytes`. The caller remains responsible for wiping its own copy.
    /// - Throws: `CryptoError.outOfMemory` when no guarded memory is left.
    public convenience init(copying bytes: UnsafeRawBufferPointer) throws(CryptoError) {
        try self.init(count: bytes.count)
        if let src = bytes.baseAddress, bytes.count > 0 { base.copyMemory(from: src, byteCount: bytes.count) }
    }

    deinit { releaseGuarded(base, count: count) }

    @inlinable
    public func withUnsafeBytes<R, E: Error>(_ body: (UnsafeRawBufferPointer) throws(E) -> R) throws(E) -> R {
        try body(UnsafeRawBufferPointer(start: base, count: count))
    }

    @inlinable
    public func withUnsafeMutableBytes<R, E: Error>(_ body: (UnsafeMutableRawBufferPointer) throws(E) -> R) throws(E) -> R {
        try body(UnsafeMutableRawBufferPointer(start: base, count: count))
    }

    /// Overwrites the contents with zeros (the buffer stays allocated).
    public func wipe() { sodium_memzero(base, max(count, 1)) }

    /// The contents, frozen into key material (a guarded copy).
    /// - Throws: `CryptoError.outOfMemory` when no guarded memory is left.
    public func secureBytes() throws(CryptoError) -> SecureBytes {
        try SecureBytes(copying: UnsafeRawBufferPointer(start: base, count: count))
    }
}

@available(*, unavailable, message: "a SecureBuffer is written in place: keep it with one owner, or freeze it with secureBytes()")
extension SecureBuffer: Sendable {}
