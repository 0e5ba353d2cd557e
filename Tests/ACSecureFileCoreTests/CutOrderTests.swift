#if canImport(Glibc)
import Glibc
#endif
import XCTest
import ACSecureTestSupport
@_spi(Testing) import ACSystemCalls
@testable import ACSecureFileCore

/// Cuts and emptying are ordered for a power loss (docs/FORMAT.md "Power loss"): the page cache
/// writes pages back in any order and the length may reach the device before or after the data
/// around it, so the steps that must persist in order are separated by `fdatasync`, and a cut is on
/// the device before anything else changes the file. These tests pin the order of the calls that
/// change the disk; the crash-state enumerator checks what every order the device may choose leaves.
final class CutOrderTests: XCTestCase {
    private enum Step: Equatable, CustomStringConvertible {
        case pwrite(count: Int, at: Int64), ftruncate(Int64), fdatasync, fsync
        var description: String {
            switch self {
            case .pwrite(let n, let at): return "pwrite(\(n) @\(at))"
            case .ftruncate(let l): return "ftruncate(\(l))"
            case .fdatasync: return "fdatasync"
            case .fsync: return "fsync"
            }
        }
    }

    /// The disk-changing calls `body` makes on this thread (the length given to `ftruncate` is not
    /// seen by the driver; it is read back from the file after the call, so cuts are told apart
    /// by the tests' expectations of count and order).
    private func steps(_ body: () throws -> Void) rethrows -> [Step] {
        var log: [Step] = []
        let driver = SystemCallDriver { call, count, offset in
            switch call {
            case .pwrite: log.append(.pwrite(count: count, at: offset))
            case .ftruncate: log.append(.ftruncate(-1))
            case .fdatasync: log.append(.fdatasync)
            case .fsync: log.append(.fsync)
            default: break
            }
            return nil
        }
        try SystemCallDriver.with(driver) { try body() }
        return log
    }

    private let record = Step.pwrite(count: 20, at: 108)  // the header's pending-end record
    private func chunkOffset(_ i: Int64) -> Int64 { FileLayout().chunkOffset(i) }
    private let trailer = FileLayout().trailerSize
    /// The tail copy a cut writes for its new end (version 4): the file's creation wrote copy 0
    /// and its sync copy 1, so a cut writes copy 2, in slot 0 — its descriptor, then the copies.
    private func tailCopy(_ copied: Int) -> Step { .pwrite(count: TailCopyDescriptor.size + copied, at: Int64(FileLayout.headerSize)) }

    private func makeFile(_ env: TestEnvironment, _ name: String, size: Int) throws -> SecureFile {
        let path = env.path(name)
        let w = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services)
        _ = try w.pwrite((0..<size).map { UInt8(truncatingIfNeeded: $0 &* 7) }, at: 0)
        try w.sync()
        try w.close()
        return try SecureFile.open(path, flags: O_RDWR, services: env.services)
    }

    func testAShrinkInsideAChunkRecordsItsEndOnTheDeviceBeforeRewritingTheChunkAndCutsLast() throws {
        let env = try TestEnvironment()
        let f = try makeFile(env, "inside", size: 65536)
        let cut = try steps { try f.truncate(to: 20000) }
        // Chunk 4 holds 16384..<20000 afterwards: 3616 bytes + 32 of overhead + the trailer (40 bytes in version 5).
        // Its tail copy goes to the device with the record, before the chunk is rewritten in place.
        XCTAssertEqual(cut, [record, tailCopy(3616 + 32 + trailer), .fdatasync, .pwrite(count: 3616 + 32 + trailer, at: chunkOffset(4)), .fdatasync, .ftruncate(-1)])
        // The next change first puts the cut on the device, then clears the record.
        let append = try steps { _ = try f.pwrite([1], at: 20000) }
        XCTAssertEqual(Array(append.prefix(2)), [.fdatasync, record], "\(append)")
        XCTAssertEqual(try f.size, 20001)
        XCTAssertEqual(try f.pread(count: 2, at: 19999), [UInt8(truncatingIfNeeded: 19999 &* 7), 1])
        try f.close()
    }

    func testAShrinkToAChunkBoundaryPutsRecordAndTrailerOnTheDeviceBeforeTheCut() throws {
        let env = try TestEnvironment()
        let f = try makeFile(env, "boundary", size: 65536)
        let cut = try steps { try f.truncate(to: 12288) }
        // (Version 5: the copy goes to the device before the 40-byte trailer, which may span two sectors.)
        XCTAssertEqual(cut, [record, .fdatasync, tailCopy(trailer), .fdatasync, .pwrite(count: trailer, at: chunkOffset(3)), .fdatasync, .ftruncate(-1)])
        // The application's own sync settles the cut: the record is cleared after it, and the next
        // change needs no barrier of its own.
        let sync = try steps { try f.sync() }
        XCTAssertEqual(sync, [.fsync, record])
        let append = try steps { _ = try f.pwrite([1, 2, 3], at: 12288) }
        XCTAssertFalse(append.contains(.fdatasync), "\(append)")
        try f.close()
        let reopened = try SecureFile.open(env.path("boundary"), flags: O_RDONLY, services: env.services)
        XCTAssertEqual(try reopened.size, 12291)
        XCTAssertEqual(try reopened.bytesAfterAuthenticatedEnd, 0)
        try reopened.close()
    }

    func testEmptyingPutsTheNewHeaderOnTheDeviceBeforeTheCut() throws {
        let env = try TestEnvironment()
        // A file larger than the recovery scan's window: the next change waits for the cut.
        let f = try makeFile(env, "empty", size: 1_200_000)
        let empty = try steps { try f.truncate(to: 0) }
        // The new header (recording 0) and the empty file's tail copy in one pwrite, inside the
        // first sector; the trailer after the slots once they are on the device.
        let emptying: [Step] = [.pwrite(count: 192 + trailer, at: 0), .fdatasync, .pwrite(count: trailer, at: chunkOffset(0)), .ftruncate(-1)]
        XCTAssertEqual(empty, emptying)
        let append = try steps { _ = try f.pwrite([9], at: 0) }
        XCTAssertEqual(Array(append.prefix(2)), [.fdatasync, record], "\(append)")
        try f.close()
        // A smaller one: wherever the cut and the next change land, the scan finds the end; only
        // the record is cleared first.
        let small = try makeFile(env, "small", size: 65536)
        XCTAssertEqual(try steps { try small.truncate(to: 0) }, emptying)
        let next = try steps { _ = try small.pwrite([9], at: 0) }
        XCTAssertEqual(next.first, record, "\(next)")
        XCTAssertFalse(next.contains(.fdatasync), "\(next)")
        try small.close()
        // O_TRUNC empties the same way.
        let again = try steps {
            let t = try SecureFile.open(env.path("empty"), flags: O_RDWR | O_TRUNC, services: env.services)
            try t.close()
        }
        XCTAssertEqual(again.filter { $0 != .fsync }, emptying)
    }

    func testACutOfTheLastChunkAloneNeedsNoRecord() throws {
        let env = try TestEnvironment()
        let f = try makeFile(env, "last-chunk", size: 12288 + 100)
        let cut = try steps { try f.truncate(to: 12288) }
        // Once the trailer is down, the old end's last chunk fails and the recovery scan finds the new end.
        XCTAssertEqual(cut, [tailCopy(trailer), .fdatasync, .pwrite(count: trailer, at: chunkOffset(3)), .fdatasync, .ftruncate(-1)])
        let append = try steps { _ = try f.pwrite([1], at: 12288) }
        XCTAssertFalse(append.contains(.fdatasync) || append.contains(record), "\(append)")
        try f.close()
    }

    func testAShrinkInsideTheLastChunkNeedsNoRecord() throws {
        let env = try TestEnvironment()
        let f = try makeFile(env, "last", size: 10000)
        let cut = try steps { try f.truncate(to: 9000) }
        // The old trailer stays at the old end until the cut: the end check finds the new end.
        // (Its tail copy first, on the device before the chunk is rewritten in place.)
        XCTAssertEqual(cut, [tailCopy(9000 - 8192 + 32 + trailer), .fdatasync, .pwrite(count: 9000 - 8192 + 32 + trailer, at: chunkOffset(2)), .fdatasync, .ftruncate(-1)])
        try f.close()
    }

    func testCoordinatedCutsAreOnTheDeviceBeforeTheLockIsReleased() throws {
        let env = try TestEnvironment()
        let path = env.path("coordinated")
        let w = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services)
        _ = try w.pwrite([UInt8](repeating: 5, count: 65536), at: 0)
        try w.close()
        let f = try SecureFile.open(path, flags: O_RDWR, services: env.services, sharing: .processes)
        let cut = try steps { try f.truncate(to: 12288) }
        XCTAssertEqual(Array(cut.suffix(3)), [.ftruncate(-1), .fdatasync, record], "no record is left for another process: \(cut)")
        try f.close()
    }
}
