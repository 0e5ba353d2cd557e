import XCTest
import ACCrypto
@testable import ACSecureServices

/// The seed file is read into guarded memory, and that memory is wiped before it is released: no
/// copy of an unprotected seed is left behind in ordinary heap memory (SeedStore.load).
final class SeedMemoryTests: SecureServicesTestCase {
    private struct Observation: Sendable {
        var phase: SeedStore.ReadPhase
        var address: UInt
        var bytes: [UInt8]
    }

    /// Records what `SeedStore.seedFileReadObserver` sees while `body` runs.
    private func observingSeedReads(_ body: () throws -> Void) rethrows -> [Observation] {
        let seen = LockedValue<[Observation]>([])
        SeedStore.seedFileReadObserver.withLock {
            $0 = { phase, bytes in
                let o = Observation(phase: phase, address: UInt(bitPattern: bytes.baseAddress), bytes: Array(bytes))
                seen.withLock { $0.append(o) }
            }
        }
        defer { SeedStore.seedFileReadObserver.withLock { $0 = nil } }
        try body()
        return seen.withLock { $0 }
    }

    func testUnprotectedSeedFileIsReadIntoMemoryThatIsWipedBeforeRelease() throws {
        let services = try makeServices()
        let key = try services.derivedAppKey(identifier: "k").bytes
        services.lock()
        let onDisk = try XCTUnwrap(readBytes(seedPath))
        XCTAssertEqual(onDisk.count, 38, "an unprotected seed file: the raw seed is in it")

        let seen = try observingSeedReads { try services.unlock(passcode: nil) }

        XCTAssertEqual(seen.map(\.phase), [.read, .released], "one read of the seed file, then its release")
        guard seen.count == 2 else { return }
        XCTAssertEqual(seen[0].bytes, onDisk, "the file's bytes are read into the observed buffer")
        XCTAssertEqual(seen[1].address, seen[0].address, "the same buffer is released")
        XCTAssertEqual(seen[1].bytes.count, SeedStore.maximumFileSize)
        XCTAssertTrue(seen[1].bytes.allSatisfy { $0 == 0 }, "the seed file's bytes are wiped before the buffer is released")
        // The seed that was kept is its own guarded copy: unlocking worked and derives the same key.
        XCTAssertEqual(try services.derivedAppKey(identifier: "k").bytes, key)
    }

    func testProtectedSeedFileBufferIsWipedToo() throws {
        let services = try makeServices(passcode: passcode("1234"))
        services.lock()
        let seen = try observingSeedReads { try services.unlock(passcode: passcode("1234")) }
        XCTAssertEqual(seen.map(\.phase), [.read, .released])
        XCTAssertEqual(seen.first?.bytes.count, 98)
        XCTAssertTrue(seen.last?.bytes.allSatisfy { $0 == 0 } ?? false)
        XCTAssertEqual(services.availability, .available)
    }
}
