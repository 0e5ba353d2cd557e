#if canImport(Glibc)
import Glibc
#endif
import Foundation
import XCTest
import ACCrypto
import ACSystemCalls
@testable import ACSecureServices

/// Issue 15, findings 6 and 7: attacks on the store rather than on the files. Each test performs
/// the attack of the review and checks that it now fails.
final class StoreAttackTests: SecureServicesTestCase {

    // MARK: finding 6: seed downgrade

    /// A store created with a passcode, its seed replaced by an unprotected one (written by anyone
    /// who can write the store): starting with the passcode must not accept it.
    func testAPasscodeRefusesAPlantedUnprotectedSeed() throws {
        _ = try makeServices()  // the planted, unprotected seed
        XCTAssertEqual(readBytes(seedPath)?[5], 0, "protection 0")
        assertThrows(.noKeys, try makeServices(passcode: passcode("123456")), "passcode given, unprotected seed on disk")
    }

    /// The same swap while the services are locked: unlocking with the passcode must refuse it.
    func testUnlockRefusesASeedSwappedForAnUnprotectedOne() throws {
        let services = try makeServices(passcode: passcode("123456"))
        services.lock()
        _ = try makeServices(directory: root + "/planted")
        let planted = try XCTUnwrap(readBytes(root + "/planted/seed"))
        XCTAssertEqual(rename(root + "/planted/seed", seedPath), 0)
        assertThrows(.noKeys, try services.unlock(passcode: passcode("123456")), "unlock with an unprotected seed on disk")
        XCTAssertEqual(services.availability, .unavailable)
        XCTAssertEqual(readBytes(seedPath), planted, "the planted seed is refused, not rewritten")
    }

    /// `ACSECURE_PASSCODE` configured, unprotected seed on disk: the environment start refuses it.
    func testEnvironmentPasscodeRefusesAPlantedUnprotectedSeed() throws {
        _ = try makeServices()
        try withServicesEnvironment(["ACSECURE_HOME": storeDirectory, "ACSECURE_APP_ID": "com.example.app",
                                     "ACSECURE_PASSCODE": "123456"]) {
            assertThrows(.noKeys, try SecureServices.currentOrStartFromEnvironment())
            XCTAssertNil(SecureServices.current)
        }
    }

    /// The explicit option, without a passcode at hand: an unprotected seed is refused; a protected
    /// store starts locked and the option holds at every unlock and passcode change.
    func testRequireProtectedStoreOption() throws {
        _ = try makeServices()
        assertThrows(.noKeys, try SecureServices(appID: "com.example.app", storeDirectory: storeDirectory,
                                                 requireProtectedStore: true, argonCost: .minimum))
        try FileManager.default.removeItem(atPath: storeDirectory)
        assertThrows(.invalidArgument, try SecureServices(appID: "com.example.app", storeDirectory: storeDirectory,
                                                          requireProtectedStore: true, argonCost: .minimum),
                     "no passcode to create a protected store with")
        XCTAssertNil(fileMode(seedPath))
        _ = try makeServices(passcode: passcode("1111"))
        let services = try SecureServices(appID: "com.example.app", storeDirectory: storeDirectory,
                                          requireProtectedStore: true, argonCost: .minimum)
        XCTAssertTrue(services.requiresProtectedStore)
        XCTAssertEqual(services.availability, .unavailable)
        try services.unlock(passcode: passcode("1111"))
        XCTAssertEqual(services.availability, .available)
        assertThrows(.invalidArgument, try services.setPasscode(old: passcode("1111"), new: nil), "removing the passcode")
        XCTAssertEqual(readBytes(seedPath)?[5], 1, "still protected")
        XCTAssertFalse(try makeServices().requiresProtectedStore, "not required unless asked or implied")
        // Implied by a passcode: the app may still remove its own passcode, which ends it.
        let implied = try makeServices(passcode: passcode("1111"))
        XCTAssertTrue(implied.requiresProtectedStore, "implied by a passcode")
        try implied.setPasscode(old: passcode("1111"), new: nil)
        XCTAssertFalse(implied.requiresProtectedStore, "removed with the passcode")
        implied.lock()
        try implied.unlock(passcode: nil)
        try implied.setPasscode(old: nil, new: passcode("2222"))
        XCTAssertTrue(implied.requiresProtectedStore, "set again with a passcode")
    }

    // MARK: finding 6: no store is created as a side effect, no app ID is invented

    /// The explicit start may be told not to create a store.
    func testCreateStoreIfMissingFalseCreatesNothing() throws {
        assertThrows(.noKeys, try SecureServices(appID: "com.example.app", storeDirectory: storeDirectory,
                                                 createStoreIfMissing: false, argonCost: .minimum))
        XCTAssertNil(fileMode(storeDirectory))
    }

    /// `ACSECURE_CREATE_STORE=1` is the environment's explicit request to create a store.
    func testEnvironmentCreatesAStoreOnlyWhenAskedTo() throws {
        try withServicesEnvironment(["ACSECURE_HOME": storeDirectory, "ACSECURE_APP_ID": "com.example.app",
                                     "ACSECURE_CREATE_STORE": "1"]) {
            let services = try SecureServices.currentOrStartFromEnvironment()
            XCTAssertEqual(services.appID, "com.example.app")
            XCTAssertEqual(services.availability, .available)
            XCTAssertTrue(SecureServices.current === services)
            XCTAssertFalse(services.requiresProtectedStore)
        }
        XCTAssertEqual(readBytes(seedPath)?.count, 38, "an unprotected store was created")
        // ACSECURE_REQUIRE_PROTECTED_STORE=1 refuses it without a passcode.
        try withServicesEnvironment(["ACSECURE_HOME": storeDirectory, "ACSECURE_APP_ID": "com.example.app",
                                     "ACSECURE_REQUIRE_PROTECTED_STORE": "1"]) {
            assertThrows(.noKeys, try SecureServices.currentOrStartFromEnvironment())
        }
    }

    /// Nothing started and no app ID in the environment: file calls fail with `.noKeys` and a
    /// message saying how to start services; nothing is created.
    func testNoServicesAndNoAppIDFailsWithoutCreatingAStore() throws {
        try withServicesEnvironment(["ACSECURE_HOME": storeDirectory]) {
            do {
                _ = try SecureServices.currentOrStartFromEnvironment()
                XCTFail("services started with an invented app ID")
            } catch let error as SecureServicesError {
                XCTAssertEqual(error.code, .noKeys, error.message)
                XCTAssertTrue(error.message.contains("ACSecureServicesStart"), error.message)
                XCTAssertTrue(error.message.contains("ACSECURE_APP_ID"), error.message)
            }
            XCTAssertNil(SecureServices.current)
        }
        XCTAssertNil(fileMode(storeDirectory), "no store was created")
    }

    /// An app ID in the environment but no store: the environment start does not create one.
    func testEnvironmentStartDoesNotCreateAMissingStore() throws {
        try withServicesEnvironment(["ACSECURE_HOME": storeDirectory, "ACSECURE_APP_ID": "com.example.app"]) {
            do {
                _ = try SecureServices.currentOrStartFromEnvironment()
                XCTFail("a store was created as a side effect")
            } catch let error as SecureServicesError {
                XCTAssertEqual(error.code, .noKeys, error.message)
                XCTAssertTrue(error.message.contains(storeDirectory), error.message)
                XCTAssertTrue(error.message.contains("ACSECURE_CREATE_STORE"), error.message)
            }
        }
        XCTAssertNil(fileMode(storeDirectory), "no store was created")
    }

    // MARK: creating a store never replaces one

    /// Several processes (here threads) starting at once on a missing store: each sees no seed and
    /// creates one. Publishing by rename let the last one replace the seed the others were already
    /// using, so files they wrote became undecryptable. Creation must publish without replacing and
    /// take the store that won: every starter ends up with the same keys.
    func testConcurrentCreationsAgreeOnOneSeed() throws {
        for round in 0..<4 {
            let directory = root + "/race\(round)"
            let keys = Recorder<[UInt8]>()
            let failures = Recorder<String>()
            DispatchQueue.concurrentPerform(iterations: 6) { _ in
                do {
                    let services = try SecureServices(appID: "com.example.app", storeDirectory: directory, argonCost: .minimum)
                    keys.append(try services.derivedAppKey(identifier: "k").bytes)
                } catch {
                    failures.append("\(error)")
                }
            }
            XCTAssertEqual(failures.values, [], "round \(round)")
            let stored = try makeServices(directory: directory).derivedAppKey(identifier: "k").bytes
            XCTAssertEqual(Set(keys.values).count, 1, "round \(round): starters used different seeds")
            XCTAssertEqual(keys.values.first, stored, "round \(round): a starter's seed was replaced")
            let leftovers = try FileManager.default.contentsOfDirectory(atPath: directory).filter { $0 != "seed" }
            XCTAssertEqual(leftovers, [], "round \(round): temporary seed files left behind")
        }
    }

    /// A seed whose existence cannot be checked (an I/O error, not ENOENT) is not a missing store:
    /// starting fails with .storeIO naming the seed, and never creates a new store over it.
    func testUncheckableSeedIsAnErrorNotAMissingStore() throws {
        let expected = try makeServices().derivedAppKey(identifier: "k").bytes
        let seed = try XCTUnwrap(readBytes(seedPath))
        // Only the first examination fails (the seed's): later ones, e.g. of the directory, succeed.
        let stats = LockedValue(0)
        let driver = SystemCallDriver { call, _, _ in
            guard call == .stat else { return nil }
            return stats.withLock { n in n += 1; return n == 1 } ? .fail(EIO) : nil
        }
        do {
            _ = try SystemCallDriver.with(driver) { () throws(SecureServicesError) in try makeServicesTyped() }
            XCTFail("a store whose seed cannot be examined started")
        } catch {
            let e = error
            XCTAssertEqual(e.code, .storeIO, e.message)
            XCTAssertEqual(e.errno, EIO, e.message)
            XCTAssertTrue(e.message.contains(seedPath), e.message)
        }
        XCTAssertEqual(readBytes(seedPath), seed, "the seed was rewritten")
        XCTAssertEqual(try makeServices().derivedAppKey(identifier: "k").bytes, expected)
    }

    /// `createStore` (what `acsecure init` uses) never opens an existing store, also when it looked
    /// missing and another process published its seed first (simulated: the first examination of
    /// the seed says ENOENT): `.storeIO` with EEXIST, the winner's seed untouched. A plain start in
    /// the same race loads the winner's seed.
    func testCreateStoreRefusesAnExistingOrRacedStore() throws {
        let expected = try makeServices().derivedAppKey(identifier: "k").bytes
        let seed = try XCTUnwrap(readBytes(seedPath))
        func firstStatSaysMissing() -> SystemCallDriver {
            let stats = LockedValue(0)
            return SystemCallDriver { call, _, _ in
                guard call == .stat else { return nil }
                return stats.withLock { n in n += 1; return n == 1 } ? .fail(ENOENT) : nil
            }
        }
        for raced in [false, true] {
            do {
                let create = { () throws(SecureServicesError) -> SecureServices in
                    try SecureServices.createStore(appID: "com.example.app", storeDirectory: self.storeDirectory, argonCost: .minimum)
                }
                _ = raced ? try SystemCallDriver.with(firstStatSaysMissing(), create) : try create()
                XCTFail("createStore over an existing store succeeded (raced: \(raced))")
            } catch {
                XCTAssertEqual(error.code, .storeIO, error.message)
                XCTAssertEqual(error.errno, EEXIST, error.message)
                XCTAssertTrue(error.message.contains(storeDirectory), error.message)
                XCTAssertEqual(error.message.contains("another process created it meanwhile"), raced, error.message)
            }
            XCTAssertEqual(readBytes(seedPath), seed, "the seed was rewritten (raced: \(raced))")
        }
        let started = try SystemCallDriver.with(firstStatSaysMissing()) { () throws(SecureServicesError) in try makeServicesTyped() }
        XCTAssertEqual(try started.derivedAppKey(identifier: "k").bytes, expected)
        XCTAssertEqual(readBytes(seedPath), seed)
    }

    private func makeServicesTyped() throws(SecureServicesError) -> SecureServices {
        try SecureServices(appID: "com.example.app", storeDirectory: storeDirectory, argonCost: .minimum)
    }

    // MARK: finding 7: store hardening

    /// A store directory that group or others can write lets anyone plant a seed: refused.
    func testStoreDirectoryOpenToGroupOrOthersIsRefused() throws {
        _ = try makeServices()
        for mode: mode_t in [0o777, 0o770, 0o705] {
            XCTAssertEqual(chmod(storeDirectory, mode), 0)
            do {
                _ = try makeServices()
                XCTFail("store directory mode \(String(mode, radix: 8)) accepted")
            } catch let e as SecureServicesError {
                XCTAssertEqual(e.code, .storeIO, e.message)
                XCTAssertEqual(e.errno, EACCES, e.message)
                XCTAssertTrue(e.message.contains(storeDirectory), e.message)
                XCTAssertTrue(e.message.contains(String(mode, radix: 8)), e.message)
            }
            XCTAssertEqual(fileMode(storeDirectory), mode, "refused, not silently changed")
        }
        XCTAssertEqual(chmod(storeDirectory, 0o700), 0)
        XCTAssertEqual(chmod(seedPath, 0o666), 0)
        assertThrows(.storeIO, try makeServices(), "seed mode 0666")
        XCTAssertEqual(chmod(seedPath, 0o600), 0)
        XCTAssertEqual(try makeServices().availability, .available, "private again: accepted")
    }

    /// Creating a store in a directory that already exists (the user's own, made with a lax umask)
    /// makes it private; an existing store with the same mode is refused (above).
    func testCreatingAStoreInAnExistingDirectoryMakesItPrivate() throws {
        XCTAssertEqual(mkdir(storeDirectory, 0o755), 0)
        XCTAssertEqual(chmod(storeDirectory, 0o775), 0)
        _ = try makeServices()
        XCTAssertEqual(fileMode(storeDirectory), 0o700)
        XCTAssertEqual(fileMode(seedPath), 0o600)
    }

    /// A relative store directory is created relative to the working directory, private.
    func testRelativeStoreDirectory() throws {
        let saved = FileManager.default.currentDirectoryPath
        XCTAssertEqual(chdir(root), 0)
        defer { _ = chdir(saved) }
        let services = try SecureServices(appID: "com.example.app", storeDirectory: "relative/store", argonCost: .minimum)
        XCTAssertEqual(services.availability, .available)
        XCTAssertEqual(fileMode(root + "/relative/store"), 0o700)
        XCTAssertEqual(fileMode(root + "/relative/store/seed"), 0o600)
        try services.retire()
        XCTAssertNil(fileMode(root + "/relative/store"))
    }

    /// A symbolic link to a file of the user's planted at the temporary seed file's name: writing
    /// the seed must neither write through the link nor rename it over the seed. (The name is
    /// random, `.seed.acsecure-tmp-<hex>`, so the test hands the writer the name it planted.)
    func testTemporarySeedFileIsNotFollowed() throws {
        _ = try makeServices(passcode: passcode("1111"))
        let seed = try XCTUnwrap(readBytes(seedPath))
        let victim = root + "/victim"
        writeBytes(victim, Array("precious".utf8))
        let replacement = AtomicReplacement(destination: seedPath)
        let temporary = replacement.temporaryPath.description
        XCTAssertTrue(temporary.hasPrefix(storeDirectory + "/.seed.acsecure-tmp-"), temporary)
        XCTAssertEqual(symlink(victim, temporary), 0)
        do {
            try writeFileAtomically(BytePath(seedPath), Array("not a seed".utf8), through: replacement)
            XCTFail("the seed write wrote through \(temporary)")
        } catch {
            XCTAssertEqual(error.code, .storeIO, error.message)
            XCTAssertTrue(error.message.contains(temporary), error.message)
        }
        XCTAssertEqual(readBytes(victim), Array("precious".utf8), "the link's target is untouched")
        XCTAssertEqual(readBytes(seedPath), seed, "the seed is unchanged")
        var st = stat()
        XCTAssertEqual(lstat(seedPath, &st), 0)
        XCTAssertEqual(st.st_mode & S_IFMT, S_IFREG, "the seed is still a regular file")
        XCTAssertEqual(try makeServices(passcode: passcode("1111")).availability, .available)
    }

    /// `retire` overwrites and removes every seed-related file: the seed and any temporary a crashed
    /// re-seal left behind. Hard links made beforehand show the bytes were overwritten, not just unlinked.
    func testRetireOverwritesAndRemovesEverySeedFile() throws {
        let services = try makeServices(passcode: passcode("1111"))
        let seed = try XCTUnwrap(readBytes(seedPath))
        let leftover = storeDirectory + "/.seed.acsecure-tmp-8a3f5e"
        writeBytes(leftover, seed)
        XCTAssertEqual(chmod(leftover, 0o600), 0)
        let olderLeftover = storeDirectory + "/seed.tmp.4194304"  // the name older versions used
        writeBytes(olderLeftover, seed)
        XCTAssertEqual(link(seedPath, root + "/seed-link"), 0)
        XCTAssertEqual(link(leftover, root + "/leftover-link"), 0)

        try services.retire()

        XCTAssertNil(fileMode(seedPath), "seed removed")
        XCTAssertNil(fileMode(leftover), "temporary seed removed")
        XCTAssertNil(fileMode(olderLeftover), "older temporary seed removed")
        XCTAssertNil(fileMode(storeDirectory), "empty store directory removed")
        XCTAssertEqual(readBytes(root + "/seed-link"), [UInt8](repeating: 0, count: seed.count), "seed overwritten with zeros")
        XCTAssertEqual(readBytes(root + "/leftover-link"), [UInt8](repeating: 0, count: seed.count), "temporary overwritten with zeros")
    }

    /// New and re-sealed seeds use at least libsodium's MODERATE Argon2id cost (3 passes, 256 MiB).
    func testNewAndResealedSeedsUseAtLeastModerateArgon2idCost() throws {
        func storedCost() throws -> (ops: UInt64, mem: UInt64) {
            let b = try XCTUnwrap(readBytes(seedPath))
            XCTAssertEqual(b.count, 98)
            let ops = b[6..<14].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
            let mem = b[14..<22].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
            return (ops, mem)
        }
        let services = try SecureServices(appID: "com.example.app", storeDirectory: storeDirectory, passcode: passcode("123456"))
        var cost = try storedCost()
        XCTAssertGreaterThanOrEqual(cost.ops, 3, "new seed: ops limit")
        XCTAssertGreaterThanOrEqual(cost.mem, 256 << 20, "new seed: memory limit")
        try services.setPasscode(old: passcode("123456"), new: passcode("654321"))
        cost = try storedCost()
        XCTAssertGreaterThanOrEqual(cost.ops, 3, "re-sealed seed: ops limit")
        XCTAssertGreaterThanOrEqual(cost.mem, 256 << 20, "re-sealed seed: memory limit")
    }

    /// Seeds sealed at a lower cost (older stores, tests) still open with their stored parameters.
    func testSeedsSealedAtALowerCostStillOpen() throws {
        _ = try makeServices(passcode: passcode("1111"))  // Argon2id minimum cost
        let services = try SecureServices(appID: "com.example.app", storeDirectory: storeDirectory, passcode: passcode("1111"))
        XCTAssertEqual(services.availability, .available)
    }
}

extension SecureServicesTestCase {
    /// Runs `body` with exactly these ACSECURE_* variables set (the others unset) and no current
    /// services, then restores both.
    func withServicesEnvironment(_ variables: [String: String], _ body: () throws -> Void) rethrows {
        let names = ["ACSECURE_HOME", "ACSECURE_APP_ID", "ACSECURE_PASSCODE", "ACSECURE_CREATE_STORE",
                     "ACSECURE_REQUIRE_PROTECTED_STORE"]
        var saved: [String: String?] = [:]
        for name in names {
            saved.updateValue(getenv(name).map { String(cString: $0) }, forKey: name)
            if let value = variables[name] { setenv(name, value, 1) } else { unsetenv(name) }
        }
        let savedServices = SecureServices.current
        SecureServices.current = nil
        defer {
            SecureServices.current = savedServices
            for (name, value) in saved {
                if let value { setenv(name, value, 1) } else { unsetenv(name) }
            }
        }
        try body()
    }
}
