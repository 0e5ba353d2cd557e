#if canImport(Glibc)
import Glibc
#endif
import XCTest
@_spi(Testing) import ACCrypto
import ACSecureServices
@testable import ACSecureFileCore

/// Issue 15, finding 9: about 5,250 open secure files aborted the process ("sodium_malloc failed").
/// Running out of guarded memory or descriptors is now an error of the call that needed them
/// (ENOMEM/EMFILE + ACE_LOW_MEMORY_ERROR, naming the path), never a trap, and leaves nothing
/// half-open behind.
final class ResourceExhaustionTests: XCTestCase {
    override func tearDown() { SecureBytes.simulateGuardedMemoryExhaustion(false) }

    /// The real thing, in a child process (Tests/ACSecureCrashChild/Exhaustion.swift): RLIMIT_AS a
    /// few MiB above its use, secure files opened until one fails; then half are closed, the failed
    /// file opens, and every byte written before and during the exhaustion reads back.
    func testOutOfAddressSpaceFailsTheOpenWithENOMEMAndRecovers() throws {
        let lines = try runExhaustionChild("memory")
        let fail = try XCTUnwrap(lines.first { $0.hasPrefix("FAIL ") }, lines.joined(separator: "\n")).split(separator: " ")
        XCTAssertEqual(fail[2], "\(ENOMEM)")
        XCTAssertEqual(fail[3], "ACE_LOW_MEMORY_ERROR")
        XCTAssertGreaterThan(Int(fail[1]) ?? 0, 20, "files opened before guarded memory ran out")
    }

    /// RLIMIT_NOFILE: the kernel open fails with EMFILE; with exactly one descriptor free the engine's
    /// own dup fails after the kernel open succeeded, and that descriptor is released.
    func testOutOfDescriptorsFailsTheOpenWithEMFILEAndReleasesEverything() throws {
        let lines = try runExhaustionChild("descriptors")
        let fail = try XCTUnwrap(lines.first { $0.hasPrefix("FAIL ") }, lines.joined(separator: "\n")).split(separator: " ")
        XCTAssertEqual(fail[2], "\(EMFILE)")
        XCTAssertEqual(fail[3], "ACE_LOW_MEMORY_ERROR")
        let half = try XCTUnwrap(lines.first { $0.hasPrefix("HALF ") }, lines.joined(separator: "\n"))
        XCTAssertTrue(half.contains("dup"), half)
    }

    private func runExhaustionChild(_ mode: String) throws -> [String] {
        let env = try TestEnvironment()
        let files = env.path("files")
        XCTAssertEqual(mkdir(files, 0o700), 0)
        let (status, output) = try runCrashChild(["exhaust", env.directory + "/store", files, mode])
        let lines = output.split(separator: "\n").map(String.init)
        XCTAssertTrue(status.succeeded, "the child ended with \(status) or found a problem:\n\(output)")
        XCTAssertTrue(lines.last?.hasPrefix("OK ") ?? false, output)
        XCTAssertFalse(lines.contains { $0.hasPrefix("E ") }, output)
        return lines
    }

    // MARK: every path that allocates guarded memory, in process (simulated exhaustion)

    func testOpeningAFileFailsWithENOMEMAndLeavesNoEntry() throws {
        let env = try TestEnvironment()
        let path = env.path("a")
        let existing = env.path("existing")
        let keep = try SecureFile.open(existing, flags: O_RDWR | O_CREAT, services: env.services)
        try keep.write(Array("kept".utf8))
        let other = env.path("other")
        try SecureFile.open(other, flags: O_RDWR | O_CREAT, services: env.services).close()

        SecureBytes.simulateGuardedMemoryExhaustion(true)
        for (p, flags) in [(path, O_RDWR | O_CREAT), (other, O_RDONLY)] {
            do {
                _ = try SecureFile.open(p, flags: flags, services: env.services)
                XCTFail("\(p) opened without guarded memory")
            } catch {
                XCTAssertEqual(error.errno, ENOMEM, error.message)
                XCTAssertEqual(error.code, .lowMemory, error.message)
                XCTAssertTrue(error.message.contains(p), error.message)
            }
            if p == path {
                // An atomic creation that failed leaves no file at all (never a 0-byte one).
                XCTAssertNotEqual(access(p, F_OK), 0, "a failed creation left \(p)")
            } else {
                XCTAssertEqual(try SecureFileSystem.openHandleCount(p), 0, "no half-open entry for \(p)")
            }
        }
        // A file already open needs no new guarded memory: another handle on it still opens.
        let second = try SecureFile.open(existing, flags: O_RDONLY, services: env.services)
        XCTAssertEqual(try SecureFileSystem.openHandleCount(existing), 2)
        try second.close()

        SecureBytes.simulateGuardedMemoryExhaustion(false)
        let again = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services)
        try again.write(Array("after".utf8))
        try again.close()
        XCTAssertEqual(try readSecure(path, env), Array("after".utf8))
        try keep.close()
        XCTAssertEqual(try readSecure(existing, env), Array("kept".utf8))
    }

    func testUnlockAndKeyDerivationFailWithOutOfMemory() throws {
        let env = try TestEnvironment(passcode: "1234")
        env.services.lock()
        let passcode = try SecureBytes(copying: Array("1234".utf8))
        SecureBytes.simulateGuardedMemoryExhaustion(true)
        XCTAssertThrowsError(try env.services.unlock(passcode: passcode)) { error in
            let e = error as? SecureServicesError
            XCTAssertEqual(e?.code, .outOfMemory, "\(error)")
            XCTAssertEqual(e?.errno, ENOMEM)
        }
        XCTAssertEqual(env.services.availability, .unavailable)
        SecureBytes.simulateGuardedMemoryExhaustion(false)
        try env.services.unlock(passcode: passcode)

        SecureBytes.simulateGuardedMemoryExhaustion(true)
        XCTAssertThrowsError(try env.services.derivedAppKey(identifier: "x")) { error in
            XCTAssertEqual((error as? SecureServicesError)?.code, .outOfMemory, "\(error)")
        }
        XCTAssertThrowsError(try env.services.keyEncryptionKey(for: .group("g"))) { error in
            XCTAssertEqual((error as? SecureServicesError)?.code, .outOfMemory, "\(error)")
        }
        SecureBytes.simulateGuardedMemoryExhaustion(false)
        XCTAssertEqual(try env.services.derivedAppKey(identifier: "x").count, 32)
    }

    private func readSecure(_ path: String, _ env: TestEnvironment) throws -> [UInt8] {
        let f = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
        defer { try? f.close() }
        var out = [UInt8](repeating: 0, count: 64)
        let n = try out.withUnsafeMutableBytes { try f.pread(into: $0, at: 0) }
        return Array(out[0..<n])
    }
}
