import Foundation
import GRDB

/// What the crash child (grdb-crash-child) writes and the crash-recovery tests check afterwards.
///
/// Each transaction `seq` inserts rows (seq, n, payload(seq, n)) for n in 0..<count: a small one
/// `smallRows` rows of `smallPayload` bytes, the big one (killed before it commits) rows of
/// `bigPayload` bytes until the process dies. So after any crash every seq in the table has exactly
/// `smallRows` rows with the right payloads, or the transaction is not there at all.
public enum CrashWorkload {
    public static let smallRows = 5
    public static let smallPayload = 1500
    public static let bigPayload = 4000
    /// The child says "inside SEQ" once the big transaction has this many rows (over 1 MiB: past a
    /// 1 MiB write cache and SQLite's small page cache, so pages reached the database file).
    public static let bigRowsBeforeAnnouncing = 400

    public static func createSchema(_ db: Database) throws {
        try db.execute(sql: """
            CREATE TABLE IF NOT EXISTS entry(id INTEGER PRIMARY KEY, seq INTEGER NOT NULL, n INTEGER NOT NULL, payload BLOB NOT NULL);
            CREATE INDEX IF NOT EXISTS entry_seq ON entry(seq);
            """)
    }

    /// The payload of row n of transaction seq: the marker, then bytes that depend on seq and n.
    public static func payload(seq: Int, n: Int, size: Int) -> Data {
        var bytes = [UInt8]("\(OnDisk.marker) seq \(seq) n \(n) ".utf8)
        var x = UInt64(truncatingIfNeeded: seq &* 1_000_003 &+ n &* 7919 &+ 1)
        while bytes.count < size {
            x = x &* 6364136223846793005 &+ 1442695040888963407
            bytes.append(UInt8(truncatingIfNeeded: x >> 33))
        }
        return Data(bytes.prefix(size))
    }

    /// Opens the writer the child and the checks use: a DatabaseQueue, or a DatabasePool (WAL).
    public static func openWriter(kind: String, path: String, configuration: Configuration = Configuration()) throws -> any DatabaseWriter {
        switch kind {
        case "queue": return try DatabaseQueue(path: path, configuration: configuration)
        case "pool": return try DatabasePool(path: path, configuration: configuration)
        default: throw ACSecureGRDBError("unknown writer kind \(kind) (queue or pool)")
        }
    }
}
