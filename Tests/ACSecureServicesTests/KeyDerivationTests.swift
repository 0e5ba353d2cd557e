import XCTest
import ACCrypto
import ACSecureServices

final class KeyDerivationTests: SecureServicesTestCase {

    /// A file's KEK is derived once per unlocked period (opens reuse it); lock() drops the cache, and
    /// after unlock the KEK is derived again, to the same value.
    func testKeyEncryptionKeysAreCachedUntilLock() throws {
        let s = try makeServices()
        let a = try s.keyEncryptionKey(for: .app)
        XCTAssertTrue(try s.keyEncryptionKey(for: .app).key === a.key, "the second open derived the KEK again")
        let g = try s.keyEncryptionKey(for: .group("g"))
        XCTAssertFalse(g.key === a.key)
        XCTAssertNotEqual(g.key, a.key, "group and app KEKs are separate")
        XCTAssertNotEqual(try s.keyEncryptionKey(for: .group("h")).key, g.key, "groups are separate")

        s.lock()
        XCTAssertThrowsError(try s.keyEncryptionKey(for: .app), "a cached KEK must not outlive lock()")
        try s.unlock(passcode: nil)
        let b = try s.keyEncryptionKey(for: .app)
        XCTAssertFalse(b.key === a.key, "the cache is emptied at lock()")
        XCTAssertEqual(b.key, a.key)
        XCTAssertEqual(b.fingerprint, a.fingerprint)
    }

    func testDerivedAppKeysAreStableAcrossRestarts() throws {
        let first = try makeServices()
        let a = try first.derivedAppKey(identifier: "database")
        XCTAssertEqual(a.count, 32)
        XCTAssertEqual(try first.derivedAppKey(identifier: "database"), a, "deterministic")

        let restarted = try makeServices()
        XCTAssertEqual(try restarted.derivedAppKey(identifier: "database"), a)
        XCTAssertEqual(try restarted.derivedSharedKey(identifier: "database"), try first.derivedSharedKey(identifier: "database"))
    }

    func testDerivedAppKeysAreStableAcrossRestartsWithPasscode() throws {
        let first = try makeServices(passcode: passcode("pw"))
        let a = try first.derivedAppKey(identifier: "database")
        XCTAssertEqual(try makeServices(passcode: passcode("pw")).derivedAppKey(identifier: "database"), a)
    }

    func testDerivedAppKeysDifferAcrossAppsIdentifiersAndStores() throws {
        let app1 = try makeServices(appID: "com.example.one")
        let app2 = try makeServices(appID: "com.example.two")
        let otherStore = try makeServices(appID: "com.example.one", directory: root + "/other-store")

        let k = try app1.derivedAppKey(identifier: "id")
        XCTAssertNotEqual(k, try app2.derivedAppKey(identifier: "id"), "app IDs separate")
        XCTAssertNotEqual(k, try app1.derivedAppKey(identifier: "id2"), "identifiers separate")
        XCTAssertNotEqual(k, try otherStore.derivedAppKey(identifier: "id"), "stores separate")
        XCTAssertNotEqual(k, try app1.derivedSharedKey(identifier: "id"), "app and shared keys separate")
        // Length-prefixed inputs: moving a character between app ID and identifier changes the key.
        let x = try makeServices(appID: "ab").derivedAppKey(identifier: "c")
        let y = try makeServices(appID: "a").derivedAppKey(identifier: "bc")
        XCTAssertNotEqual(x, y)
        XCTAssertNotEqual(k.bytes, [UInt8](repeating: 0, count: 32))
    }

    func testDerivedSharedKeysAreEqualAcrossApps() throws {
        let app1 = try makeServices(appID: "com.example.one")
        let app2 = try makeServices(appID: "com.example.two")
        let s = try app1.derivedSharedKey(identifier: "shared")
        XCTAssertEqual(s.count, 32)
        XCTAssertEqual(try app2.derivedSharedKey(identifier: "shared"), s)
        XCTAssertNotEqual(try app1.derivedSharedKey(identifier: "shared2"), s)
        let otherStore = try makeServices(appID: "com.example.one", directory: root + "/other-store")
        XCTAssertNotEqual(try otherStore.derivedSharedKey(identifier: "shared"), s)
    }

    func testEmptyArgumentsAreRejected() throws {
        let s = try makeServices()
        assertThrows(.invalidArgument, try s.derivedAppKey(identifier: ""))
        assertThrows(.invalidArgument, try s.derivedSharedKey(identifier: ""))
        assertThrows(.invalidArgument, try s.keyEncryptionKey(for: .group("")))
        assertThrows(.invalidArgument, try makeServices(appID: ""))
    }

    func testAppAndGroupKeyEncryptionKeys() throws {
        let app1 = try makeServices(appID: "com.example.one")
        let app2 = try makeServices(appID: "com.example.two")

        let appKEK1 = try app1.keyEncryptionKey(for: .app)
        let appKEK2 = try app2.keyEncryptionKey(for: .app)
        let group1 = try app1.keyEncryptionKey(for: .group("group.shared"))
        let group2 = try app2.keyEncryptionKey(for: .group("group.shared"))

        XCTAssertEqual(appKEK1.keyClass, .app)
        XCTAssertEqual(group1.keyClass, .group)
        XCTAssertEqual(appKEK1.key.count, 32)
        XCTAssertNotEqual(appKEK1.key, group1.key, "app KEK differs from group KEK")
        XCTAssertNotEqual(appKEK1.key, appKEK2.key, "app KEKs differ across app IDs")
        XCTAssertEqual(group1.key, group2.key, "group KEK is the same for every app naming the group")
        XCTAssertEqual(group1.fingerprint, group2.fingerprint)
        XCTAssertNotEqual(group1.key, try app1.keyEncryptionKey(for: .group("group.other")).key)
        // A group named like an app ID is still a different key (domain separation).
        XCTAssertNotEqual(try app1.keyEncryptionKey(for: .group("com.example.one")).key, appKEK1.key)

        // The KEK is not one of the derived keys either.
        XCTAssertNotEqual(appKEK1.key, try app1.derivedAppKey(identifier: "com.example.one"))

        XCTAssertEqual(try makeServices(appID: "com.example.one").keyEncryptionKey(for: .app).key, appKEK1.key,
                       "stable across restarts")
    }

    func testKeyFingerprint() throws {
        let kek = try makeServices().keyEncryptionKey(for: .app)
        XCTAssertEqual(kek.fingerprint.count, 16)
        let expected = try HKDF.sha256(key: kek.key, salt: "ACSF v1", info: "key fingerprint", outputCount: 16)
        XCTAssertEqual(kek.fingerprint, expected.bytes)
        XCTAssertNotEqual(Array(kek.key.bytes.prefix(16)), kek.fingerprint, "the fingerprint does not reveal the key")

        let direct = try KeyEncryptionKey(key: try SecureBytes(copying: kek.key.bytes), keyClass: .cryptoBlock)
        XCTAssertEqual(direct.fingerprint, kek.fingerprint)
        XCTAssertEqual(direct.keyClass.rawValue, 3)
    }

    func testKeySelectionDescription() throws {
        XCTAssertEqual(KeySelection.app.description, "app")
        XCTAssertEqual(KeySelection.group("g1").description, "group g1")
        XCTAssertNotEqual(KeySelection.group("a"), KeySelection.group("b"))
        XCTAssertEqual(Set([KeySelection.app, .app, .group("x")]).count, 2)
    }
}
