#if canImport(Glibc)
import Glibc
#endif
import XCTest
import ACCrypto
import ACSecureServices
import ACSecureTestSupport
@testable import ACSecureFileCore

/// docs/FORMAT.md "Keys in memory", checked by scanning the process: a file's data key has an
/// expanded schedule in OpenSSL's heap while the file is open and unlocked, and none after a lock or
/// the last close, although the engine's OpenSSL contexts are pooled for reuse; a KEK's schedule
/// lives only while a header is unwrapped. (AES-256's schedule starts with the key's 32 bytes: the
/// scan looks for them outside the guarded buffer that holds the key.)
final class KeyMemoryTests: XCTestCase {
    private func copies(of key: SecureBytes) throws -> Int {
        try key.withUnsafeBytes { k throws -> Int in
            guard let n = ProcessMemory.occurrences(of: k, excluding: k.baseAddress) else {
                throw XCTSkip("/proc/self/mem is not readable here")
            }
            return n
        }
    }

    func testNoKeyScheduleOutlivesLockOrClose() throws {
        let env = try TestEnvironment()
        let f = try SecureFile.open(env.path("f"), flags: O_RDWR | O_CREAT, mode: 0o600, services: env.services)
        _ = try f.write([UInt8](repeating: 1, count: 10_000))
        // The test holds the keys' guarded buffers (the scan leaves each out); any other copy counts.
        var dataKey: SecureBytes? = try f.shared.lock.withLock { try XCTUnwrap(f.shared.dataKey) }
        guard try copies(of: dataKey!) > 0 else { throw XCTSkip("this OpenSSL's key schedule does not start with the key") }
        XCTAssertEqual(try copies(of: env.services.keyEncryptionKey(for: .app).key), 0,
                       "the KEK's schedule is gone once the header is unwrapped")

        env.services.lock()
        XCTAssertEqual(try copies(of: dataKey!), 0, "no schedule of the data key after lock")
        dataKey = nil

        try env.services.unlock(passcode: nil)
        XCTAssertEqual(try f.pread(count: 3, at: 0), [1, 1, 1])
        let reloaded = try f.shared.lock.withLock { try XCTUnwrap(f.shared.dataKey) }
        XCTAssertGreaterThan(try copies(of: reloaded), 0, "the key is set up again after unlock")
        let second = try SecureFile.open(env.path("f"), flags: O_RDONLY, services: env.services)
        try second.close()
        try f.close()
        // `f` is still referenced: the last close itself must drop the keys.
        XCTAssertEqual(try copies(of: reloaded), 0, "no schedule of the data key after the last close")
        XCTAssertEqual(try copies(of: env.services.keyEncryptionKey(for: .app).key), 0)
        withExtendedLifetime(f) {}
    }
}
