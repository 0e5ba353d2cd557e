import CACSecureSodium

/// An owned buffer for secrets: keys and plaintext caches.
///
/// The memory comes from `sodium_malloc`: it sits between guard pages, is `mlock`ed so it never reaches
/// swap, is marked `MADV_DONTDUMP` so it stays out of core dumps, and is zeroed when freed.
/// Equality is constant time. Never copy the contents into `Data` or `[UInt8]`.
///
/// Guarded memory is finite (each buffer is its own mapping with guard pages: the kernel's
/// `vm.max_map_count` and `RLIMIT_AS` bound how many a process can hold), so every initializer
/// throws `CryptoError.outOfMemory` instead of stopping the program when it runs out.
public final class SecureBytes: @unchecked Sendable {
    public let count: Int
    private let base: UnsafeMutableRawPointer

    /// A zero-filled buffer of `count` bytes.
    /// - Throws: `CryptoError.outOfMemory` when no guarded memory is left.
    public init(count: Int) throws(CryptoError) {
        precondition(count >= 0)
        Sodium.ensureInitialized()
        self.count = count
        if let p = GuardedMemoryPool.shared.take(max(count, 1)) {
            self.base = p  // zeroed when it was given back
            return
        }
        guard !GuardedMemoryPool.shared.simulatingExhaustion, let p = sodium_malloc(max(count, 1)) else {
            throw CryptoError.outOfMemory(count)
        }
        self.base = p
        sodium_memzero(p, max(count, 1))
    }

    /// `count` fresh random bytes.
    public convenience init(randomCount count: Int) throws(CryptoError) {
        try self.init(count: count)
        SecureRandom.fill(UnsafeMutableRawBufferPointer(start: base, count: count))
    }

    /// A copy of `bytes`. The caller remains responsible for wiping its own copy.
    public convenience init(copying bytes: UnsafeRawBufferPointer) throws(CryptoError) {
        try self.init(count: bytes.count)
        if let src = bytes.baseAddress, bytes.count > 0 { base.copyMemory(from: src, byteCount: bytes.count) }
    }

    public convenience init(copying bytes: [UInt8]) throws(CryptoError) {
        try self.init(count: bytes.count)
        bytes.withUnsafeBytes { src in
            if let s = src.baseAddress, src.count > 0 { base.copyMemory(from: s, byteCount: src.count) }
        }
    }

    deinit {
        // Zeroes, then keeps it for reuse or unmaps it with its guard pages (sodium_free).
        GuardedMemoryPool.shared.give(base, size: max(count, 1))
    }

    public func withUnsafeBytes<R, E: Error>(_ body: (UnsafeRawBufferPointer) throws(E) -> R) throws(E) -> R {
        try body(UnsafeRawBufferPointer(start: base, count: count))
    }

    public func withUnsafeMutableBytes<R, E: Error>(_ body: (UnsafeMutableRawBufferPointer) throws(E) -> R) throws(E) -> R {
        try body(UnsafeMutableRawBufferPointer(start: base, count: count))
    }

    /// Overwrites the contents with zeros (the buffer stays allocated).
    public func wipe() { sodium_memzero(base, max(count, 1)) }

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
    /// Tests: while `on`, every new buffer fails with `CryptoError.outOfMemory`, as when the process
    /// has run out of mappings or address space. Set it only while no other thread allocates.
    @_spi(Testing) public static func simulateGuardedMemoryExhaustion(_ on: Bool) {
        GuardedMemoryPool.shared.simulateExhaustion(on)
    }
}
