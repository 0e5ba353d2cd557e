#if canImport(Glibc)
import Glibc
#endif
import XCTest
import ACSecureTestSupport
import Dispatch
import ACCrypto
@_spi(Testing) import ACSystemCalls
@testable import ACSecureFileCore

/// Many threads reading, writing, appending and truncating one file at once (issue 26 item 4): the
/// safety net for any change to how operations on a file exclude each other. Interleavings differ
/// from run to run, so the checks are invariants that hold for every interleaving rather than a
/// replay against a plain file:
///
/// - **Regions.** Each writer owns a 256 KiB region at the start of the file and writes whole chunks
///   there (one or two per call, and every 8th call the whole region, which several threads seal),
///   each chunk stamped with one (writer, version) value. The owner reads its region back
///   exactly as its own model says (nobody else writes it); readers may read any region, and every
///   chunk they read is one stamp whole (a read sees a write entirely or not at all, per chunk),
///   never a version older than one they saw before (no going back in time). Readers share one
///   handle and read whole chunks, parts of one chunk and spans from inside one chunk to inside
///   another: preads run with the file's lock held shared (`SecureFile.preadConcurrently`), so
///   these are what checks that a write or truncation excludes them, per chunk, on every read path.
/// - **Log.** After the regions, appenders add 128-byte records with `O_APPEND` (32 per chunk, none
///   across two chunks), and a truncator cuts the log back to a record boundary or grows it with
///   zeros. Every record anyone reads is a whole valid record or zeros; at the end, every record is
///   valid or zeros, and each appender's sequence numbers only go up along the file.
///
/// Run under ThreadSanitizer by scripts/test.d/45-tsan.sh.
final class ContentionStressTests: XCTestCase {
    static let writers = 2, readers = 2, appenders = 2
    /// A region is 256 KiB so that a writer's whole-region write is sealed in pieces by the sealing
    /// pool's threads too (`SharedFile.parallelSealBytes`).
    static let region = 1 << 18, chunk = 4096, record = 128
    static var logStart: Int { writers * region }

    /// A chunk's content: its stamp repeated (8 bytes: writer + 1, then the version).
    /// (Built and checked a word at a time: with generic per-byte code, which a debug build runs, the
    /// threads spent most of their time here, serialised on the runtime's metadata cache, not in the engine.)
    static func stampedChunk(writer: Int, version: UInt32) -> [UInt8] {
        let word = UInt64(UInt8(writer + 1)) | UInt64(version) << 32  // bytes: writer+1, 0, 0, 0, version (LE)
        return [UInt8](unsafeUninitializedCapacity: chunk) { b, initialized in
            let p = UnsafeMutableRawPointer(b.baseAddress!)
            var i = 0
            while i < chunk { p.storeBytes(of: word.littleEndian, toByteOffset: i, as: UInt64.self); i += 8 }
            initialized = chunk
        }
    }

    /// The stamp of a chunk read whole, or nil when it is not one stamp repeated (a torn chunk).
    static func stamp(of bytes: ArraySlice<UInt8>) -> (writer: Int, version: UInt32)? {
        guard bytes.count >= 8, bytes.count % 8 == 0 else { return nil }
        let first: UInt64? = bytes.withUnsafeBytes { b in
            let w = UInt64(littleEndian: b.loadUnaligned(as: UInt64.self))
            var i = 8
            while i < b.count {
                if UInt64(littleEndian: b.loadUnaligned(fromByteOffset: i, as: UInt64.self)) != w { return nil }
                i += 8
            }
            return w
        }
        guard let first else { return nil }
        if first == 0 { return (-1, 0) }  // never written yet
        return (Int(first & 0xFF) - 1, UInt32(truncatingIfNeeded: first >> 32))
    }

    /// A log record: magic, appender, sequence number, then a payload derived from them.
    static func logRecord(appender: Int, sequence: UInt32) -> [UInt8] {
        var r = [UInt8](repeating: 0, count: record)
        r[0] = 0xA5; r[1] = UInt8(appender)
        withUnsafeBytes(of: sequence.littleEndian) { r.replaceSubrange(4..<8, with: $0) }
        for i in 8..<record { r[i] = UInt8(truncatingIfNeeded: Int(sequence) &* 31 &+ i &+ appender) }
        return r
    }

    enum RecordCheck { case zeros, valid(appender: Int, sequence: UInt32), bad(String) }

    static func parseRecord(_ r: ArraySlice<UInt8>) -> RecordCheck {
        if r.allSatisfy({ $0 == 0 }) { return .zeros }
        guard r.count == record, r[r.startIndex] == 0xA5 else { return .bad("not a record") }
        let appender = Int(r[r.startIndex + 1])
        let sequence = r[(r.startIndex + 4)..<(r.startIndex + 8)].withUnsafeBytes { UInt32(littleEndian: $0.loadUnaligned(as: UInt32.self)) }
        guard appender < appenders, r.elementsEqual(logRecord(appender: appender, sequence: sequence)) else { return .bad("a torn or foreign record") }
        return .valid(appender: appender, sequence: sequence)
    }

    func testThreadsReadingWritingAppendingAndTruncatingOneFile() throws {
        try stress(readCache: .off, operations: Self.operations)
    }

    /// The same with a read cache smaller than the file: readers store into it and copy out of it
    /// while writers replace and truncation drops its chunks.
    func testThreadsOnOneFileWithAReadCache() throws {
        try stress(readCache: .bytes(64 << 10), operations: Self.operations / 2)
    }

    /// Operations per thread (ACSECURE_STRESS_OPERATIONS): 1,000 take about a second, under
    /// ThreadSanitizer (scripts/test.d/45-tsan.sh) about three.
    static var operations: Int { getenv("ACSECURE_STRESS_OPERATIONS").flatMap { Int(String(cString: $0)) } ?? 1000 }

    /// Checks the region part of a read of `got` at `offset` (below `logStart`): each chunk's part is
    /// one stamp, of the region's owner, not older than one seen before.
    static func checkRegionRead(_ got: [UInt8], at offset: Int, seen: inout [Int: UInt32], _ fail: (String) -> Void) {
        var at = offset
        while at < offset + got.count {
            let c = at / chunk
            let end = min(offset + got.count, (c + 1) * chunk)
            guard let s = stamp(of: got[(at - offset)..<(end - offset)]) else {
                fail("chunk \(c) (bytes \(at - c * chunk)..<\(end - c * chunk)) is not one write whole"); return
            }
            if s.writer >= 0, s.writer != c * chunk / region { fail("chunk \(c) holds writer \(s.writer)'s stamp") }
            if let before = seen[c], s.version < before { fail("chunk \(c) went back from version \(before) to \(s.version)") }
            seen[c] = s.version
            at = end
        }
    }

    func stress(readCache: SecureFile.ReadCache, operations: Int) throws {
        let env = try TestEnvironment()
        let path = env.path("contention")
        let setup = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services)
        try setup.pwrite([UInt8](repeating: 0, count: Self.logStart), at: 0)
        try setup.close()
        // The readers' one handle (pread on a shared descriptor).
        let readerHandle = try SecureFile.open(path, flags: O_RDONLY, services: env.services, readCache: readCache)
        defer { try? readerHandle.close() }
        let failures = LockedValue<[String]>([])
        @Sendable func fail(_ s: String) { failures.withLock { if $0.count < 20 { $0.append(s) } } }
        let services = env.services
        let models = LockedValue<[Int: [UInt32]]>([:])
        let roles = Self.writers + Self.readers + Self.appenders + 1

        DispatchQueue.concurrentPerform(iterations: roles) { role in
            var rng = SplitMix64(seed: UInt64(role) &* 0x9E37 &+ 11)
            do {
                if role < Self.writers {
                    // A writer: whole chunks of its own region, one or two per call, on one shared
                    // handle or a handle of its own (both paths of the state).
                    let f = try SecureFile.open(path, flags: O_RDWR, services: services, readCache: readCache)
                    defer { try? f.close() }
                    var versions = [UInt32](repeating: 0, count: Self.region / Self.chunk)
                    var next: UInt32 = 1
                    for i in 0..<operations {
                        // Every 8th call writes the whole region (large: sealed in pieces by several threads).
                        let c = i % 8 == 7 ? 0 : Int.random(in: 0..<(versions.count - 1), using: &rng)
                        let count = i % 8 == 7 ? versions.count : Int.random(in: 1...2, using: &rng)
                        var bytes: [UInt8] = []
                        for k in 0..<count { bytes += Self.stampedChunk(writer: role, version: next); versions[c + k] = next }
                        next += 1
                        try f.pwrite(bytes, at: Int64(role * Self.region + c * Self.chunk))
                        if i % 4 == 3 {
                            let all = try f.pread(count: Self.region, at: Int64(role * Self.region))
                            for (k, v) in versions.enumerated() {
                                let s = Self.stamp(of: all[(k * Self.chunk)..<((k + 1) * Self.chunk)])
                                if s.map({ $0.writer == (v == 0 ? -1 : role) && $0.version == v }) != true {
                                    fail("writer \(role): chunk \(k) of its region reads \(String(describing: s)), its model says version \(v)")
                                }
                            }
                        }
                    }
                    models.withLock { $0[role] = versions }
                } else if role < Self.writers + Self.readers {
                    // A reader: any region (whole chunks: one stamp each, never older than seen) and the log.
                    let f = readerHandle
                    var seen = [Int: UInt32]()
                    for _ in 0..<operations {
                        if Int.random(in: 0..<3, using: &rng) > 0 {
                            // Whole chunks, part of one chunk, or from inside one chunk to inside another.
                            let c = Int.random(in: 0..<(Self.logStart / Self.chunk - 2), using: &rng)
                            let (start, count): (Int, Int)
                            switch Int.random(in: 0..<3, using: &rng) {
                            case 0: (start, count) = (c * Self.chunk, 3 * Self.chunk)
                            case 1: (start, count) = (c * Self.chunk + 8 * Int.random(in: 0..<400, using: &rng), 8 * Int.random(in: 1...100, using: &rng))
                            default: (start, count) = (c * Self.chunk + 8 * Int.random(in: 1..<512, using: &rng), Self.chunk + 8 * Int.random(in: 1..<512, using: &rng))
                            }
                            let got = try f.pread(count: count, at: Int64(start))
                            if got.count != count { fail("reader \(role): short read \(got.count) of \(count) at \(start)") }
                            Self.checkRegionRead(got, at: start, seen: &seen) { fail("reader \(role): \($0)") }
                        } else {
                            let size = try f.size
                            let records = (Int(size) - Self.logStart) / Self.record
                            guard records > 0 else { continue }
                            let r = Int.random(in: 0..<records, using: &rng)
                            let got = try f.pread(count: Self.record, at: Int64(Self.logStart + r * Self.record))
                            // Cut meanwhile: short or empty. Otherwise one record whole, or zeros.
                            if got.count == Self.record, case .bad(let why) = Self.parseRecord(got[...]) { fail("reader \(role): log record \(r): \(why)") }
                        }
                    }
                } else if role < Self.writers + Self.readers + Self.appenders {
                    // An appender: O_APPEND records, each one write call.
                    let a = role - Self.writers - Self.readers
                    let f = try SecureFile.open(path, flags: O_WRONLY | O_APPEND, services: services)
                    defer { try? f.close() }
                    for s in 0..<UInt32(operations) {
                        let n = try f.write(Self.logRecord(appender: a, sequence: s))
                        if n != Self.record { fail("appender \(a): short append \(n)") }
                    }
                } else {
                    // The truncator: cuts the log to a record boundary, or grows it by zero records.
                    let f = try SecureFile.open(path, flags: O_RDWR, services: services)
                    defer { try? f.close() }
                    for _ in 0..<(operations / 4) {
                        let records = (Int(try f.size) - Self.logStart) / Self.record
                        // At most the last 3 records go, so most survive to be checked at the end.
                        let target = Bool.random(using: &rng) ? Int.random(in: max(0, records - 3)...max(0, records), using: &rng) : records + Int.random(in: 1...3, using: &rng)
                        try f.truncate(to: Int64(Self.logStart + target * Self.record))
                        usleep(UInt32.random(in: 0...300, using: &rng))
                    }
                }
            } catch { fail("role \(role): \(error)") }
        }

        XCTAssertEqual(failures.withLock { $0 }, [])
        // The file as a fresh open reads it.
        let f = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
        let all = try f.readAll()
        try f.close()
        XCTAssertEqual((all.count - Self.logStart) % Self.record, 0, "the log ends at a record boundary")
        for (w, versions) in models.withLock({ $0 }) {
            for (k, v) in versions.enumerated() {
                let at = w * Self.region + k * Self.chunk
                let s = Self.stamp(of: all[at..<(at + Self.chunk)])
                XCTAssertTrue(s.map { $0.writer == (v == 0 ? -1 : w) && $0.version == v } == true, "writer \(w)'s chunk \(k): \(String(describing: s)), expected version \(v)")
            }
        }
        var last = [Int: UInt32]()
        var valid = 0
        for r in 0..<((all.count - Self.logStart) / Self.record) {
            let at = Self.logStart + r * Self.record
            switch Self.parseRecord(all[at..<(at + Self.record)]) {
            case .bad(let why): XCTFail("log record \(r): \(why)")
            case .zeros: break
            case .valid(let a, let s):
                valid += 1
                if let before = last[a] { XCTAssertGreaterThan(s, before, "appender \(a)'s records out of order at record \(r)") }
                last[a] = s
            }
        }
        XCTAssertGreaterThan(valid, Self.appenders * operations / 2, "most records survive the cuts")
    }

    /// Two threads' preads of one file, on a handle each and on one shared handle, are inside the
    /// read system call at the same time: each thread's pread waits there (a system-call driver)
    /// until the other's arrives. With the file's lock held exclusively across the read, the second
    /// could never arrive and the first would give up after 5 s.
    func testPreadsOfOneFileRunAtOnce() throws {
        let env = try TestEnvironment()
        let path = env.path("at-once")
        let setup = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services)
        try setup.pwrite([UInt8](repeating: 7, count: 8 * Self.chunk), at: 0)
        try setup.close()
        for sharedHandle in [false, true] {
            let one = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
            let handles = sharedHandle ? [one, one] : [one, try SecureFile.open(path, flags: O_RDONLY, services: env.services)]
            // The end is authenticated by a first read (that one takes the lock exclusively).
            XCTAssertEqual(try one.pread(count: 1, at: 0), [7])
            let arrived = [DispatchSemaphore(value: 0), DispatchSemaphore(value: 0)]
            let met = LockedValue<[Bool]>([false, false])
            DispatchQueue.concurrentPerform(iterations: 2) { t in
                var waited = false
                let driver = SystemCallDriver { call, _, _ in
                    if call == .pread, !waited {
                        waited = true
                        arrived[t].signal()
                        let other = arrived[1 - t].wait(timeout: .now() + 5) == .success
                        met.withLock { $0[t] = other }
                    }
                    return nil
                }
                SystemCallDriver.with(driver) {
                    let got = try? handles[t].pread(count: Self.chunk, at: Int64((2 + t) * Self.chunk))
                    XCTAssertEqual(got, [UInt8](repeating: 7, count: Self.chunk))
                }
            }
            XCTAssertEqual(met.withLock { $0 }, [true, true], sharedHandle ? "one shared handle" : "a handle each")
            try one.close()
            if !sharedHandle { try handles[1].close() }
        }
    }
}

extension ContentionStressTests {
    /// Regression (found by FuzzOperationSequence, fuzz/FailCases/FuzzOperationSequence): a pread of
    /// part of the short last chunk, on the shared-lock path, kept it in the one-chunk cache without
    /// zeroing the buffer after its length when the cache had been marked empty (a write had
    /// composed another chunk elsewhere and left the buffer as it was). A later write past that
    /// chunk's end then padded it with those stale bytes, not zeros, and sealed them into the file.
    func testAPartialReadOfTheLastChunkThenAWritePastItsEndLeavesZeros() throws {
        let env = try TestEnvironment()
        let path = env.path("stale-tail")
        let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services)
        let first = (0..<14_000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ 1) }
        try f.pwrite(first, at: 0)
        _ = try f.pread(count: 100, at: 0)                                 // chunk 0 (full) in the cache
        let middle = [UInt8](repeating: 0xEE, count: 12_288 - 4_100)
        try f.pwrite(middle, at: 4_100)                                      // composes chunk 1 elsewhere; the cache is marked empty
        _ = try f.pread(count: 100, at: 12_288)                              // part of the short last chunk 3 (1,712 bytes)
        try f.pwrite([9, 9, 9], at: 15_000)                                  // pads chunk 3 from 14,000
        var expected = first
        expected.replaceSubrange(4_100..<12_288, with: middle)
        expected += [UInt8](repeating: 0, count: 1_000) + [9, 9, 9]
        XCTAssertEqual(try f.readAll(), expected)
        try f.close()
        let g = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
        XCTAssertEqual(try g.pread(count: 1_000, at: 14_000), [UInt8](repeating: 0, count: 1_000), "the padding reads as zeros")
        try g.close()
    }
}
