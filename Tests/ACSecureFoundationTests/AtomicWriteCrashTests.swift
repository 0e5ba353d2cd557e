#if canImport(Glibc)
import Glibc
#endif
import Foundation
import XCTest
import ACSecureTestSupport
import ACSecureFileCore
import ACSecureFoundation

/// Runs Tests/ACSecureFoundationCrashHelper, built next to the test bundle (standard error
/// merged into standard output).
enum CrashHelper {
    struct Result { var output: String; var status: ExitStatus }

    static func start(_ arguments: [String], home: String, appID: String) throws -> ChildProcess {
        guard let executable = ChildProcess.builtExecutable("ACSecureFoundationCrashHelper") else {
            throw TestSupportError("ACSecureFoundationCrashHelper is not built next to the tests: run `swift build --build-tests` first")
        }
        var environment = ChildProcess.inheritedEnvironment
        environment["ACSECURE_HOME"] = home
        environment["ACSECURE_APP_ID"] = appID
        environment["ACSECURE_PASSCODE"] = nil
        environment["SWIFT_BACKTRACE"] = "enable=no"
        return try ChildProcess.spawn(executable, arguments, environment: environment, standardError: .standardOutput)
    }

    static func run(_ arguments: [String], home: String, appID: String) throws -> Result {
        let output = try start(arguments, home: home, appID: appID).finish()
        return Result(output: output.standardOutput, status: output.status)
    }
}

final class AtomicWriteCrashTests: SecureFoundationTestCase {
    /// What a file holds after its writer was killed: a whole version, or something else.
    enum Outcome: Equatable { case whole(UInt64), partial(String) }

    func outcome(_ p: String) -> Outcome {
        let data: Data
        do { data = try Data(contentsOfSecureFile: p) } catch { return .partial("unreadable: \((error as NSError).code)") }
        guard data.count >= 8 else { return .partial("\(data.count) bytes") }
        let k = data.prefix(8).enumerated().reduce(UInt64(0)) { $0 | UInt64($1.element) << (8 * UInt64($1.offset)) }
        guard k > 0, k < 1_000_000, data == Data(writeLoopVersion(k)) else { return .partial("\(data.count) bytes, not a whole version") }
        return .whole(k)
    }

    #if ACSECURE_SYSCALL_MOCKING
    /// An atomic rewrite of a secure file through the Foundation layer, and a rename of a secure
    /// file over another, each SIGKILLed right before every system call it makes: the file is
    /// always a whole old or new version, never anything else, and never missing.
    func testAtomicWriteAndRenameKilledAtEverySystemCall() throws {
        for mode in ["atomic-kill-at", "rename-kill-at"] {
            let p = path("every-call-\(mode)")
            try version(1).write(toSecureFile: p, options: [])
            let full = try CrashHelper.run([mode, p, "-1"], home: directory + "/store", appID: appID)
            guard let done = full.output.split(separator: "\n").first(where: { $0.hasPrefix("C ") }), let calls = Int(done.dropFirst(2)) else {
                XCTFail("\(mode): the uninterrupted run did not complete: \(full.status) \(full.output)")
                continue
            }
            XCTAssertEqual(outcome(p), .whole(2), mode)
            XCTAssertGreaterThanOrEqual(calls, mode == "rename-kill-at" ? 1 : 5, "\(mode): \(calls) system calls")
            for killAt in 0..<calls {
                try version(1).write(toSecureFile: p, options: [])
                unlink(p + ".new")
                let r = try CrashHelper.run([mode, p, String(killAt)], home: directory + "/store", appID: appID)
                XCTAssertEqual(r.status.signal, SIGKILL, "\(mode) killed before call \(killAt): \(r.status) \(r.output)")
                let o = outcome(p)
                XCTAssertTrue(o == .whole(1) || o == .whole(2), "\(mode) killed before call \(killAt): \(o)")
            }
        }
    }

    func version(_ k: UInt64) -> Data { Data(writeLoopVersion(k)) }
    #endif

    /// Kills a child that rewrites the file in a loop at random moments; run `rounds` times.
    func killWhileWriting(atomic: Bool, rounds: Int, seed: UInt64) throws -> [Outcome] {
        var rng = SplitMix64(seed: seed)
        var outcomes: [Outcome] = []
        for round in 0..<rounds {
            let p = path("crash-\(atomic)-\(round)")
            let helper = try CrashHelper.start(["write-loop", p] + (atomic ? ["atomic"] : []),
                                               home: directory + "/store", appID: appID)
            let said = helper.readStandardOutput(untilLine: "ready")
            guard said.hasSuffix("ready\n") else {
                XCTFail("helper did not start (\(helper.finish().status)): \(said)")
                return outcomes
            }
            usleep(UInt32.random(in: 0...40_000, using: &rng))
            kill(helper.pid, SIGKILL)
            let status = helper.finish().status
            XCTAssertEqual(status.signal, SIGKILL, "\(status)")
            outcomes.append(outcome(p))
        }
        return outcomes
    }

    /// A writer killed in the middle of an atomic write leaves the old or the new contents.
    func testKilledAtomicWriterLeavesAWholeVersion() throws {
        let outcomes = try killWhileWriting(atomic: true, rounds: 12, seed: 0xA70)
        for (i, o) in outcomes.enumerated() {
            if case .partial(let why) = o { XCTFail("round \(i): \(why)") }
        }
        // Leftover temporaries are allowed (the kill can land before the rename) but never replace the file.
        let names = directoryEntries().filter { !$0.contains(".acsecure-tmp-") }
        XCTAssertEqual(names.count, 12, "\(names)")
    }

    /// The control: the same kills on a non-atomic writer do catch half-written files, so the
    /// atomic test above can fail.
    func testKilledNonAtomicWriterCanLeaveAPartialFile() throws {
        var partial = 0
        for attempt in 0..<3 where partial == 0 {
            let outcomes = try killWhileWriting(atomic: false, rounds: 8, seed: 0xB00 + UInt64(attempt))
            partial += outcomes.filter { if case .partial = $0 { return true } else { return false } }.count
        }
        XCTAssertGreaterThan(partial, 0, "no kill caught a non-atomic write in the middle: the crash test cannot fail")
    }
}
