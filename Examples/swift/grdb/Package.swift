// swift-tools-version: 6.1
// grdb-notes: a GRDB.swift app whose database is encrypted by the acsecure VFS (README, "GRDB").
//     swift run --package-path Examples/swift/grdb grdb-notes notes.db "buy milk"
import PackageDescription

let package = Package(
    name: "grdb-notes",
    dependencies: [
        // name: lets package: "ACSecureFile" find the products whatever the checkout's folder is called.
        .package(name: "ACSecureFile", path: "../../.."),
        .package(url: "https://github.com/groue/GRDB.swift", exact: "7.10.0"),
    ],
    targets: [
        .executableTarget(name: "grdb-notes", dependencies: [
            .product(name: "ACSecureSQLite", package: "ACSecureFile"),   // the acsecure VFS (module CACSecureSQLite)
            .product(name: "ACSecureFileKit", package: "ACSecureFile"),  // SecureServices
            .product(name: "GRDB", package: "GRDB.swift"),
        ]),
    ],
    swiftLanguageModes: [.v6]
)
