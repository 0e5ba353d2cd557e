import ACSecureGRDBSupport
import Foundation
import GRDB
import GRDBSQLite
import XCTest

/// GRDB's DatabaseQueue (one connection, rollback journal) on acsecure.
final class DatabaseQueueTests: WriterTestCase {
    override var kind: String { "queue" }

    func testMigrations() throws { try checkMigrations() }
    func testRecordsAndQueries() throws { try checkRecordsAndQueries() }
    func testTransactionsAndRollback() throws { try checkTransactionsAndRollback() }
    func testValueObservation() throws { try checkValueObservation() }
    func testCrashRecovery() throws { try checkCrashRecovery() }

    /// The queue's database is in the rollback journal mode GRDB leaves it in (DELETE), and its
    /// connection is on the acsecure VFS.
    func testQueueUsesAcsecureAndARollbackJournal() throws {
        let queue = try DatabaseQueue(path: path("mode.sqlite"))
        try queue.write { db in try db.execute(sql: "CREATE TABLE t(x); INSERT INTO t VALUES (?)", arguments: [OnDisk.marker]) }
        let (mode, vfs) = try queue.read { db in
            (try String.fetchOne(db, sql: "PRAGMA journal_mode"), try Row.fetchAll(db, sql: "PRAGMA main.database_list").count)
        }
        XCTAssertEqual(mode, "delete")
        XCTAssertEqual(vfs, 1)
        if !Baseline.isPlainSQLite {
            let name = queue.inDatabase { db -> String? in
                var pointer: UnsafeMutablePointer<CChar>?
                guard sqlite3_file_control(db.sqliteConnection, "main", SQLITE_FCNTL_VFSNAME, &pointer) == SQLITE_OK, let pointer else { return nil }
                defer { sqlite3_free(pointer) }
                return String(cString: pointer)
            }
            XCTAssertEqual(name, ACSecureVFS.name)
        }
    }
}
