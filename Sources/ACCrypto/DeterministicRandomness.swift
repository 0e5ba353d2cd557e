#if DEBUG
import Synchronization
import CACSecureSodium

/// Test hook, in debug builds only: while `run` executes its body, every random draw of the process
/// (`SecureRandom` and `NonceGenerator`: seeds, salts, file IDs, data keys, nonces, key selectors)
/// comes from a fixed stream, so the committed test vectors in docs/test-vectors can be regenerated
/// byte for byte and compared. Release builds contain none of this.
///
/// Draw *n* of the stream is libsodium's `randombytes_buf_deterministic` (ChaCha20) under the
/// 32-byte seed whose first 8 bytes are replaced by *n* (big-endian), so the bytes depend only on the
/// seed and the order of the draws. Not for concurrent use: every thread's draws come from it.
package enum DeterministicRandomness {
    private struct Stream { var seed: [UInt8]; var draw: UInt64 }
    private static let active = Atomic<Bool>(false)
    private static let stream = LockedValue<Stream?>(nil)

    /// Runs `body` with every random draw taken from the stream of `seed` (32 bytes).
    package static func run<R>(seed: [UInt8], _ body: () throws -> R) rethrows -> R {
        precondition(seed.count == Int(randombytes_SEEDBYTES), "DeterministicRandomness: the seed has 32 bytes")
        stream.withLock { $0 = Stream(seed: seed, draw: 0) }
        active.store(true, ordering: .sequentiallyConsistent)
        defer {
            active.store(false, ordering: .sequentiallyConsistent)
            stream.withLock { $0 = nil }
        }
        return try body()
    }

    /// Fills `buffer` from the stream when one is active; false otherwise (draw real randomness).
    @inline(__always) static func fillIfActive(_ base: UnsafeMutableRawPointer, _ count: Int) -> Bool {
        guard active.load(ordering: .relaxed) else { return false }
        return stream.withLock { s in
            guard var current = s else { return false }
            var seed = current.seed
            for i in 0..<8 { seed[i] = UInt8(truncatingIfNeeded: current.draw >> (8 * UInt64(7 - i))) }
            randombytes_buf_deterministic(base, count, seed)
            current.draw += 1
            s = current
            return true
        }
    }
}
#endif
