#if canImport(Glibc)
import Glibc
#endif
import XCTest
import ACSecureTestSupport
import ACCrypto
import ACSecureServices
@_spi(Testing) import ACSystemCalls
@testable import ACSecureFileCore

/// The engine's promises beyond plain POSIX equivalence: keys, errors, file types, holes, sharing.
final class EngineBehaviourTests: XCTestCase {
    // MARK: secure services state

    /// The whole-buffer helpers every layer uses (Foundation, sharing, CLI): all bytes or the end of file.
    func testFullyHelpersWriteAndReadWholeBuffersAndStopAtTheEnd() throws {
        let env = try TestEnvironment()
        let f = try SecureFile.open(env.path("fully"), flags: O_RDWR | O_CREAT, services: env.services)
        let plain = (0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        try plain.withUnsafeBytes { try f.pwriteFully(UnsafeRawBufferPointer(rebasing: $0[0..<100_000]), at: 0) }
        try plain.withUnsafeBytes { try f.writeFully(UnsafeRawBufferPointer(rebasing: $0[0..<0])) }  // empty: no progress needed
        _ = try f.seek(100_000, whence: SEEK_SET)
        try plain.withUnsafeBytes { try f.writeFully(UnsafeRawBufferPointer(rebasing: $0[100_000...])) }
        var back = [UInt8](repeating: 0, count: 400_000)
        let n = try back.withUnsafeMutableBytes { try f.preadFully(into: $0, at: 0) }
        XCTAssertEqual(n, plain.count, "stops at the end of the file")
        XCTAssertEqual(Array(back[0..<n]), plain)
        XCTAssertEqual(try back.withUnsafeMutableBytes { try f.preadFully(into: $0, at: 300_000) }, 0)
        try f.close()
    }

    /// `copyPlaintext` sizes its buffer to the file (up to 1 MiB): every size copies exactly,
    /// including empty, sizes around the 4 KiB rounding and files larger than the buffer.
    func testCopyPlaintextCopiesEverySizeExactly() throws {
        let env = try TestEnvironment()
        for (i, size) in [0, 1, 4095, 4097, 70_000, (1 << 20) + 1, 2_500_000].enumerated() {
            let data = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ i) }
            let source = try SecureFile.open(env.path("source-\(i)"), flags: O_RDWR | O_CREAT, services: env.services)
            try data.withUnsafeBytes { try source.pwriteFully($0, at: 0) }
            let copy = try SecureFile.open(env.path("copy-\(i)"), flags: O_RDWR | O_CREAT, services: env.services)
            try source.copyPlaintext(to: copy)
            XCTAssertEqual(try copy.size, Int64(size), "size \(size)")
            XCTAssertEqual(try copy.pread(count: size + 1, at: 0), data, "size \(size)")
            try source.close()
            try copy.close()
        }
    }

    /// `writev` gathers buffers under 64 KiB into one write and writes larger ones as they are,
    /// in order: the same bytes and results as `writev(2)` on a plain file, for mixes around the
    /// limit (a staging buffer that fills and is written mid-call), at an offset and with O_APPEND.
    func testWritevGathersSmallBuffersInOrderAsPlainWritev() throws {
        let env = try TestEnvironment()
        let layouts: [[Int]] = [
            [100, 70_000, 3, 65_535, 65_536, 40_000, 30_000, 1],
            [1, 2, 3, 4096, 0, 5000],
            [60_000, 60_000, 60_000],
            [0, 200_000, 10],
            [7],
        ]
        for (i, sizes) in layouts.enumerated() {
            for append in [false, true] {
                let datas = sizes.enumerated().map { k, n in (0..<n).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ k &+ i) } }
                let flags = O_RDWR | O_CREAT | (append ? O_APPEND : 0)
                let plainPath = env.path("plain-\(i)-\(append)"), securePath = env.path("secure-\(i)-\(append)")
                let plain = open(plainPath, flags, 0o600)
                XCTAssertGreaterThanOrEqual(plain, 0)
                let secure = try SecureFile.open(securePath, flags: flags, services: env.services)
                let start = [UInt8](repeating: 0xEE, count: 5000)
                XCTAssertEqual(start.withUnsafeBytes { Glibc.write(plain, $0.baseAddress, $0.count) }, 5000)
                _ = try secure.write(start)
                XCTAssertEqual(lseek(plain, 1234, SEEK_SET), 1234)
                XCTAssertEqual(try secure.seek(1234, whence: SEEK_SET), 1234)
                var iov = datas.map { d in iovec(iov_base: UnsafeMutableRawPointer(mutating: d.withUnsafeBytes { $0.baseAddress }), iov_len: d.count) }
                let expected = withExtendedLifetime(datas) { Glibc.writev(plain, &iov, Int32(iov.count)) }
                let got = try withExtendedLifetime(datas) { try secure.writev(datas.map { d in d.withUnsafeBytes { $0 } }) }
                XCTAssertEqual(got, expected, "\(sizes) append \(append)")
                XCTAssertEqual(try secure.seek(0, whence: SEEK_CUR), Int64(lseek(plain, 0, SEEK_CUR)), "offset after \(sizes)")
                close(plain)
                try secure.close()
                let reopened = try SecureFile.open(securePath, flags: O_RDONLY, services: env.services)
                let back = try reopened.pread(count: 1 << 20, at: 0), want = readWholeFile(plainPath)
                let differs = back.indices.first { $0 >= want.count || back[$0] != want[$0] } ?? (back.count == want.count ? nil : back.count)
                XCTAssertNil(differs, "\(sizes) append \(append): the bytes differ from plain writev's from \(differs ?? 0) (\(back.count) against \(want.count) bytes)")
                try reopened.close()
            }
        }
        // No guarded memory to gather in: ENOMEM (ACE_LOW_MEMORY_ERROR), nothing written.
        let f = try SecureFile.open(env.path("no-memory"), flags: O_RDWR | O_CREAT, services: env.services)
        SecureFileTesting.simulateGuardedMemoryExhaustion(true)
        defer { SecureFileTesting.simulateGuardedMemoryExhaustion(false) }
        let two = [UInt8](repeating: 1, count: 10)
        XCTAssertEqual(aceCode { _ = try two.withUnsafeBytes { try f.writev([$0, $0]) } }, .lowMemory)
        SecureFileTesting.simulateGuardedMemoryExhaustion(false)
        XCTAssertEqual(try f.size, 0)
        try f.close()
    }

    func testHandlesOpenedBeforeLockFailCleanlyAndWorkAfterUnlock() throws {
        let env = try TestEnvironment(passcode: "1234")
        let path = env.path("f")
        let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services)
        let data = Array("attack at dawn".utf8)
        try f.write(data)  // stays in the write-back cache

        env.services.lock()
        XCTAssertEqual(aceCode { _ = try f.pread(count: 10, at: 0) }, .noKeys)
        XCTAssertEqual(aceCode { try f.write([1]) }, .noKeys)
        XCTAssertEqual(aceCode { try f.truncate(to: 0) }, .noKeys)
        XCTAssertEqual(aceCode { _ = try f.stat() }, .noKeys)
        XCTAssertEqual(aceCode { _ = try f.seek(0, whence: SEEK_END) }, .noKeys)
        XCTAssertEqual(errnoOf { _ = try f.pread(count: 10, at: 0) }, EACCES)
        XCTAssertEqual(aceCode { _ = try SecureFile.open(path, flags: O_RDONLY, services: env.services) }, .noKeys)
        // Lock flushed the cached write and wiped the plaintext cache.
        XCTAssertEqual(f.shared.cacheIndex, -1)
        XCTAssertNil(f.shared.cipher)
        XCTAssertTrue(f.shared.cache.withUnsafeBytes { $0.allSatisfy { $0 == 0 } })

        try env.services.unlock(passcode: try SecureBytes(copying: Array("1234".utf8)))
        XCTAssertEqual(try f.pread(count: 100, at: 0), data)
        try f.close()
    }

    /// Appends from a chunk-aligned end keep the new short last chunk in the plaintext cache (it
    /// came whole from the caller's buffer): the next appends read nothing back, and a hole written
    /// inside that chunk afterwards still reads as zeros. (One exception, for kill safety: an append
    /// that fills the short last chunk across two pages reads the end it first copies — a tail copy
    /// cannot hold a full chunk — so only appends that fill a chunk may read, once each.)
    func testAppendsFromAChunkAlignedEndReadNothingBack() throws {
        let env = try TestEnvironment()
        let path = env.path("f")
        let chunk = FileLayout().chunkSize
        let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT | O_APPEND, services: env.services, buffering: .writeThrough)
        var expected: [UInt8] = []
        func append(_ count: Int) throws {
            let bytes = (0..<count).map { UInt8(truncatingIfNeeded: expected.count + $0 &* 31 + 1) }
            XCTAssertEqual(try f.write(bytes), count)
            expected += bytes
        }
        final class Count: @unchecked Sendable { var preads = 0 }
        let count = Count()
        var preads = 0, endingAChunk = 0
        let driver = SystemCallDriver { call, _, _ in
            if call == .pread { count.preads += 1 }
            return nil
        }
        func appendCounted(_ n: Int) throws {
            count.preads = 0
            let fills = expected.count % chunk != 0 && expected.count % chunk + n >= chunk
            try append(n)
            if fills { endingAChunk += count.preads } else { preads += count.preads }
        }
        try SystemCallDriver.with(driver) {
            for _ in 0..<(3 * chunk / 512) { try appendCounted(512) }  // every 8th from an aligned end
            try appendCounted(chunk)
            for _ in 0..<100 { try appendCounted(100) }  // crosses chunk ends inside a call
        }
        XCTAssertEqual(preads, 0, "sequential appends read no chunk back")
        XCTAssertLessThanOrEqual(endingAChunk, 4, "at most one read per append that fills a chunk (4 in all)")
        XCTAssertEqual(f.shared.cacheIndex, Int64(expected.count / chunk))

        // A write past the end inside the cached chunk (another handle: the same file state and
        // cache): the gap reads as zeros.
        XCTAssertLessThan(expected.count % chunk + 42, chunk)
        let g = try SecureFile.open(path, flags: O_RDWR, services: env.services, buffering: .writeThrough)
        XCTAssertEqual(try g.pwrite([7, 7], at: Int64(expected.count + 40)), 2)
        expected += Array(repeating: 0, count: 40) + [7, 7]
        try append(3)
        try g.close()
        try f.close()
        let r = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
        XCTAssertEqual(try r.pread(count: expected.count + 10, at: 0), expected)
        try r.close()
    }

    func testRetireMakesEveryFileUnreadable() throws {
        let env = try TestEnvironment()
        let path = env.path("f")
        let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services)
        try f.write(Array(repeating: 7, count: 10_000))
        try f.close()
        try env.services.retire()
        XCTAssertEqual(aceCode { _ = try SecureFile.open(path, flags: O_RDONLY, services: env.services) }, .noKeys)
        // A new store in the same place has a new seed: the old file does not open.
        let reborn = try SecureServices(appID: "com.example.tests", storeDirectory: env.directory + "/store", argonCost: .minimum)
        XCTAssertEqual(aceCode { _ = try SecureFile.open(path, flags: O_RDONLY, services: reborn) }, .badKeyOrCorruptData)
    }

    // MARK: keys

    func testAnotherAppCannotOpenAppFilesButGroupMembersCanOpenGroupFiles() throws {
        let env = try TestEnvironment(appID: "app.one")
        let other = try SecureServices(appID: "app.two", storeDirectory: env.directory + "/store", argonCost: .minimum)
        let appFile = env.path("app"), groupFile = env.path("group")
        var f = try SecureFile.open(appFile, flags: O_RDWR | O_CREAT, services: env.services)
        try f.write([1, 2, 3]); try f.close()
        f = try SecureFile.open(groupFile, flags: O_RDWR | O_CREAT, key: .group("team"), services: env.services)
        try f.write([4, 5, 6]); try f.close()

        XCTAssertEqual(aceCode { _ = try SecureFile.open(appFile, flags: O_RDONLY, services: other) }, .badKeyOrCorruptData)
        XCTAssertEqual(aceCode { _ = try SecureFile.open(groupFile, flags: O_RDONLY, services: other) }, .badKeyOrCorruptData)
        XCTAssertEqual(aceCode { _ = try SecureFile.open(groupFile, flags: O_RDONLY, key: .group("other"), services: other) }, .badKeyOrCorruptData)
        let g = try SecureFile.open(groupFile, flags: O_RDONLY, key: .group("team"), services: other)
        XCTAssertEqual(try g.readAll(), [4, 5, 6])
        try g.close()
    }

    func testASecondOpenerNeedsTheKeyToo() throws {
        // Shared in-process state must not let a handle without the group key read a group file.
        let env = try TestEnvironment()
        let path = env.path("g")
        let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT, key: .group("team"), services: env.services)
        try f.write([9, 9, 9])
        XCTAssertEqual(aceCode { _ = try SecureFile.open(path, flags: O_RDONLY, key: .app, services: env.services) }, .badKeyOrCorruptData)
        XCTAssertEqual(aceCode { _ = try SecureFile.open(path, flags: O_RDONLY, key: .group("x"), services: env.services) }, .badKeyOrCorruptData)
        try f.close()
    }

    func testRewrapIsHeaderOnlyAndMovesTheFileToTheNewKey() throws {
        let env = try TestEnvironment()
        let path = env.path("r")
        var rng = SplitMix64(seed: 3)
        let data = randomBytes(50_000, &rng)
        var f = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services)
        try f.write(data); try f.close()
        let before = readWholeFile(path)
        try SecureFileSystem.rewrap(path, from: .app, to: .group("team"), services: env.services)
        let after = readWholeFile(path)
        XCTAssertEqual(before.count, after.count)
        XCTAssertEqual(Array(before[128...]), Array(after[128...]), "only the header may change")
        XCTAssertNotEqual(Array(before[0..<128]), Array(after[0..<128]))
        XCTAssertEqual(aceCode { _ = try SecureFile.open(path, flags: O_RDONLY, services: env.services) }, .badKeyOrCorruptData)
        f = try SecureFile.open(path, flags: O_RDONLY, key: .group("team"), services: env.services)
        XCTAssertEqual(try f.readAll(), data)
        try f.close()
        XCTAssertEqual(try SecureFileSystem.info(path).keyClassName, "group")
    }

    func testAFixedKeyProviderOpensFilesWithoutServices() throws {
        let kek = try KeyEncryptionKey(key: try SecureBytes(randomCount: 32), keyClass: .cryptoBlock)
        let provider = FixedKeyProvider(kek: kek)
        let env = try TestEnvironment()
        let path = env.path("x")
        var f = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: provider)
        try f.write([1, 2, 3, 4]); try f.close()
        f = try SecureFile.open(path, flags: O_RDONLY, services: FixedKeyProvider(kek: kek))
        XCTAssertEqual(try f.readAll(), [1, 2, 3, 4])
        try f.close()
        let otherKEK = try KeyEncryptionKey(key: try SecureBytes(randomCount: 32), keyClass: .cryptoBlock)
        XCTAssertEqual(aceCode { _ = try SecureFile.open(path, flags: O_RDONLY, services: FixedKeyProvider(kek: otherKEK)) }, .badKeyOrCorruptData)
    }

    // MARK: what is not a secure file

    func testPlainFilesAndOtherFormatsAreRefused() throws {
        let env = try TestEnvironment()
        let plain = env.path("plain")
        writeWholeFile(plain, Array("just some text, not encrypted at all, long enough for a header".utf8) + [UInt8](repeating: 0x41, count: 200))
        XCTAssertEqual(aceCode { _ = try SecureFile.open(plain, flags: O_RDONLY, services: env.services) }, .badKeyOrCorruptData)
        XCTAssertEqual(aceCode { _ = try SecureFile.open(plain, flags: O_RDWR, services: env.services) }, .badKeyOrCorruptData)
        XCTAssertEqual(readWholeFile(plain).count, 262, "a refused open never changes the file")
        // O_TRUNC of a plain file replaces it, as open(2) would.
        let f = try SecureFile.open(plain, flags: O_RDWR | O_TRUNC, services: env.services)
        XCTAssertEqual(try f.size, 0)
        try f.close()
        XCTAssertEqual(readWholeFile(plain).count, Int(FileLayout().physicalSize(forPlaintextSize: 0)))

        // A secure file of another store is never destroyed by O_TRUNC.
        let foreignEnv = try TestEnvironment()
        let foreign = env.path("foreign")
        let g = try SecureFile.open(foreign, flags: O_RDWR | O_CREAT, services: foreignEnv.services)
        try g.write([1, 2, 3]); try g.close()
        let bytes = readWholeFile(foreign)
        XCTAssertEqual(aceCode { _ = try SecureFile.open(foreign, flags: O_RDWR | O_TRUNC, services: env.services) }, .badKeyOrCorruptData)
        XCTAssertEqual(readWholeFile(foreign), bytes)
    }

    func testOnlyRegularFiles() throws {
        let env = try TestEnvironment()
        let dir = env.path("dir")
        mkdir(dir, 0o755)
        XCTAssertEqual(errnoOf { _ = try SecureFile.open(dir, flags: O_RDONLY, services: env.services) }, EISDIR)
        XCTAssertEqual(aceCode { _ = try SecureFile.open(dir, flags: O_RDONLY, services: env.services) }, .regularFileOnly)
        XCTAssertEqual(errnoOf { _ = try SecureFile.open(dir, flags: O_RDWR, services: env.services) }, EISDIR)
        let fifo = env.path("fifo")
        mkfifo(fifo, 0o644)
        // Must not block waiting for a writer.
        XCTAssertEqual(aceCode { _ = try SecureFile.open(fifo, flags: O_RDONLY, services: env.services) }, .regularFileOnly)
        XCTAssertEqual(errnoOf { _ = try SecureFile.open(env.path("missing"), flags: O_RDONLY, services: env.services) }, ENOENT)
        let f = try SecureFile.open(env.path("e"), flags: O_RDWR | O_CREAT | O_EXCL, services: env.services)
        try f.close()
        XCTAssertEqual(errnoOf { _ = try SecureFile.open(env.path("e"), flags: O_RDWR | O_CREAT | O_EXCL, services: env.services) }, EEXIST)
        XCTAssertEqual(errnoOf { _ = try SecureFile.open(env.path("e"), flags: O_RDWR | O_DIRECTORY, services: env.services) }, EINVAL)
    }

    func testAccessModeErrors() throws {
        let env = try TestEnvironment()
        let path = env.path("m")
        var f = try SecureFile.open(path, flags: O_WRONLY | O_CREAT, services: env.services)
        XCTAssertEqual(aceCode { _ = try f.pread(count: 1, at: 0) }, .readOnWriteOnly)
        XCTAssertEqual(errnoOf { _ = try f.pread(count: 1, at: 0) }, EBADF)
        try f.close()
        XCTAssertEqual(errnoOf { try f.close() }, EBADF)
        f = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
        XCTAssertEqual(aceCode { try f.write([1]) }, .writeOnReadOnly)
        XCTAssertEqual(aceCode { try f.truncate(to: 0) }, .truncOnReadOnly)
        XCTAssertEqual(errnoOf { try f.truncate(to: 0) }, EINVAL)
        try f.close()
        f = try SecureFile.open(path, flags: O_RDWR, services: env.services)
        XCTAssertEqual(aceCode { try f.truncate(to: -1) }, .negativeFileLength)
        XCTAssertEqual(aceCode { try f.truncate(to: SecureFile.maximumFileSize + 1) }, .fileTooBig)
        XCTAssertEqual(aceCode { try f.pwrite([1], at: SecureFile.maximumFileSize) }, .fileTooBig)
        XCTAssertEqual(errnoOf { try f.pwrite([1], at: SecureFile.maximumFileSize) }, EFBIG)
        XCTAssertEqual(aceCode { _ = try f.seek(-1, whence: SEEK_SET) }, .negativeFileLength)
        XCTAssertEqual(aceCode { _ = try f.seek(SecureFile.maximumFileSize + 1, whence: SEEK_SET) }, .fileTooBig)
        XCTAssertEqual(aceCode { _ = try f.seek(0, whence: 99) }, .invalidArgument)
        XCTAssertEqual(try f.size, 0, "refused operations change nothing")
        try f.close()
    }

    // MARK: holes, sizes, sharing

    func testHolesReadAsAuthenticatedZeros() throws {
        let env = try TestEnvironment()
        let path = env.path("h")
        let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services)
        try f.pwrite([0xAA], at: 100_000)
        try f.close()
        let g = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
        let all = try g.readAll()
        XCTAssertEqual(all.count, 100_001)
        XCTAssertTrue(all[0..<100_000].allSatisfy { $0 == 0 })
        XCTAssertEqual(all.last, 0xAA)
        try g.close()
        // Zeroing a hole chunk on disk is detected: holes are encrypted like any data.
        let fd = open(path, O_WRONLY)
        let zeros = [UInt8](repeating: 0, count: FileLayout().physicalChunkSize)
        _ = zeros.withUnsafeBytes { Glibc.pwrite(fd, $0.baseAddress, $0.count, off_t(FileLayout().chunkOffset(3))) }
        close(fd)
        let h = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
        XCTAssertEqual(aceCode { _ = try h.pread(count: 10, at: 3 * 4096) }, .badKeyOrCorruptData)
        XCTAssertEqual(try h.pread(count: 10, at: 0), [UInt8](repeating: 0, count: 10), "other chunks still read")
        try h.close()
    }

    func testStatAndLstatReportThePlaintextSizeInConstantTime() throws {
        let env = try TestEnvironment()
        let path = env.path("s")
        let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services)
        for size: Int64 in [0, 1, 4095, 4096, 4097, 12_288, 100_000] {
            try f.truncate(to: size)
            try f.sync()
            XCTAssertEqual(Int64(try f.stat().st_size), size)
            XCTAssertEqual(Int64(try SecureFileSystem.lstat(path).st_size), size)
            XCTAssertEqual(try SecureFileSystem.info(path).plaintextSize, size)
            var st = stat()
            lstat(path, &st)
            XCTAssertEqual(Int64(st.st_size), FileLayout().physicalSize(forPlaintextSize: size))
        }
        try f.close()
        // Storage overhead at the default chunk size: 32/4096 (version 2, within the 0.8 % budget),
        // 28/4096 (version 1).
        let physical = Double(FileLayout().physicalSize(forPlaintextSize: 1 << 30))
        XCTAssertLessThanOrEqual(physical / Double(1 << 30) - 1, 0.008)
        let physicalV1 = Double(FileLayout(version: 1).physicalSize(forPlaintextSize: 1 << 30))
        XCTAssertLessThanOrEqual(physicalV1 / Double(1 << 30) - 1, 0.007)
    }

    func testHandlesOnTheSameFileSeeEachOthersWritesAtOnce() throws {
        let env = try TestEnvironment()
        let path = env.path("shared")
        let a = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services)
        let b = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
        try a.write(Array("hello".utf8))  // only in the write-back cache
        XCTAssertEqual(try b.pread(count: 5, at: 0), Array("hello".utf8))
        XCTAssertEqual(try b.size, 5)
        // The path can be renamed while open; the file stays readable (the AAD binds the file ID).
        try SecureFileSystem.rename(path, env.path("renamed"))
        try a.close()
        XCTAssertEqual(try b.pread(count: 5, at: 0), Array("hello".utf8))
        try b.close()
        let c = try SecureFile.open(env.path("renamed"), flags: O_RDONLY, services: env.services)
        XCTAssertEqual(try c.readAll(), Array("hello".utf8))
        try c.close()
    }

    func testTruncateByPathAndEmptyFiles() throws {
        let env = try TestEnvironment()
        let path = env.path("t")
        // A 0-byte file (e.g. from touch) is not a secure file — also for a creating open, as a
        // secure file cut to 0 bytes looks the same — until O_TRUNC empties it on purpose.
        close(open(path, O_CREAT | O_WRONLY, 0o644))
        XCTAssertEqual(aceCode { _ = try SecureFile.open(path, flags: O_RDONLY, services: env.services) }, .badKeyOrCorruptData)
        XCTAssertEqual(aceCode { _ = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services) }, .badKeyOrCorruptData)
        let created = try SecureFile.open(path, flags: O_RDWR | O_TRUNC, services: env.services)
        try created.close()
        XCTAssertEqual(fileSize(path), FileLayout().physicalSize(forPlaintextSize: 0), "an O_TRUNC open writes the header and the empty trailer")
        let r = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
        XCTAssertEqual(try r.readAll(), [])
        try r.close()
        try SecureFileSystem.truncate(path, to: 5000, services: env.services)
        let f = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
        XCTAssertEqual(try f.readAll(), [UInt8](repeating: 0, count: 5000))
        try f.close()
        XCTAssertEqual(aceCode { try SecureFileSystem.truncate(path, to: -5, services: env.services) }, .negativeFileLength)
    }

    func testManyThreadsOnOneHandle() throws {
        let env = try TestEnvironment()
        let path = env.path("threads")
        let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services)
        let threads = 8, perThread = 40, block = 3000
        DispatchQueueless.concurrentPerform(iterations: threads) { t in
            for i in 0..<perThread {
                let value = UInt8(truncatingIfNeeded: t * 31 + i)
                let at = Int64((t * perThread + i) * block)
                _ = try? f.pwrite([UInt8](repeating: value, count: block), at: at)
            }
        }
        for t in 0..<threads {
            for i in 0..<perThread {
                let at = Int64((t * perThread + i) * block)
                XCTAssertEqual(try f.pread(count: block, at: at), [UInt8](repeating: UInt8(truncatingIfNeeded: t * 31 + i), count: block))
            }
        }
        try f.close()
    }

    /// An append inside the last chunk of a version 4 file writes the chunk and its new trailer in
    /// one `pwrite` when they lie in one page (a kill stops a write only between pages); when its
    /// part before the old end spans two pages, it first copies the end as it is into a tail-copy
    /// slot, then writes chunk and trailer in one `pwrite`; otherwise beyond the old end first, then
    /// the part before it. A version 3 file (no tail copies) always splits. A version 5 file (the
    /// default) seals the append alone, as a record, and writes it with the new trailer over the old
    /// trailer: one `pwrite` in one page, else beyond the old end first, then the old trailer's
    /// place; never a copy. Checked from the system calls themselves.
    func testAnAppendIsOneWriteInOnePageAndCopiesTheEndFirstWhereAKillCouldTearIt() throws {
        let env = try TestEnvironment()
        let v3 = env.path("v3")
        writeWholeFile(v3, readWholeFile(FormatVectorTests.directory + "/v3/multi-chunk.acsf"))
        let v4 = env.path("v4")
        writeWholeFile(v4, readWholeFile(FormatVectorTests.directory + "/v4/multi-chunk.acsf"))
        let v5 = env.path("v5")
        let vectorKeys = FixedKeyProvider(kek: try FormatVectorTests.kek())
        let files: [(name: String, path: String, file: SecureFile)] = [
            ("version 5", v5, try SecureFile.open(v5, flags: O_RDWR | O_CREAT | O_APPEND, mode: 0o600, services: env.services)),
            ("version 4", v4, try SecureFile.open(v4, flags: O_RDWR | O_APPEND, services: vectorKeys)),
            ("version 3", v3, try SecureFile.open(v3, flags: O_RDWR | O_APPEND, services: vectorKeys)),
        ]
        final class Writes: @unchecked Sendable { var list: [(offset: Int64, count: Int)] = [] }
        let writes = Writes()
        func onePage(_ offset: Int64, _ count: Int) -> Bool { offset / 4096 == (offset + Int64(count) - 1) / 4096 }
        let slots = [FileLayout(version: 4).tailCopyOffset(0), FileLayout(version: 4).tailCopyOffset(1)]
        for (name, path, f) in files {
            var single = 0, split = 0, copied = 0, other = 0
            for k in 0..<120 {
                let before = try f.size
                let oldEnd = fileSize(path)
                writes.list = []
                SecureFileTesting.transferFaultInjector = { call, count, offset in
                    if call == .pwrite { writes.list.append((offset, count)) }
                    return nil
                }
                _ = try f.write([UInt8](repeating: UInt8(k), count: 100))
                SecureFileTesting.transferFaultInjector = nil
                // An append past a chunk's end is two runs: not this test's shape.
                if before / 4096 != (before + 99) / 4096 || before % 4096 == 0 { continue }
                let w = writes.list
                if name == "version 5" {
                    let trailer = Int64(FileLayout().trailerSize), record = 100 + TailShape.recordOverhead
                    if w.count == 1 {
                        XCTAssertEqual(w[0].offset, oldEnd - trailer, "append \(k): over the old trailer: \(w)")
                        XCTAssertEqual(w[0].count, record + Int(trailer), "append \(k): the record and the trailer: \(w)")
                        XCTAssertTrue(onePage(w[0].offset, w[0].count), "append \(k): one write across a page boundary: \(w)")
                        single += 1
                    } else if w.count == 2 && w[0].offset == oldEnd {
                        XCTAssertEqual(w[1].offset, oldEnd - trailer, "append \(k): then the old trailer's place: \(w)")
                        XCTAssertEqual(w[1].count, Int(trailer), "append \(k): \(w)")
                        XCTAssertFalse(onePage(w[1].offset, w[1].count + w[0].count), "append \(k): two writes where one would do: \(w)")
                        split += 1
                    } else {
                        other += 1  // the records reached their limit, or the old trailer spans two pages
                    }
                    continue
                }
                if w.count == 1 {
                    XCTAssertTrue(w[0].offset < oldEnd && w[0].offset + Int64(w[0].count) > oldEnd, "\(name), append \(k): \(w)")
                    XCTAssertTrue(onePage(w[0].offset, w[0].count),
                                  "\(name), append \(k): one write across a page boundary, where a kill could cut it: \(w), old end \(oldEnd)")
                    XCTAssertNotEqual(name, "version 3", "append \(k): a version 3 file has no tail copy to fall back on")
                    single += 1
                } else if w.count == 2 && slots.contains(w[0].offset) {
                    XCTAssertEqual(name, "version 4", "append \(k): a tail copy in a version 3 file: \(w)")
                    XCTAssertTrue(w[1].offset < oldEnd && w[1].offset + Int64(w[1].count) > oldEnd, "\(name), append \(k): \(w)")
                    XCTAssertFalse(onePage(w[1].offset, Int(oldEnd - w[1].offset)),
                                   "\(name), append \(k): the end copied first though its rewrite lies in one page: \(w), old end \(oldEnd)")
                    copied += 1
                } else if w.count == 2 {
                    XCTAssertEqual(w[0].offset, oldEnd, "\(name), append \(k): beyond the old end first: \(w)")
                    XCTAssertEqual(w[1].offset + Int64(w[1].count), oldEnd, "\(name), append \(k): then the part before it: \(w)")
                    if name == "version 4" {
                        XCTAssertFalse(onePage(w[1].offset, w[1].count + w[0].count),
                                       "\(name), append \(k): two writes where one in one page would do: \(w), old end \(oldEnd)")
                        XCTAssertTrue(onePage(w[1].offset, w[1].count),
                                      "\(name), append \(k): a split whose second write a kill could cut between pages: \(w), old end \(oldEnd)")
                    }
                    split += 1
                } else {
                    XCTFail("\(name), append \(k): \(w.count) writes: \(w)")
                }
            }
            if name == "version 5" {
                XCTAssertGreaterThan(single, 80, "one write where it lies in one page (\(single) single, \(split) split, \(other) other)")
                XCTAssertLessThan(other, 8, "(\(single) single, \(split) split, \(other) other)")
            } else if name == "version 4" {
                XCTAssertGreaterThan(single, 20, "one write where it lies in one page (\(single) single, \(copied) copied first, \(split) split)")
                XCTAssertGreaterThan(copied, 5, "the end copied first where a kill could tear the rewrite (\(single) single, \(copied) copied first, \(split) split)")
            } else {
                XCTAssertGreaterThan(split, 100)
            }
            try f.close()
        }
        XCTAssertEqual(try SecureFile.open(v5, flags: O_RDONLY, services: env.services).readAll(),
                       (0..<120).flatMap { [UInt8](repeating: UInt8($0), count: 100) })
        XCTAssertEqual(Array(try SecureFile.open(v4, flags: O_RDONLY, services: vectorKeys).readAll()[10_000...]),
                       (0..<120).flatMap { [UInt8](repeating: UInt8($0), count: 100) })
    }
}

/// Runs `body` on `iterations` threads at once (pthreads, no Foundation).
enum DispatchQueueless {
    static func concurrentPerform(iterations: Int, _ body: @escaping @Sendable (Int) -> Void) {
        final class Box: @unchecked Sendable { let body: @Sendable (Int) -> Void; let i: Int; init(_ b: @escaping @Sendable (Int) -> Void, _ i: Int) { body = b; self.i = i } }
        var threads: [pthread_t] = []
        for i in 0..<iterations {
            var t = pthread_t()
            let box = Unmanaged.passRetained(Box(body, i)).toOpaque()
            pthread_create(&t, nil, { arg in
                let b = Unmanaged<Box>.fromOpaque(arg!).takeRetainedValue()
                b.body(b.i)
                return nil
            }, box)
            threads.append(t)
        }
        for t in threads { pthread_join(t, nil) }
    }
}
