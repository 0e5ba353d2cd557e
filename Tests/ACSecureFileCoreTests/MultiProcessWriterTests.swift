#if canImport(Glibc)
import Glibc
#endif
import XCTest
import ACSecureTestSupport
import ACSecureServices
@testable import ACSecureFileCore

/// Several processes write one secure file at the same time with `sharing: .processes`: no lost
/// update, no torn chunk, appends do not overwrite each other.
final class MultiProcessWriterTests: XCTestCase {
    static let writers = 4, block = 1500, rounds = 6, blocks = 64

    func runWriters(store: String, file: String, mode: String) throws {
        guard let exe = ChildProcess.builtExecutable("ACSecureMultiWriter") else {
            XCTFail("ACSecureMultiWriter is not built next to the tests (swift build --build-tests)")
            return
        }
        let writers = try (0..<Self.writers).map { i in
            try ChildProcess.spawn(exe, [store, file, String(i), String(Self.writers), String(Self.block), String(Self.rounds), mode],
                                   environment: ["SWIFT_BACKTRACE": "enable=no"])
        }
        for writer in writers {
            let result = writer.finish()
            XCTAssertTrue(result.status.succeeded, "writer \(writer.pid) failed (\(result.status)): \(result.standardOutput)\(result.standardError)")
        }
    }

    func testDisjointBlocksFromSeveralProcessesAllLand() throws {
        let env = try TestEnvironment(appID: "com.example.multiwriter")
        let path = env.path("shared")
        // The file exists before the writers start; blocks of 1500 bytes share chunks between writers.
        let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services)
        try f.truncate(to: Int64(Self.blocks * Self.block))
        try f.close()
        try runWriters(store: env.directory + "/store", file: path, mode: "blocks")
        let g = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
        let all = try g.readAll()
        try g.close()
        XCTAssertEqual(all.count, Self.blocks * Self.block)
        var wrong = 0
        for b in 0..<Self.blocks {
            let w = b % Self.writers, r = Self.rounds - 1
            for j in 0..<Self.block where all[b * Self.block + j] != UInt8(truncatingIfNeeded: w &* 73 &+ r &* 31 &+ b &* 7 &+ j) {
                wrong += 1
            }
        }
        XCTAssertEqual(wrong, 0, "bytes lost to a concurrent read-modify-write")
    }

    func testAppendsFromSeveralProcessesNeverOverlap() throws {
        let env = try TestEnvironment(appID: "com.example.multiwriter")
        let path = env.path("log")
        let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services)
        try f.close()
        try runWriters(store: env.directory + "/store", file: path, mode: "append")
        let g = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
        let all = try g.readAll()
        try g.close()
        XCTAssertEqual(all.count, Self.writers * Self.rounds * Self.block)
        var seen: [UInt8: Int] = [:]
        for record in stride(from: 0, to: all.count, by: Self.block) {
            let slice = all[record..<min(record + Self.block, all.count)]
            XCTAssertTrue(slice.allSatisfy { $0 == slice.first }, "record at \(record) is mixed: appends overlapped")
            seen[slice.first!, default: 0] += 1
        }
        XCTAssertEqual(seen.values.reduce(0, +), Self.writers * Self.rounds)
        XCTAssertTrue(seen.values.allSatisfy { $0 == 1 }, "every (writer, round) record exactly once")
    }

    /// A reader that opened the file while it was still empty sees another process's first write.
    func testAReaderOfAnEmptyFileSeesTheFirstWriteOfAnotherProcess() throws {
        let env = try TestEnvironment(appID: "com.example.multiwriter")
        let path = env.path("late")
        // A read-only creating open of a missing file creates it (with its header): it reads as empty.
        let reader = try SecureFile.open(path, flags: O_RDONLY | O_CREAT, services: env.services, sharing: .processes)
        XCTAssertEqual(fileSize(path), FileLayout().physicalSize(forPlaintextSize: 0))
        XCTAssertEqual(try reader.size, 0)
        let other = try SecureServices(appID: "com.example.multiwriter", storeDirectory: env.directory + "/store", argonCost: .minimum)
        let writer = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: other, sharing: .processes)
        try writer.write(Array("first".utf8))
        try writer.close()
        XCTAssertEqual(try reader.pread(count: 10, at: 0), Array("first".utf8))
        try reader.close()
    }

    /// The control: without coordination, the same workload loses updates (so the test can fail).
    func testWithoutCoordinationUpdatesAreLost() throws {
        let env = try TestEnvironment(appID: "com.example.multiwriter")
        let path = env.path("uncoordinated")
        let a = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services)
        try a.truncate(to: 8192)
        try a.sync()
        // A second "process": independent state on the same store and file.
        let other = try SecureServices(appID: "com.example.multiwriter", storeDirectory: env.directory + "/store", argonCost: .minimum)
        let b = try SecureFile.open(path, flags: O_RDWR, services: other)
        // b caches chunk 0 (a handle of another process is not told of later writes by default).
        XCTAssertEqual(try b.pread(count: 1, at: 0), [0])
        try a.pwrite([1], at: 0)
        try b.pwrite([2], at: 1)  // b's cached chunk 0 does not have a's byte
        try a.close()
        try b.close()
        let c = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
        let head = try c.pread(count: 2, at: 0)
        try c.close()
        XCTAssertNotEqual(head, [1, 2], "expected a lost update without coordination")

        // The same with coordination keeps both.
        let a2 = try SecureFile.open(path, flags: O_RDWR, services: env.services, sharing: .processes)
        let b2 = try SecureFile.open(path, flags: O_RDWR, services: other, sharing: .processes)
        try a2.pwrite([1], at: 0)
        try b2.pwrite([2], at: 1)
        try a2.close()
        try b2.close()
        let d = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
        XCTAssertEqual(try d.pread(count: 2, at: 0), [1, 2])
        try d.close()
    }

    /// Another process empties the file and writes it anew (a new file ID and data key): a
    /// coordinated reader that keeps its handle reads the new contents at its next call, whether the
    /// length stayed the same (reads of an unchanged length skip the file-ID check and recheck when
    /// a chunk fails) or changed.
    func testACoordinatedReaderSeesAFileAnotherProcessEmptiedAndWroteAnew() throws {
        let env = try TestEnvironment(appID: "com.example.multiwriter")
        let path = env.path("recreated")
        let other = try SecureServices(appID: "com.example.multiwriter", storeDirectory: env.directory + "/store", argonCost: .minimum)
        func rewrite(_ byte: UInt8, count: Int) throws {
            let w = try SecureFile.open(path, flags: O_RDWR | O_CREAT | O_TRUNC, services: other, sharing: .processes)
            try w.write([UInt8](repeating: byte, count: count))
            try w.close()
        }
        try rewrite(0xAA, count: 10_000)
        let reader = try SecureFile.open(path, flags: O_RDONLY, services: env.services, sharing: .processes)
        XCTAssertEqual(try reader.pread(count: 4096, at: 4096), [UInt8](repeating: 0xAA, count: 4096))

        try rewrite(0xBB, count: 10_000)  // the same length: the same physical size
        XCTAssertEqual(try reader.pread(count: 4096, at: 4096), [UInt8](repeating: 0xBB, count: 4096))
        XCTAssertEqual(try reader.pread(count: 10, at: 9_995), [UInt8](repeating: 0xBB, count: 5))
        XCTAssertEqual(try reader.pread(count: 100, at: 0), [UInt8](repeating: 0xBB, count: 100))

        // Shorter: preads inside the length the reader knew (10 000) come first, so they start
        // without rereading the length.
        try rewrite(0xCC, count: 3_000)
        XCTAssertEqual(try reader.pread(count: 4096, at: 4096), [])
        XCTAssertEqual(try reader.pread(count: 100, at: 2_950), [UInt8](repeating: 0xCC, count: 50))
        XCTAssertEqual(try reader.size, 3_000)
        XCTAssertEqual(try reader.pread(count: 4096, at: 0), [UInt8](repeating: 0xCC, count: 3_000))
        try reader.close()
    }

    /// Another process appends into the last (short) chunk and cuts the file: a coordinated pread
    /// inside the length the reader knew reads the current bytes.
    func testACoordinatedPreadInsideTheKnownLengthSeesAppendsAndCuts() throws {
        let env = try TestEnvironment(appID: "com.example.multiwriter")
        let path = env.path("grows")
        let other = try SecureServices(appID: "com.example.multiwriter", storeDirectory: env.directory + "/store", argonCost: .minimum)
        let w = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: other, sharing: .processes)
        try w.write([UInt8](repeating: 1, count: 5_000))
        let reader = try SecureFile.open(path, flags: O_RDONLY, services: env.services, sharing: .processes)
        XCTAssertEqual(try reader.pread(count: 10, at: 4_990), [UInt8](repeating: 1, count: 10))
        try w.pwrite([UInt8](repeating: 2, count: 3_000), at: 4_000)  // chunk 1 grows, its first bytes change
        XCTAssertEqual(try reader.pread(count: 10, at: 4_990), [UInt8](repeating: 2, count: 10))
        XCTAssertEqual(try reader.pread(count: 3_000, at: 4_500), [UInt8](repeating: 2, count: 2_500))
        try w.truncate(to: 4_100)
        XCTAssertEqual(try reader.pread(count: 200, at: 4_000), [UInt8](repeating: 2, count: 100))
        try w.truncate(to: 1_000)
        try w.truncate(to: 9_000)  // regrown over the reader's range: zeros now
        XCTAssertEqual(try reader.pread(count: 10, at: 4_990), [UInt8](repeating: 0, count: 10))
        try w.close()
        try reader.close()
    }

    /// The recheck after a failed authentication does not hide damage: a damaged chunk of a file
    /// that was not rewritten still fails, also in coordinated mode.
    func testACoordinatedReadOfADamagedChunkStillFails() throws {
        let env = try TestEnvironment(appID: "com.example.multiwriter")
        let path = env.path("damaged")
        let w = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services)
        try w.write([UInt8](repeating: 7, count: 12_288))
        try w.close()
        let reader = try SecureFile.open(path, flags: O_RDONLY, services: env.services, sharing: .processes)
        XCTAssertEqual(try reader.pread(count: 4096, at: 4096), [UInt8](repeating: 7, count: 4096))
        let layout = FileLayout()
        let fd = open(path, O_RDWR)
        var flipped: UInt8 = 0
        XCTAssertEqual(pread(fd, &flipped, 1, off_t(layout.chunkOffset(1) + 100)), 1)
        flipped ^= 1
        XCTAssertEqual(pwrite(fd, &flipped, 1, off_t(layout.chunkOffset(1) + 100)), 1)
        close(fd)
        XCTAssertThrowsError(try reader.pread(count: 4096, at: 4096)) { error in
            XCTAssertEqual((error as? SecureFileError)?.code, .badKeyOrCorruptData)
        }
        XCTAssertEqual(try reader.pread(count: 4096, at: 0), [UInt8](repeating: 7, count: 4096))
        try reader.close()
    }
}
