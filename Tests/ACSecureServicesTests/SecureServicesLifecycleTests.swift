import Foundation
import XCTest
import ACCrypto
import ACSecureServices

final class SecureServicesLifecycleTests: SecureServicesTestCase {

    func testCreateWithoutPasscodeIsAvailable() throws {
        XCTAssertFalse(FileManager.default.fileExists(atPath: storeDirectory))
        let s = try makeServices()
        XCTAssertEqual(s.availability, .available)
        XCTAssertNotEqual(s.keyGeneration, 0)
        XCTAssertFalse(s.isPasscodeSet)
        XCTAssertEqual(s.appID, "com.example.app")
        XCTAssertEqual(s.storeDirectory, storeDirectory)
        XCTAssertTrue(s.secureFileIOPolicyIsRequired)
        // "ACSS", version 1, protection 0, then the 32-byte seed.
        let file = try XCTUnwrap(readBytes(seedPath))
        XCTAssertEqual(file.count, 6 + 32)
        XCTAssertEqual(Array(file[0..<6]), Array("ACSS".utf8) + [1, 0])
        XCTAssertEqual(try s.derivedAppKey(identifier: "k").count, 32)
    }

    func testCreateWithPasscodeIsAvailableAndSealed() throws {
        let s = try makeServices(passcode: passcode("1234"))
        XCTAssertEqual(s.availability, .available)
        XCTAssertTrue(s.isPasscodeSet)
        let file = try XCTUnwrap(readBytes(seedPath))
        // header 6, ops 8, mem 8, salt 16, nonce 12, sealed seed 32, tag 16
        XCTAssertEqual(file.count, 98)
        XCTAssertEqual(Array(file[0..<6]), Array("ACSS".utf8) + [1, 1])
        XCTAssertNoThrow(try s.keyEncryptionKey(for: .app))
    }

    func testEmptyPasscodeMeansNoPasscode() throws {
        let s = try makeServices(passcode: try SecureBytes(count: 0))
        XCTAssertFalse(s.isPasscodeSet)
        XCTAssertEqual(try makeServices().availability, .available)
    }

    func testPasscodeStoreStartsUnavailableAndUnlocks() throws {
        let creator = try makeServices(passcode: passcode("1234"))
        let expected = try creator.derivedAppKey(identifier: "k")

        let s = try makeServices()  // no passcode given
        XCTAssertEqual(s.availability, .unavailable)
        XCTAssertEqual(s.keyGeneration, 0)
        assertThrows(.noKeys, try s.keyEncryptionKey(for: .app))
        assertThrows(.noKeys, try s.derivedAppKey(identifier: "k"))

        assertThrows(.wrongPasscode, try s.unlock(passcode: passcode("4321")))
        assertThrows(.wrongPasscode, try s.unlock(passcode: passcode("12345")))
        assertThrows(.wrongPasscode, try s.unlock(passcode: try SecureBytes(count: 0)))
        assertThrows(.wrongPasscode, try s.unlock(passcode: nil))
        XCTAssertEqual(s.availability, .unavailable)
        XCTAssertEqual(s.keyGeneration, 0)

        try s.unlock(passcode: passcode("1234"))
        XCTAssertEqual(s.availability, .available)
        XCTAssertNotEqual(s.keyGeneration, 0)
        XCTAssertEqual(try s.derivedAppKey(identifier: "k"), expected)
        // Unlocking an available instance is a no-op, whatever the passcode.
        XCTAssertNoThrow(try s.unlock(passcode: passcode("wrong")))
    }

    func testStartingWithWrongPasscodeThrows() throws {
        _ = try makeServices(passcode: passcode("1234"))
        assertThrows(.wrongPasscode, try makeServices(passcode: passcode("0000")))
        XCTAssertEqual(try makeServices(passcode: passcode("1234")).availability, .available)
    }

    func testLockMakesKeysUnavailable() throws {
        let s = try makeServices(passcode: passcode("pw"))
        let before = try s.derivedAppKey(identifier: "k")
        s.lock()
        XCTAssertEqual(s.availability, .unavailable)
        XCTAssertEqual(s.keyGeneration, 0)
        assertThrows(.noKeys, try s.keyEncryptionKey(for: .app))
        assertThrows(.noKeys, try s.keyEncryptionKey(for: .group("g")))
        assertThrows(.noKeys, try s.derivedAppKey(identifier: "k"))
        assertThrows(.noKeys, try s.derivedSharedKey(identifier: "k"))
        s.lock()  // idempotent
        XCTAssertEqual(s.availability, .unavailable)

        assertThrows(.wrongPasscode, try s.unlock(passcode: passcode("nope")))
        try s.unlock(passcode: passcode("pw"))
        XCTAssertEqual(try s.derivedAppKey(identifier: "k"), before)
    }

    func testLockAndUnlockWithoutPasscode() throws {
        let s = try makeServices()
        let before = try s.keyEncryptionKey(for: .app)
        s.lock()
        assertThrows(.noKeys, try s.keyEncryptionKey(for: .app))
        try s.unlock(passcode: nil)
        XCTAssertEqual(try s.keyEncryptionKey(for: .app).key, before.key)
    }

    func testKeyGenerationIsZeroWhenLockedAndChangesAcrossCycles() throws {
        let s = try makeServices(passcode: passcode("pw"))
        var seen: Set<UInt64> = []
        for _ in 0..<4 {
            let g = s.keyGeneration
            XCTAssertNotEqual(g, 0)
            XCTAssertEqual(s.keyGeneration, g, "stable while nothing happens")
            XCTAssertTrue(seen.insert(g).inserted, "generation \(g) reused")
            s.lock()
            XCTAssertEqual(s.keyGeneration, 0)
            try s.unlock(passcode: passcode("pw"))
        }
    }

    func testSetPasscodeKeepsSeedAndRetiresOldPasscode() throws {
        let s = try makeServices(passcode: passcode("old"))
        let appKey = try s.derivedAppKey(identifier: "k")
        let shared = try s.derivedSharedKey(identifier: "k")
        let kek = try s.keyEncryptionKey(for: .app)
        let groupKEK = try s.keyEncryptionKey(for: .group("g"))
        let saltBefore = try XCTUnwrap(readBytes(seedPath))[22..<38]

        assertThrows(.wrongPasscode, try s.setPasscode(old: passcode("bad"), new: passcode("new")))
        assertThrows(.wrongPasscode, try s.setPasscode(old: nil, new: passcode("new")))
        XCTAssertEqual(try XCTUnwrap(readBytes(seedPath))[22..<38], saltBefore, "a failed change leaves the file alone")

        try s.setPasscode(old: passcode("old"), new: passcode("new"))
        XCTAssertTrue(s.isPasscodeSet)
        XCTAssertNotEqual(try XCTUnwrap(readBytes(seedPath))[22..<38], saltBefore, "fresh salt")
        // The running instance stays available with the same keys.
        XCTAssertEqual(s.availability, .available)
        XCTAssertEqual(try s.derivedAppKey(identifier: "k"), appKey)

        // A restart: the old passcode no longer opens the store, the new one gives identical keys.
        assertThrows(.wrongPasscode, try makeServices(passcode: passcode("old")))
        let fresh = try makeServices()
        assertThrows(.wrongPasscode, try fresh.unlock(passcode: passcode("old")))
        try fresh.unlock(passcode: passcode("new"))
        XCTAssertEqual(try fresh.derivedAppKey(identifier: "k"), appKey)
        XCTAssertEqual(try fresh.derivedSharedKey(identifier: "k"), shared)
        XCTAssertEqual(try fresh.keyEncryptionKey(for: .app).key, kek.key)
        XCTAssertEqual(try fresh.keyEncryptionKey(for: .app).fingerprint, kek.fingerprint)
        XCTAssertEqual(try fresh.keyEncryptionKey(for: .group("g")).key, groupKEK.key)
    }

    func testSetPasscodeAddAndRemove() throws {
        let s = try makeServices()
        let appKey = try s.derivedAppKey(identifier: "k")

        try s.setPasscode(old: nil, new: passcode("added"))
        XCTAssertTrue(s.isPasscodeSet)
        let locked = try makeServices()
        XCTAssertEqual(locked.availability, .unavailable)
        try locked.unlock(passcode: passcode("added"))
        XCTAssertEqual(try locked.derivedAppKey(identifier: "k"), appKey)

        try s.setPasscode(old: passcode("added"), new: nil)
        XCTAssertFalse(s.isPasscodeSet)
        let open = try makeServices()
        XCTAssertEqual(open.availability, .available)
        XCTAssertEqual(try open.derivedAppKey(identifier: "k"), appKey)
        XCTAssertEqual(try XCTUnwrap(readBytes(seedPath)).count, 38)
    }

    func testSetPasscodeWhileLocked() throws {
        let s = try makeServices(passcode: passcode("a"))
        let appKey = try s.derivedAppKey(identifier: "k")
        s.lock()
        try s.setPasscode(old: passcode("a"), new: passcode("b"))
        XCTAssertEqual(s.availability, .unavailable, "changing the passcode does not unlock")
        assertThrows(.wrongPasscode, try s.unlock(passcode: passcode("a")))
        try s.unlock(passcode: passcode("b"))
        XCTAssertEqual(try s.derivedAppKey(identifier: "k"), appKey)
    }

    func testRetireDestroysTheStore() throws {
        let s = try makeServices(passcode: passcode("pw"))
        let appKey = try s.derivedAppKey(identifier: "k")
        let kek = try s.keyEncryptionKey(for: .app)

        try s.retire()
        XCTAssertEqual(s.availability, .unavailable)
        XCTAssertFalse(FileManager.default.fileExists(atPath: seedPath))
        XCTAssertFalse(FileManager.default.fileExists(atPath: storeDirectory), "the empty store directory goes too")
        XCTAssertFalse(s.isPasscodeSet)
        assertThrows(.noKeys, try s.derivedAppKey(identifier: "k"))
        assertThrows(.noKeys, try s.unlock(passcode: passcode("pw")))

        // A new store in the same place has a new seed: every key differs.
        let reborn = try makeServices(passcode: passcode("pw"))
        XCTAssertEqual(reborn.availability, .available)
        XCTAssertNotEqual(try reborn.derivedAppKey(identifier: "k"), appKey)
        XCTAssertNotEqual(try reborn.keyEncryptionKey(for: .app).key, kek.key)
        XCTAssertNotEqual(try reborn.keyEncryptionKey(for: .app).fingerprint, kek.fingerprint)
    }

    func testRetireKeepsOtherFilesInTheDirectory() throws {
        let s = try makeServices()
        writeBytes(storeDirectory + "/other", [1, 2, 3])
        try s.retire()
        XCTAssertFalse(FileManager.default.fileExists(atPath: seedPath))
        XCTAssertEqual(readBytes(storeDirectory + "/other"), [1, 2, 3])
    }

    func testEmptyOrNULAppIDIsRejected() throws {
        assertThrows(.invalidArgument, try makeServices(appID: ""))
        assertThrows(.invalidArgument, try makeServices(appID: "a\u{0}b"))
        XCTAssertFalse(FileManager.default.fileExists(atPath: storeDirectory), "nothing created for a bad argument")
    }
}
