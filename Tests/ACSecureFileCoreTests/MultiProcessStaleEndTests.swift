#if canImport(Glibc)
import Glibc
#endif
import XCTest
import ACSecureServices
import ACSecureTestSupport
@testable import ACSecureFileCore

/// Two processes interleaved deterministically: process A appends a 100-byte record through a
/// coordinated O_APPEND handle and is held between two `pwrite`s of its change (right after the
/// one that extends the file, or between the two runs of an append past a chunk's end), as a
/// preempted writer or a slow disk holds it. Meanwhile this process
/// (B) opens the file in default mode: it sees A's half-written end, takes the old end and reports
/// the bytes after it. A is released and its append returns. Then B opens the file
/// `ACSECURE_OPEN_SHARED`-style (`sharing: .processes`), joining the state it already has, and writes.
///
/// Before the fix, B kept the end it had checked without the record lock: its first locked change
/// cut A's acknowledged append off as an interrupted write, or refused to build on an end that no
/// longer authenticated (EIO + ACE 5). Now a state that turns coordinated checks its end again under
/// the lock (`SharedFile.endCheckedWithoutLock`), whatever the length.
final class MultiProcessStaleEndTests: XCTestCase {
    enum BWrites: CaseIterable { case append, rewriteFirstRecord }

    func record(_ k: Int) -> [UInt8] { (0..<100).map { crashPattern(k, $0) } }

    /// `records` records already in the file; A appends record `records` and is held before its
    /// `pwrite` number `hold`.
    func run(records: Int, hold: Int, b: BWrites, _ env: TestEnvironment, label: String) throws {
        let path = env.path("stale-\(records)-\(hold)-\(b)")
        var expected: [UInt8] = []
        let setup = try SecureFile.open(path, flags: O_RDWR | O_CREAT | O_TRUNC, mode: 0o600, services: env.services)
        for k in 0..<records { expected += record(k); _ = try setup.write(record(k)) }
        try setup.close()

        let a = try ChildProcess.spawn(try crashChild(), ["hold-append", env.directory + "/store", path, String(hold), String(records)],
                                       environment: ["SWIFT_BACKTRACE": "enable=no"], standardInput: .pipe, standardError: .inherit)
        let said = a.readStandardOutput(untilLine: "H")
        XCTAssertTrue(said.hasSuffix("H\n"), "\(label): A was not held: \(said)")

        // B, in default mode, while A is between its two writes.
        let plain = try SecureFile.open(path, flags: O_RDWR, services: env.services)
        var one: UInt8 = 1
        XCTAssertEqual(write(a.standardInput, &one, 1), 1)
        let output = a.finish()
        XCTAssertTrue(output.status.succeeded && output.standardOutput.contains("A "), "\(label): A's append did not return: \(output.status) \(output.standardOutput)")
        expected += record(records)

        // B joins its state in coordinated mode and writes.
        let shared = try SecureFile.open(path, flags: b == .append ? O_RDWR | O_APPEND : O_RDWR, services: env.services, sharing: .processes)
        switch b {
        case .append:
            _ = try shared.write(record(99))
            expected += record(99)
        case .rewriteFirstRecord:
            _ = try shared.pwrite(record(98), at: 0)
            expected.replaceSubrange(0..<100, with: record(98))
        }
        try shared.close()
        try plain.close()

        let check = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
        defer { try? check.close() }
        XCTAssertEqual(try check.bytesAfterAuthenticatedEnd, 0, "\(label): bytes after the end")
        XCTAssertEqual(try check.readAll(), expected, "\(label): A's acknowledged append or B's write is not in the file as written")
    }

    /// The same without a hold, as a stress: one process appends records through a coordinated
    /// handle, pausing 0.3 ms after each, while another appends its own, each through a default-mode
    /// handle that a coordinated one then joins (now and then the default-mode open lands between the
    /// first writer's two writes, and the joined handle's change comes before that writer's next).
    /// Every acknowledged record of both must be in the file exactly once.
    func testAProcessSwitchingModesLosesNoAppendOfAnother() throws {
        let env = try TestEnvironment()
        let path = env.path("switching")
        try SecureFile.open(path, flags: O_RDWR | O_CREAT | O_TRUNC, mode: 0o600, services: env.services).close()
        let perWriter = 2000
        let steady = try ChildProcess.spawn(try crashChild(), ["append-loop", env.directory + "/store", path, "0", String(perWriter), "steady-300"],
                                            environment: ["SWIFT_BACKTRACE": "enable=no"], standardError: .inherit)
        let switching = try ChildProcess.spawn(try crashChild(), ["append-loop", env.directory + "/store", path, "10000", String(perWriter), "switching-100"],
                                               environment: ["SWIFT_BACKTRACE": "enable=no"], standardError: .inherit)
        for (name, child) in [("steady", steady), ("switching", switching)] {
            let out = child.finish()
            XCTAssertTrue(out.status.succeeded && out.standardOutput.contains("A \(perWriter)"), "\(name): \(out.status) \(out.standardOutput)")
        }
        let f = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
        defer { try? f.close() }
        XCTAssertEqual(try f.bytesAfterAuthenticatedEnd, 0)
        let all = try f.readAll()
        let found = stride(from: 0, to: all.count, by: 100).map { Array(all[$0..<min(all.count, $0 + 100)]) }
        // Some records have equal patterns: compare how often each appears.
        let expected = (0..<perWriter).map(record) + (10000..<10000 + perWriter).map(record)
        XCTAssertEqual(found.count, 2 * perWriter, "records in the file")
        XCTAssertEqual(Dictionary(found.map { ($0, 1) }, uniquingKeysWith: +), Dictionary(expected.map { ($0, 1) }, uniquingKeysWith: +),
                       "every acknowledged record, each once")
    }

    func testAWriterHeldBetweenItsWritesLosesNothingToAProcessThatTurnsCoordinated() throws {
        let env = try TestEnvironment()
        // 40 records end at 4000: A's record crosses the chunk boundary, in two runs: the first
        // spans two pages (pwrites 1-2), the second lies in one (pwrite 3: SharedFile.withinOnePage).
        // 36 records end at 3600: A's record stays in chunk 0 (at 8576, page offset 384), and its
        // change spans two pages (pwrites 1-2).
        for (records, hold) in [(40, 2), (40, 3), (36, 2)] {
            for b in BWrites.allCases {
                for round in 0..<3 {
                    try run(records: records, hold: hold, b: b, env, label: "\(records) records, A held before pwrite \(hold), B \(b), round \(round)")
                }
            }
        }
    }
}
