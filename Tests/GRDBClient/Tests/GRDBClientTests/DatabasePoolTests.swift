import ACSecureGRDBSupport
import Foundation
import GRDB
import XCTest

/// Throws XCTSkip when the acsecure VFS refuses WAL (tried once per process on a scratch database:
/// ACSecureVFS.walSupport), so these tests turn on by themselves once it provides WAL.
private func skipUnlessWAL() throws {
    try ACSecureVFS.useTemporaryStoreIfNoneIsSet(appID: "grdb-client-tests")
    guard !Baseline.isPlainSQLite else { return }
    try ACSecureVFS.makeDefault()
    if case .refused(let reason) = try ACSecureVFS.walSupport() {
        throw XCTSkip("DatabasePool: skipped, the acsecure VFS refuses WAL (\(reason))")
    }
}

/// GRDB's DatabasePool (WAL: one writer, concurrent readers) on acsecure: the same behaviours as
/// the queue, and what only a pool does.
final class DatabasePoolTests: WriterTestCase {
    override var kind: String { "pool" }

    override func setUpWithError() throws {
        try skipUnlessWAL()
        try super.setUpWithError()
    }

    func testMigrations() throws { try checkMigrations() }
    func testRecordsAndQueries() throws { try checkRecordsAndQueries() }
    func testTransactionsAndRollback() throws { try checkTransactionsAndRollback() }
    func testValueObservation() throws { try checkValueObservation() }
    func testCrashRecovery() throws { try checkCrashRecovery() }

    /// Readers are not blocked by the writer and see committed states only.
    func testConcurrentReadsDuringWrites() throws {
        let pool = try DatabasePool(path: path("concurrent.sqlite"))
        try pool.write { db in
            try db.execute(sql: "CREATE TABLE account(id INTEGER PRIMARY KEY, owner TEXT NOT NULL, balance INTEGER NOT NULL)")
            try db.execute(sql: "CREATE TABLE progress(done INTEGER NOT NULL)")
            try db.execute(sql: "INSERT INTO progress VALUES (0)")
            for id in 0..<10 {
                try db.execute(sql: "INSERT INTO account VALUES (?, ?, 100)", arguments: [id, "\(OnDisk.marker) \(id)"])
            }
        }
        let sum: @Sendable (Database) throws -> Int = { db in try Int.fetchOne(db, sql: "SELECT sum(balance) FROM account") ?? -1 }

        // 1. A read while a write transaction is open returns at once, with the last committed state.
        let inTransaction = DispatchSemaphore(value: 0)
        let readDone = DispatchSemaphore(value: 0)
        let writerWaited = Recorder<Bool>()
        let writerDone = DispatchSemaphore(value: 0)
        let writerThread = Thread {
            defer { writerDone.signal() }
            do {
                try pool.write { db in
                    try db.execute(sql: "UPDATE account SET balance = balance + 50 WHERE id = 0")
                    inTransaction.signal()
                    // The reader must finish while this transaction is open.
                    writerWaited.record(readDone.wait(timeout: .now() + 20) == .success)
                }
            } catch {
                writerWaited.record(error: error)
            }
        }
        writerThread.start()
        XCTAssertEqual(inTransaction.wait(timeout: .now() + 20), .success)
        let during = try pool.read(sum)
        readDone.signal()
        XCTAssertEqual(writerDone.wait(timeout: .now() + 30), .success)
        let (waited, errors) = writerWaited.wait(for: 1, timeout: 0)
        XCTAssertTrue(errors.isEmpty, "\(errors)")
        XCTAssertEqual(waited, [true], "the read did not return while the writer held its transaction")
        XCTAssertEqual(during, 1000, "the read saw the uncommitted transaction")
        XCTAssertEqual(try pool.read(sum), 1050)

        // 2. A read transaction is a snapshot: a commit made meanwhile on another thread is not in it.
        try pool.read { db in
            let before = try sum(db)
            let committed = DispatchSemaphore(value: 0)
            Thread {
                try? pool.write { db in try db.execute(sql: "UPDATE account SET balance = balance + 1 WHERE id = 1") }
                committed.signal()
            }.start()
            XCTAssertEqual(committed.wait(timeout: .now() + 20), .success)
            XCTAssertEqual(try sum(db), before)
        }
        XCTAssertEqual(try pool.read(sum), 1051)

        // 3. Two reader threads while the writer commits 200 transfers: every read sees the same
        //    total, and the readers see the transfers progress.
        let finished = Recorder<Bool>()
        let observed = Recorder<Int>()  // the progress counter each read saw
        let readerEnded = DispatchSemaphore(value: 0)
        let readers = (0..<2).map { _ in
            Thread {
                defer { readerEnded.signal() }
                do {
                    while finished.wait(for: 1, timeout: 0).values.isEmpty {
                        let (total, done) = try pool.read { db in (try sum(db), try Int.fetchOne(db, sql: "SELECT done FROM progress") ?? -1) }
                        if total != 1051 { observed.record(error: ACSecureGRDBError("a read saw the total \(total) at progress \(done)")) }
                        observed.record(done)
                    }
                } catch {
                    observed.record(error: error)
                }
            }
        }
        readers.forEach { $0.start() }
        for transfer in 1...200 {
            try pool.write { db in
                let from = transfer % 10, to = (transfer * 7 + 3) % 10
                try db.execute(sql: "UPDATE account SET balance = balance - 7 WHERE id = ?", arguments: [from])
                try db.execute(sql: "UPDATE account SET balance = balance + 7 WHERE id = ?", arguments: [to])
                try db.execute(sql: "UPDATE progress SET done = ?", arguments: [transfer])
            }
        }
        finished.record(true)
        for _ in readers { XCTAssertEqual(readerEnded.wait(timeout: .now() + 20), .success) }
        let (seen, readErrors) = observed.wait(for: Int.max, timeout: 0)
        XCTAssertTrue(readErrors.isEmpty, "\(readErrors)")
        XCTAssertGreaterThan(Set(seen).count, 2, "the readers saw no progress while the writer committed: \(Set(seen).sorted())")
        XCTAssertEqual(try pool.read(sum), 1051)

        // 4. asyncConcurrentRead: a read of the state the writer just committed, while the writer goes on.
        let concurrent = Recorder<Int>()
        try pool.writeWithoutTransaction { db in
            try db.execute(sql: "UPDATE progress SET done = 1000")
            pool.asyncConcurrentRead { result in
                do {
                    concurrent.record(try Int.fetchOne(try result.get(), sql: "SELECT done FROM progress") ?? -1)
                } catch {
                    concurrent.record(error: error)
                }
            }
            try db.execute(sql: "UPDATE progress SET done = 2000")
        }
        let (concurrentValues, concurrentErrors) = concurrent.wait(for: 1)
        XCTAssertTrue(concurrentErrors.isEmpty, "\(concurrentErrors)")
        XCTAssertEqual(concurrentValues, [1000])
        XCTAssertEqual(try pool.read { db in try Int.fetchOne(db, sql: "SELECT done FROM progress") }, 2000)
    }

    /// Checkpoints: passive, blocked by a reader on an older snapshot, truncate, automatic; the
    /// database reopens with everything in it.
    func testWALCheckpoints() throws {
        let dbPath = path("wal.sqlite")
        let body = String(repeating: "\(OnDisk.marker) ", count: 40)
        func insert(_ pool: DatabasePool, _ range: Range<Int>) throws {
            try pool.write { db in
                for i in range { try db.execute(sql: "INSERT INTO item(id, body) VALUES (?, ?)", arguments: [i, "\(i) \(body)"]) }
            }
        }
        do {
            let pool = try DatabasePool(path: dbPath)
            XCTAssertEqual(try pool.read { db in try String.fetchOne(db, sql: "PRAGMA journal_mode") }, "wal")
            try pool.write { db in try db.execute(sql: "CREATE TABLE item(id INTEGER PRIMARY KEY, body TEXT NOT NULL)") }
            try insert(pool, 0..<300)
            XCTAssertTrue(FileManager.default.fileExists(atPath: dbPath + "-wal"))

            // Passive: every frame is copied into the database.
            let passive = try pool.writeWithoutTransaction { db in try db.checkpoint(.passive) }
            XCTAssertGreaterThan(passive.walFrameCount, 0)
            XCTAssertEqual(passive.checkpointedFrameCount, passive.walFrameCount)

            // A reader on an older snapshot holds back the frames written after it.
            let readerIn = DispatchSemaphore(value: 0)
            let release = DispatchSemaphore(value: 0)
            let readerCounts = Recorder<Int>()
            let readerDone = DispatchSemaphore(value: 0)
            let reader = Thread {
                defer { readerDone.signal() }
                do {
                    try pool.read { db in
                        readerCounts.record(try Int.fetchOne(db, sql: "SELECT count(*) FROM item") ?? -1)
                        readerIn.signal()
                        _ = release.wait(timeout: .now() + 30)
                        readerCounts.record(try Int.fetchOne(db, sql: "SELECT count(*) FROM item") ?? -1)
                    }
                } catch {
                    readerCounts.record(error: error)
                }
            }
            reader.start()
            XCTAssertEqual(readerIn.wait(timeout: .now() + 20), .success)
            try insert(pool, 300..<400)
            let held = try pool.writeWithoutTransaction { db in try db.checkpoint(.passive) }
            XCTAssertLessThan(held.checkpointedFrameCount, held.walFrameCount, "a checkpoint copied frames a reader's older snapshot excludes")
            XCTAssertThrowsError(try pool.writeWithoutTransaction { db in try db.checkpoint(.truncate) }) { error in
                XCTAssertEqual((error as? DatabaseError)?.resultCode, .SQLITE_BUSY, "\(error)")
            }
            release.signal()
            XCTAssertEqual(readerDone.wait(timeout: .now() + 20), .success)
            XCTAssertEqual(readerCounts.wait(for: 2, timeout: 0).values, [300, 300], "the reader's snapshot changed under it")

            // Truncate, once no reader is behind: the WAL is empty.
            let truncated = try pool.writeWithoutTransaction { db in try db.checkpoint(.truncate) }
            XCTAssertEqual(truncated.walFrameCount, 0)
            XCTAssertEqual(truncated.checkpointedFrameCount, 0)

            // Automatic checkpoints (every 1000 frames by default) keep the WAL from growing: 40
            // transactions of about 50 pages each leave far fewer frames than were written.
            for batch in 0..<40 { try insert(pool, (1000 + batch * 200)..<(1000 + (batch + 1) * 200)) }
            let after = try pool.writeWithoutTransaction { db in try db.checkpoint(.passive) }
            XCTAssertLessThan(after.walFrameCount, 1500, "no automatic checkpoint restarted the WAL")
            if checksFilesOnDisk {
                let (checked, problems) = try OnDisk.plaintextProblems(in: directory)
                XCTAssertTrue(problems.isEmpty, "with the pool open: \(problems)")
                XCTAssertTrue(checked.contains("wal.sqlite-wal"), "\(checked)")
            }
            try pool.close()
        }
        // Reopened by a DatabaseQueue: still WAL (persistent), everything there.
        let queue = try DatabaseQueue(path: dbPath)
        try queue.read { db in
            XCTAssertEqual(try String.fetchOne(db, sql: "PRAGMA journal_mode"), "wal")
            XCTAssertEqual(try Int.fetchOne(db, sql: "SELECT count(*) FROM item"), 400 + 40 * 200)
            XCTAssertEqual(try String.fetchAll(db, sql: "PRAGMA integrity_check"), ["ok"])
        }
    }
}

/// While the acsecure VFS refuses WAL, DatabasePool fails to open with the VFS's message (an error,
/// no crash), and the database is still usable by a DatabaseQueue. Skipped once WAL is provided.
final class DatabasePoolWithoutWALTests: ACSecureGRDBTestCase {
    override func setUpWithError() throws {
        guard !Baseline.isPlainSQLite else { throw XCTSkip("plain SQLite provides WAL") }
        try ACSecureVFS.useTemporaryStoreIfNoneIsSet(appID: "grdb-client-tests")
        try ACSecureVFS.makeDefault()
        guard case .refused = try ACSecureVFS.walSupport() else { throw XCTSkip("the acsecure VFS provides WAL: DatabasePoolTests run") }
        try super.setUpWithError()
    }

    func testDatabasePoolOpenFailsCleanlyWhileWALIsRefused() throws {
        let dbPath = path("pool.sqlite")
        XCTAssertThrowsError(try DatabasePool(path: dbPath)) { error in
            XCTAssertTrue("\(error)".contains("journal_mode=WAL is not supported"), "\(error)")
        }
        let queue = try DatabaseQueue(path: dbPath)
        try AppSchema.migrator.migrate(queue)
        try queue.read { db in
            XCTAssertEqual(try String.fetchOne(db, sql: "PRAGMA journal_mode"), "delete")
            XCTAssertEqual(try Team.fetchCount(db), 2)
        }
    }
}
