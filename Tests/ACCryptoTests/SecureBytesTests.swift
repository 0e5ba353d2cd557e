import Dispatch
import XCTest
@testable import ACCrypto

final class SecureBytesTests: XCTestCase {

    func testZeroFilledOnCreation() {
        let b = SecureBytes(count: 40)
        XCTAssertEqual(b.count, 40)
        XCTAssertEqual(b.bytes, [UInt8](repeating: 0, count: 40))
        XCTAssertEqual(SecureBytes(count: 0).count, 0)
        XCTAssertEqual(SecureBytes(count: 0).bytes, [])
    }

    func testCopyingInitialisers() {
        let source: [UInt8] = [1, 2, 3, 250, 0, 7]
        XCTAssertEqual(SecureBytes(copying: source).bytes, source)
        XCTAssertEqual(source.withUnsafeBytes { SecureBytes(copying: $0) }.bytes, source)
        XCTAssertEqual(SecureBytes(copying: [UInt8]()).count, 0)
        XCTAssertEqual(UnsafeRawBufferPointer(start: nil, count: 0).count, 0)
        XCTAssertEqual(SecureBytes(copying: UnsafeRawBufferPointer(start: nil, count: 0)).count, 0)
    }

    func testEqualityIsByContent() {
        let a = SecureBytes(copying: [1, 2, 3, 4])
        let b = SecureBytes(copying: [1, 2, 3, 4])
        XCTAssertFalse(a === b)
        XCTAssertEqual(a, b)
        XCTAssertNotEqual(a, SecureBytes(copying: [1, 2, 3, 5]))
        XCTAssertNotEqual(a, SecureBytes(copying: [0, 2, 3, 4]))
        XCTAssertNotEqual(a, SecureBytes(copying: [1, 2, 3]), "different lengths")
        XCTAssertNotEqual(a, SecureBytes(copying: [1, 2, 3, 4, 0]), "a zero suffix is still a difference")
        XCTAssertEqual(SecureBytes(count: 0), SecureBytes(count: 0))
    }

    func testWrittenOnceWhenCreated() {
        let b = SecureBytes(count: 4) { $0.copyBytes(from: [9, 8, 7, 6]) }
        XCTAssertEqual(b.bytes, [9, 8, 7, 6])
    }

    /// An initialiser that throws releases the memory and rethrows (the buffer is never half made).
    func testThrowingInitialiserRethrows() {
        struct Refused: Error {}
        XCTAssertThrowsError(try SecureBytes(count: 8) { (_: UnsafeMutableRawBufferPointer) throws(Refused) in throw Refused() }) {
            XCTAssertTrue($0 is Refused)
        }
    }

    /// Key material is immutable after creation, so it may be shared across threads (checked by the
    /// compiler: this does not build if `SecureBytes` is not `Sendable`). `SecureBuffer`,
    /// `AESGCMContext` and `AESBlockCipher` are not Sendable: capturing one in a `@Sendable`
    /// closure is a compile error in Swift 6 mode.
    func testKeyMaterialIsSendable() {
        func requireSendable<T: Sendable>(_ value: T) -> T { value }
        let key = requireSendable(SecureBytes(randomCount: 32))
        let copies = LockedValue<[[UInt8]]>([])
        DispatchQueue.concurrentPerform(iterations: 4) { _ in
            let bytes = key.bytes
            copies.withLock { $0.append(bytes) }
        }
        XCTAssertEqual(copies.withLock { $0 }, [[UInt8]](repeating: key.bytes, count: 4))
    }

    func testBufferWipeZeroesButKeepsLength() {
        let b = [UInt8](repeating: 0xFF, count: 33).withUnsafeBytes { SecureBuffer(copying: $0) }
        XCTAssertEqual(b.bytes, [UInt8](repeating: 0xFF, count: 33))
        b.wipe()
        XCTAssertEqual(b.count, 33)
        XCTAssertEqual(b.bytes, [UInt8](repeating: 0, count: 33))
        SecureBuffer(count: 0).wipe()  // must not trap
    }

    func testBufferMutationAndFreezing() {
        let b = SecureBuffer(count: 4)
        XCTAssertEqual(b.bytes, [0, 0, 0, 0])
        b.withUnsafeMutableBytes { $0.copyBytes(from: [9, 8, 7, 6]) }
        XCTAssertEqual(b.bytes, [9, 8, 7, 6])
        // Freezing copies: writing the buffer afterwards leaves the key material intact.
        let frozen = b.secureBytes()
        b.wipe()
        XCTAssertEqual(frozen.bytes, [9, 8, 7, 6])
    }

    func testSliceCopiesTheRange() {
        let b = SecureBytes(copying: Array(0..<32))
        let s = b.slice(8..<20)
        XCTAssertEqual(s.bytes, Array(8..<20))
        XCTAssertEqual(b.slice(0..<32), b)
        XCTAssertEqual(b.slice(32..<32).count, 0)
        XCTAssertNotEqual(s.withUnsafeBytes { $0.baseAddress }, b.withUnsafeBytes { $0.baseAddress! + 8 }, "a slice is a copy")
    }

    func testRandomBytesDiffer() {
        let a = SecureBytes(randomCount: 32)
        let b = SecureBytes(randomCount: 32)
        XCTAssertEqual(a.count, 32)
        XCTAssertNotEqual(a, b)
        XCTAssertNotEqual(a.bytes, [UInt8](repeating: 0, count: 32))
        XCTAssertEqual(SecureBytes(randomCount: 0).count, 0)
        // 4 KiB of randomness uses all 256 byte values (fails with probability ~2^-20 per value... effectively never).
        XCTAssertEqual(Set(SecureBytes(randomCount: 4096).bytes).count, 256)
    }

    func testSecureRandomBytes() {
        let a = SecureRandom.bytes(16), b = SecureRandom.bytes(16)
        XCTAssertEqual(a.count, 16)
        XCTAssertNotEqual(a, b)
        XCTAssertEqual(SecureRandom.bytes(0), [])
    }

    func testConstantTimeEqual() {
        let x: [UInt8] = [1, 2, 3], y: [UInt8] = [1, 2, 3], z: [UInt8] = [1, 2, 4]
        x.withUnsafeBytes { xb in
            y.withUnsafeBytes { XCTAssertTrue(constantTimeEqual(xb, $0)) }
            z.withUnsafeBytes { XCTAssertFalse(constantTimeEqual(xb, $0)) }
            XCTAssertFalse(constantTimeEqual(xb, UnsafeRawBufferPointer(rebasing: xb[0..<2])), "length differs")
        }
        XCTAssertTrue(constantTimeEqual(UnsafeRawBufferPointer(start: nil, count: 0), UnsafeRawBufferPointer(start: nil, count: 0)))
    }

    func testSecureZero() {
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

    func testReleasedBufferIsZeroedAndReused() {
        var b: SecureBuffer? = SecureBuffer(count: size)
        b!.withUnsafeMutableBytes { _ = $0.initializeMemory(as: UInt8.self, repeating: 0xA5) }
        let first = address(b!)
        b = nil
        // Still guarded memory of this process; read it only through the pool's next buffer.
        let again = SecureBuffer(count: size)
        XCTAssertEqual(address(again), first, "the released buffer was not reused")
        XCTAssertEqual(again.bytes, [UInt8](repeating: 0, count: size), "a reused buffer must come back zeroed")
    }

    func testPoolIsBounded() {
        let bigger = GuardedMemoryPool.maximumBufferSize + 1
        var big: SecureBytes? = SecureBytes(count: bigger)
        big = nil
        XCTAssertNil(big)
        XCTAssertEqual(GuardedMemoryPool.shared.pooledCount(size: bigger), 0, "buffers above the size limit are freed")

        var many: [SecureBytes] = (0..<(GuardedMemoryPool.maximumBuffersPerSize + 5)).map { _ in SecureBytes(count: 4091) }
        many.removeAll()
        XCTAssertEqual(GuardedMemoryPool.shared.pooledCount(size: 4091), GuardedMemoryPool.maximumBuffersPerSize)
        XCTAssertLessThanOrEqual(GuardedMemoryPool.shared.pooledBytes, GuardedMemoryPool.maximumPooledBytes)
    }
}
