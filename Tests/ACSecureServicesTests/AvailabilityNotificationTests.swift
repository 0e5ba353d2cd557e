#if canImport(Glibc)
import Glibc
#endif
import Foundation
import XCTest
import ACCrypto
@testable import ACSecureServices

final class AvailabilityNotificationTests: SecureServicesTestCase {

    func testObserversSeeLockAndUnlock() throws {
        let s = try makeServices(passcode: passcode("pw"))
        let seen = Recorder<SecureServicesAvailability>()
        let token = s.addObserver { seen.append($0) }
        XCTAssertEqual(seen.values, [], "no call on registration")

        s.lock()
        XCTAssertEqual(seen.values, [.unavailable])
        s.lock()  // already locked: no change, no notification
        XCTAssertEqual(seen.values, [.unavailable])
        XCTAssertThrowsError(try s.unlock(passcode: passcode("bad")))
        XCTAssertEqual(seen.values, [.unavailable], "a failed unlock is no change")
        try s.unlock(passcode: passcode("pw"))
        XCTAssertEqual(seen.values, [.unavailable, .available])

        s.removeObserver(token)
        s.lock()
        XCTAssertEqual(seen.values, [.unavailable, .available], "removed observers are not called")
    }

    func testSeveralObservers() throws {
        let s = try makeServices()
        let a = Recorder<SecureServicesAvailability>(), b = Recorder<SecureServicesAvailability>()
        let ta = s.addObserver { a.append($0) }
        let tb = s.addObserver { b.append($0) }
        XCTAssertNotEqual(ta, tb)
        s.lock()
        try s.unlock(passcode: nil)
        XCTAssertEqual(a.values, [.unavailable, .available])
        XCTAssertEqual(b.values, [.unavailable, .available])
    }

    func testAvailabilityUpdatesStream() async throws {
        let s = try makeServices(passcode: passcode("pw"))
        let stream = s.availabilityUpdates
        var iterator = stream.makeAsyncIterator()

        let first = await iterator.next()
        XCTAssertEqual(first, .available, "starts with the current value")
        s.lock()
        let second = await iterator.next()
        XCTAssertEqual(second, .unavailable)
        try s.unlock(passcode: passcode("pw"))
        let third = await iterator.next()
        XCTAssertEqual(third, .available)
    }

    func testAvailabilityUpdatesStartsUnavailableForLockedStore() async throws {
        _ = try makeServices(passcode: passcode("pw"))
        let s = try makeServices()
        var iterator = s.availabilityUpdates.makeAsyncIterator()
        let first = await iterator.next()
        XCTAssertEqual(first, .unavailable)
        try s.unlock(passcode: passcode("pw"))
        let second = await iterator.next()
        XCTAssertEqual(second, .available)
    }

    /// The engine flushes and wipes in a lock handler: it must run during `lock()`, before observers hear
    /// "unavailable", once per lock, and keys the engine already holds must still be intact then.
    func testLockHandlersRunBeforeTheSeedIsDropped() throws {
        let s = try makeServices()
        let heldKEK = try s.keyEncryptionKey(for: .app)
        let expected = heldKEK.key.bytes
        let events = Recorder<String>()
        s.addLockHandler {
            // The KEK the engine holds is still usable to flush dirty chunks.
            events.append(heldKEK.key.bytes == expected ? "handler: key intact" : "handler: key wiped")
        }
        s.addLockHandler { events.append("handler 2") }
        s.addObserver { events.append("observer \($0)") }

        s.lock()
        XCTAssertEqual(events.values, ["handler: key intact", "handler 2", "observer unavailable"])
        s.lock()
        XCTAssertEqual(events.values.count, 3, "handlers do not run when already locked")

        try s.unlock(passcode: nil)
        s.lock()
        XCTAssertEqual(events.values.suffix(3), ["handler: key intact", "handler 2", "observer unavailable"])
    }

    func testRetireRunsLockHandlers() throws {
        let s = try makeServices()
        let ran = Recorder<Bool>()
        s.addLockHandler { ran.append(true) }
        try s.retire()
        XCTAssertEqual(ran.values, [true])
    }

    func testAutoLockAfterInactivity() throws {
        let s = try makeServices(passcode: passcode("pw"))
        let seen = Recorder<SecureServicesAvailability>()
        s.addObserver { seen.append($0) }

        s.setAutoLock(seconds: 0.2)
        XCTAssertEqual(s.availability, .available)
        // The timer thread flips availability first and notifies after the lock handlers: wait for the notification.
        XCTAssertEqual(seen.values(atLeast: 1), [.unavailable], "auto-lock did not fire")
        XCTAssertEqual(s.availability, .unavailable)
        XCTAssertThrowsError(try s.derivedAppKey(identifier: "k"))

        // Re-armed after an unlock.
        try s.unlock(passcode: passcode("pw"))
        XCTAssertEqual(s.availability, .available)
        XCTAssertEqual(seen.values(atLeast: 3), [.unavailable, .available, .unavailable], "auto-lock not re-armed after unlock")
        XCTAssertEqual(s.availability, .unavailable)
    }

    func testActivityPostponesAutoLock() throws {
        let s = try makeServices()
        let seen = Recorder<SecureServicesAvailability>()
        s.addObserver { seen.append($0) }
        s.setAutoLock(seconds: 0.5)
        // Keep using keys for ~1.2 s (over two auto-lock periods): it must stay available throughout.
        // (The pause between uses is the subject of the test, inactivity shorter than the period, not a synchronisation.)
        let end = Date().addingTimeInterval(1.2)
        while Date() < end {
            XCTAssertEqual(s.availability, .available)
            _ = try s.derivedAppKey(identifier: "k")
            usleep(20_000)
        }
        XCTAssertEqual(s.availability, .available)
        XCTAssertEqual(seen.values(atLeast: 1), [.unavailable], "auto-lock did not fire once idle")
    }

    func testAutoLockCanBeDisabled() throws {
        let s = try makeServices()
        s.setAutoLock(seconds: 600)  // long: the count alone decides, no timer fires during the test
        XCTAssertEqual(s.armedAutoLockTimers, 1)
        s.setAutoLock(seconds: nil)
        // A cancelled timer never fires again: none armed means none can lock.
        XCTAssertEqual(s.armedAutoLockTimers, 0, "disabling left an auto-lock timer armed")
        XCTAssertEqual(s.availability, .available)
    }
}
