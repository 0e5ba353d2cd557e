#if canImport(Glibc)
import Glibc
#endif
import XCTest
import ACSecureTestSupport
import ACSystemCalls
@testable import ACSecureFileCore

/// `O_DSYNC` / `O_SYNC`, as on a plain file: every write and truncate of the handle is forced to the
/// device before it returns (`fdatasync(2)` / `fsync(2)` after the engine's `pwrite`s), in every
/// buffering and sharing mode; a failed sync fails the call with its errno; reads sync nothing.
final class SynchronizedWriteTests: XCTestCase {
    override func tearDown() { SecureFileTesting.faultInjector = nil }

    /// Counts this thread's `fsync` and `fdatasync` calls while `body` runs, failing them with
    /// `fault` when given.
    private func syncCalls(failingWith fault: Int32? = nil, _ body: () throws -> Void) rethrows -> (full: Int, data: Int) {
        let plan = FaultPlan(target: fault == nil ? nil : .fdatasync, index: 0, fault: .fail(fault ?? EIO))
        SecureFileTesting.faultInjector = { plan.decide($0) }
        defer { SecureFileTesting.faultInjector = nil }
        try body()
        return (plan.counts.calls[.fsync, default: 0], plan.counts.calls[.fdatasync, default: 0])
    }

    func testEveryWriteAndTruncateIsSyncedAndReadsAreNot() throws {
        let env = try TestEnvironment()
        let cases: [(String, Int32, SecureFile.Sharing, SecureFile.Buffering, (full: Int, data: Int))] = [
            ("O_DSYNC", O_DSYNC, .thisProcess, .writeThrough, (0, 1)),
            ("O_SYNC", O_SYNC, .thisProcess, .writeThrough, (1, 0)),
            ("O_DSYNC, write-back", O_DSYNC, .thisProcess, .writeBack, (0, 1)),
            ("O_SYNC, coordinated", O_SYNC, .processes, .writeThrough, (1, 0)),
            ("no flag", 0, .thisProcess, .writeThrough, (0, 0)),
        ]
        for (name, flag, sharing, buffering, perCall) in cases {
            let path = env.path("sync-\(flag)-\(sharing == .processes)-\(buffering == .writeBack)")
            let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT | flag, services: env.services, sharing: sharing, buffering: buffering)
            let writes = try syncCalls {
                _ = try f.write([UInt8](repeating: 1, count: 100))
                _ = try f.pwrite([UInt8](repeating: 2, count: 5000), at: 50)
                _ = try [UInt8](repeating: 3, count: 10).withUnsafeBytes { try f.writev([$0, $0]) }
                try f.truncate(to: 9000)
            }
            // The first synced write of a file this open created also fsyncs its directory (its name).
            XCTAssertEqual(writes.full, 4 * perCall.full + (flag == 0 ? 0 : 1), "\(name): fsync per write or truncate, and the directory's once")
            XCTAssertEqual(writes.data, 4 * perCall.data, "\(name): fdatasync per write or truncate")
            let reads = try syncCalls { _ = try f.pread(count: 100, at: 0); _ = try f.stat() }
            XCTAssertEqual(reads.full + reads.data, 0, "\(name): reads and fstat sync nothing")
            // Synced means written: a fresh open reads it (write-back included).
            let other = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
            XCTAssertEqual(try other.size, 9000, name)
            XCTAssertEqual(try other.pread(count: 3, at: 5048), [2, 2, 0], name)
            XCTAssertEqual(try other.pread(count: 3, at: 98), [2, 2, 3], name)
            try other.close()
            try f.close()
        }
    }

    func testAFailedSyncFailsTheWriteWithItsErrno() throws {
        let env = try TestEnvironment()
        let f = try SecureFile.open(env.path("failing"), flags: O_WRONLY | O_CREAT | O_DSYNC, services: env.services)
        var error: SecureFileError?
        _ = syncCalls(failingWith: EIO) {
            do { _ = try f.write([1, 2, 3]) } catch let e as SecureFileError { error = e } catch { XCTFail("\(error)") }
        }
        XCTAssertEqual(error?.errno, EIO, "the write reports the failed fdatasync")
        XCTAssertTrue(error?.message.contains("failing") == true && error?.message.contains("fdatasync") == true,
                      "names the file and the call: \(error?.message ?? "")")
        XCTAssertEqual(try f.write([4]), 1, "the next write works once the device does")
        try f.close()
    }

    func testOtherSynchronousAndDirectFlagsAreStillRefused() throws {
        let env = try TestEnvironment()
        // O_DIRECT, O_TMPFILE, O_PATH, O_NOATIME (GNU names Glibc does not import), O_NONBLOCK.
        for flag: Int32 in [0o40000, 0o20200000, 0o10000000, 0o1000000, O_NONBLOCK] {
            XCTAssertThrowsError(try SecureFile.open(env.path("refused"), flags: O_RDWR | O_CREAT | flag, services: env.services)) { e in
                XCTAssertEqual((e as? SecureFileError)?.errno, EINVAL, "flag 0o\(String(flag, radix: 8))")
            }
        }
    }
}
