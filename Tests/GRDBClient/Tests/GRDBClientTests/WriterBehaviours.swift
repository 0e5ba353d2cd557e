import ACSecureGRDBSupport
import Foundation
import GRDB
import XCTest

/// What an app does with GRDB, the same on a DatabaseQueue and a DatabasePool: the subclasses
/// (DatabaseQueueTests, DatabasePoolTests) say which writer `open` makes and run each check as a
/// test. No test method here, so XCTest does not run these for this class itself.
class WriterTestCase: ACSecureGRDBTestCase {
    /// "queue" or "pool" (CrashWorkload.openWriter, and the crash child's argument).
    var kind: String { fatalError("a subclass says which writer it tests") }

    func open(_ path: String, configuration: Configuration = Configuration()) throws -> any DatabaseWriter {
        try CrashWorkload.openWriter(kind: kind, path: path, configuration: configuration)
    }

    struct Abort: Error {}

    // MARK: - Migrations

    func checkMigrations() throws {
        let dbPath = path("app.sqlite")
        do {
            let writer = try open(dbPath)
            try AppSchema.migrator.migrate(writer, upTo: AppSchema.v2)
            try writer.read { db in
                XCTAssertEqual(try AppSchema.migrator.appliedMigrations(db), [AppSchema.v1, AppSchema.v2])
                XCTAssertFalse(try AppSchema.migrator.hasCompletedMigrations(db))
                XCTAssertEqual(try db.columns(in: "player").map(\.name), ["id", "teamId", "name", "score", "email"])
            }
        }
        // Reopened: the first two migrations are on disk; the third runs now.
        let writer = try open(dbPath)
        try writer.read { db in XCTAssertEqual(try AppSchema.migrator.appliedMigrations(db), [AppSchema.v1, AppSchema.v2]) }
        try AppSchema.migrator.migrate(writer)
        try writer.read { db in
            XCTAssertTrue(try AppSchema.migrator.hasCompletedMigrations(db))
            XCTAssertFalse(try AppSchema.migrator.hasSchemaChanges(db))
            XCTAssertEqual(try Team.order(Column("id")).fetchAll(db).map(\.id), [1, 2])
        }
        // A migration that fails is rolled back whole: its table and rows are not there.
        var broken = AppSchema.migrator
        broken.registerMigration("v4 broken") { db in
            try db.create(table: "scratch") { t in t.column("x", .text) }
            try db.execute(sql: "INSERT INTO scratch(x) VALUES (?)", arguments: [OnDisk.marker])
            try db.execute(sql: "INSERT INTO no_such_table VALUES (1)")
        }
        XCTAssertThrowsError(try broken.migrate(writer))
        try writer.read { db in
            XCTAssertFalse(try db.tableExists("scratch"))
            XCTAssertEqual(try AppSchema.migrator.appliedMigrations(db), [AppSchema.v1, AppSchema.v2, AppSchema.v3])
            XCTAssertEqual(try String.fetchAll(db, sql: "PRAGMA integrity_check"), ["ok"])
        }
        // Migrating again is a no-op; the foreign key of v1 holds.
        try AppSchema.migrator.migrate(writer)
        XCTAssertThrowsError(try writer.write { db in
            var orphan = Player(id: nil, teamId: 99, name: "orphan", score: 0, email: nil)
            try orphan.insert(db)
        }) { error in XCTAssertEqual((error as? DatabaseError)?.resultCode, .SQLITE_CONSTRAINT, "\(error)") }
    }

    // MARK: - Records and queries

    func checkRecordsAndQueries() throws {
        let dbPath = path("records.sqlite")
        let big = Data((0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 11) }) + Data(OnDisk.marker.utf8)
        do {
            let writer = try open(dbPath)
            try AppSchema.migrator.migrate(writer)
            let inserted = try writer.write { db in
                try AppSchema.makePlayers(0..<300).map { player in
                    var player = player
                    try player.insert(db)
                    return player
                }
            }
            XCTAssertEqual(inserted.compactMap(\.id), Array(1...300))
            try writer.write { db in
                try db.create(table: "attachment") { t in
                    t.autoIncrementedPrimaryKey("id")
                    t.column("data", .blob).notNull()
                }
                try db.execute(sql: "INSERT INTO attachment(data) VALUES (?)", arguments: [big])
            }
            try writer.read { db in
                XCTAssertEqual(try Player.fetchCount(db), 300)
                let top = try Player.filter(Player.Columns.score >= 150).order(Player.Columns.score.desc).limit(3).fetchAll(db)
                XCTAssertEqual(top.map(\.score), [299, 298, 297])
                XCTAssertEqual(try Player.find(db, key: 42).name, "\(OnDisk.marker) player 41")
                XCTAssertEqual(try Player.filter(Player.Columns.name.like("%player 1_")).fetchCount(db), 10)
                XCTAssertEqual(try Int.fetchOne(db, Player.select(sum(Player.Columns.score))), 299 * 300 / 2)
                let teams = try Team.including(all: Team.players.order(Player.Columns.score)).order(Column("id")).asRequest(of: TeamWithPlayers.self).fetchAll(db)
                XCTAssertEqual(teams.map { $0.players.count }, [150, 150])
                XCTAssertEqual(teams.first?.players.prefix(2).map(\.score), [0, 2])
                let rows = try Row.fetchAll(db, sql: "SELECT team.name, count(*) AS n FROM player JOIN team ON team.id = player.teamId GROUP BY team.id ORDER BY team.id")
                XCTAssertEqual(rows.map { $0["n"] as Int }, [150, 150])
            }
            try writer.write { db in
                var player = try Player.find(db, key: 1)
                player.score = 1000
                player.email = "changed@example.com"
                try player.update(db)
                XCTAssertEqual(try Player.filter(Player.Columns.score < 10).deleteAll(db), 9)
                XCTAssertEqual(try Player.filter(Player.Columns.teamId == 2).updateAll(db, Player.Columns.score += 1), 145)
            }
            // A unique constraint is enforced and reported as SQLITE_CONSTRAINT.
            XCTAssertThrowsError(try writer.write { db in try Team(id: 3, name: "\(OnDisk.marker) red").insert(db) }) { error in
                XCTAssertEqual((error as? DatabaseError)?.resultCode, .SQLITE_CONSTRAINT, "\(error)")
            }
        }
        // Everything is there after the writer is gone, read by a new one.
        let reader = try DatabaseQueue(path: dbPath)
        try reader.read { db in
            XCTAssertEqual(try Player.fetchCount(db), 291)
            XCTAssertEqual(try Player.find(db, key: 1).score, 1000)
            XCTAssertEqual(try Player.find(db, key: 1).email, "changed@example.com")
            XCTAssertEqual(try Player.find(db, key: 100).score, 100)  // score 99, team 2: + 1
            XCTAssertEqual(try Data.fetchOne(db, sql: "SELECT data FROM attachment"), big)
            XCTAssertEqual(try String.fetchAll(db, sql: "PRAGMA integrity_check"), ["ok"])
        }
        try reader.close()
        assertPlainSQLiteCannotRead(dbPath)
    }

    // MARK: - Transactions and rollback

    func checkTransactionsAndRollback() throws {
        var configuration = Configuration()
        // A small page cache: the large transaction below spills pages before it is rolled back.
        configuration.prepareDatabase { db in try db.execute(sql: "PRAGMA cache_size = 16") }
        let dbPath = path("transactions.sqlite")
        let writer = try open(dbPath, configuration: configuration)
        try AppSchema.migrator.migrate(writer)
        let names: @Sendable (Database) throws -> [String] = { db in try String.fetchAll(db, Player.select(Player.Columns.name).order(Player.Columns.name)) }
        func add(_ db: Database, _ name: String, score: Int = 0) throws {
            var player = Player(id: nil, teamId: 1, name: name, score: score, email: nil)
            try player.insert(db)
        }
        try writer.write { db in try add(db, "a") }

        // An error thrown out of write rolls its transaction back.
        XCTAssertThrowsError(try writer.write { db in try add(db, "thrown"); throw Abort() }) { XCTAssertTrue($0 is Abort) }
        // A transaction that returns .rollback.
        try writer.writeWithoutTransaction { db in
            try db.inTransaction { try add(db, "rolled back"); return .rollback }
        }
        // A savepoint rolled back inside a committed transaction; a released one kept.
        try writer.writeWithoutTransaction { db in
            try db.inTransaction {
                try add(db, "b")
                try db.inSavepoint { try add(db, "savepoint rolled back"); return .rollback }
                try db.inSavepoint { try add(db, "c"); return .commit }
                return .commit
            }
        }
        // A constraint failure in the middle: the whole write is rolled back.
        XCTAssertThrowsError(try writer.write { db in
            try add(db, "before the failure")
            try Team(id: 1, name: "duplicate id").insert(db)
        })
        // Explicit SQL.
        try writer.writeWithoutTransaction { db in
            try db.execute(sql: "BEGIN IMMEDIATE")
            try add(db, "explicit rollback")
            try db.execute(sql: "ROLLBACK")
            try db.execute(sql: "BEGIN")
            try add(db, "d")
            try db.execute(sql: "COMMIT")
        }
        XCTAssertEqual(try writer.read(names), ["a", "b", "c", "d"])

        // A large transaction (about 6 MB, far more than the page cache) rolled back.
        let payload = String(repeating: "\(OnDisk.marker) ", count: 180)
        XCTAssertThrowsError(try writer.write { db in
            for i in 0..<1500 { try add(db, "\(i) \(payload)", score: i) }
            XCTAssertEqual(try Player.fetchCount(db), 1504)
            throw Abort()
        })
        XCTAssertEqual(try writer.read(names), ["a", "b", "c", "d"])
        // The same, committed, then reopened.
        try writer.write { db in for i in 0..<1500 { try add(db, "big \(i) \(payload)", score: i) } }
        try writer.close()
        let reopened = try open(dbPath)
        try reopened.read { db in
            XCTAssertEqual(try Player.fetchCount(db), 1504)
            XCTAssertEqual(try String.fetchAll(db, sql: "PRAGMA integrity_check"), ["ok"])
        }
    }

    // MARK: - ValueObservation

    func checkValueObservation() throws {
        let writer = try open(path("observed.sqlite"))
        try AppSchema.migrator.migrate(writer)
        let queue = DispatchQueue(label: "observation")

        // The count of players, and the three best players (records).
        let counts = Recorder<Int>()
        let countObservation = ValueObservation.tracking { db in try Player.fetchCount(db) }.removeDuplicates()
        let countCancellable = countObservation.start(in: writer, scheduling: .async(onQueue: queue),
                                                      onError: { counts.record(error: $0) }, onChange: { counts.record($0) })
        let best = Recorder<[String]>()
        let bestObservation = ValueObservation.tracking { db in
            try String.fetchAll(db, Player.select(Player.Columns.name).order(Player.Columns.score.desc).limit(3))
        }.removeDuplicates()
        let bestCancellable = bestObservation.start(in: writer, scheduling: .async(onQueue: queue),
                                                    onError: { best.record(error: $0) }, onChange: { best.record($0) })
        defer { countCancellable.cancel(); bestCancellable.cancel() }

        func insert(_ names: [String], scores: [Int]) throws {
            try writer.write { db in
                for (name, score) in zip(names, scores) {
                    var player = Player(id: nil, teamId: 1, name: name, score: score, email: nil)
                    try player.insert(db)
                }
            }
        }
        func expect<V: Equatable>(_ recorder: Recorder<V>, _ expected: [V], line: UInt = #line) {
            let (values, errors) = recorder.wait(for: expected.count)
            XCTAssertTrue(errors.isEmpty, "observation failed: \(errors)", line: line)
            XCTAssertEqual(values, expected, line: line)
        }
        expect(counts, [0])
        expect(best, [[]])
        try insert(["p1"], scores: [10])
        expect(counts, [0, 1])
        // Both observers have the new state before the next write: a pool's observation may
        // coalesce changes that follow each other closely, and this test wants every state.
        expect(best, [[], ["p1"]])
        try insert(["p2", "p3"], scores: [30, 20])
        expect(counts, [0, 1, 3])
        expect(best, [[], ["p1"], ["p2", "p3", "p1"]])
        // A rolled back transaction and a write to a table nobody observes: no new value; the next
        // commit's value follows 3 directly.
        XCTAssertThrowsError(try writer.write { db in
            var player = Player(id: nil, teamId: 1, name: "never", score: 100, email: nil)
            try player.insert(db)
            throw Abort()
        })
        try writer.write { db in try db.execute(sql: "CREATE TABLE unrelated(x); INSERT INTO unrelated VALUES (1)") }
        try insert(["p4"], scores: [25])
        expect(counts, [0, 1, 3, 4])
        expect(best, [[], ["p1"], ["p2", "p3", "p1"], ["p2", "p4", "p3"]])
        // An update that changes the ranking.
        try writer.write { db in _ = try Player.filter(Player.Columns.name == "p1").updateAll(db, Player.Columns.score.set(to: 99)) }
        expect(best, [[], ["p1"], ["p2", "p3", "p1"], ["p2", "p4", "p3"], ["p1", "p2", "p4"]])
        XCTAssertEqual(counts.wait(for: 4, timeout: 0).values, [0, 1, 3, 4])
    }
}
