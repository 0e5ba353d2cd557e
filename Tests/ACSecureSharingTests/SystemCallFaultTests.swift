#if canImport(Glibc)
import Glibc
#endif
import Foundation
import XCTest
import ACCrypto
import ACSecureServices
import ACSecureFileCore
import ACSecureFoundation
import ACSecureSharing
import ACSystemCalls

/// Fault injection through the one system-call layer (ACSystemCalls' `SystemCallDriver`) into the
/// modules above the engine: the seed store, atomic publishing (`AtomicReplacement`, through the
/// Foundation layer's atomic write), wrapped files and data key rotation. For each operation the
/// calls it makes are counted, then the n-th call of each kind fails with EIO, for every n.
/// Expected every time: either success with the new content, or an error naming the destination;
/// the destination holds its old content (the new one only when the failed step is the final
/// directory fsync, after the rename); no temporary file is left. Injected EINTR (on every first
/// attempt of every call) and short transfers change nothing: the layer retries and finishes them.
final class SystemCallFaultTests: XCTestCase {
    /// Runs `body` under a driver that fails attempt `index` of `kind` (nil: none) with `fault`.
    @discardableResult
    static func run(failing kind: SystemCall?, index: Int = 0, with fault: SystemCallFault = .fail(EIO),
                    _ body: () throws -> Void) -> (error: Error?, attempts: [SystemCall: Int]) {
        let seen = LockedCounts()
        let driver = SystemCallDriver { call, _, _ in seen.next(call) == index && call == kind ? fault : nil }
        let error: Error?
        do { try SystemCallDriver.with(driver) { try body() }; error = nil } catch let e { error = e }
        return (error, driver.attempts)
    }

    final class LockedCounts: @unchecked Sendable {
        private var counts: [SystemCall: Int] = [:]
        /// The index of this attempt among the attempts of its kind.
        func next(_ call: SystemCall) -> Int { defer { counts[call, default: 0] += 1 }; return counts[call, default: 0] }
    }

    static func message(_ error: Error) -> String {
        switch error {
        case let e as SecureServicesError: return e.message
        case let e as SecureFileError: return e.message
        default: return (error as NSError).localizedDescription
        }
    }

    static func temporaries(in directory: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).filter { $0.contains(AtomicReplacement.temporaryMarker) }
    }

    /// For every call kind the operation makes and every index: `prepare` a fresh case, fail that
    /// call, then `check(error, label)`. Returns how many runs failed with an error.
    @discardableResult
    func atEveryCall(_ name: String, prepare: (String) throws -> Void, operation: (String) throws -> Void,
                     check: (Error?, String, String) throws -> Void) throws -> Int {
        try prepare("\(name)-baseline")
        let baseline = Self.run(failing: nil) { try operation("\(name)-baseline") }
        XCTAssertNil(baseline.error, "\(name) without faults: \(baseline.error.map(Self.message) ?? "")")
        var failures = 0
        for (kind, count) in baseline.attempts.sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
            for index in 0..<count {
                let label = "\(name)-\(kind)-\(index)"
                try prepare(label)
                let r = Self.run(failing: kind, index: index) { try operation(label) }
                if r.error != nil { failures += 1 }
                try check(r.error, label, "\(kind)#\(index) of \(count)")
            }
        }
        XCTAssertGreaterThan(failures, 0, "\(name): no injected fault was reported")
        let calls = baseline.attempts.sorted { $0.key.rawValue < $1.key.rawValue }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
        print("SystemCallFaultTests \(name): \(baseline.attempts.values.reduce(0, +)) runs, \(failures) reported errors; calls: \(calls)")
        return failures
    }

    // MARK: the seed store

    func testSeedWriteAtEveryCall() throws {
        let env = try SharingEnvironment()
        let old = try SecureBytes(copying: Array("1111".utf8)), new = try SecureBytes(copying: Array("2222".utf8))
        var before: [String: [UInt8]] = [:]
        func store(_ label: String) -> String { env.path(label) }
        try atEveryCall("seed", prepare: { label in
            _ = try SecureServices(appID: "com.example.app", storeDirectory: store(label), passcode: old, argonCost: .minimum)
            before[label] = readPlain(store(label) + "/seed")
        }, operation: { label in
            let services = try SecureServices(appID: "com.example.app", storeDirectory: store(label), passcode: old,
                                              createStoreIfMissing: false, argonCost: .minimum)
            try services.setPasscode(old: old, new: new)
        }, check: { error, label, what in
            let seed = store(label) + "/seed"
            XCTAssertEqual(Self.temporaries(in: store(label)), [], "\(what): a temporary seed file is left")
            let unchanged = readPlain(seed) == before[label]
            if let error {
                XCTAssertTrue(Self.message(error).contains(store(label)), "\(what): the error names no store path: \(Self.message(error))")
                let step = Self.message(error)
                XCTAssertTrue(unchanged || step.contains("fsync of the directory"), "\(what): the seed changed although the write failed: \(step)")
            } else {
                XCTAssertFalse(unchanged, "\(what): no error, but the seed is unchanged")
            }
            // Whatever happened, the seed on disk opens with the old or (if replaced) the new passcode.
            let passcode = unchanged ? old : new
            XCTAssertNoThrow(try SecureServices(appID: "com.example.app", storeDirectory: store(label), passcode: passcode,
                                                createStoreIfMissing: false, argonCost: .minimum), what)
        })
    }

    // MARK: atomic publish (the Foundation layer's atomic write)

    func testAtomicWriteAtEveryCall() throws {
        let env = try SharingEnvironment()
        let services = try env.services()
        SecureServices.current = services
        defer { SecureServices.current = nil }
        let oldContent = Data("the old content".utf8), newContent = Data(repeating: 7, count: 70_000)
        try atEveryCall("atomic", prepare: { label in
            try oldContent.write(toSecureFile: env.path(label))
        }, operation: { label in
            try newContent.write(toSecureFile: env.path(label), options: .atomic)
        }, check: { error, label, what in
            XCTAssertEqual(Self.temporaries(in: env.directory), [], "\(what): a temporary file is left")
            let now = try Data(contentsOfSecureFile: env.path(label))
            if let error {
                XCTAssertTrue(Self.message(error).contains(env.path(label)), "\(what): the error does not name the destination: \(Self.message(error))")
                XCTAssertFalse(Self.message(error).contains(AtomicReplacement.temporaryMarker), "\(what): the error names the temporary file: \(Self.message(error))")
                XCTAssertTrue(now == oldContent || (now == newContent && Self.message(error).contains("fsync of the directory")),
                              "\(what): after a failure the file is neither the old content nor (after the rename) the new one")
            } else {
                XCTAssertEqual(now, newContent, what)
            }
        })
    }

    // MARK: wrapped files

    func testWrapAtEveryCall() throws {
        let env = try SharingEnvironment()
        let provider = try env.services("com.example.provider")
        let host = try env.services("com.example.host")
        let block = try ACWrappedAppKey.getCryptoKeysForACFileEncryption(sharedGroupID: "g1", services: provider)
        let oldPlain = Array("an older wrapped file".utf8), newPlain = [UInt8](repeating: 5, count: 300_000)
        writePlain(env.path("old-source"), oldPlain)
        writePlain(env.path("source"), newPlain)
        func unwrapped(_ path: String) throws -> [UInt8] {
            let h = try ACUnwrappedFile.readWrappedFile(atPath: path, sharedGroupID: "g1", services: host)
            defer { try? h.close() }  // read only
            return Array(try h.readToEnd() ?? Data())
        }
        try atEveryCall("wrap", prepare: { label in
            try ACWrappedFile.wrapFile(atPath: env.path("old-source"), toPath: env.path(label), cryptoBlock: block)
        }, operation: { label in
            try ACWrappedFile.wrapFile(atPath: env.path("source"), toPath: env.path(label), cryptoBlock: block)
        }, check: { error, label, what in
            XCTAssertEqual(Self.temporaries(in: env.directory), [], "\(what): a temporary file is left")
            let now = try unwrapped(env.path(label))
            if let error {
                XCTAssertTrue(Self.message(error).contains(env.path(label)) || Self.message(error).contains(env.path("source")),
                              "\(what): the error names neither the source nor the destination: \(Self.message(error))")
                XCTAssertTrue(now == oldPlain || (now == newPlain && Self.message(error).contains("fsync of the directory")), what)
            } else {
                XCTAssertEqual(now, newPlain, what)
            }
        })
        // Reading a wrapped file: a failing call is an error, never wrong bytes.
        try ACWrappedFile.wrapFile(atPath: env.path("source"), toPath: env.path("read"), cryptoBlock: block)
        let baseline = Self.run(failing: nil) { XCTAssertEqual(try unwrapped(env.path("read")), newPlain) }
        for (kind, count) in baseline.attempts {
            for index in 0..<count {
                var got: [UInt8]?
                Self.run(failing: kind, index: index) { got = try unwrapped(env.path("read")) }
                if let got { XCTAssertEqual(got, newPlain, "read with \(kind)#\(index) failing returned wrong bytes") }
            }
        }
    }

    // MARK: data key rotation

    func testRotateDataKeyAtEveryCall() throws {
        let env = try SharingEnvironment()
        let services = try env.services()
        let content = [UInt8](repeating: 3, count: 100_000)
        var fileIDs: [String: [UInt8]] = [:]
        try atEveryCall("rotate", prepare: { label in
            let f = try SecureFile.open(env.path(label), flags: O_RDWR | O_CREAT | O_TRUNC, services: services)
            _ = try content.withUnsafeBytes { try f.write($0) }
            try f.close()
            fileIDs[label] = try SecureFileSystem.info(env.path(label)).fileID
        }, operation: { label in
            try SecureSharing.rotateDataKey(env.path(label), services: services)
        }, check: { error, label, what in
            XCTAssertEqual(Self.temporaries(in: env.directory), [], "\(what): a temporary file is left")
            let f = try SecureFile.open(env.path(label), flags: O_RDONLY, services: services)
            var back = [UInt8](repeating: 0, count: content.count + 1)
            let n = try back.withUnsafeMutableBytes { try f.pread(into: $0, at: 0) }
            XCTAssertEqual(Array(back[0..<n]), content, "\(what): the content changed")
            try f.close()
            let rotated = try SecureFileSystem.info(env.path(label)).fileID != fileIDs[label]
            if let error {
                XCTAssertTrue(Self.message(error).contains(env.path(label)), "\(what): \(Self.message(error))")
                XCTAssertTrue(!rotated || Self.message(error).contains("fsync of the directory"), "\(what): replaced although it failed")
            } else {
                XCTAssertTrue(rotated, "\(what): no error, but the file was not rotated")
            }
        })
    }

    // MARK: EINTR and short transfers, everywhere

    /// Every first attempt of every call fails with EINTR, and every transfer is cut to 7 bytes
    /// at a time: the seed store, atomic writes, wrapping, unwrapping and rotation all still work.
    func testInterruptedAndShortCallsAreRetriedInEveryModule() throws {
        let env = try SharingEnvironment()
        let seen = LockedCounts()
        let driver = SystemCallDriver { call, count, _ in
            if seen.next(call) % 2 == 0 { return .fail(EINTR) }
            return [.read, .write, .pread, .pwrite].contains(call) && count > 7 ? .short(7) : nil
        }
        let plain = [UInt8](repeating: 9, count: 20_000)
        writePlain(env.path("source"), plain)
        try SystemCallDriver.with(driver) {
            let services = try SecureServices(appID: "com.example.app", storeDirectory: env.storeDirectory,
                                              passcode: SecureBytes(copying: Array("1111".utf8)), argonCost: .minimum)
            try services.setPasscode(old: SecureBytes(copying: Array("1111".utf8)), new: SecureBytes(copying: Array("2222".utf8)))
            SecureServices.current = services
            defer { SecureServices.current = nil }
            try Data(plain).write(toSecureFile: env.path("atomic"), options: .atomic)
            XCTAssertEqual(try Data(contentsOfSecureFile: env.path("atomic")), Data(plain))
            let block = try ACWrappedAppKey.getCryptoKeysForACFileEncryption(sharedGroupID: nil, services: services)
            try ACWrappedFile.wrapFile(atPath: env.path("source"), toPath: env.path("wrapped"), cryptoBlock: block)
            let h = try ACUnwrappedFile.readWrappedFile(atPath: env.path("wrapped"), sharedGroupID: nil, services: services)
            XCTAssertEqual(Array(try h.readToEnd() ?? Data()), plain)
            try h.close()
            try SecureSharing.rotateDataKey(env.path("atomic"), services: services)
            XCTAssertEqual(try Data(contentsOfSecureFile: env.path("atomic")), Data(plain))
        }
        for call in [SystemCall.open, .read, .write, .pread, .pwrite, .fsync, .rename, .close, .fstat, .mkdir] {
            XCTAssertGreaterThanOrEqual(driver.attempts[call, default: 0], 2, "\(call) was never retried")
        }
        XCTAssertEqual(SystemCallDriver.current == nil, true, "the driver is removed afterwards")
    }
}
