import Foundation

/// GRDB_CLIENT_VFS=unix runs the same tests on plain SQLite (the acsecure VFS not registered, the
/// on-disk checks off): a check of the tests themselves, DatabasePool's included while acsecure
/// refuses WAL. Any other value, or none, is the real run on acsecure.
public enum Baseline {
    public static var isPlainSQLite: Bool { ProcessInfo.processInfo.environment["GRDB_CLIENT_VFS"] == "unix" }
}
