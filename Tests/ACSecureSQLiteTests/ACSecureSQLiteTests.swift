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
    private func rows(_ db: OpaquePointer, _ sql: String) throws -> [[String]] { try sqliteRows(db, sql) }

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

    /// WAL mode (issue 25): the -wal file is a secure file, the -shm index shared memory. Connections
    /// of one process: a reader keeps its snapshot while a writer commits, then sees the commit;
    /// every checkpoint mode works; wal_autocheckpoint and journal_size_limit bound the -wal;
    /// PERSIST_WAL keeps it at close; nothing of the rows is in the clear; the database reopens whole.
    func testWALModeWithConcurrentConnectionsOfOneProcess() throws {
        let path = directory + "/wal.db"
        let writer = try open("wal.db", vfs: "acsecure")
        XCTAssertEqual(try rows(writer, "PRAGMA journal_mode=WAL"), [["wal"]])
        _ = try rows(writer, """
            CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT);
            WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 500)
              INSERT INTO t(name) SELECT 'wal-row-' || i FROM c;
            """)
        XCTAssertTrue(FileManager.default.fileExists(atPath: path + "-wal"))
        XCTAssertTrue(FileManager.default.fileExists(atPath: path + "-shm"))
        let reader = try open("wal.db", vfs: "acsecure")
        _ = try rows(reader, "BEGIN; SELECT count(*) FROM t;")
        _ = try rows(writer, "INSERT INTO t(name) VALUES('wal-row-new'); UPDATE t SET name = name || '!' WHERE id <= 10;")
        XCTAssertEqual(try rows(reader, "SELECT count(*), sum(name LIKE '%!') FROM t"), [["500", "0"]], "the reader keeps its snapshot")
        _ = try rows(reader, "COMMIT")
        XCTAssertEqual(try rows(reader, "SELECT count(*), sum(name LIKE '%!') FROM t"), [["501", "10"]], "then sees the commit")
        for mode in ["PASSIVE", "FULL", "RESTART", "TRUNCATE"] {
            _ = try rows(writer, "INSERT INTO t(name) VALUES('ckpt-\(mode)')")
            let result = try rows(writer, "PRAGMA wal_checkpoint(\(mode))")
            XCTAssertEqual(result.first?.first, "0", "checkpoint \(mode) completes: \(result)")
        }
        // A connection that opens the -wal while it is empty (after the TRUNCATE checkpoint) learns its
        // page size once another connection has written the header (GRDB's pool readers: this failed
        // with "disk I/O error").
        let late = try open("wal.db", vfs: "acsecure")
        XCTAssertEqual(try rows(late, "SELECT count(*) FROM t"), [["505"]])
        _ = try rows(writer, "INSERT INTO t(name) VALUES('after-truncate')")
        XCTAssertEqual(try rows(late, "SELECT count(*) FROM t"), [["506"]])
        XCTAssertEqual(sqlite3_close(late), SQLITE_OK)
        XCTAssertEqual(try rows(writer, "PRAGMA wal_autocheckpoint=50; PRAGMA journal_size_limit=65536;"), [["50"], ["65536"]])
        _ = try rows(writer, "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 3000) INSERT INTO t(name) SELECT 'wal-bulk-' || i || hex(randomblob(50)) FROM c;")
        XCTAssertEqual(try rows(reader, "SELECT count(*) FROM t; PRAGMA integrity_check;"), [["3506"], ["ok"]])
        let walBytes = try Data(contentsOf: URL(fileURLWithPath: path + "-wal"))
        XCTAssertNil(walBytes.range(of: Data("wal-".utf8)), "row text in the -wal file")
        XCTAssertEqual(sqlite3_close(reader), SQLITE_OK)
        var persist: Int32 = 1
        XCTAssertEqual(sqlite3_file_control(writer, "main", SQLITE_FCNTL_PERSIST_WAL, &persist), SQLITE_OK)
        XCTAssertEqual(sqlite3_close(writer), SQLITE_OK)
        XCTAssertTrue(FileManager.default.fileExists(atPath: path + "-wal"), "PERSIST_WAL keeps the -wal file")
        let db = try open("wal.db", vfs: "acsecure")
        XCTAssertEqual(try rows(db, "PRAGMA journal_mode; SELECT count(*) FROM t; PRAGMA integrity_check;"), [["wal"], ["3506"], ["ok"]])
        XCTAssertEqual(sqlite3_close(db), SQLITE_OK)
        XCTAssertFalse(FileManager.default.fileExists(atPath: path + "-wal"), "the last connection checkpoints and removes the -wal file")
        XCTAssertFalse(FileManager.default.fileExists(atPath: path + "-shm"), "and the index")
        let bytes = try Data(contentsOf: URL(fileURLWithPath: path))
        XCTAssertNil(bytes.range(of: Data("SQLite format 3".utf8)))
        XCTAssertNil(bytes.range(of: Data("wal-row".utf8)))
    }

    /// A database of about 40 chunks, closed; returns its bytes on disk.
    private func makeDatabase(_ name: String) throws -> [UInt8] {
        let db = try open(name, vfs: "acsecure")
        _ = try rows(db, """
            CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT);
            WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 2500)
              INSERT INTO t(name) SELECT 'row-' || i || '-' || hex(randomblob(20)) FROM c;
            """)
        XCTAssertEqual(sqlite3_close(db), SQLITE_OK)
        return try XCTUnwrap(readBytes(directory + "/" + name))
    }

    private func readBytes(_ path: String) -> [UInt8]? { (try? Data(contentsOf: URL(fileURLWithPath: path))).map { [UInt8]($0) } }
    private func writeBytes(_ path: String, _ bytes: [UInt8]) throws { try Data(bytes).write(to: URL(fileURLWithPath: path)) }

    /// The code sqlite3_open_v2 gives for the database at `name` through acsecure (closing it).
    private func openCode(_ name: String) -> Int32 {
        var db: OpaquePointer?
        let rc = sqlite3_open_v2(directory + "/" + name, &db, SQLITE_OPEN_READWRITE, "acsecure")
        sqlite3_close(db)
        return rc
    }

    /// Issue 25: a database cut by whole on-disk chunks, to half, or into its trailer opened
    /// silently as a shorter database. Its end does not authenticate, so it is never read at the
    /// cut's length: the engine restores the end of its last sync from the tail copy (issue 24: a
    /// power loss leaves such ends; the VFS logs it), and SQLite either finds the database whole
    /// (cut into its last chunk or trailer: the copy holds them) or fails every query (cut deeper:
    /// the chunks the end needs are gone) — never a shorter table. Bytes appended after an
    /// authenticated end (what a crash in the middle of an extension leaves) are ignored and the
    /// database opens whole.
    func testADatabaseWhoseEndDoesNotAuthenticateIsNeverReadAtTheCut() throws {
        let original = try makeDatabase("cut.db")
        let physicalChunk = 4096 + 32
        XCTAssertGreaterThan(original.count, 30 * physicalChunk)
        let first = 128 + 2 * (64 + 4096 + 64)  // chunk 0: after the header and the two tail-copy slots
        let half = first + (original.count - first - 32) / physicalChunk / 2 * physicalChunk + 32
        for (cut, whole) in [(physicalChunk, false), (2 * physicalChunk, false), (original.count - half, false), (32, true), (1, true)] {
            let damaged = Array(original.prefix(original.count - cut))
            try writeBytes(directory + "/cut.db", damaged)
            let db = try open("cut.db", vfs: "acsecure")
            let result = try? rows(db, "SELECT count(*) FROM t; PRAGMA integrity_check;")
            sqlite3_close(db)
            if whole {
                XCTAssertEqual(result, [["2500"], ["ok"]], "cut by \(cut) bytes: restored whole from the tail copy")
            } else {
                XCTAssertNil(result, "cut by \(cut) bytes: every query fails")
            }
        }
        try writeBytes(directory + "/cut.db", original + [UInt8](repeating: 0xA5, count: 100))
        let db = try open("cut.db", vfs: "acsecure")
        defer { sqlite3_close(db) }
        XCTAssertEqual(try rows(db, "SELECT count(*) FROM t; PRAGMA integrity_check;"), [["2500"], ["ok"]])
    }

    /// Issue 25: a chunk that fails authentication (tampering) is SQLITE_IOERR_DATA, as SQLite's
    /// checksum VFS reports a page that fails its check, not SQLITE_IOERR_READ (a disk's error).
    func testAChunkThatFailsAuthenticationIsIOERR_DATA() throws {
        var bytes = try makeDatabase("flip.db")
        bytes[128 + 5 * (4096 + 32) + 100] ^= 0x01  // inside chunk 5's ciphertext
        try writeBytes(directory + "/flip.db", bytes)
        let db = try open("flip.db", vfs: "acsecure")
        defer { sqlite3_close(db) }
        XCTAssertThrowsError(try rows(db, "SELECT count(*), max(name) FROM t; PRAGMA integrity_check;"))
        // SQLITE_IOERR_DATA (sqlite3.h: SQLITE_IOERR | (32<<8), a macro Swift does not import).
        XCTAssertEqual(sqlite3_extended_errcode(db), SQLITE_IOERR | (32 << 8), String(cString: sqlite3_errmsg(db)))
    }

    /// A database file of 0 bytes (what a power loss before a new database's first sync can leave,
    /// or a cut to 0 bytes) is refused as not a database, never opened empty, and left as it is;
    /// once it is deleted, the same path is a new encrypted database.
    func testAnEmptyDatabaseFileIsRefusedAndLeftAsItIs() throws {
        let path = directory + "/empty.db"
        try writeBytes(path, [])
        var db: OpaquePointer?
        XCTAssertEqual(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, "acsecure"), SQLITE_NOTADB)
        sqlite3_close(db)
        XCTAssertEqual(readBytes(path), [])
        XCTAssertEqual(unlink(path), 0)
        let fresh = try open("empty.db", vfs: "acsecure")
        XCTAssertEqual(try rows(fresh, "CREATE TABLE t(x); INSERT INTO t VALUES (1); SELECT count(*) FROM t;"), [["1"]])
        XCTAssertEqual(sqlite3_close(fresh), SQLITE_OK)
        XCTAssertNotEqual(readBytes(path)?.prefix(16).map { $0 }, Array("SQLite format 3\0".utf8))
    }

    /// Issue 24 (a power loss tears PERSIST's rewrite of its journal): the torn chunks fail
    /// authentication, the VFS reads them as zeros, and SQLite's next transaction writes its
    /// records over them, ending inside one (records are a page + 8 bytes): a partial write of a
    /// damaged chunk, which the engine refuses. The VFS widens it to the whole chunk (the torn
    /// bytes as zeros), so the transaction commits as on a plain file ("disk I/O error" before).
    func testAPersistJournalWithTornChunksTakesTheNextTransaction() throws {
        let db = try open("persist.db", vfs: "acsecure")
        _ = try rows(db, """
            PRAGMA journal_mode=PERSIST;
            CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB);
            INSERT INTO t(v) VALUES (randomblob(3000)), (randomblob(3000)), (randomblob(3000));
            UPDATE t SET v = randomblob(3000);
            """)
        XCTAssertEqual(sqlite3_close(db), SQLITE_OK)
        let journal = directory + "/persist.db-journal"
        var bytes = try XCTUnwrap(readBytes(journal))
        let chunk0 = 128 + 2 * (4096 + 128)  // after the header and the two tail-copy slots
        XCTAssertGreaterThan(bytes.count, chunk0 + 5 * (4096 + 32), "the journal persists with its four records")
        // Chunks 1, 2 and 4, inside their ciphertext, as torn sectors leave them (not chunk 3 nor
        // the last: a sync's tail copy holds those, and the engine would restore the end from it).
        // The next transaction's journal (a header and three records, 16,408 bytes) ends in chunk 4.
        for chunk in [1, 2, 4] { bytes[chunk0 + chunk * (4096 + 32) + 16 + 1] ^= 0x40 }
        try writeBytes(journal, bytes)
        let again = try open("persist.db", vfs: "acsecure")
        defer { sqlite3_close(again) }
        XCTAssertEqual(try rows(again, """
            PRAGMA journal_mode=PERSIST;
            UPDATE t SET v = zeroblob(100) WHERE id <= 2;
            SELECT count(*), sum(length(v)) FROM t; PRAGMA integrity_check;
            """), [["persist"], ["3", "3200"], ["ok"]])
    }

    /// The file controls the unix VFS answers, answered the same way (issue 25): LAST_ERRNO,
    /// CHUNK_SIZE with SIZE_HINT (the file grows to the hint in whole chunks) and the rounding of
    /// later truncations, TEMPFILENAME, MMAP_SIZE (0: no mapping), EXTERNAL_READER (0 without WAL).
    func testFileControlsAreAnsweredAsTheUnixVFSAnswersThem() throws {
        for vfs in [nil, "acsecure"] {
            let name = vfs == nil ? "fc-plain.db" : "fc-secure.db"
            let db = try open(name, vfs: vfs)
            defer { sqlite3_close(db) }
            _ = try rows(db, "CREATE TABLE t(x); INSERT INTO t VALUES(randomblob(10000));")
            /// The file's length as SQLite's VFS sees it: the plaintext length for a secure file.
            func length() -> Int64 {
                var st = stat()
                if vfs == nil { return stat(directory + "/" + name, &st) == 0 ? Int64(st.st_size) : -1 }
                return ACSecureLstat(directory + "/" + name, &st) == 0 ? Int64(st.st_size) : -1
            }
            var errnoValue: Int32 = -1
            XCTAssertEqual(sqlite3_file_control(db, "main", SQLITE_FCNTL_LAST_ERRNO, &errnoValue), SQLITE_OK, "\(vfs ?? "unix")")
            XCTAssertEqual(errnoValue, 0)
            var hint: Int64 = 100_000
            let before = length()
            XCTAssertEqual(sqlite3_file_control(db, "main", SQLITE_FCNTL_SIZE_HINT, &hint), SQLITE_OK)
            XCTAssertEqual(length(), before, "\(vfs ?? "unix"): without a chunk size a size hint changes nothing")
            var chunk: Int32 = 65536
            XCTAssertEqual(sqlite3_file_control(db, "main", SQLITE_FCNTL_CHUNK_SIZE, &chunk), SQLITE_OK)
            _ = try rows(db, "BEGIN IMMEDIATE")
            hint = 100_000
            XCTAssertEqual(sqlite3_file_control(db, "main", SQLITE_FCNTL_SIZE_HINT, &hint), SQLITE_OK)
            _ = try rows(db, "COMMIT")
            XCTAssertEqual(length(), 131_072, "\(vfs ?? "unix"): the hint rounded up to whole chunks")
            _ = try rows(db, "INSERT INTO t VALUES(randomblob(200000)); DELETE FROM t; VACUUM;")
            XCTAssertEqual(length() % 65536, 0, "\(vfs ?? "unix"): a truncation keeps whole chunks")
            XCTAssertEqual(try rows(db, "PRAGMA integrity_check"), [["ok"]])
            var temporaryName: UnsafeMutablePointer<CChar>?
            XCTAssertEqual(sqlite3_file_control(db, "main", SQLITE_FCNTL_TEMPFILENAME, &temporaryName), SQLITE_OK)
            XCTAssertNotNil(temporaryName.map { String(cString: $0) }.flatMap { $0.hasPrefix("/") ? $0 : nil }, "\(vfs ?? "unix"): a temporary name")
            sqlite3_free(temporaryName)
            var mmap: Int64 = -1
            XCTAssertEqual(sqlite3_file_control(db, "main", SQLITE_FCNTL_MMAP_SIZE, &mmap), SQLITE_OK)
            if vfs != nil { XCTAssertEqual(mmap, 0, "acsecure never maps the file") }
            var reader: Int32 = -1
            XCTAssertEqual(sqlite3_file_control(db, "main", SQLITE_FCNTL_EXTERNAL_READER, &reader), SQLITE_OK)
            XCTAssertEqual(reader, 0)
        }
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
