import Foundation
import XCTest
import ACCrypto
import ACSecureServices
import ACSecureFoundation
@testable import ACSecureSharing

final class DerivedKeyTests: XCTestCase {
    func bytes(_ d: ACSensitiveData) -> [UInt8] { d.withUnsafeBytes { Array($0) } }

    func testKeysAre32BytesStableAcrossRestartsAndDistinct() throws {
        let env = try SharingEnvironment()
        let a = try env.services("com.example.a")
        let appKey = bytes(try a.derivedAppKey(withIdentifier: "aes"))
        let sharedKey = bytes(try a.derivedSharedKey(withIdentifier: "aes"))
        XCTAssertEqual(appKey.count, 32)
        XCTAssertEqual(sharedKey.count, 32)

        // A restart (new services object on the same store) derives the same keys.
        let again = try env.services("com.example.a")
        XCTAssertEqual(bytes(try again.derivedAppKey(withIdentifier: "aes")), appKey)
        XCTAssertEqual(bytes(try again.derivedSharedKey(withIdentifier: "aes")), sharedKey)

        // Another app on the same store: a different app key, the same shared key.
        let b = try env.services("com.example.b")
        XCTAssertNotEqual(bytes(try b.derivedAppKey(withIdentifier: "aes")), appKey)
        XCTAssertEqual(bytes(try b.derivedSharedKey(withIdentifier: "aes")), sharedKey)

        // Another identifier, another purpose, another store: all different.
        let all = [appKey, sharedKey,
                   bytes(try a.derivedAppKey(withIdentifier: "hmac")),
                   bytes(try a.derivedSharedKey(withIdentifier: "hmac")),
                   bytes(try b.derivedAppKey(withIdentifier: "aes")),
                   bytes(try SharingEnvironment().services("com.example.a").derivedAppKey(withIdentifier: "aes")),
                   bytes(try SharingEnvironment().services("com.example.a").derivedSharedKey(withIdentifier: "aes"))]
        XCTAssertEqual(Set(all.map(hex)).count, all.count)
    }

    /// Differential: the keys are HKDF-SHA-256 of the seed as documented, computed here from the seed file.
    func testKeysMatchAnIndependentDerivationFromTheSeed() throws {
        let env = try SharingEnvironment()
        let s = try env.services("com.example.kat")
        let seedFile = readPlain(env.storeDirectory + "/seed")
        XCTAssertEqual(seedFile.count, 6 + 32)  // "ACSS", version, protection none, seed
        let seed = try SecureBytes(copying: Array(seedFile[6...]))
        func lp(_ label: String, _ value: String) -> [UInt8] {
            var out: [UInt8] = []
            for part in [Array(label.utf8), Array(value.utf8)] {
                let n = UInt32(part.count)
                out += withUnsafeBytes(of: n.bigEndian) { Array($0) }
                out += part
            }
            return out
        }
        let salt = Array("ACSF v1".utf8)
        let expectedApp = try HKDF.sha256(key: seed, salt: salt, info: lp("derived-app", "com.example.kat") + lp("id", "x"))
        let expectedShared = try HKDF.sha256(key: seed, salt: salt, info: lp("derived-shared", "x"))
        XCTAssertTrue(try s.derivedAppKey(withIdentifier: "x").secureBytes() == expectedApp)
        XCTAssertTrue(try s.derivedSharedKey(withIdentifier: "x").secureBytes() == expectedShared)
    }

    func testErrorsAreACErrorDomainNoKeysAndInvalidArg() throws {
        let env = try SharingEnvironment()
        let s = try env.services("com.example.a", passcode: "1234")
        for call in [{ _ = try s.derivedAppKey(withIdentifier: "") }, { _ = try s.derivedSharedKey(withIdentifier: "") }] {
            let e = try XCTUnwrap(nsErrorOf(call))
            XCTAssertEqual(e.0, ACErrorDomain)
            XCTAssertEqual(e.1, ACErrorInvalidArg)
            XCTAssertEqual(e.1, 6)  // ACE_INVALID_ARG
        }
        s.lock()
        for call in [{ _ = try s.derivedAppKey(withIdentifier: "k") }, { _ = try s.derivedSharedKey(withIdentifier: "k") }] {
            let e = try XCTUnwrap(nsErrorOf(call))
            XCTAssertEqual(e.0, ACErrorDomain)
            XCTAssertEqual(e.1, ACErrorNoKeys)
            XCTAssertEqual(e.1, 1)  // ACE_NO_KEYS_ERROR
        }
        try s.unlock(passcode: try SecureBytes(copying: Array("1234".utf8)))
        XCTAssertNoThrow(try s.derivedAppKey(withIdentifier: "k"))
        // A passcode change re-seals the seed only: the keys stay.
        let before = try s.derivedAppKey(withIdentifier: "k")
        try s.setPasscode(old: try SecureBytes(copying: Array("1234".utf8)), new: try SecureBytes(copying: Array("5678".utf8)))
        XCTAssertTrue(try env.services("com.example.a", passcode: "5678").derivedAppKey(withIdentifier: "k") == before)
        // Retired: no keys, for ever.
        try s.retire()
        XCTAssertEqual(nsErrorOf { _ = try s.derivedAppKey(withIdentifier: "k") }?.1, ACErrorNoKeys)
    }

    @available(*, deprecated)
    func testDeprecatedIndexFormsAreWrappers() throws {
        let s = try SharingEnvironment().services()
        XCTAssertTrue(try s.derivedAppKey(withIndex: "i") == s.derivedAppKey(withIdentifier: "i"))
        XCTAssertTrue(try s.derivedSharedKey(withIndex: "i") == s.derivedSharedKey(withIdentifier: "i"))
        XCTAssertEqual(nsErrorOf { _ = try s.derivedAppKey(withIndex: "") }?.1, ACErrorInvalidArg)
    }
}
