#if canImport(Glibc)
import Glibc
#endif
import XCTest
import ACSecureServices
import ACSecureTestSupport
@testable import ACSecureFileCore

/// Several processes create one missing file at the same moment (O_RDWR | O_CREAT | O_APPEND,
/// coordinated) and each appends a record: there must be one file, every process must succeed, and
/// every record must be in it. A creation is atomic (an unnamed file linked once it has its header),
/// so no process ever opens another's file while it is still empty, writes a second header over it
/// or refuses it as a cut.
final class CreationRaceTests: XCTestCase {
    func testProcessesCreatingOneFileAtOnceGetOneFile() throws {
        let env = try TestEnvironment()
        let writers = 6
        for round in 0..<4 {
            let path = env.path("raced-\(round)")
            let children = try (0..<writers).map { k in
                try ChildProcess.spawn(try crashChild(), ["create-append", env.directory + "/store", path, String(k)],
                                       environment: ["SWIFT_BACKTRACE": "enable=no"], standardInput: .pipe, standardError: .inherit)
            }
            for c in children { XCTAssertTrue(c.readStandardOutput(untilLine: "R").hasSuffix("R\n")) }
            var go: UInt8 = 1
            for c in children { XCTAssertEqual(write(c.standardInput, &go, 1), 1) }
            for (k, c) in children.enumerated() {
                let out = c.finish()
                XCTAssertTrue(out.status.succeeded && out.standardOutput.contains("A"), "round \(round), writer \(k): \(out.status) \(out.standardOutput)")
            }
            let f = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
            let all = try f.readAll()
            XCTAssertEqual(try f.bytesAfterAuthenticatedEnd, 0)
            try f.close()
            XCTAssertEqual(all.count, writers * 100, "round \(round)")
            let records = Set(stride(from: 0, to: all.count, by: 100).map { Array(all[$0..<min(all.count, $0 + 100)]) })
            XCTAssertEqual(records, Set((0..<writers).map { k in (0..<100).map { crashPattern(k, $0) } }), "round \(round): every record once")
        }
    }
}
