// swift-tools-version: 6.1
// Benchmarks for the secure file engine, kept out of the library's own dependency graph
// (as swift-nio and swift-crypto do): `swift package benchmark` runs the package-benchmark suite,
// `./compare.sh` runs the side-by-side comparison against plain I/O, OpenSSL and gocryptfs.
import PackageDescription

let package = Package(
    name: "ACSecureFileBenchmarks",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(name: "ACSecureFile", path: ".."),
        .package(url: "https://github.com/ordo-one/benchmark", from: "1.38.1", traits: ["MallocInterposer"]),
    ],
    targets: [
        // package-benchmark suite (Swift API): throughput, latency and malloc counts per operation.
        .executableTarget(
            name: "SecureFileBenchmarks",
            dependencies: [
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "ACSecureFileKit", package: "ACSecureFile"),
            ],
            path: "Benchmarks/SecureFileBenchmarks",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ),
        // The comparison's workloads, timing and report; engine-independent.
        .target(name: "CompareCore"),
        // The C API's variadic open, called from C.
        .target(name: "CCompareCAPI", dependencies: [.product(name: "ACSecureFile", package: "ACSecureFile")]),
        // The comparison with the engine driven through the C API (libACSecureFile.so).
        .executableTarget(name: "ac-compare", dependencies: [
            "CompareCore", "CCompareCAPI", .product(name: "ACSecureFile", package: "ACSecureFile"),
        ]),
        // The same comparison with the engine driven through the Swift API (fallback).
        .executableTarget(name: "ac-compare-swift", dependencies: [
            "CompareCore", .product(name: "ACSecureFileKit", package: "ACSecureFile"),
        ]),
    ],
    swiftLanguageModes: [.v6]
)
