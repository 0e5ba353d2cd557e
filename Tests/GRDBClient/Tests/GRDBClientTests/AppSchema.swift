import ACSecureGRDBSupport
import Foundation
import GRDB

// An app's schema as GRDB apps write it: migrations, Codable records, an association.

struct Team: Codable, Equatable, FetchableRecord, PersistableRecord {
    var id: Int64
    var name: String
    static let players = hasMany(Player.self)
}

struct Player: Codable, Equatable, FetchableRecord, MutablePersistableRecord {
    var id: Int64?
    var teamId: Int64
    var name: String
    var score: Int
    var email: String?

    enum Columns {
        static let teamId = Column(CodingKeys.teamId)
        static let name = Column(CodingKeys.name)
        static let score = Column(CodingKeys.score)
    }
    static let team = belongsTo(Team.self)

    mutating func didInsert(_ inserted: InsertionSuccess) { id = inserted.rowID }
}

/// A team with its players, fetched in one request.
struct TeamWithPlayers: Decodable, FetchableRecord, Equatable {
    var team: Team
    var players: [Player]
}

enum AppSchema {
    static let v1 = "v1 team and player"
    static let v2 = "v2 player email"
    static let v3 = "v3 seed teams"

    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration(v1) { db in
            try db.create(table: "team") { t in
                t.primaryKey("id", .integer)
                t.column("name", .text).notNull().unique()
            }
            try db.create(table: "player") { t in
                t.autoIncrementedPrimaryKey("id")
                t.belongsTo("team", onDelete: .cascade).notNull()
                t.column("name", .text).notNull()
                t.column("score", .integer).notNull().indexed()
            }
        }
        migrator.registerMigration(v2) { db in
            try db.alter(table: "player") { t in t.add(column: "email", .text) }
        }
        migrator.registerMigration(v3) { db in
            try Team(id: 1, name: "\(OnDisk.marker) red").insert(db)
            try Team(id: 2, name: "\(OnDisk.marker) blue").insert(db)
        }
        return migrator
    }

    /// Players 0..<count, alternately in team 1 and 2, score i.
    static func makePlayers(_ range: Range<Int>) -> [Player] {
        range.map { i in
            Player(id: nil, teamId: Int64(i % 2 + 1), name: "\(OnDisk.marker) player \(i)", score: i,
                   email: i % 3 == 0 ? "p\(i)@example.com" : nil)
        }
    }
}
