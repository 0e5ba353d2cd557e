import Dispatch
import Foundation
import XCTest
import ACCrypto
@testable import ACSecureServices

final class ConcurrencyTests: SecureServicesTestCase {

    /// A key derived while another thread locks must be either the right key or `.noKeys`, never a key
    /// derived from a seed that is being released (derive reads the seed only under the state lock).
    func testDeriveRacingLockNeverReturnsAWrongKey() throws {
        let s = try makeServices()
        let expected = try s.derivedAppKey(identifier: "k").bytes
        let wrong = Recorder<[UInt8]>()
        let ok = Recorder<Bool>()
        let deadline = Date().addingTimeInterval(1.5)

        DispatchQueue.concurrentPerform(iterations: 3) { worker in
            while Date() < deadline {
                if worker == 0 {
                    s.lock()
                    try? s.unlock(passcode: nil)
                } else {
                    do {
                        let k = try s.derivedAppKey(identifier: "k").bytes
                        if k != expected { wrong.append(k) } else if ok.values.count < 1 { ok.append(true) }
                    } catch {
                        // .noKeys while locked is fine.
                    }
                }
            }
        }
        XCTAssertEqual(wrong.values.count, 0, "keys derived from a released seed: \(wrong.values.prefix(3).map { $0.prefix(8) })")
        XCTAssertFalse(ok.values.isEmpty, "the race never let a derivation through; the test proved nothing")
    }

    /// Several threads locking at once (the auto-lock timer, the UI, the C API): one transition, one
    /// notification.
    func testConcurrentLocksNotifyOnce() throws {
        let s = try makeServices()
        let seen = Recorder<SecureServicesAvailability>()
        s.addObserver { seen.append($0) }
        for round in 1...50 {
            DispatchQueue.concurrentPerform(iterations: 4) { _ in s.lock() }
            XCTAssertEqual(s.availability, .unavailable)
            XCTAssertEqual(seen.values.filter { $0 == .unavailable }.count, round, "round \(round)")
            try s.unlock(passcode: nil)
        }
    }

    func testConcurrentUnlocksNotifyOnceAndKeepOneGeneration() throws {
        let s = try makeServices()
        let seen = Recorder<SecureServicesAvailability>()
        s.addObserver { seen.append($0) }
        let expected = try s.derivedAppKey(identifier: "k")
        s.addLockHandler {}
        for round in 1...30 {
            s.lock()
            DispatchQueue.concurrentPerform(iterations: 4) { _ in try? s.unlock(passcode: nil) }
            XCTAssertEqual(s.availability, .available)
            XCTAssertEqual(seen.values.filter { $0 == .available }.count, round, "round \(round)")
            XCTAssertEqual(try s.derivedAppKey(identifier: "k"), expected)
        }
    }

    /// Racing unlocks with auto-lock armed must not leave a stray timer behind: after the race one
    /// timer is armed, and disabling auto-lock leaves none (a leaked one would lock later, unasked).
    /// The period is long so no timer fires during the test: the count alone decides.
    func testConcurrentUnlocksDoNotLeakAutoLockTimers() throws {
        let s = try makeServices()
        s.setAutoLock(seconds: 600)
        s.lock()
        DispatchQueue.concurrentPerform(iterations: 4) { _ in try? s.unlock(passcode: nil) }
        XCTAssertEqual(s.armedAutoLockTimers, 1, "one unlock armed the timer, the others kept it")
        s.setAutoLock(seconds: nil)  // cancels the one timer it knows about
        XCTAssertEqual(s.armedAutoLockTimers, 0, "an auto-lock timer leaked, still armed")
        XCTAssertEqual(s.availability, .available)
    }

    func testMixedLockUnlockStormStaysUsable() throws {
        let s = try makeServices()
        let expected = try s.derivedAppKey(identifier: "k")
        DispatchQueue.concurrentPerform(iterations: 4) { _ in
            for _ in 0..<200 {
                s.lock()
                try? s.unlock(passcode: nil)
            }
        }
        try s.unlock(passcode: nil)
        XCTAssertEqual(s.availability, .available)
        XCTAssertNotEqual(s.keyGeneration, 0)
        XCTAssertEqual(try s.derivedAppKey(identifier: "k"), expected)
    }
}
