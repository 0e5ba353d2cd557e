import XCTest
@_spi(Testing) @testable import ACCrypto

final class LargeSecureBufferTests: XCTestCase {
    /// A value from /proc/self/status in kB ("VmRSS", "VmLck").
    private func statusKB(_ field: String) throws -> Int {
        let text = try String(contentsOfFile: "/proc/self/status", encoding: .utf8)
        let line = try XCTUnwrap(text.split(separator: "\n").first { $0.hasPrefix(field + ":") })
        return try XCTUnwrap(Int(line.split(separator: " ", omittingEmptySubsequences: true)[1]))
    }

    func testZeroFilledAndWritable() throws {
        let b = try LargeSecureBuffer(count: 3 * 4096 + 5, lock: true)
        XCTAssertEqual(b.count, 3 * 4096 + 5)
        XCTAssertTrue(b.bytes.allSatisfy { $0 == 0 })
        b.bytes[0] = 1
        b.bytes[b.count - 1] = 2
        XCTAssertEqual([b.bytes[0], b.bytes[b.count - 1]], [1, 2])
    }

    /// The point of the type: a locked 64 MiB buffer of which three pages are used holds about three
    /// pages of memory (sodium_malloc's is faulted in whole at creation, by mlock and by zeroing).
    /// (VmLck counts the whole locked range, as RLIMIT_MEMLOCK does, touched or not.)
    func testPagesAreTakenAsTheyAreTouched() throws {
        let rssBefore = try statusKB("VmRSS")
        let b = try LargeSecureBuffer(count: 64 << 20, lock: true)
        for page in [0, 1000, 16_000] { b.bytes[page * 4096] = 7 }
        XCTAssertLessThan(try statusKB("VmRSS") - rssBefore, 8 << 10, "at most a few MiB resident, not 64")
        withExtendedLifetime(b) {}
    }

    func testReleaseWipesThePagesInMemory() throws {
        let b = try LargeSecureBuffer(count: 1 << 20, lock: false)
        for i in stride(from: 0, to: b.count, by: 4096 * 7) {
            b.bytes[i] = 0xA5
            b.bytes[i + 100] = 0x5A
        }
        XCTAssertFalse(b.bytes.allSatisfy { $0 == 0 })
        b.wipeResidentPages()  // what deinit does before unmapping
        XCTAssertTrue(b.bytes.allSatisfy { $0 == 0 }, "no plaintext is left")
    }

    func testExhaustionThrowsOutOfMemory() throws {
        SecureBytes.simulateGuardedMemoryExhaustion(true)
        defer { SecureBytes.simulateGuardedMemoryExhaustion(false) }
        XCTAssertThrowsError(try LargeSecureBuffer(count: 1 << 20, lock: true)) { error in
            guard case CryptoError.outOfMemory(1 << 20) = error else { return XCTFail("\(error)") }
        }
    }
}
