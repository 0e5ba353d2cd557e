import Foundation
import XCTest
import ACSecureTestSupport
import ACCrypto
import ACSecureFoundation
@testable import ACSecureSharing

final class SensitiveDataTests: XCTestCase {
    func testHoldsACopyAndComparesByContents() {
        var key: [UInt8] = Array(0..<32)
        let a = key.withUnsafeBytes { ACSensitiveData(bytes: $0.baseAddress, length: UInt($0.count)) }
        key[0] = 99  // the object holds its own copy
        XCTAssertEqual(a.length, 32)
        XCTAssertEqual(Array(Data(referencing: a)), Array(0..<32))
        let b = ACSensitiveData(data: Data(Array(0..<32)))
        XCTAssertTrue(a == b)
        XCTAssertTrue(a.isEqual(b))
        XCTAssertTrue(a.isEqual(Data(Array(0..<32))))
        XCTAssertEqual(a.hash, b.hash)
        var other = Array<UInt8>(0..<32); other[31] ^= 1
        XCTAssertFalse(a == ACSensitiveData(data: Data(other)))
        XCTAssertFalse(a == ACSensitiveData(data: Data(Array(0..<31))))
        XCTAssertFalse(a.isEqual("not data"))
        XCTAssertTrue(ACSensitiveData() == ACSensitiveData(data: Data()))
    }

    func testDescriptionNeverShowsTheBytes() {
        let a = ACSensitiveData(data: Data([0xde, 0xad, 0xbe, 0xef]))
        for text in [a.description, a.debugDescription, "\(a)", String(reflecting: a)] {
            XCTAssertFalse(text.lowercased().contains("deadbeef"), text)
            XCTAssertFalse(text.lowercased().contains("de ad"), text)
        }
        XCTAssertTrue(a.description.contains("4 bytes"))
    }

    func testCopiesStayGuarded() {
        let a = ACSensitiveData(data: Data([1, 2, 3]))
        let c = a.copy()
        XCTAssertTrue(c is ACSensitiveData)
        XCTAssertTrue((c as! ACSensitiveData) == a)
        let m = a.mutableCopy()
        XCTAssertTrue(m is ACSensitiveMutableData)
        (m as! ACSensitiveMutableData).append(Data([4]) as NSData)
        XCTAssertEqual(Array(Data(referencing: m as! NSData)), [1, 2, 3, 4])
        XCTAssertEqual(Array(Data(referencing: a)), [1, 2, 3])
    }

    /// Differential: a random sequence of mutations on ACSensitiveMutableData and on NSMutableData.
    func testMutableDataMatchesNSMutableData() {
        var rng = SplitMix64(seed: 0x5e5)
        for round in 0..<30 {
            let s = ACSensitiveMutableData(capacity: Int.random(in: 0...8, using: &rng))
            let n = NSMutableData()
            for step in 0..<60 {
                switch Int.random(in: 0..<5, using: &rng) {
                case 0:
                    let b = randomBytes(Int.random(in: 0...300, using: &rng), &rng)
                    b.withUnsafeBytes { s.append($0) }
                    n.append(Data(b))
                case 1:
                    let l = Int.random(in: 0...600, using: &rng)
                    s.length = l
                    n.length = l
                case 2 where n.length > 0:
                    let loc = Int.random(in: 0...n.length, using: &rng)
                    let len = Int.random(in: 0...(n.length - loc), using: &rng)
                    let b = randomBytes(Int.random(in: 0...50, using: &rng), &rng)
                    b.withUnsafeBytes { s.replaceBytes(in: NSRange(location: loc, length: len), with: $0) }
                    n.replaceBytes(in: NSRange(location: loc, length: len), withBytes: b, length: b.count)
                case 3 where n.length > 0:
                    let loc = Int.random(in: 0...n.length, using: &rng)
                    let len = Int.random(in: 0...(n.length - loc), using: &rng)
                    s.resetBytes(in: NSRange(location: loc, length: len))
                    n.resetBytes(in: NSRange(location: loc, length: len))
                default:
                    let k = Int.random(in: 0...40, using: &rng)
                    s.increaseLength(by: k)
                    n.increaseLength(by: k)
                }
                XCTAssertEqual(Array(Data(referencing: s)), Array(n as Data), "round \(round) step \(step)")
                if s.length != n.length { return }
            }
        }
    }

    func testContainerKeepsTheBytesSealed() {
        let key = ACSensitiveData(data: Data((0..<32).map { UInt8($0 * 7 & 0xff) }))
        let box = ACSensitiveDataContainer.container(with: key)
        XCTAssertEqual(box.length, 32)
        XCTAssertTrue(box.data == key)
        XCTAssertFalse(box.data === box.data)  // a fresh object each time
        XCTAssertTrue(ACSensitiveDataContainer(data: ACSensitiveData()).data == ACSensitiveData())
        XCTAssertFalse(box.description.contains("0007"))
    }

    /// The lifetime check reports long-lived objects once, with their allocation stack, and not short-lived ones.
    func testLifetimeCheckReportsObjectsThatLiveTooLong() throws {
        let reports = ReportLog()
        let reported = DispatchSemaphore(value: 0)
        let oldHandler = ACSensitiveDataLifetimeCheck.reportHandler
        ACSensitiveDataLifetimeCheck.reportHandler = { reports.append($0); reported.signal() }
        ACSensitiveDataLifetimeCheck.maximumLifetime = 0.2
        defer {
            ACSensitiveDataLifetimeCheck.maximumLifetime = nil
            ACSensitiveDataLifetimeCheck.reportHandler = oldHandler
        }
        do { _ = ACSensitiveData(data: Data([1])) }  // freed at once
        var kept: ACSensitiveMutableData? = ACSensitiveMutableData(length: 7)
        XCTAssertEqual(ACSensitiveDataLifetimeCheck.trackedCount, 1)
        // The background timer's report signals (at most 5 s: the machine is noisy).
        XCTAssertEqual(reported.wait(timeout: .now() + 5), .success, "no report for an object alive past its lifetime")
        XCTAssertEqual(reports.all.count, 1)
        let r = try XCTUnwrap(reports.all.first)
        XCTAssertEqual(r.className, "ACSensitiveMutableData")
        XCTAssertEqual(r.length, 7)
        XCTAssertGreaterThanOrEqual(r.age, 0.2)
        XCTAssertFalse(r.allocationStack.isEmpty)
        ACSensitiveDataLifetimeCheck.checkNow()
        XCTAssertEqual(kept?.length, 7, "still alive when checked again")
        kept = nil  // reported once only, not again when freed
        XCTAssertEqual(reports.all.count, 1)
        XCTAssertEqual(ACSensitiveDataLifetimeCheck.trackedCount, 0)
    }

    /// The environment variable alone turns the check on (in a fresh process); the report goes to stderr
    /// and carries no byte of the secret.
    func testLifetimeCheckFromEnvironment() throws {
        let on = try TestHost.run(["lifetime", "0.6"], environment: ["AC_SENSITIVE_DATA_MAX_LIFETIME": "0.1"])
        XCTAssertEqual(on.stdout, "OK")
        XCTAssertTrue(on.stderr.contains("still alive"), on.stderr)
        XCTAssertTrue(on.stderr.contains("AC_SENSITIVE_DATA_MAX_LIFETIME"), on.stderr)
        XCTAssertFalse(on.stderr.contains("c0ffee"), "the report must not contain the secret")
        let off = try TestHost.run(["lifetime", "0.3"])
        XCTAssertEqual(off.stdout, "OK")
        XCTAssertFalse(off.stderr.contains("still alive"), off.stderr)
    }
}

final class ReportLog: @unchecked Sendable {
    private let lock = PThreadMutex()
    private var reports: [ACSensitiveDataLifetimeCheck.Report] = []
    func append(_ r: ACSensitiveDataLifetimeCheck.Report) { lock.withLock { reports.append(r) } }
    var all: [ACSensitiveDataLifetimeCheck.Report] { lock.withLock { reports } }
}
