import XCTest
import ACSecureTestSupport
@testable import ACCrypto

/// docs/FORMAT.md "Keys in memory": OpenSSL's contexts hold expanded key schedules in ordinary heap
/// while a key is in use, and nothing of them once released, although `CipherContextPool` keeps the
/// contexts for reuse (it re-keys them with zeros first). AES-256's expanded schedule starts with the
/// key itself (round keys 0 and 1), so the scan looks for the key's 32 bytes anywhere in the
/// process's writable memory outside the guarded buffer that holds it.
final class KeyScheduleMemoryTests: XCTestCase {
    private func copies(of key: SecureBytes) throws -> Int {
        try key.withUnsafeBytes { k throws -> Int in
            guard let n = ProcessMemory.occurrences(of: k, excluding: k.baseAddress) else {
                throw XCTSkip("/proc/self/mem is not readable here")
            }
            return n
        }
    }

    /// The positive control: a live context's schedule is found (else this OpenSSL stores its round
    /// keys transformed, e.g. vector-permutation AES without AES-NI, and the scan proves nothing).
    private func requireScheduleVisible(_ key: SecureBytes) throws {
        guard try copies(of: key) > 0 else { throw XCTSkip("this OpenSSL's key schedule does not start with the key") }
    }

    func testReleasedGCMContextKeepsNoKeySchedule() throws {
        let key = try SecureBytes(randomCount: 32)
        XCTAssertEqual(try copies(of: key), 0, "no copy before a context is keyed")
        var context: AESGCMContext? = try AESGCMContext(key: key)
        let sealed = try context!.sealWithRandomNonce(key, aad: [1, 2, 3])
        try requireScheduleVisible(key)
        context = nil
        XCTAssertGreaterThan(CipherContextPool.aes256GCM.idleCount, 0, "the context went back to the pool")
        XCTAssertEqual(try copies(of: key), 0, "a released (pooled) context keeps no key schedule")

        // The pooled context is keyed again for the next user and works as a fresh one.
        let again = try AESGCMContext(key: key)
        let opened = try XCTUnwrap(try again.openSealed(sealed, aad: [1, 2, 3]))
        XCTAssertEqual(opened, key)
    }

    func testReleasedBlockCipherKeepsNoKeySchedule() throws {
        let key = try SecureBytes(randomCount: 32)
        var prf: AESBlockCipher? = try AESBlockCipher(key: key)
        var out = [UInt8](repeating: 0, count: 16)
        try [UInt8](repeating: 7, count: 16).withUnsafeBytes { b in try out.withUnsafeMutableBytes { try prf!.encryptBlocks(b, into: $0.baseAddress!) } }
        try requireScheduleVisible(key)
        prf = nil
        XCTAssertGreaterThan(CipherContextPool.aes256ECB.idleCount, 0, "the context went back to the pool")
        XCTAssertEqual(try copies(of: key), 0, "a released (pooled) block cipher keeps no key schedule")

        // Reused with the same key: the same block as before.
        var again = [UInt8](repeating: 0, count: 16)
        let reused = try AESBlockCipher(key: key)
        try [UInt8](repeating: 7, count: 16).withUnsafeBytes { b in try again.withUnsafeMutableBytes { try reused.encryptBlocks(b, into: $0.baseAddress!) } }
        XCTAssertEqual(again, out)
    }

    /// One context seals and opens (both directions share it), alternately, with a re-key between.
    func testOneContextSealsAndOpensAfterRekey() throws {
        let ctx = try AESGCMContext(key: try SecureBytes(randomCount: 32))
        let secret = try SecureBytes(randomCount: 32)
        for _ in 0..<3 {
            let sealed = try ctx.sealWithRandomNonce(secret, aad: [9])
            XCTAssertEqual(try ctx.openSealed(sealed, aad: [9]), secret)
            XCTAssertNil(try ctx.openSealed(sealed, aad: [8]))
        }
        let sealed = try ctx.sealWithRandomNonce(secret, aad: [])
        let next = try SecureBuffer(count: 32)
        next.withUnsafeMutableBytes { SecureRandom.fill($0) }
        try ctx.rekey(next)
        XCTAssertNil(try ctx.openSealed(sealed, aad: []), "a re-keyed context no longer opens what the old key sealed")
        XCTAssertEqual(try ctx.openSealed(try ctx.sealWithRandomNonce(secret, aad: []), aad: []), secret)
    }
}
