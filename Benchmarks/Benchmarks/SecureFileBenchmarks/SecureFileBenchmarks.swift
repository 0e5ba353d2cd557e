#if canImport(Glibc)
import Glibc
#endif
import ACSecureFileCore
import ACSecureServices
import Benchmark

// The engine through its Swift API, per operation: wall clock, throughput and malloc counts.
// Sequential benchmarks move one 16 MiB file per iteration (4096 chunks of 4 KiB): a malloc count
// far below 4096 per iteration means the data path does not allocate per chunk. Per-call
// benchmarks use a scaling factor of 1000, so their figures are per call.
//
// Run: `cd Benchmarks && swift package benchmark` (see docs/BENCHMARKS.md).

/// Everything the benchmarks share: a store, a scratch directory and the data files.
final class Fixture: @unchecked Sendable {
    static let shared = Fixture()

    let directory: String
    let services: SecureServices
    let source: UnsafeMutableRawBufferPointer
    let sink: UnsafeMutableRawBufferPointer
    let streamSize = 16 << 20
    let largeSize: Int64 = 64 << 20
    var offsets: [Int64] = []

    private init() {
        var template = Array("/tmp/acsecure-bench.XXXXXX".utf8CString)
        guard mkdtemp(&template) != nil else { fatalError("mkdtemp failed") }
        directory = String(decoding: template.dropLast().map { UInt8(bitPattern: $0) }, as: UTF8.self)
        do { services = try SecureServices(appID: "bench", storeDirectory: directory + "/store") } catch {
            fatalError("secure services: \(error)")
        }
        source = .allocate(byteCount: 1 << 20, alignment: 4096)
        sink = .allocate(byteCount: 1 << 20, alignment: 4096)
        var x: UInt64 = 0x2545_F491_4F6C_DD1D
        for i in stride(from: 0, to: source.count, by: 8) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17
            source.storeBytes(of: x, toByteOffset: i, as: UInt64.self)
        }
        offsets = (0..<4096).map { _ in
            x ^= x << 13; x ^= x >> 7; x ^= x << 17
            return Int64(x % UInt64(largeSize / 4096)) * 4096
        }
        // The large file, for reads, random I/O, open, rewrap.
        writeFile("large", bytes: Int(largeSize), callSize: 1 << 20)
        writeFile("stream", bytes: streamSize, callSize: 1 << 20)
        writeFile("small", bytes: 1024, callSize: 1024)
        atexit { Fixture.removeTree(Fixture.shared.directory) }
    }

    /// Deletes the scratch directory (files and the store) when the benchmark process exits.
    static func removeTree(_ path: String) {
        if let d = opendir(path) {
            while let e = readdir(d) {
                let name = withUnsafeBytes(of: e.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
                if name == "." || name == ".." { continue }
                let child = path + "/" + name
                if unlink(child) != 0 { removeTree(child) }
            }
            closedir(d)
        }
        rmdir(path)
    }

    func path(_ name: String) -> String { directory + "/" + name }

    func open(_ name: String, _ flags: Int32, partialOverwrites: SecureFile.PartialOverwrites = .chunkCopy,
              wholeChunkOverwrites: SecureFile.WholeChunkOverwrites = .chunkCopy) -> SecureFile {
        do {
            return try SecureFile.open(path(name), flags: flags, mode: 0o600, services: services, partialOverwrites: partialOverwrites,
                                       wholeChunkOverwrites: wholeChunkOverwrites)
        } catch {
            fatalError("open \(name): \(error)")
        }
    }

    /// Measures `count`-byte `pwrite`s through `f` at the random chunk offsets plus `into`, then the
    /// close (which belongs to the cost).
    func randomPwrites(_ benchmark: Benchmark, _ f: SecureFile, count: Int, into: Int64) throws {
        benchmark.startMeasurement()
        for i in benchmark.scaledIterations {
            blackHole(try f.pwrite(UnsafeRawBufferPointer(start: source.baseAddress! + (i & 255) * count, count: count),
                                   at: offsets[i & 4095] + into))
        }
        try f.close()
        benchmark.stopMeasurement()
    }

    func writeFile(_ name: String, bytes: Int, callSize: Int) {
        let f = open(name, O_WRONLY | O_CREAT | O_TRUNC)
        var done = 0
        while done < bytes {
            let n = min(callSize, bytes - done)
            _ = try! f.write(UnsafeRawBufferPointer(start: source.baseAddress! + (done & (source.count - 1) & ~(callSize - 1)), count: n))
            done += n
        }
        try! f.close()
    }

    func readFile(_ name: String, callSize: Int) -> Int {
        let f = open(name, O_RDONLY)
        var total = 0
        while true {
            let n = try! f.read(into: UnsafeMutableRawBufferPointer(start: sink.baseAddress!, count: callSize))
            if n == 0 { break }
            total += n
        }
        try! f.close()
        return total
    }
}

let benchmarks: @Sendable () -> Void = {
    let fx = Fixture.shared
    let metrics: [BenchmarkMetric] = [.wallClock, .throughput, .mallocCountTotal, .peakMemoryResident]
    Benchmark.defaultConfiguration = .init(metrics: metrics, warmupIterations: 2,
                                           maxDuration: .seconds(2), maxIterations: 200)
    let perCall = Benchmark.Configuration(metrics: metrics, scalingFactor: .kilo, maxDuration: .seconds(2), maxIterations: 200)

    for (callSize, label) in [(4096, "4 KiB"), (65536, "64 KiB"), (1 << 20, "1 MiB")] {
        Benchmark("Sequential write, 16 MiB file, \(label) calls") { _ in
            fx.writeFile("seq", bytes: fx.streamSize, callSize: callSize)
        }
        Benchmark("Sequential read, 16 MiB file, \(label) calls") { _ in
            blackHole(fx.readFile("stream", callSize: callSize))
        }
    }

    Benchmark("Random 4 KiB pread, 64 MiB file", configuration: perCall) { benchmark in
        let f = fx.open("large", O_RDONLY)
        benchmark.startMeasurement()
        for i in benchmark.scaledIterations {
            blackHole(try f.pread(into: UnsafeMutableRawBufferPointer(start: fx.sink.baseAddress!, count: 4096),
                                  at: fx.offsets[i & 4095]))
        }
        benchmark.stopMeasurement()
        try f.close()
    }

    // A whole chunk (a page): its chunk copy first (the default: a kill never tears it), or in place
    // (what the SQLite VFS asks for; docs/FORMAT.md "Whole chunks").
    for (wholeChunkOverwrites, label) in [(SecureFile.WholeChunkOverwrites.chunkCopy, ""), (.inPlace, ", whole chunks in place")] {
        Benchmark("Random 4 KiB pwrite, 64 MiB file\(label)", configuration: perCall) { benchmark in
            // close writes nothing here (whole chunks bypass the cache) but belongs to the cost
            try fx.randomPwrites(benchmark, fx.open("large", O_RDWR, wholeChunkOverwrites: wholeChunkOverwrites), count: 4096, into: 0)
        }
    }

    // A chunk rewritten in part: a chunk copy first (the default), or double writes (the copy and
    // the rewrite each on the device before the next step: two fdatasyncs; docs/FORMAT.md "Double write").
    for (partialOverwrites, label) in [(SecureFile.PartialOverwrites.chunkCopy, "chunk copy"), (.doubleWrite, "double writes")] {
        Benchmark("Random 100-byte pwrite inside a chunk, 64 MiB file, \(label)", configuration: perCall) { benchmark in
            try fx.randomPwrites(benchmark, fx.open("large", O_RDWR, partialOverwrites: partialOverwrites), count: 100, into: 1000)
        }
    }

    for recordSize in [100, 512] {
        Benchmark("Sequential \(recordSize)-byte writes (log appends)", configuration: perCall) { benchmark in
            let f = fx.open("log", O_WRONLY | O_CREAT | O_TRUNC)
            benchmark.startMeasurement()
            for i in benchmark.scaledIterations {
                blackHole(try f.write(UnsafeRawBufferPointer(start: fx.source.baseAddress! + (i & 1023) * recordSize, count: recordSize)))
            }
            try f.close()
            benchmark.stopMeasurement()
        }
    }

    for (name, label) in [("large", "64 MiB"), ("small", "1 KiB")] {
        Benchmark("open + close, \(label) file") { benchmark in
            for _ in benchmark.scaledIterations {
                try fx.open(name, O_RDONLY).close()
            }
        }
    }

    Benchmark("fstat, 64 MiB file", configuration: perCall) { benchmark in
        let f = fx.open("large", O_RDONLY)
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations { blackHole(try f.stat().st_size) }
        benchmark.stopMeasurement()
        try f.close()
    }

    Benchmark("truncate: cut 100 bytes off a 64 MiB file and grow it back") { benchmark in
        let f = fx.open("large", O_RDWR)
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations {
            try f.truncate(to: fx.largeSize - 100)
            try f.truncate(to: fx.largeSize)
        }
        benchmark.stopMeasurement()
        try f.close()
    }

    Benchmark("Small file: create, write 1 KiB, close; open, read, close") { benchmark in
        for _ in benchmark.scaledIterations {
            fx.writeFile("tiny", bytes: 1024, callSize: 1024)
            blackHole(fx.readFile("tiny", callSize: 4096))
        }
    }

    // Re-sharing rewrites the 128-byte header (and fsyncs): the cost must not depend on the size.
    for (name, label) in [("large", "64 MiB"), ("small", "1 KiB")] {
        Benchmark("Re-share (rewrap app → group → app), \(label) file") { benchmark in
            for _ in benchmark.scaledIterations {
                try SecureFileSystem.rewrap(fx.path(name), from: .app, to: .group("bench.group"), services: fx.services)
                try SecureFileSystem.rewrap(fx.path(name), from: .group("bench.group"), to: .app, services: fx.services)
            }
        }
    }
}
