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
    func testApplyDisablesCoreDumpsAndDumpability() throws {
        let (status, output) = try runCrashChild(["--harden"])
        XCTAssertTrue(status.succeeded, "\(status): \(output)")
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
