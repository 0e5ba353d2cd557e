// swift-tools-version: 6.1
// Throughput of the engine at one commit (Swift API), for before/after comparisons of the format:
// `./run.sh BASE` builds this harness against BASE and against the working tree and interleaves them.
import PackageDescription
import Foundation

let root = ProcessInfo.processInfo.environment["ACSECURE_ROOT"] ?? "../.."
let package = Package(
    name: "FormatVersions",
    dependencies: [.package(name: "ACSecureFile", path: root)],
    targets: [.executableTarget(name: "format-bench", dependencies: [.product(name: "ACSecureFileKit", package: "ACSecureFile")])]
)
