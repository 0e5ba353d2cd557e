import ACSecureGRDBSupport
import Foundation
import GRDB
import XCTest

/// Every test: secure services (the environment's store, or a temporary one), the acsecure VFS made
/// SQLite's default before the test opens anything, a fresh directory for its databases, and at
/// the end a check that no file in that directory holds plaintext or looks like plain SQLite.
class ACSecureGRDBTestCase: XCTestCase {
    /// The test's own directory (removed after the on-disk check).
    private(set) var directory = ""
    /// Whether tearDown checks the files on disk (off for the baseline run on plain SQLite).
    var checksFilesOnDisk: Bool { !Baseline.isPlainSQLite }

    override func setUpWithError() throws {
        try super.setUpWithError()
        try ACSecureVFS.useTemporaryStoreIfNoneIsSet(appID: "grdb-client-tests")
        if !Baseline.isPlainSQLite {
            // Explicit, and before GRDB opens anything in this process.
            try ACSecureVFS.makeDefault()
            XCTAssertEqual(ACSecureVFS.defaultVFSName, ACSecureVFS.name)
        }
        directory = try TemporaryDirectory.make(prefix: "grdb-client-\(name.filter { $0.isLetter || $0.isNumber })")
    }

    override func tearDownWithError() throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        if checksFilesOnDisk, !directory.isEmpty {
            let (checked, problems) = try OnDisk.plaintextProblems(in: directory)
            XCTAssertTrue(problems.isEmpty, "files in the clear: \(problems.joined(separator: "; "))")
            XCTAssertFalse(checked.isEmpty, "the test left no database in \(directory) to check")
        }
        try super.tearDownWithError()
    }

    func path(_ name: String) -> String { directory + "/" + name }

    /// The database file is encrypted: plain SQLite calls it "not a database". Only for a closed
    /// database without a journal (plain SQLite would take a journal for a hot one).
    func assertPlainSQLiteCannotRead(_ path: String, file: StaticString = #filePath, line: UInt = #line) {
        guard checksFilesOnDisk else { return }
        if let problem = OnDisk.plainSQLiteProblem(reading: path) { XCTFail(problem, file: file, line: line) }
    }
}

/// Values an observation delivered, on any thread.
final class Recorder<Value: Sendable>: @unchecked Sendable {
    private let condition = NSCondition()
    private var values: [Value] = []
    private var errors: [any Error] = []

    func record(_ value: Value) { condition.lock(); values.append(value); condition.broadcast(); condition.unlock() }
    func record(error: any Error) { condition.lock(); errors.append(error); condition.broadcast(); condition.unlock() }

    /// Waits until `count` values have arrived (or an error, or the timeout) and returns them all.
    func wait(for count: Int, timeout: TimeInterval = 20) -> (values: [Value], errors: [any Error]) {
        let deadline = Date(timeIntervalSinceNow: timeout)
        condition.lock()
        defer { condition.unlock() }
        while values.count < count, errors.isEmpty, condition.wait(until: deadline) {}
        return (values, errors)
    }
}
