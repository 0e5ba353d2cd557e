#if canImport(Glibc)
import Glibc
#endif

/// The side-by-side comparison: plain POSIX I/O, OpenSSL's AES-256-GCM speed, the engine and
/// (when mounted) gocryptfs, measured in interleaved rounds on the same data, reported as ratios.
public enum Comparison {
    struct Options {
        var directory = "/tmp/acbench"
        var fileSize = 1 << 30
        var repetitions = 5
        var minSeconds = 0.5
        var gocryptfs: String?
        var output: String?
        var streamPasses = 4
        var opensslSeconds = 1
    }

    /// Entry point of both drivers. `engine` is the engine's backend and `engineLabel` says which
    /// API drives it; `startServices` starts secure services on a store in the given directory.
    /// `variants`: the engine opened in other modes ("engine-wb": write-back buffering,
    /// "engine-mp": coordinated multi-process mode), measured where their targets are.
    public static func main(engine: IOBackend, engineLabel: String, variants: [String: IOBackend] = [:],
                            startServices: (String) throws -> Void) {
        let args = Array(CommandLine.arguments.dropFirst())
        do {
            if args.first == "--stream-child" {
                try streamChild(args: Array(args.dropFirst()), engine: engine, startServices: startServices)
                return
            }
            var o = Options()
            var i = 0
            func value() throws -> String {
                i += 1
                guard i < args.count else { throw UsageError(description: "\(args[i - 1]) needs a value") }
                return args[i]
            }
            while i < args.count {
                switch args[i] {
                case "--dir": o.directory = try value()
                case "--size-mib": o.fileSize = (Int(try value()) ?? 1024) << 20
                case "--reps": o.repetitions = Int(try value()) ?? 5
                case "--min-seconds": o.minSeconds = Double(try value()) ?? 0.5
                case "--gocryptfs": o.gocryptfs = try value()
                case "--out": o.output = try value()
                case "--stream-passes": o.streamPasses = Int(try value()) ?? 4
                case "--smoke":
                    o.fileSize = 16 << 20; o.repetitions = 1; o.minSeconds = 0.02; o.streamPasses = 1
                default: throw UsageError(description: "unknown argument \(args[i])")
                }
                i += 1
            }
            try run(o, engine: engine, engineLabel: engineLabel, variants: variants, startServices: startServices)
        } catch {
            log("\(error)")
            exit(1)
        }
    }

    struct UsageError: Error, CustomStringConvertible { var description: String }

    static func run(_ o: Options, engine: IOBackend, engineLabel: String, variants: [String: IOBackend],
                    startServices: (String) throws -> Void) throws {
        for sub in ["plain", "engine", "store"] { makeDirectories(o.directory + "/" + sub) }
        try startServices(o.directory + "/store")
        var contenders = [Contender(name: "plain", backend: .posix, directory: o.directory + "/plain"),
                          Contender(name: "engine", backend: engine, directory: o.directory + "/engine")]
        if let g = o.gocryptfs { contenders.append(Contender(name: "gocryptfs", backend: .posix, directory: g)) }
        // The engine in its other modes, on the engine's files: only where a target names them.
        let writeBack = variants["engine-wb"].map { Contender(name: "engine-wb", backend: $0, directory: o.directory + "/engine") }
        let coordinated = variants["engine-mp"].map { Contender(name: "engine-mp", backend: $0, directory: o.directory + "/engine") }
        let w = Workloads(fileSize: o.fileSize, minSeconds: o.minSeconds)
        var results = Results()

        log("engine driven through \(engineLabel); file \(o.fileSize >> 20) MiB; \(o.repetitions) rounds; contenders: \(contenders.map(\.name).joined(separator: ", "))")
        // Warm-up (untimed): creates every contender's file and warms code paths and the page cache.
        for c in contenders {
            _ = try w.sequentialWrite(c, "data", callSize: 1 << 20)
            _ = try w.sequentialRead(c, "data", callSize: 1 << 20)
        }
        let sizes = [(4096, "4 KiB"), (65536, "64 KiB"), (1 << 20, "1 MiB")]
        for round in 1...o.repetitions {
            let t0 = now()
            // 1 MiB last: it writes the whole file, which the reads below need.
            for (size, label) in sizes {
                let cap = size < 1 << 20 ? 4 * o.minSeconds : .infinity
                for c in contenders { results.add("seqwrite \(label)", c.name, try w.sequentialWrite(c, "data", callSize: size, maxSeconds: cap)) }
            }
            for (size, label) in sizes {
                for c in contenders { results.add("seqread \(label)", c.name, try w.sequentialRead(c, "data", callSize: size)) }
            }
            for c in contenders + [coordinated].compactMap({ $0 }) { results.add("randread 4 KiB", c.name, try w.randomRead(c, "data")) }
            for c in contenders + [coordinated].compactMap({ $0 }) { results.add("randwrite 4 KiB", c.name, try w.randomWrite(c, "data")) }
            for size in [100, 512] {
                for c in contenders + [writeBack].compactMap({ $0 }) {
                    results.add("append \(size) B", c.name, try w.smallWrites(c, "log", callSize: size))
                }
            }
            for c in contenders.prefix(2) where c.backend.fsync != nil {
                // Three durability calls per sample, averaged: one fsync is too noisy alone.
                let rates = try (0..<3).map { _ in try w.fsyncAfterWriting(c, "sync", dirtyBytes: min(o.fileSize, 8 << 20)) }
                results.add("fsync 8 MiB", c.name, Double(rates.count) / rates.map { 1 / $0 }.reduce(0, +))
            }
            for bytes in [4096, 65536] {
                results.add("openssl \(bytes)", "openssl", try opensslSpeed(bytes: bytes, seconds: o.opensslSeconds))
            }
            log(fmt("round %d/%d done in %.1f s", round, o.repetitions, now() - t0))
        }
        // The engine file must read back intact after all that (a benchmark that corrupts data proves nothing).
        _ = try w.sequentialRead(contenders[1], "data", callSize: 1 << 20)

        let plainSize = try fileSize(contenders[0].path("data"))
        let engineSize = try fileSize(contenders[1].path("data"))
        results.overhead = Double(engineSize - plainSize) / Double(plainSize)
        for c in contenders { unlink(c.path("log")) }

        // Memory: a child process streams `streamPasses` × fileSize through each API; its peak RSS.
        for c in contenders.prefix(2) {
            results.peakRSS[c.name] = try streamPeakRSS(c.name, o)
        }
        let report = Report(results: results, options: o, engineLabel: engineLabel, hasGocryptfs: o.gocryptfs != nil,
                            variants: [writeBack, coordinated].compactMap { $0?.name })
        print(report.markdown())
        if let out = o.output {
            makeDirectories(out)
            try writeFile(out + "/results.md", report.markdown())
            try writeFile(out + "/ratios.dat", report.chartData())
        }
    }

    static func fileSize(_ path: String) throws -> Int64 {
        var st = stat()
        guard stat(path, &st) == 0 else { throw WorkloadError("stat", path) }
        return Int64(st.st_size)
    }

    /// `openssl speed -elapsed -evp aes-256-gcm -bytes N`: bytes/s.
    static func opensslSpeed(bytes: Int, seconds: Int) throws -> Double {
        let text = try runProcess(["/usr/bin/openssl", "speed", "-mr", "-elapsed", "-seconds", "\(seconds)", "-evp", "aes-256-gcm",
                                   "-bytes", "\(bytes)"], quietStderr: true).output
        guard let line = text.split(separator: "\n").first(where: { $0.hasPrefix("+F:") }),
              let rate = line.split(separator: ":").last.flatMap({ Double($0) }) else {
            throw UsageError(description: "cannot parse openssl speed output: \(text)")
        }
        return rate
    }

    /// Runs this executable again as a child that streams through one contender; returns its peak RSS (bytes).
    static func streamPeakRSS(_ name: String, _ o: Options) throws -> Int {
        let (output, status) = try runProcess([selfPath(), "--stream-child", name, o.directory, "\(o.fileSize)", "\(o.streamPasses)"])
        guard status == 0, let kib = Int(output.split(separator: "\n").last ?? "") else {
            throw UsageError(description: "stream child for \(name) failed")
        }
        return kib * 1024
    }

    /// The child: writes then reads `passes` × `size` bytes in 1 MiB calls through a file of `size`
    /// bytes (re-created each pass, so a 4 GiB stream needs only 1 GiB of disk), then prints its peak RSS (KiB).
    static func streamChild(args: [String], engine: IOBackend, startServices: (String) throws -> Void) throws {
        guard args.count == 4, let size = Int(args[2]), let passes = Int(args[3]) else { throw UsageError(description: "bad --stream-child") }
        let directory = args[1]
        let c: Contender
        if args[0] == "engine" {
            try startServices(directory + "/store")
            c = Contender(name: "engine", backend: engine, directory: directory + "/engine")
        } else {
            c = Contender(name: "plain", backend: .posix, directory: directory + "/plain")
        }
        let w = Workloads(fileSize: size, minSeconds: 0)
        for _ in 0..<passes { _ = try w.sequentialWrite(c, "stream", callSize: 1 << 20) }
        for _ in 0..<passes { _ = try w.sequentialRead(c, "stream", callSize: 1 << 20) }
        unlink(c.path("stream"))
        // VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the parent across exec.
        print(peakResidentKiB())
    }
}

/// Samples per (metric, contender).
struct Results {
    var samples: [String: [String: [Double]]] = [:]
    var order: [String] = []
    var overhead = 0.0
    var peakRSS: [String: Int] = [:]

    mutating func add(_ metric: String, _ contender: String, _ value: Double) {
        if samples[metric] == nil { order.append(metric) }
        samples[metric, default: [:]][contender, default: []].append(value)
    }

    func median(_ metric: String, _ contender: String) -> Double? {
        guard let s = samples[metric]?[contender], !s.isEmpty else { return nil }
        let v = s.sorted()
        return v.count % 2 == 1 ? v[v.count / 2] : (v[v.count / 2 - 1] + v[v.count / 2]) / 2
    }

    /// (max - min) / median: how disturbed the samples were.
    func spread(_ metric: String, _ contender: String) -> Double? {
        guard let s = samples[metric]?[contender], let m = median(metric, contender), s.count > 1, m > 0 else { return nil }
        return (s.max()! - s.min()!) / m
    }
}
