// swift-tools-version: 6.1
// A real client on encrypted SQLite: GRDB.swift 7.10.0 (DatabaseQueue, and DatabasePool once the
// acsecure VFS provides WAL) with the acsecure VFS made SQLite's default VFS, checked for what an
// app relies on: migrations, records and queries, transactions and rollback, ValueObservation,
// crash recovery after SIGKILL, concurrent reads during writes and WAL checkpoints.
// Kept out of the root package's dependency graph (as Benchmarks/ is): scripts/test.d/55-grdb.sh
// builds it in the root's scratch path (.build), so the engine modules are not compiled twice.
import PackageDescription

let package = Package(
    name: "GRDBClient",
    dependencies: [
        // name: makes package: "ACSecureFile" work whatever the checkout's folder is called.
        .package(name: "ACSecureFile", path: "../.."),
        .package(url: "https://github.com/groue/GRDB.swift", exact: "7.10.0"),
    ],
    targets: [
        // Registering acsecure as SQLite's default VFS, the WAL probe, the on-disk checks, the schema.
        .target(name: "ACSecureGRDBSupport", dependencies: [
            .product(name: "ACSecureSQLite", package: "ACSecureFile"),
            .product(name: "GRDB", package: "GRDB.swift"),
            .product(name: "GRDBSQLite", package: "GRDB.swift"),
        ]),
        // The writer the crash-recovery tests SIGKILL in the middle of a transaction.
        .executableTarget(name: "grdb-crash-child", dependencies: [
            "ACSecureGRDBSupport",
            .product(name: "GRDB", package: "GRDB.swift"),
        ]),
        .testTarget(name: "GRDBClientTests", dependencies: [
            "ACSecureGRDBSupport",
            .product(name: "GRDB", package: "GRDB.swift"),
            .product(name: "GRDBSQLite", package: "GRDB.swift"),
        ]),
    ],
    swiftLanguageModes: [.v6]
)
