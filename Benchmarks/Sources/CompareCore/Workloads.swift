#if canImport(Glibc)
import Glibc
#endif

/// Monotonic seconds.
@inline(__always) func now() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Double(ts.tv_sec) + Double(ts.tv_nsec) * 1e-9
}

struct WorkloadError: Error, CustomStringConvertible {
    var description: String
    init(_ what: String, _ path: String) { description = "\(what) \(path): \(String(cString: strerror(errno)))" }
}

/// The workloads. Each returns a rate (bytes/s or operations/s) and is run, in turn, by every
/// contender on its own copy of the same data.
struct Workloads {
    let source: UnsafeMutableRawBufferPointer
    let sink: UnsafeMutableRawBufferPointer
    let fileSize: Int
    let minSeconds: Double
    /// Chunk-aligned 4 KiB offsets inside the file, the same sequence for every contender.
    let offsets: [Int64]

    init(fileSize: Int, minSeconds: Double) {
        self.fileSize = fileSize
        self.minSeconds = minSeconds
        source = .allocate(byteCount: 1 << 20, alignment: 4096)
        sink = .allocate(byteCount: 1 << 20, alignment: 4096)
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        func next() -> UInt64 {  // SplitMix64: deterministic, identical for every contender
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
        for i in stride(from: 0, to: source.count, by: 8) { source.storeBytes(of: next(), toByteOffset: i, as: UInt64.self) }
        let blocks = UInt64(max(1, fileSize / 4096))
        offsets = (0..<65536).map { _ in Int64(next() % blocks) * 4096 }
    }

    /// The most a small-writes sample writes: write-back appends ran at 0.5–1 GB/s, and samples of
    /// that much spread ±30 % (plain's ±2–6 %), where 100 MB rounds of the same calls in
    /// Benchmarks/c/writeback-append.c spread ±2 % (docs/BENCHMARKS.md, stop 44).
    static let smallWritesBytes = 128 << 20

    /// Before a timed write: deletes the old file (untimed). Truncating or overwriting pages that are
    /// still being written back to the device waits for the device, which would measure the disk
    /// (and whoever else is using it), not the I/O path.
    func removeUntimed(_ path: String) { unlink(path) }

    /// After a timed write and before timed in-place writes: flushes the file (untimed), so the next
    /// timed write neither finds pages under writeback nor is throttled by the dirty-page limits for
    /// data a previous contender left behind.
    func settleUntimed(_ path: String) {
        let fd = Glibc.open(path, O_RDONLY)
        if fd >= 0 { fsync(fd); Glibc.close(fd) }
    }

    /// Creates the file and writes `fileSize` bytes in calls of `callSize`; close included.
    /// With `maxSeconds`, stops early once that much time has passed (slow contenders at small call
    /// sizes would otherwise take minutes); the file is then shorter.
    func sequentialWrite(_ c: Contender, _ file: String, callSize: Int, maxSeconds: Double = .infinity) throws -> Double {
        let b = c.backend, path = c.path(file)
        removeUntimed(path)
        let t0 = now()
        let fd = b.open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        guard fd >= 0 else { throw WorkloadError("open", path) }
        var done = 0
        while done < fileSize {
            let n = min(callSize, fileSize - done)
            let src = source.baseAddress! + (done & (source.count - 1) & ~(callSize - 1))
            guard b.write(fd, src, n) == n else { throw WorkloadError("write", path) }
            done += n
            if done & ((64 * callSize) - 1) == 0, now() - t0 > maxSeconds { break }
        }
        guard b.close(fd) == 0 else { throw WorkloadError("close", path) }
        let rate = Double(done) / (now() - t0)
        settleUntimed(path)
        return rate
    }

    /// Reads the whole file in calls of `callSize`; open and close included.
    func sequentialRead(_ c: Contender, _ file: String, callSize: Int) throws -> Double {
        let b = c.backend, path = c.path(file)
        let t0 = now()
        let fd = b.open(path, O_RDONLY, 0)
        guard fd >= 0 else { throw WorkloadError("open", path) }
        var total = 0
        while true {
            let n = b.read(fd, sink.baseAddress!, callSize)
            guard n >= 0 else { throw WorkloadError("read", path) }
            if n == 0 { break }
            total += n
        }
        guard b.close(fd) == 0 else { throw WorkloadError("close", path) }
        let dt = now() - t0
        guard total == fileSize else { throw WorkloadError("short file (\(total) bytes)", path) }
        return Double(total) / dt
    }

    /// 4 KiB preads at random chunk-aligned offsets, for at least `minSeconds`. Operations/s.
    func randomRead(_ c: Contender, _ file: String) throws -> Double {
        let b = c.backend, path = c.path(file)
        let fd = b.open(path, O_RDONLY, 0)
        guard fd >= 0 else { throw WorkloadError("open", path) }
        defer { _ = b.close(fd) }
        var ops = 0
        let t0 = now()
        var dt = 0.0
        repeat {
            for k in 0..<256 {
                let off = offsets[(ops + k) & (offsets.count - 1)]
                guard b.pread(fd, sink.baseAddress!, 4096, off_t(off)) == 4096 else { throw WorkloadError("pread", path) }
            }
            ops += 256
            dt = now() - t0
        } while dt < minSeconds
        return Double(ops) / dt
    }

    /// 4 KiB pwrites at random chunk-aligned offsets of the existing file, for at least `minSeconds`
    /// (close included, so a write-back cache is paid for). Operations/s.
    func randomWrite(_ c: Contender, _ file: String) throws -> Double {
        let b = c.backend, path = c.path(file)
        settleUntimed(path)
        let t0 = now()
        let fd = b.open(path, O_RDWR, 0)
        guard fd >= 0 else { throw WorkloadError("open", path) }
        var ops = 0
        repeat {
            for k in 0..<256 {
                let off = offsets[(ops + k) & (offsets.count - 1)]
                let src = source.baseAddress! + ((ops + k) & 255) * 4096
                guard b.pwrite(fd, src, 4096, off_t(off)) == 4096 else { throw WorkloadError("pwrite", path) }
            }
            ops += 256
        } while now() - t0 < minSeconds
        guard b.close(fd) == 0 else { throw WorkloadError("close", path) }
        return Double(ops) / (now() - t0)
    }

    /// Appends `callSize`-byte records (a log) to a new file for at least `minSeconds`, or until
    /// `smallWritesBytes` are written; close included. Bytes/s. For plain I/O this is unbuffered
    /// write(2): one system call per record.
    func smallWrites(_ c: Contender, _ file: String, callSize: Int) throws -> Double {
        let b = c.backend, path = c.path(file)
        removeUntimed(path)
        let t0 = now()
        let fd = b.open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        guard fd >= 0 else { throw WorkloadError("open", path) }
        var calls = 0
        repeat {
            for k in 0..<256 {
                let src = source.baseAddress! + ((calls + k) & 1023) * callSize
                guard b.write(fd, src, callSize) == callSize else { throw WorkloadError("write", path) }
            }
            calls += 256
        } while now() - t0 < minSeconds && calls * callSize < Self.smallWritesBytes
        guard b.close(fd) == 0 else { throw WorkloadError("close", path) }
        let rate = Double(calls * callSize) / (now() - t0)
        settleUntimed(path)
        return rate
    }

    /// Writes `dirtyBytes` in 1 MiB calls to a new file (untimed), pauses 20 ms (untimed), then times
    /// only the durability call: fsync(2) for plain files, ACSecureFileFsync for the engine. Calls/s.
    ///
    /// The pause gives both the same state before the call: fsync's time depends on what the
    /// process did just before, not only on the dirty data. Plain fsync(2) took 3.5 % longer after
    /// writes spaced by 0.3 ms of busy work (as the engine's sealing spaces them) than after
    /// back-to-back writes, and the engine/plain ratio spread 1.03-1.22 over rounds without the
    /// pause, 1.00-1.16 with it (Benchmarks/c/fsync-timing.c, docs/benchmarks/stop21/fsync-timing.txt).
    func fsyncAfterWriting(_ c: Contender, _ file: String, dirtyBytes: Int) throws -> Double {
        let b = c.backend, path = c.path(file)
        guard let sync = b.fsync else { throw WorkloadError("no fsync in this API for", path) }
        removeUntimed(path)
        let fd = b.open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        guard fd >= 0 else { throw WorkloadError("open", path) }
        var done = 0
        while done < dirtyBytes {
            let n = min(1 << 20, dirtyBytes - done)
            guard b.write(fd, source.baseAddress!, n) == n else { throw WorkloadError("write", path) }
            done += n
        }
        usleep(20_000)
        let t0 = now()
        guard sync(fd) == 0 else { throw WorkloadError("fsync", path) }
        let dt = now() - t0
        guard b.close(fd) == 0 else { throw WorkloadError("close", path) }
        unlink(path)
        return 1 / dt
    }
}
