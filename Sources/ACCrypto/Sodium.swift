import CACSecureSodium

/// libsodium must be initialised once per process before its randomness or guarded memory is used.
enum Sodium {
    static let initialized: Bool = {
        // sodium_init returns 1 when already initialised, -1 on failure (no entropy source).
        precondition(sodium_init() >= 0, "libsodium failed to initialise")
        return true
    }()

    @inline(__always) static func ensureInitialized() { _ = initialized }
}

/// Cryptographically secure random bytes (libsodium's `randombytes_buf`, i.e. `getrandom(2)`).
public enum SecureRandom {
    public static func fill(_ buffer: UnsafeMutableRawBufferPointer) {
        guard let base = buffer.baseAddress, buffer.count > 0 else { return }
        Sodium.ensureInitialized()
        #if DEBUG
        if DeterministicRandomness.fillIfActive(base, buffer.count) { return }
        #endif
        randombytes_buf(base, buffer.count)
    }

    public static func bytes(_ count: Int) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: count)
        out.withUnsafeMutableBytes { fill($0) }
        return out
    }
}

/// Constant-time comparison of two equally long buffers (`sodium_memcmp`).
public func constantTimeEqual(_ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer) -> Bool {
    guard a.count == b.count else { return false }
    guard a.count > 0 else { return true }
    Sodium.ensureInitialized()
    return sodium_memcmp(a.baseAddress!, b.baseAddress!, a.count) == 0
}

/// Zeroes memory in a way the compiler may not optimise away (`sodium_memzero`).
public func secureZero(_ buffer: UnsafeMutableRawBufferPointer) {
    guard let base = buffer.baseAddress, buffer.count > 0 else { return }
    sodium_memzero(base, buffer.count)
}
