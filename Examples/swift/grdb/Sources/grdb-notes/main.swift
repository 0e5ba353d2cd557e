import ACSecureServices
import CACSecureSQLite
import Foundation
import GRDB

struct Note: Codable, FetchableRecord, MutablePersistableRecord {
    var id: Int64?
    var body: String
    var createdAt: Date
    mutating func didInsert(_ inserted: InsertionSuccess) { id = inserted.rowID }
}

guard CommandLine.arguments.count == 3 else {
    print("usage: grdb-notes DATABASE NOTE")
    exit(2)
}
// Keys first: this app's secure services (store: $ACSECURE_HOME, else ~/.local/share/acsecure; created if missing).
SecureServices.current = try SecureServices(appID: "com.example.notes")
// Then, before GRDB opens anything, acsecure becomes SQLite's default VFS: every database GRDB opens is encrypted.
guard ACSecureSQLiteRegister(1) == 0 else { fatalError("cannot register the acsecure VFS") }

let dbQueue = try DatabaseQueue(path: CommandLine.arguments[1])
var migrator = DatabaseMigrator()
migrator.registerMigration("v1") { db in
    try db.create(table: "note") { t in
        t.autoIncrementedPrimaryKey("id")
        t.column("body", .text).notNull()
        t.column("createdAt", .datetime).notNull()
    }
}
try migrator.migrate(dbQueue)

try dbQueue.write { db in
    var note = Note(id: nil, body: CommandLine.arguments[2], createdAt: Date())
    try note.insert(db)
}
for note in try dbQueue.read({ db in try Note.order(Column("id")).fetchAll(db) }) {
    print("\(note.id!): \(note.body)")
}
