import Dispatch
import XCTest
@_spi(Testing) @testable import ACCrypto

final class SecureBytesTests: XCTestCase {

    func testZeroFilledOnCreation() throws {
        let b = try SecureBytes(count: 40)
        XCTAssertEqual(b.count, 40)
        XCTAssertEqual(b.bytes, [UInt8](repeating: 0, count: 40))
        XCTAssertEqual(try SecureBytes(count: 0).count, 0)
        XCTAssertEqual(try SecureBytes(count: 0).bytes, [])
    }

    func testCopyingInitialisers() throws {
        let source: [UInt8] = [1, 2, 3, 250, 0, 7]
        XCTAssertEqual(try SecureBytes(copying: source).bytes, source)
        XCTAssertEqual(try source.withUnsafeBytes { try SecureBytes(copying: $0) }.bytes, source)
        XCTAssertEqual(try SecureBytes(copying: [UInt8]()).count, 0)
        XCTAssertEqual(UnsafeRawBufferPointer(start: nil, count: 0).count, 0)
        XCTAssertEqual(try SecureBytes(copying: UnsafeRawBufferPointer(start: nil, count: 0)).count, 0)
    }

    func testEqualityIsByContent() throws {
        let a = try SecureBytes(copying: [1, 2, 3, 4])
        let b = try SecureBytes(copying: [1, 2, 3, 4])
        XCTAssertFalse(a === b)
        XCTAssertEqual(a, b)
        XCTAssertNotEqual(a, try SecureBytes(copying: [1, 2, 3, 5]))
        XCTAssertNotEqual(a, try SecureBytes(copying: [0, 2, 3, 4]))
        XCTAssertNotEqual(a, try SecureBytes(copying: [1, 2, 3]), "different lengths")
        XCTAssertNotEqual(a, try SecureBytes(copying: [1, 2, 3, 4, 0]), "a zero suffix is still a difference")
        XCTAssertEqual(try SecureBytes(count: 0), try SecureBytes(count: 0))
    }

    func testWrittenOnceWhenCreated() throws {
        let b = try SecureBytes(count: 4) { $0.copyBytes(from: [9, 8, 7, 6]) }
        XCTAssertEqual(b.bytes, [9, 8, 7, 6])
    }

    /// An initialiser that throws releases the memory and rethrows (the buffer is never half made).
    func testThrowingInitialiserRethrows() {
        XCTAssertThrowsError(try SecureBytes(count: 8) { (_) throws(CryptoError) in throw .invalidArgument("refused") }) {
            XCTAssertEqual($0 as? CryptoError, .invalidArgument("refused"))
        }
    }

    /// Key material is immutable after creation, so it may be shared across threads (checked by the
    /// compiler: this does not build if `SecureBytes` is not `Sendable`). `SecureBuffer`,
    /// `AESGCMContext` and `AESBlockCipher` are not Sendable: capturing one in a `@Sendable`
    /// closure is a compile error in Swift 6 mode.
    func testKeyMaterialIsSendable() throws {
        func requireSendable<T: Sendable>(_ value: T) -> T { value }
        let key = requireSendable(try SecureBytes(randomCount: 32))
        let copies = LockedValue<[[UInt8]]>([])
        DispatchQueue.concurrentPerform(iterations: 4) { _ in
            let bytes = key.bytes
            copies.withLock { $0.append(bytes) }
        }
        XCTAssertEqual(copies.withLock { $0 }, [[UInt8]](repeating: key.bytes, count: 4))
    }

    func testBufferWipeZeroesButKeepsLength() throws {
        let b = try [UInt8](repeating: 0xFF, count: 33).withUnsafeBytes { try SecureBuffer(copying: $0) }
        XCTAssertEqual(b.bytes, [UInt8](repeating: 0xFF, count: 33))
        b.wipe()
        XCTAssertEqual(b.count, 33)
        XCTAssertEqual(b.bytes, [UInt8](repeating: 0, count: 33))
        try SecureBuffer(count: 0).wipe()  // must not trap
    }

    func testBufferMutationAndFreezing() throws {
        let b = try SecureBuffer(count: 4)
        XCTAssertEqual(b.bytes, [0, 0, 0, 0])
        b.withUnsafeMutableBytes { $0.copyBytes(from: [9, 8, 7, 6]) }
        XCTAssertEqual(b.bytes, [9, 8, 7, 6])
        // Freezing copies: writing the buffer afterwards leaves the key material intact.
        let frozen = try b.secureBytes()
        b.wipe()
        XCTAssertEqual(frozen.bytes, [9, 8, 7, 6])
    }

    func testSliceCopiesTheRange() throws {
        let b = try SecureBytes(copying: Array(0..<32))
        let s = try b.slice(8..<20)
        XCTAssertEqual(s.bytes, Array(8..<20))
        XCTAssertEqual(try b.slice(0..<32), b)
        XCTAssertEqual(try b.slice(32..<32).count, 0)
        XCTAssertNotEqual(s.withUnsafeBytes { $0.baseAddress }, b.withUnsafeBytes { $0.baseAddress! + 8 }, "a slice is a copy")
    }

    func testRandomBytesDiffer() throws {
        let a = try SecureBytes(randomCount: 32)
        let b = try SecureBytes(randomCount: 32)
        XCTAssertEqual(a.count, 32)
        XCTAssertNotEqual(a, b)
        XCTAssertNotEqual(a.bytes, [UInt8](repeating: 0, count: 32))
        XCTAssertEqual(try SecureBytes(randomCount: 0).count, 0)
        // 4 KiB of randomness uses all 256 byte values (fails with probability ~2^-20 per value... effectively never).
        XCTAssertEqual(Set(try SecureBytes(randomCount: 4096).bytes).count, 256)
    }

    func testSecureRandomBytes() throws {
        let a = SecureRandom.bytes(16), b = SecureRandom.bytes(16)
        XCTAssertEqual(a.count, 16)
        XCTAssertNotEqual(a, b)
        XCTAssertEqual(SecureRandom.bytes(0), [])
    }

    func testConstantTimeEqual() throws {
        let x: [UInt8] = [1, 2, 3], y: [UInt8] = [1, 2, 3], z: [UInt8] = [1, 2, 4]
        x.withUnsafeBytes { xb in
            y.withUnsafeBytes { XCTAssertTrue(constantTimeEqual(xb, $0)) }
            z.withUnsafeBytes { XCTAssertFalse(constantTimeEqual(xb, $0)) }
            XCTAssertFalse(constantTimeEqual(xb, UnsafeRawBufferPointer(rebasing: xb[0..<2])), "length differs")
        }
        XCTAssertTrue(constantTimeEqual(UnsafeRawBufferPointer(start: nil, count: 0), UnsafeRawBufferPointer(start: nil, count: 0)))
    }

    func testSecureZero() throws {
        var a: [UInt8] = [1, 2, 3, 4]
        a.withUnsafeMutableBytes { secureZero(UnsafeMutableRawBufferPointer(rebasing: $0[1..<3])) }
        XCTAssertEqual(a, [1, 0, 0, 4])
    }
}

/// Released buffers are zeroed and reused (GuardedMemoryPool), within the pool's bounds.
final class GuardedMemoryPoolTests: XCTestCase {
    /// A size no other test uses, so parallel tests do not take these buffers.
    private let size = 4093

    private func address(_ b: SecureBuffer) -> UnsafeRawPointer { b.withUnsafeBytes { $0.baseAddress! } }

    func testReleasedBufferIsZeroedAndReused() throws {
        var b: SecureBuffer? = try SecureBuffer(count: size)
        b!.withUnsafeMutableBytes { _ = $0.initializeMemory(as: UInt8.self, repeating: 0xA5) }
        let first = address(b!)
        b = nil
        // Still guarded memory of this process; read it only through the pool's next buffer.
        let again = try SecureBuffer(count: size)
        XCTAssertEqual(address(again), first, "the released buffer was not reused")
        XCTAssertEqual(again.bytes, [UInt8](repeating: 0, count: size), "a reused buffer must come back zeroed")
    }

    func testPoolIsBounded() throws {
        let bigger = GuardedMemoryPool.maximumBufferSize + 1
        var big: SecureBytes? = try SecureBytes(count: bigger)
        big = nil
        XCTAssertNil(big)
        XCTAssertEqual(GuardedMemoryPool.shared.pooledCount(size: bigger), 0, "buffers above the size limit are freed")

        var many: [SecureBytes] = try (0..<(GuardedMemoryPool.maximumBuffersPerSize + 5)).map { _ in try SecureBytes(count: 4091) }
        many.removeAll()
        XCTAssertEqual(GuardedMemoryPool.shared.pooledCount(size: 4091), GuardedMemoryPool.maximumBuffersPerSize)
        XCTAssertLessThanOrEqual(GuardedMemoryPool.shared.pooledBytes, GuardedMemoryPool.maximumPooledBytes)
    }

    /// The pool has a fixed number of sizes (it allocates nothing itself): a new size takes the place
    /// of another when every one is in use, and the bounds still hold.
    func testANewSizeIsPooledWhenEverySizeIsInUse() throws {
        for size in 5000..<(5000 + GuardedMemoryPool.sizeClasses + 3) { _ = try SecureBytes(count: size) }
        _ = try SecureBytes(count: 4087)
        XCTAssertEqual(GuardedMemoryPool.shared.pooledCount(size: 4087), 1)
        XCTAssertLessThanOrEqual(GuardedMemoryPool.shared.pooledBytes, GuardedMemoryPool.maximumPooledBytes)
        let again = try SecureBytes(count: 4087)
        XCTAssertEqual(GuardedMemoryPool.shared.pooledCount(size: 4087), 0, "taken from the pool")
        XCTAssertEqual(again.bytes, [UInt8](repeating: 0, count: 4087))
    }
}

/// Issue 15, finding 9: running out of guarded memory is an error the caller sees, never a trap.
/// (The real exhaustion, with lowered rlimits, is ResourceExhaustionTests in ACSecureFileCoreTests.)
final class GuardedMemoryExhaustionTests: XCTestCase {
    override func tearDown() { SecureBytes.simulateGuardedMemoryExhaustion(false) }

    func testEveryInitializerThrowsOutOfMemoryAndRecovers() throws {
        // A pooled buffer of this size exists: exhaustion must not hand it out either.
        _ = try SecureBytes(count: 4089)
        let key = try SecureBytes(count: 32)
        SecureBytes.simulateGuardedMemoryExhaustion(true)
        XCTAssertThrowsError(try SecureBytes(count: 4089)) { XCTAssertEqual($0 as? CryptoError, .outOfMemory(4089)) }
        XCTAssertThrowsError(try SecureBytes(randomCount: 32)) { XCTAssertEqual($0 as? CryptoError, .outOfMemory(32)) }
        XCTAssertThrowsError(try SecureBytes(copying: [1, 2, 3])) { XCTAssertEqual($0 as? CryptoError, .outOfMemory(3)) }
        XCTAssertThrowsError(try HKDF.sha256(key: key, salt: "s", info: "i")) {
            XCTAssertEqual($0 as? CryptoError, .outOfMemory(32))
        }
        SecureBytes.simulateGuardedMemoryExhaustion(false)
        XCTAssertEqual(try SecureBytes(copying: [1, 2, 3]).bytes, [1, 2, 3])
    }
}
