import CACSecureSQLite
import Foundation
import GRDBSQLite

/// An error of this support module, with what went wrong in words.
public struct ACSecureGRDBError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// The acsecure VFS as GRDB gets it: SQLite's default VFS.
///
/// GRDB opens every connection with `sqlite3_open_v2(path, &db, flags, NULL)` (no VFS name, no URI),
/// so an app gets encrypted databases by making "acsecure" SQLite's default VFS before GRDB opens
/// anything: `ACSecureSQLiteRegister(1)`. A connection opened before that stays on the VFS it was
/// opened with. GRDB and the VFS share the process's one libsqlite3.so.0 (both link the system's).
public enum ACSecureVFS {
    public static let name = "acsecure"

    /// Registers the acsecure VFS as SQLite's default (once per process; later calls only report the
    /// first call's result) and checks that SQLite's default VFS is now acsecure.
    public static func makeDefault() throws {
        try registration.get()
    }

    private static let registration: Result<Void, ACSecureGRDBError> = {
        let rc = ACSecureSQLiteRegister(1)
        guard rc == SQLITE_OK else {
            return .failure(ACSecureGRDBError("ACSecureSQLiteRegister(1) failed with SQLite error \(rc)"))
        }
        guard defaultVFSName == name else {
            return .failure(ACSecureGRDBError("after ACSecureSQLiteRegister(1), SQLite's default VFS is \(defaultVFSName ?? "none"), not \(name)"))
        }
        return .success(())
    }()

    /// The name of SQLite's default VFS (the one GRDB's connections get).
    public static var defaultVFSName: String? {
        guard let vfs = sqlite3_vfs_find(nil), let name = vfs.pointee.zName else { return nil }
        return String(cString: name)
    }

    /// Whether the acsecure VFS lets a database into WAL mode, which DatabasePool needs.
    public enum WALSupport: Sendable, Equatable {
        case supported
        /// The journal mode was refused; the associated text is SQLite's message or the mode it kept.
        case refused(String)
    }

    /// Tries `PRAGMA journal_mode=WAL` on a new scratch database opened through "acsecure" by name
    /// (once per process). Throws if the scratch database cannot be created at all.
    public static func walSupport() throws -> WALSupport {
        try walProbe.get()
    }

    private static let walProbe: Result<WALSupport, ACSecureGRDBError> = {
        let directory: String
        do { directory = try TemporaryDirectory.make(prefix: "acsecure-wal-probe") } catch {
            return .failure(ACSecureGRDBError("WAL probe: \(error)"))
        }
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var db: OpaquePointer?
        defer { sqlite3_close(db) }
        let path = directory + "/probe.db"
        guard sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, name) == SQLITE_OK,
              sqlite3_exec(db, "CREATE TABLE probe(x)", nil, nil, nil) == SQLITE_OK else {
            return .failure(ACSecureGRDBError("WAL probe: cannot create \(path) through \(name): \(message(db))"))
        }
        var statement: OpaquePointer?
        defer { sqlite3_finalize(statement) }
        guard sqlite3_prepare_v2(db, "PRAGMA journal_mode=WAL", -1, &statement, nil) == SQLITE_OK else {
            return .success(.refused(message(db)))
        }
        switch sqlite3_step(statement) {
        case SQLITE_ROW:
            let mode = sqlite3_column_text(statement, 0).map { String(cString: $0) } ?? "NULL"
            return .success(mode.lowercased() == "wal" ? .supported : .refused("journal_mode stayed \(mode)"))
        default:
            return .success(.refused(message(db)))
        }
    }()

    private static func message(_ db: OpaquePointer?) -> String {
        db.flatMap { sqlite3_errmsg($0) }.map { String(cString: $0) } ?? "out of memory"
    }

    /// Secure services for a process that has none configured: when `ACSECURE_APP_ID` is unset, a
    /// new store in a temporary directory (`ACSECURE_HOME`, `ACSECURE_CREATE_STORE=1`), so that
    /// `swift test` in this package works on its own. Child processes inherit it. Returns the
    /// store's directory when it made one.
    @discardableResult
    public static func useTemporaryStoreIfNoneIsSet(appID: String) throws -> String? {
        if let configured = ProcessInfo.processInfo.environment["ACSECURE_APP_ID"], !configured.isEmpty { return nil }
        let store = try TemporaryDirectory.make(prefix: "acsecure-grdb-store")
        setenv("ACSECURE_HOME", store, 1)
        setenv("ACSECURE_APP_ID", appID, 1)
        setenv("ACSECURE_CREATE_STORE", "1", 1)
        temporaryStore = store
        atexit { if let store = temporaryStore { try? FileManager.default.removeItem(atPath: store) } }
        return store
    }
}

/// The store useTemporaryStoreIfNoneIsSet made (set once, before any test opens a database),
/// removed when the process exits.
nonisolated(unsafe) private var temporaryStore: String?

/// mkdtemp under $TMPDIR (or /tmp).
public enum TemporaryDirectory {
    public static func make(prefix: String) throws -> String {
        let base = ProcessInfo.processInfo.environment["TMPDIR"].flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
        var template = Array("\(base)/\(prefix).XXXXXX".utf8CString)
        guard let made = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
            throw ACSecureGRDBError("mkdtemp \(base)/\(prefix).XXXXXX: \(String(cString: strerror(errno)))")
        }
        return String(cString: made)
    }
}
