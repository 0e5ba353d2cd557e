import Foundation
import GRDBSQLite

/// What is on disk next to a database: every file must be encrypted.
public enum OnDisk {
    /// The text every test writes into its databases (names, payloads): it must never be on disk.
    public static let marker = "GRDB-CLIENT-PLAINTEXT"

    /// The problems found in the files of `directory` (the database, its -journal, -wal, -shm and
    /// -aclock): the marker anywhere, a database or journal that starts like a plain SQLite one
    /// ("SQLite format 3", the rollback journal's magic, the WAL's magic). Also returns the files
    /// checked, so a caller can require that the database was there.
    public static func plaintextProblems(in directory: String) throws -> (checked: [String], problems: [String]) {
        let marker = Data(Self.marker.utf8)
        let sqliteHeader = Data("SQLite format 3\0".utf8)
        let journalMagic = Data([0xd9, 0xd5, 0x05, 0xf9, 0x20, 0xa1, 0x63, 0xd7])
        let walMagics = [Data([0x37, 0x7f, 0x06, 0x82]), Data([0x37, 0x7f, 0x06, 0x83])]
        var checked: [String] = []
        var problems: [String] = []
        for name in try FileManager.default.contentsOfDirectory(atPath: directory).sorted() {
            let path = directory + "/" + name
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), !isDirectory.boolValue else { continue }
            let data = try Data(contentsOf: URL(fileURLWithPath: path))
            checked.append(name)
            if data.range(of: marker) != nil { problems.append("\(name): the plaintext \(Self.marker) is on disk") }
            if data.starts(with: sqliteHeader) { problems.append("\(name): starts with \"SQLite format 3\" (a plain database)") }
            if data.starts(with: journalMagic) { problems.append("\(name): starts with the rollback journal's magic (a plain journal)") }
            if walMagics.contains(where: { data.starts(with: $0) }) { problems.append("\(name): starts with the WAL magic (a plain WAL)") }
        }
        return (checked, problems)
    }

    /// What plain SQLite (the "unix" VFS) says when it reads the database: the encrypted file must
    /// not be a database to it (SQLITE_NOTADB). Returns nil when that is so, else what happened.
    public static func plainSQLiteProblem(reading path: String) -> String? {
        var db: OpaquePointer?
        defer { sqlite3_close(db) }
        guard sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, "unix") == SQLITE_OK else {
            return "plain SQLite could not even open \(path): \(db.flatMap { sqlite3_errmsg($0) }.map { String(cString: $0) } ?? "?")"
        }
        let rc = sqlite3_exec(db, "SELECT count(*) FROM sqlite_schema", nil, nil, nil)
        return rc == SQLITE_NOTADB ? nil : "plain SQLite read \(path) with result \(rc), expected SQLITE_NOTADB (26)"
    }
}
