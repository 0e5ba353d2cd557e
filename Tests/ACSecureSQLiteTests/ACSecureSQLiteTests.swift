#if canImport(Glibc)
import Glibc
#endif
import Foundation
import XCTest
import ACSecureTestSupport
import CACSecureFile
import CACSystemSQLite
import CACSecureSQLite

/// The "acsecure" VFS used from Swift: the same statements as on SQLite's own VFS, and the file on
/// disk holds neither SQLite's header nor the rows. (scripts/test.d/25-sqlite.sh tests it from C:
/// several processes, SIGKILLed writers, the sqlite3 shell.)
final class ACSecureSQLiteTests: XCTestCase {
    private var temporary: TemporaryDirectory!
    private var directory: String { temporary.path }

    override func setUpWithError() throws {
        temporary = try TemporaryDirectory(prefix: "acsecure-sqlite")
        XCTAssertEqual(ACSecureServicesStart("sqlite-tests", directory + "/store"), 0, String(cString: strerror(errno)))
        XCTAssertEqual(ACSecureSQLiteRegister(0), SQLITE_OK)
    }

    override func tearDownWithError() throws {
        temporary = nil
    }

    private func open(_ name: String, vfs: String?) throws -> OpaquePointer {
        var db: OpaquePointer?
        let rc = sqlite3_open_v2(directory + "/" + name, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, vfs)
        guard rc == SQLITE_OK, let db else {
            defer { sqlite3_close(db) }
            throw NSError(domain: "sqlite", code: Int(rc), userInfo: [NSLocalizedDescriptionKey: String(cString: sqlite3_errmsg(db))])
        }
        return db
    }

    /// Runs `sql` and returns every row's columns as text ("NULL" for NULL).
    private func rows(_ db: OpaquePointer, _ sql: String) throws -> [[String]] {
        var out: [[String]] = []
        var rest = Array(sql.utf8CString)
        try rest.withUnsafeMutableBufferPointer { buf in
            var tail: UnsafePointer<CChar>? = UnsafePointer(buf.baseAddress!)
            while let start = tail, start.pointee != 0 {
                var stmt: OpaquePointer?
                guard sqlite3_prepare_v2(db, start, -1, &stmt, &tail) == SQLITE_OK else {
                    throw NSError(domain: "sqlite", code: 1, userInfo: [NSLocalizedDescriptionKey: String(cString: sqlite3_errmsg(db))])
                }
                guard let stmt else { continue }
                defer { sqlite3_finalize(stmt) }
                while true {
                    let rc = sqlite3_step(stmt)
                    if rc == SQLITE_DONE { break }
                    guard rc == SQLITE_ROW else {
                        throw NSError(domain: "sqlite", code: Int(rc), userInfo: [NSLocalizedDescriptionKey: String(cString: sqlite3_errmsg(db))])
                    }
                    out.append((0..<sqlite3_column_count(stmt)).map { i in
                        sqlite3_column_text(stmt, i).map { String(cString: $0) } ?? "NULL"
                    })
                }
            }
        }
        return out
    }

    func testSameResultsAsTheDefaultVFSAndNothingInTheClear() throws {
        let workload = """
            CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, n INTEGER);
            CREATE INDEX t_name ON t(name);
            WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 3000)
              INSERT INTO t(name, n) SELECT 'swift-row-' || i, i * 7 % 1000 FROM c;
            UPDATE t SET n = n + 1 WHERE id % 3 = 0;
            DELETE FROM t WHERE id % 11 = 0;
            """
        let query = "SELECT count(*), sum(n), min(name), max(name) FROM t; SELECT name FROM t WHERE n BETWEEN 10 AND 12 ORDER BY id; PRAGMA integrity_check;"
        let plain = try open("plain.db", vfs: nil)
        defer { sqlite3_close(plain) }
        let secure = try open("secure.db", vfs: "acsecure")
        _ = try rows(plain, workload)
        _ = try rows(secure, workload)
        let expected = try rows(plain, query)
        XCTAssertEqual(expected.last, ["ok"])
        XCTAssertEqual(try rows(secure, query), expected)
        XCTAssertEqual(sqlite3_close(secure), SQLITE_OK)

        let bytes = try Data(contentsOf: URL(fileURLWithPath: directory + "/secure.db"))
        XCTAssertGreaterThan(bytes.count, 3000 * 10)
        XCTAssertNil(bytes.range(of: Data("SQLite format 3".utf8)), "the database header is in the clear")
        XCTAssertNil(bytes.range(of: Data("swift-row-".utf8)), "row text is in the clear")
        let plainBytes = try Data(contentsOf: URL(fileURLWithPath: directory + "/plain.db"))
        XCTAssertNotNil(plainBytes.range(of: Data("swift-row-".utf8)), "the check itself finds row text in a plain database")

        let reopened = try open("secure.db", vfs: "acsecure")
        defer { sqlite3_close(reopened) }
        XCTAssertEqual(try rows(reopened, query), expected)
    }

    func testWALIsRefusedWithAMessage() throws {
        let db = try open("wal.db", vfs: "acsecure")
        defer { sqlite3_close(db) }
        XCTAssertThrowsError(try rows(db, "PRAGMA journal_mode=WAL")) { error in
            XCTAssertTrue("\(error)".contains("journal_mode=WAL is not supported"), "\(error)")
        }
        XCTAssertEqual(try rows(db, "PRAGMA journal_mode"), [["delete"]])
    }

    func testAPlainDatabaseIsNotOpenedAsSecure() throws {
        let plain = try open("plain.db", vfs: nil)
        _ = try rows(plain, "CREATE TABLE t(x); INSERT INTO t VALUES('clear');")
        sqlite3_close(plain)
        var db: OpaquePointer?
        let rc = sqlite3_open_v2(directory + "/plain.db", &db, SQLITE_OPEN_READWRITE, "acsecure")
        defer { sqlite3_close(db) }
        XCTAssertEqual(rc, SQLITE_NOTADB, String(cString: sqlite3_errmsg(db)))
    }
}
