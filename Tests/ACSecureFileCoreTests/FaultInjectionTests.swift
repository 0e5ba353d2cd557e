#if canImport(Glibc)
import Glibc
#endif
import XCTest
import ACSecureTestSupport
import ACCrypto
import ACSecureServices
import ACSystemCalls
@testable import ACSecureFileCore

/// Fails (or shortens) the n-th call of one kind of system call, counting every call the engine makes.
/// With `then`, the next call of the same kind gets that fault too: `.short(n)` then `.fail(EIO)`
/// leaves a torn write (n bytes of it on disk), as a crash in the middle of a write would.
final class FaultPlan: @unchecked Sendable {
    struct Counts { var calls: [Sys.Call: Int] = [:]; var injected = 0 }
    let target: Sys.Call?
    let index: Int
    let fault: Sys.Fault
    let then: Sys.Fault?
    private let state = LockedValue(Counts())

    init(target: Sys.Call?, index: Int, fault: Sys.Fault, then: Sys.Fault? = nil) {
        self.target = target
        self.index = index
        self.fault = fault
        self.then = then
    }

    func decide(_ call: Sys.Call) -> Sys.Fault? {
        state.withLock { s in
            let n = s.calls[call, default: 0]
            s.calls[call] = n + 1
            guard call == target else { return nil }
            if n == index { s.injected += 1; return fault }
            if n == index + 1, let then { return then }
            return nil
        }
    }

    var counts: Counts { state.withLock { $0 } }
}

/// Through the engine's syscall layer (Sys, SecureFileTesting.faultInjector): for a workload that
/// writes, rewrites, truncates, reads, syncs, closes and reopens, fail the n-th pread / pwrite /
/// fsync / ftruncate / open with EIO or ENOSPC, or make it short, for every n. Expected: no crash; a
/// clear error (errno and a message naming the file) for failures; a short transfer is finished by
/// the engine and changes nothing; afterwards the file opens and ConsistencyOracle's rule holds
/// (every byte synced and not written since reads back; touched chunks read as some state since the
/// last fsync or fail with ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR); and the same handle, once the fault is
/// gone, either works correctly or fails cleanly.
///
/// EINTR is not among these faults: the driver is asked inside the layer's retry loop, so an injected
/// EINTR is retried (SystemCallFaultTests in ACSecureSharingTests injects it in every module).
final class FaultInjectionTests: XCTestCase {
    override func tearDown() { SecureFileTesting.faultInjector = nil }

    struct WorkloadResult {
        var oracle = ConsistencyOracle()
        var error: SecureFileError?
        var failedStep: String?
        var file: SecureFile?
    }

    /// The workload. Stops at the first error, leaving the handle open in `file`.
    static func runWorkload(path: String, services: SecureServices) -> WorkloadResult {
        var r = WorkloadResult()
        var rng = SplitMix64(seed: 99)
        let big = randomBytes(10_000, &rng), small = randomBytes(100, &rng), whole = randomBytes(3 * 4096, &rng)
        let tail = randomBytes(50, &rng), mid = randomBytes(5000, &rng), last = randomBytes(700, &rng)
        var step = ""
        do {
            step = "open(create)"; r.file = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: services)
            let f = r.file!
            step = "pwrite 10000 @ 0"; r.oracle.write(big, at: 0); try f.pwrite(big, at: 0)
            step = "pwrite 100 @ 5000"; r.oracle.write(small, at: 5000); try f.pwrite(small, at: 5000)
            step = "fsync 1"; try f.sync(); r.oracle.didSync()
            step = "pwrite 3 chunks @ 8192"; r.oracle.write(whole, at: 8192); try f.pwrite(whole, at: 8192)
            step = "ftruncate 9000"; r.oracle.truncate(9000); try f.truncate(to: 9000)
            step = "pwrite 50 @ 20000 (hole)"; r.oracle.write(tail, at: 20000); try f.pwrite(tail, at: 20000)
            step = "fsync 2"; try f.sync(); r.oracle.didSync()
            step = "pread 4096 @ 4000"
            let got = try f.pread(count: 4096, at: 4000)
            XCTAssertEqual(got, Array(r.oracle.model[4000..<8096]), "pread returned wrong bytes")
            step = "close"; r.file = nil; try f.close()
            step = "open(existing)"; r.file = try SecureFile.open(path, flags: O_RDWR, services: services)
            let g = r.file!
            step = "ftruncate 30000"; r.oracle.truncate(30000); try g.truncate(to: 30000)
            step = "pwrite 5000 @ 100"; r.oracle.write(mid, at: 100); try g.pwrite(mid, at: 100)
            step = "pread 700 @ 29500"
            let got2 = try g.pread(count: 700, at: 29500)
            XCTAssertEqual(got2, Array(r.oracle.model[29500..<30000]), "pread returned wrong bytes")
            step = "append 700"; r.oracle.write(last, at: 30000); try g.pwrite(last, at: 30000)
            step = "fsync 3"; try g.sync(); r.oracle.didSync()
            step = "ftruncate 4096"; r.oracle.truncate(4096); try g.truncate(to: 4096)
            step = "fsync 4"; try g.sync(); r.oracle.didSync()
            step = "close 2"; r.file = nil; try g.close()
        } catch let e as SecureFileError {
            r.error = e
            r.failedStep = step
        } catch {
            XCTFail("unexpected error type: \(error)")
        }
        return r
    }

    func testWorkloadWithoutFaultsAndCallCounts() throws {
        let env = try TestEnvironment()
        let plan = FaultPlan(target: nil, index: 0, fault: .fail(EIO))
        SecureFileTesting.faultInjector = { plan.decide($0) }
        let r = Self.runWorkload(path: env.path("w"), services: env.services)
        SecureFileTesting.faultInjector = nil
        XCTAssertNil(r.error, "\(r.failedStep ?? ""): \(r.error?.message ?? "")")
        XCTAssertTrue(r.oracle.verify(path: env.path("w"), services: env.services, label: "no faults").isEmpty)
        for call in [Sys.Call.open, .pread, .pwrite, .fsync, .ftruncate] {
            XCTAssertGreaterThan(plan.counts.calls[call, default: 0], 0, "the workload must make \(call) calls")
        }
    }

    func testFaultAtEveryCallIndex() throws {
        let env = try TestEnvironment()
        // How many calls of each kind the workload makes.
        let counting = FaultPlan(target: nil, index: 0, fault: .fail(EIO))
        SecureFileTesting.faultInjector = { counting.decide($0) }
        let baseline = Self.runWorkload(path: env.path("count"), services: env.services)
        SecureFileTesting.faultInjector = nil
        XCTAssertNil(baseline.error)
        let independent = try SecureServices(appID: "com.example.tests", storeDirectory: env.directory + "/store", argonCost: .minimum)

        let faults: [(String, Sys.Fault)] = [("EIO", .fail(EIO)), ("ENOSPC", .fail(ENOSPC)), ("short 1", .short(1)), ("short 4099", .short(4099))]
        var injected = 0, reportedErrors = 0, runs = 0
        for call in [Sys.Call.pread, .pwrite, .fsync, .ftruncate, .open] {
            let total = counting.counts.calls[call, default: 0]
            for index in 0..<total {
                for (faultName, fault) in faults {
                    if case .short = fault, call != .pread && call != .pwrite { continue }
                    runs += 1
                    var label = "\(call)#\(index) \(faultName)"
                    let path = env.path("f-\(call)-\(index)-\(runs)")
                    let plan = FaultPlan(target: call, index: index, fault: fault)
                    SecureFileTesting.faultInjector = { plan.decide($0) }
                    let r = Self.runWorkload(path: path, services: env.services)
                    SecureFileTesting.faultInjector = nil
                    injected += plan.counts.injected
                    label += " in \(r.failedStep ?? "no step")"
                    if case .short = fault {
                        // Short transfers are completed by the engine: nothing may fail.
                        XCTAssertNil(r.error, "\(label): a short transfer surfaced as an error at \(r.failedStep ?? ""): \(r.error?.message ?? "")")
                    } else if plan.counts.injected > 0 {
                        guard let e = r.error else {
                            // Only a fault the engine can absorb may go unreported; none of these can.
                            XCTFail("\(label): the injected failure was not reported")
                            continue
                        }
                        reportedErrors += 1
                        if case .fail(let code) = fault {
                            XCTAssertEqual(e.errno, code, "\(label) at \(r.failedStep ?? ""): errno \(e.errno) \(e.code.name): \(e.message)")
                        }
                        XCTAssertTrue(e.message.contains(path), "\(label): the message must name the file: \(e.message)")
                    }
                    if r.failedStep == "open(create)" {
                        // A creation is atomic: a failed one leaves no file, or (where unnamed files
                        // are not supported) a 0-byte one that no open but O_TRUNC takes.
                        if access(path, F_OK) == 0, fileSize(path) == 0 {
                            XCTAssertEqual(aceCode { _ = try SecureFile.open(path, flags: O_RDONLY, services: independent) }, .badKeyOrCorruptData, label)
                            XCTAssertEqual(aceCode { _ = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: independent) }, .badKeyOrCorruptData, label)
                            unlink(path)
                        } else if access(path, F_OK) == 0 {
                            let v = ConsistencyOracle().verify(path: path, services: env.services, label: "\(label) (failed create)")
                            if !v.isEmpty { XCTFail(v.joined(separator: "\n")) }
                            unlink(path)
                        }
                        continue
                    }
                    // The disk state as an independent reader sees it, with the faulty handle still open.
                    var problems = r.oracle.verify(path: path, services: independent, label: "\(label) (after \(r.failedStep ?? "the end"))")
                    // The same handle, fault gone: works or fails cleanly; then close and check again.
                    // The failed operation's effect stays uncertain, so the recovery write is checked
                    // on its own (its chunk is excluded from the oracle's rule).
                    var oracle = r.oracle
                    let data = [UInt8](repeating: 0xAB, count: 300)
                    var recovered = false
                    if let f = r.file {
                        do {
                            oracle.forget(2000..<2300)
                            try f.pwrite(data, at: 2000)
                            try f.sync()
                            let back = try f.pread(count: 300, at: 2000)
                            XCTAssertEqual(back, data, "\(label): the handle returned wrong bytes after the fault")
                            recovered = true
                        } catch let e as SecureFileError {
                            XCTAssertNotEqual(e.code, .internalError, "\(label): after the fault: \(e.message)")
                        } catch { XCTFail("\(error)") }
                        try? f.close()
                    }
                    problems += oracle.verify(path: path, services: env.services, label: "\(label) (after recovery and close)")
                    if recovered {
                        do {
                            let g = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
                            let back = try g.pread(count: 300, at: 2000)
                            try g.close()
                            if back != data { problems.append("\(label): the write+fsync after the fault did not persist") }
                        } catch { problems.append("\(label): reading the write made after the fault: \(error)") }
                    }
                    if !problems.isEmpty { XCTFail(problems.joined(separator: "\n")) }
                    unlink(path)
                }
            }
        }
        print("FaultInjection: \(runs) runs, \(injected) faults injected, \(reportedErrors) errors reported; calls per workload: \(counting.counts.calls.map { "\($0.key)=\($0.value)" }.sorted().joined(separator: " "))")
    }

    /// rename(2) failing leaves both names as they were.
    func testRenameFailureLeavesFilesIntact() throws {
        let env = try TestEnvironment()
        let a = env.path("a"), b = env.path("b")
        let f = try SecureFile.open(a, flags: O_RDWR | O_CREAT, services: env.services)
        try f.pwrite([1, 2, 3], at: 0)
        try f.close()
        SecureFileTesting.faultInjector = { $0 == .rename ? .fail(EIO) : nil }
        XCTAssertEqual(errnoOf { try SecureFileSystem.rename(a, b) }, EIO)
        SecureFileTesting.faultInjector = nil
        XCTAssertEqual(access(b, F_OK), -1)
        let g = try SecureFile.open(a, flags: O_RDONLY, services: env.services)
        XCTAssertEqual(try g.readAll(), [1, 2, 3])
        try g.close()
        try SecureFileSystem.rename(a, b)
        let h = try SecureFile.open(b, flags: O_RDONLY, services: env.services)
        XCTAssertEqual(try h.readAll(), [1, 2, 3])
        try h.close()
    }
}
