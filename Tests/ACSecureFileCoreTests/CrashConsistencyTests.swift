#if canImport(Glibc)
import Glibc
#endif
import XCTest
import ACSecureTestSupport
import ACSecureServices
@testable import ACSecureFileCore

/// What a secure file may contain after a crash or a failed system call: the state of the last
/// successful fsync, plus the operations started after it (each may or may not have reached the disk).
///
/// The rule checked, chunk by chunk: a chunk no operation touched since the last fsync reads back
/// exactly as it was synced; a chunk that was touched either reads as it was in one of the states
/// between the fsync and the last operation started, or fails with ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR.
/// Wrong bytes are never acceptable, and the file always opens.
struct ConsistencyOracle {
    static let chunk = 4096
    private(set) var model: [UInt8] = []
    private(set) var synced: [UInt8] = []
    /// The synced state and the state after each operation started since.
    private(set) var candidates: [[UInt8]] = [[]]
    private(set) var dirty = Set<Int>()

    private mutating func touch(_ from: Int, _ to: Int) {
        guard to > from else { return }
        for c in (from / Self.chunk)...((to - 1) / Self.chunk) { dirty.insert(c) }
    }

    /// An operation was started: pwrite of `data` at `offset`.
    mutating func write(_ data: [UInt8], at offset: Int) {
        guard !data.isEmpty else { return }
        touch(min(offset, model.count), offset + data.count)
        if model.count < offset + data.count { model += [UInt8](repeating: 0, count: offset + data.count - model.count) }
        model.replaceSubrange(offset..<offset + data.count, with: data)
        candidates.append(model)
    }

    /// An operation was started: ftruncate to `length`.
    mutating func truncate(_ length: Int) {
        touch(min(length, model.count), max(length, model.count) + 1)
        if length < model.count { model.removeLast(model.count - length) } else { model += [UInt8](repeating: 0, count: length - model.count) }
        candidates.append(model)
    }

    /// Chunks whose content is no longer predictable (written after an operation of uncertain effect):
    /// they may read anything or fail; the caller checks what it wrote there itself.
    private(set) var unknown = Set<Int>()
    mutating func forget(_ range: Range<Int>) {
        for c in (range.lowerBound / Self.chunk)...((range.upperBound - 1) / Self.chunk) { unknown.insert(c); dirty.insert(c) }
    }

    /// fsync returned success.
    mutating func didSync() {
        synced = model
        candidates = [model]
        dirty.removeAll()
    }

    private func chunkBytes(_ state: [UInt8], _ c: Int) -> ArraySlice<UInt8> {
        let start = min(state.count, c * Self.chunk)
        return state[start..<min(state.count, start + Self.chunk)]
    }

    /// Checks the file at `path` through `services` (which must not have it open). Returns the problems.
    func verify(path: String, services: any KeyProvider, label: String) -> [String] {
        let file: SecureFile
        do { file = try SecureFile.open(path, flags: O_RDONLY, services: services) } catch {
            return ["\(label): the file does not open: \(error.code.name) \(error.message)"]
        }
        defer { try? file.close() }
        var problems: [String] = []
        let size: Int
        do { size = Int(try file.size) } catch { return ["\(label): no size: \(error.message)"] }
        let chunks = max(size, synced.count + Self.chunk - 1) / Self.chunk + 1
        for c in 0..<chunks {
            var buf = [UInt8](repeating: 0, count: Self.chunk)
            do {
                let n = try buf.withUnsafeMutableBytes { try file.pread(into: $0, at: Int64(c * Self.chunk)) }
                let got = buf[0..<n]
                if unknown.contains(c) {
                    // Checked by the caller.
                } else if !dirty.contains(c) {
                    if got != chunkBytes(synced, c) {
                        problems.append("\(label): chunk \(c) (not written since the last fsync) reads \(n) bytes that differ from the synced \(chunkBytes(synced, c).count) bytes (size \(size), synced \(synced.count))")
                    }
                } else if !candidates.contains(where: { chunkBytes($0, c) == got }) {
                    problems.append("\(label): chunk \(c) reads \(n) bytes that match no state since the last fsync (size \(size))")
                }
            } catch let e as SecureFileError {
                if e.code != .badKeyOrCorruptData {
                    problems.append("\(label): chunk \(c): unexpected error \(e.code.name) errno \(e.errno): \(e.message)")
                } else if !dirty.contains(c) {
                    problems.append("\(label): chunk \(c), not written since the last fsync, is unreadable: \(e.message) (size \(size), synced \(synced.count), dirty \(dirty.sorted()))")
                }
            } catch {
                problems.append("\(label): chunk \(c): \(error)")
            }
            if problems.count > 3 { break }
        }
        return problems
    }
}

/// A child process writes to a secure file and is SIGKILLed at random points; after each kill the
/// file must open and every synced byte must read back (ConsistencyOracle's rule).
final class CrashConsistencyTests: XCTestCase {
    struct Child { var pid: pid_t; var out: Int32 }

    func spawnChild(store: String, file: String, seed: UInt64, operations: Int) throws -> Child {
        let (pid, out) = try spawnCrashChild([store, file, String(seed), String(operations)])
        return Child(pid: pid, out: out)
    }

    /// Reads lines from the child until `stop` says so (or end of output). Returns all lines read.
    func readLines(_ fd: Int32, pending: inout [UInt8], stop: (String) -> Bool) -> [String] {
        var lines: [String] = []
        var buf = [UInt8](repeating: 0, count: 4096)
        while true {
            while let nl = pending.firstIndex(of: 10) {
                let line = String(decoding: pending[..<nl], as: UTF8.self)
                pending.removeSubrange(...nl)
                lines.append(line)
                if stop(line) { return lines }
            }
            let n = buf.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n <= 0 { return lines }
            pending += buf[0..<n]
        }
    }

    /// Applies the child's protocol lines to the oracle.
    func apply(_ line: String, to oracle: inout ConsistencyOracle) {
        let f = line.split(separator: " ")
        switch f.first {
        case "W":
            let k = Int(f[1])!, off = Int(f[2])!, n = Int(f[3])!
            oracle.write(crashPatternBytes(k, n), at: off)
        case "T": oracle.truncate(Int(f[2])!)
        case "S": oracle.didSync()
        case "E": XCTFail("child error: \(line)")
        default: break
        }
    }

    /// SIGKILL cannot tear a single pwrite(2) on a local file system, but a power cut can: simulate it.
    /// For every pwrite of the fault workload and several prefix lengths, only a prefix reaches the
    /// file and the process "dies" there (the handle is abandoned, the disk is read by independent
    /// state). The torn chunk may fail; every chunk not written since the last fsync must read back.
    func testTornWritesAtEveryPwriteKeepOtherChunksReadable() throws {
        let env = try TestEnvironment()
        let counting = FaultPlan(target: nil, index: 0, fault: .fail(EIO))
        SecureFileTesting.faultInjector = { counting.decide($0) }
        _ = FaultInjectionTests.runWorkload(path: env.path("count"), services: env.services)
        SecureFileTesting.faultInjector = nil
        let pwrites = counting.counts.calls[.pwrite, default: 0]
        XCTAssertGreaterThan(pwrites, 5)
        var torn = 0
        // The "crashed" handles stay open and untouched until the end: closing one would flush its
        // cache, which a crashed process never does. Each check reads through fresh services, so no
        // in-process shared state of the crashed writer is seen.
        var abandoned: [SecureFile] = []
        defer { withExtendedLifetime(abandoned) {} }
        func freshServices() throws -> SecureServices {
            try SecureServices(appID: "com.example.tests", storeDirectory: env.directory + "/store", argonCost: .minimum)
        }
        for index in 0..<pwrites {
            for prefix in [1, 15, 16, 17, 100, 4095, 4096, 4112, 4128, 4129, 5000, 8256] {
                let independent = try freshServices()
                let path = env.path("torn-\(index)-\(prefix)")
                let plan = FaultPlan(target: .pwrite, index: index, fault: .short(prefix), then: .fail(EIO))
                SecureFileTesting.faultInjector = { plan.decide($0) }
                let r = FaultInjectionTests.runWorkload(path: path, services: env.services)
                SecureFileTesting.faultInjector = nil
                if let f = r.file { abandoned.append(f) }
                guard r.error != nil else { continue }  // the write was shorter than the prefix: not torn
                torn += 1
                let label = "pwrite#\(index) torn after \(prefix) bytes in \(r.failedStep ?? "")"
                if r.failedStep == "open(create)" {
                    // A torn header of a new, empty file: the file may fail to open, but it held no data.
                    unlink(path)
                    continue
                }
                let problems = r.oracle.verify(path: path, services: independent, label: label)
                if !problems.isEmpty { XCTFail(problems.joined(separator: "\n")) }
                // Recovery: the next writer (new state) can write, sync and read everything back.
                var oracle = r.oracle
                do {
                    let f = try SecureFile.open(path, flags: O_RDWR, services: independent)
                    let size = try f.size
                    let data = [UInt8](repeating: 0xCD, count: 5000)
                    oracle.forget(Int(size)..<(Int(size) + 5000))
                    try f.pwrite(data, at: size)
                    try f.sync()
                    try f.close()
                    var physical = stat()
                    _ = lstat(path, &physical)
                    let g = try SecureFile.open(path, flags: O_RDONLY, services: try freshServices())
                    let back = try g.pread(count: 5000, at: size)
                    let reopenedSize = try g.size
                    try g.close()
                    if back != data {
                        XCTFail("\(label): 5000 bytes appended at \(size) and synced read back as \(back.count) other bytes; size after reopen \(reopenedSize), physical \(physical.st_size)")
                    }
                } catch let e as SecureFileError {
                    // Appending past a corrupt tail needs the tail: a clean corrupt-data error is acceptable.
                    XCTAssertEqual(e.code, .badKeyOrCorruptData, "\(label): recovery append: \(e.code.name) \(e.message)")
                }
                let after = oracle.verify(path: path, services: try freshServices(), label: label + " (after a later append)")
                if !after.isEmpty { XCTFail(after.joined(separator: "\n")) }
                unlink(path)
                if testRun?.failureCount ?? 0 > 5 { return }
            }
        }
        print("CrashConsistency: \(torn) torn writes simulated")
    }

    /// An append to a file whose size is a multiple of the chunk size writes the new chunk over the
    /// old trailer. Torn after a few bytes, the synced chunks before it must still read.
    ///
    /// Regression for a bug found here: torn within its first bytes, such an append destroyed the
    /// only valid trailer and the last synced chunk became unreadable. The engine now writes the part
    /// beyond the old end (with the new trailer) first, and recovers the last valid end on open.
    func testTornAppendAtAChunkBoundaryKeepsSyncedChunksReadable() throws {
        // Regression: a torn append used to destroy the only valid trailer, making the last synced
        // chunk unreadable. Extensions are now written beyond the old end first.
        let env = try TestEnvironment()
        var rng = SplitMix64(seed: 42)
        var abandoned: [SecureFile] = []
        defer { withExtendedLifetime(abandoned) {} }
        for prefix in [1, 16, 20, 31, 32, 33, 40, 100, 4000, 4128, 4150] {
            let path = env.path("append-\(prefix)")
            var oracle = ConsistencyOracle()
            let base = randomBytes(3 * 4096, &rng)
            let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services)
            abandoned.append(f)
            oracle.write(base, at: 0)
            try f.pwrite(base, at: 0)
            try f.sync()
            oracle.didSync()
            let more = randomBytes(2 * 4096, &rng)
            oracle.write(more, at: base.count)
            let plan = FaultPlan(target: .pwrite, index: 0, fault: .short(prefix), then: .fail(EIO))
            SecureFileTesting.faultInjector = { plan.decide($0) }
            XCTAssertNotNil(errnoOf { try f.pwrite(more, at: Int64(base.count)) })
            SecureFileTesting.faultInjector = nil
            let fresh = try SecureServices(appID: "com.example.tests", storeDirectory: env.directory + "/store", argonCost: .minimum)
            let problems = oracle.verify(path: path, services: fresh, label: "append torn after \(prefix) bytes")
            if !problems.isEmpty { XCTFail(problems.joined(separator: "\n")) }
        }
    }

    func testSIGKILLAtRandomPointsKeepsSyncedData() throws {
        let env = try TestEnvironment()
        let iterations = Int(ProcessInfoless.env("ACSECURE_CRASH_ITERATIONS") ?? "") ?? 120
        var rng = SplitMix64(seed: UInt64(ProcessInfoless.env("ACSECURE_CRASH_SEED") ?? "") ?? 7)
        // The store exists before the children open it.
        _ = env.services
        var killsSurvived = 0, killedMidOperation = 0, syncsChecked = 0
        for iteration in 0..<iterations {
            let path = env.path("crash-\(iteration)")
            let seed = rng.next()
            let child = try spawnChild(store: env.directory + "/store", file: path, seed: seed, operations: 400)
            var pending: [UInt8] = []
            var oracle = ConsistencyOracle()
            // Wait for the file to exist, then let the child run for a random number of events.
            var lines = readLines(child.out, pending: &pending) { $0 == "R" }
            XCTAssertEqual(lines.last, "R", "iteration \(iteration): child did not start: \(lines)")
            let events = Int.random(in: 1...300, using: &rng)
            var seen = 0
            lines = readLines(child.out, pending: &pending) { _ in seen += 1; return seen >= events }
            // Kill after a random short delay, so the kill lands inside an operation as often as not.
            let delay = UInt32.random(in: 0...300, using: &rng)
            if delay > 0 { usleep(delay) }
            kill(child.pid, SIGKILL)
            lines += readLines(child.out, pending: &pending) { _ in false }
            close(child.out)
            var status: Int32 = 0
            waitpid(child.pid, &status, 0)
            for line in lines { apply(line, to: &oracle) }
            if lines.last?.first == "W" || lines.last?.first == "T" { killedMidOperation += 1 }
            if !oracle.synced.isEmpty { syncsChecked += 1 }
            let problems = oracle.verify(path: path, services: env.services, label: "iteration \(iteration) (seed \(seed), \(lines.count) events)")
            if problems.isEmpty { killsSurvived += 1 } else {
                XCTFail(problems.joined(separator: "\n") + "\nlast events: " + lines.suffix(8).joined(separator: " | "))
                let keep = "/tmp/acsecure-crash-failure-\(iteration)"
                removeTree(keep)
                writeWholeFile(keep, readWholeFile(path))
                print("CrashConsistency: kept the failing file at \(keep)")
                break
            }
            unlink(path)
        }
        print("CrashConsistency: \(killsSurvived)/\(iterations) SIGKILLs survived (\(killedMidOperation) with an operation in flight, \(syncsChecked) with synced data checked)")
    }
}

/// Tests/ACSecureCrashChild, built next to the tests.
func crashChild() throws -> String {
    guard let exe = ChildProcess.builtExecutable("ACSecureCrashChild") else {
        XCTFail("ACSecureCrashChild is not built next to the test bundle: run `swift build --build-tests` first")
        throw XCTSkip("no child")
    }
    return exe
}

/// Starts Tests/ACSecureCrashChild with `args`; returns its pid and the read end of its stdout.
func spawnCrashChild(_ args: [String]) throws -> (pid: pid_t, out: Int32) {
    let child = try ChildProcess.spawn(try crashChild(), args, environment: ["SWIFT_BACKTRACE": "enable=no"], standardError: .inherit)
    return (child.pid, child.standardOutput)
}

/// Runs Tests/ACSecureCrashChild with `args` to its end; returns how it ended and its output.
func runCrashChild(_ args: [String]) throws -> (status: ExitStatus, output: String) {
    let result = try ChildProcess.run(try crashChild(), args, environment: ["SWIFT_BACKTRACE": "enable=no"], standardError: .inherit)
    return (result.status, result.standardOutput)
}
