#if canImport(Glibc)
import Glibc
#endif
import XCTest
import ACSecureServices

/// Issue 15, finding 8: `ProcessHardening.apply()` disables core dumps and makes the process not
/// dumpable. Checked in a child process (ACSecureCrashChild --harden), which reads both back from
/// the kernel with getrlimit(RLIMIT_CORE) and prctl(PR_GET_DUMPABLE), so the test process itself
/// stays dumpable.
final class ProcessHardeningTests: XCTestCase {
    private func runChild(_ arguments: [String], environment: [String] = ["SWIFT_BACKTRACE=enable=no"]) throws -> (status: Int32, output: String) {
        let exe = CrashConsistencyTests.childPath
        guard !exe.isEmpty else {
            XCTFail("ACSecureCrashChild is not built next to the test bundle: run `swift build --build-tests` first")
            throw XCTSkip("no child")
        }
        var fds: [Int32] = [0, 0]
        XCTAssertEqual(pipe(&fds), 0)
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, fds[1], 1)
        posix_spawn_file_actions_addclose(&actions, fds[0])
        let argv: [UnsafeMutablePointer<CChar>?] = ([exe] + arguments).map { strdup($0) } + [nil]
        let envp: [UnsafeMutablePointer<CChar>?] = environment.map { strdup($0) } + [nil]
        defer { for p in argv + envp { free(p) } }
        var pid: pid_t = 0
        XCTAssertEqual(posix_spawn(&pid, exe, &actions, nil, argv, envp), 0)
        close(fds[1])
        var output: [UInt8] = []
        var buf = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = buf.withUnsafeMutableBytes { read(fds[0], $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            output += buf[0..<n]
        }
        close(fds[0])
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        return (status, String(decoding: output, as: UTF8.self))
    }

    func testApplyDisablesCoreDumpsAndDumpability() throws {
        let (status, output) = try runChild(["--harden"])
        XCTAssertEqual(status, 0, output)
        let lines = output.split(separator: "\n").map { $0.split(separator: " ").map(String.init) }
        XCTAssertEqual(lines.count, 2, output)
        guard lines.count == 2, lines[0].count == 4, lines[1].count == 4 else { return }
        XCTAssertEqual(lines[0][0], "before")
        XCTAssertEqual(lines[0][3], "1", "a fresh process is dumpable, so the test can fail: \(output)")
        XCTAssertEqual(lines[1], ["after", "0", "0", "0"], "core limit 0/0 and not dumpable after apply(): \(output)")
    }

    /// The state reads back in this process without changing it.
    func testCurrentReadsTheStateWithoutChangingIt() throws {
        let state = try ProcessHardening.current()
        XCTAssertEqual(state.dumpable, 1, "the test process was not hardened")
        XCTAssertEqual(try ProcessHardening.current(), state)
    }
}
