#if canImport(Glibc)
import Glibc
#endif
import CACSystemSQLite

/// A failed SQLite call in these tests: its result code and SQLite's message.
struct SQLiteError: Error, CustomStringConvertible {
    var description: String
}

/// Runs every statement of `sql` on `db` and returns every row's columns as text ("NULL" for NULL).
func sqliteRows(_ db: OpaquePointer, _ sql: String) throws -> [[String]] {
    var out: [[String]] = []
    var rest = Array(sql.utf8CString)
    try rest.withUnsafeMutableBufferPointer { buf in
        var tail: UnsafePointer<CChar>? = UnsafePointer(buf.baseAddress!)
        while let start = tail, start.pointee != 0 {
            var stmt: OpaquePointer?
            guard sqlite3_prepare_v2(db, start, -1, &stmt, &tail) == SQLITE_OK else {
                throw SQLiteError(description: String(cString: sqlite3_errmsg(db)))
            }
            guard let stmt else { continue }
            defer { sqlite3_finalize(stmt) }
            while true {
                let rc = sqlite3_step(stmt)
                if rc == SQLITE_DONE { break }
                guard rc == SQLITE_ROW else { throw SQLiteError(description: "\(rc) " + String(cString: sqlite3_errmsg(db))) }
                out.append((0..<sqlite3_column_count(stmt)).map { sqlite3_column_text(stmt, $0).map { String(cString: $0) } ?? "NULL" })
            }
        }
    }
    return out
}
