#if canImport(Glibc)
import Glibc
#endif
import Foundation
import XCTest
import ACSecureTestSupport
import CACSecureFile
import ACSecureServices
import ACSecureFileCore
import ACSecureFileCAPI
import ACSecureFoundation
import ACSystemCalls

final class ACFileHandleTests: SecureFoundationTestCase {
    /// The same random operations on an ACFileHandle (secure file) and a FileHandle (plain file),
    /// through both spellings (plain and throwing), must give the same results and leave the same bytes.
    func testDifferentialAgainstFileHandle() throws {
        for seed: UInt64 in 1...4 {
            var rng = SplitMix64(seed: seed)
            let plainPath = path("plain-\(seed)"), securePath = path("secure-\(seed)")
            let initial = randomData(Int.random(in: 0...20_000, using: &rng), &rng)
            try initial.write(to: URL(fileURLWithPath: plainPath))
            try initial.write(toSecureFile: securePath)
            let plain = try FileHandle(forUpdating: URL(fileURLWithPath: plainPath))
            let secure = try ACFileHandle.fileHandleForUpdating(atPath: securePath)
            for step in 0..<150 {
                let where_ = "seed \(seed) step \(step)"
                switch Int.random(in: 0..<14, using: &rng) {
                case 0:
                    let n = Int.random(in: 0...9000, using: &rng)
                    XCTAssertEqual(secure.readData(ofLength: n), plain.readData(ofLength: n), where_)
                case 1:
                    let d = randomData(Int.random(in: 0...9000, using: &rng), &rng)
                    secure.write(d); plain.write(d)
                case 2:
                    let o = UInt64.random(in: 0...30_000, using: &rng)
                    secure.seek(toFileOffset: o); plain.seek(toFileOffset: o)
                case 3:
                    XCTAssertEqual(secure.seekToEndOfFile(), plain.seekToEndOfFile(), where_)
                case 4:
                    let o = UInt64.random(in: 0...25_000, using: &rng)
                    secure.truncateFile(atOffset: o); plain.truncateFile(atOffset: o)
                case 5:
                    XCTAssertEqual(try secure.readToEnd(), try plain.readToEnd(), where_)
                case 6:
                    let n = Int.random(in: 0...5000, using: &rng)
                    XCTAssertEqual(try secure.read(upToCount: n), try plain.read(upToCount: n), where_)
                case 7:
                    let d = randomData(Int.random(in: 1...5000, using: &rng), &rng)
                    try secure.write(contentsOf: d); try plain.write(contentsOf: d)
                case 8:
                    let o = UInt64.random(in: 0...30_000, using: &rng)
                    try secure.seek(toOffset: o); try plain.seek(toOffset: o)
                case 9:
                    XCTAssertEqual(try secure.seekToEnd(), try plain.seekToEnd(), where_)
                case 10:
                    let o = UInt64.random(in: 0...25_000, using: &rng)
                    try secure.truncate(atOffset: o); try plain.truncate(atOffset: o)
                case 11:
                    XCTAssertEqual(secure.readDataToEndOfFile(), plain.readDataToEndOfFile(), where_)
                case 12:
                    secure.synchronizeFile(); try secure.synchronize(); plain.synchronizeFile()
                default:
                    // For a regular file, availableData is the rest of the file (the documented
                    // FileHandle behaviour; Linux's FileHandle returns one block at a time).
                    XCTAssertEqual(secure.availableData, try plain.readToEnd() ?? Data(), where_)
                }
                XCTAssertEqual(secure.offsetInFile, plain.offsetInFile, where_)
                XCTAssertEqual(try secure.offset(), try plain.offset(), where_)
            }
            try secure.synchronize(); try plain.synchronize()
            try secure.close(); try plain.close()
            XCTAssertEqual(try Data(contentsOfSecureFile: securePath), rawBytes(plainPath), "seed \(seed)")
        }
    }

    func testOpeningModesAndURLs() throws {
        let p = path("f")
        try Data("0123456789".utf8).write(toSecureFile: p)
        let reader = try ACFileHandle.fileHandleForReading(from: URL(fileURLWithPath: p))
        XCTAssertEqual(try reader.read(upToCount: 4), Data("0123".utf8))
        assertError(ACErrorDomain, ACErrorWriteOnReadOnly) { try reader.write(contentsOf: Data("x".utf8)) }
        assertError(ACErrorDomain, ACErrorTruncOnReadOnly) { try reader.truncate(atOffset: 1) }
        let writer = try ACFileHandle(forWritingTo: URL(fileURLWithPath: p))
        try writer.seek(toOffset: 10)
        try writer.write(contentsOf: Data("AB".utf8))
        assertError(ACErrorDomain, ACErrorReadOnWriteOnly) { _ = try writer.readToEnd() }
        try writer.close()
        XCTAssertEqual(try reader.readToEnd(), Data("456789AB".utf8), "a reader sees another handle's writes")
        let updater = try ACFileHandle(forUpdating: URL(fileURLWithPath: p))
        XCTAssertEqual(updater.availableData, Data("0123456789AB".utf8))
        XCTAssertEqual(updater.availableData, Data(), "empty Data (not nil) at the end of the file")
        XCTAssertEqual(updater.readDataToEndOfFile(), Data())
        XCTAssertEqual(updater.readData(ofLength: 5), Data())
        XCTAssertNil(try updater.read(upToCount: 5))
        XCTAssertNil(try updater.readToEnd())
        XCTAssertEqual(try updater.seekToEnd(), 12)
        try updater.truncate(atOffset: 3)
        XCTAssertEqual(updater.offsetInFile, 3)
        updater.synchronizeFile()
        try updater.close()
        XCTAssertEqual(try Data(contentsOfSecureFile: p), Data("012".utf8))
        // closed: errno only
        assertError(NSPOSIXErrorDomain, Int(EBADF)) { _ = try updater.read(upToCount: 1) }
        assertError(NSPOSIXErrorDomain, Int(EBADF)) { try updater.close() }
        assertError(NSPOSIXErrorDomain, Int(EBADF)) { _ = try updater.offset() }
        assertError(NSPOSIXErrorDomain, Int(EBADF)) { try updater.synchronize() }
        // a writing handle needs an existing file, as FileHandle(forWritingAtPath:)
        assertError(NSPOSIXErrorDomain, Int(ENOENT)) { _ = try ACFileHandle.fileHandleForWriting(atPath: self.path("none")) }
        XCTAssertNil(ACFileHandle(forWritingAtPath: path("none")))
        // an empty file becomes a secure file on its first write
        XCTAssertTrue(FileManager.default.createFile(atPath: path("empty"), contents: nil))
        let w = try XCTUnwrap(ACFileHandle(forWritingAtPath: path("empty")))
        w.write(Data("now secure".utf8))
        w.closeFile()
        XCTAssertEqual(try Data(contentsOfSecureFile: path("empty")), Data("now secure".utf8))
    }

    /// A handle on a file whose name is not UTF-8 (names are bytes): opened by `BytePath`, its
    /// `filePath` is the exact bytes and `path` prints them escaped; errors name it escaped.
    func testByteExactPathsOpenNamesThatAreNotUTF8() throws {
        let name = BytePath(bytes: Array(path("caf").utf8) + [0xE9, 0xFF])!
        let fd = ACSecureFile_openWithMode(name.bytes.map { CChar(bitPattern: $0) } + [0], O_RDWR | O_CREAT | O_EXCL, 0o600)
        XCTAssertGreaterThanOrEqual(fd, 0)
        XCTAssertEqual(ACSecureFileClose(fd), 0)
        let h = try ACFileHandle(forUpdating: name)
        XCTAssertEqual(h.filePath, name)
        XCTAssertEqual(h.path, path("caf") + "\\xE9\\xFF")
        try h.write(contentsOf: Data("bytes, not text".utf8))
        try h.seek(toOffset: 0)
        XCTAssertEqual(try h.readToEnd(), Data("bytes, not text".utf8))
        try h.close()
        let r = try ACFileHandle(forReadingFrom: name)
        XCTAssertEqual(try r.readToEnd(), Data("bytes, not text".utf8))
        try r.close()
        let missing = BytePath(bytes: Array(path("gone").utf8) + [0xFF])!
        assertError(NSPOSIXErrorDomain, Int(ENOENT)) { _ = try ACFileHandle(forReadingFrom: missing) }
        do { _ = try ACFileHandle(forReadingFrom: missing); XCTFail("opened") } catch {
            XCTAssertTrue("\(error)".contains("gone\\xFF") || (error as NSError).localizedDescription.contains("gone\\xFF"), "\(error)")
        }
    }

    /// The failable initializers return nil exactly where the throwing factories throw.
    func testFailableInitializers() throws {
        let p = path("f")
        try Data("abc".utf8).write(toSecureFile: p)
        XCTAssertEqual(ACFileHandle(forReadingAtPath: p)?.readDataToEndOfFile(), Data("abc".utf8))
        XCTAssertEqual(ACFileHandle(forUpdatingAtPath: p)?.readData(ofLength: 2), Data("ab".utf8))
        XCTAssertNotNil(ACFileHandle(forWritingAtPath: p))
        XCTAssertNil(ACFileHandle(forReadingAtPath: path("missing")))
        XCTAssertNil(ACFileHandle(forUpdatingAtPath: path("missing")))
        XCTAssertEqual(mkdir(path("dir"), 0o700), 0)
        XCTAssertNil(ACFileHandle(forReadingAtPath: path("dir")), "a directory is not a secure file")
        XCTAssertNil(ACFileHandle(forReadingAtPath: p, encryptionGroupId: "g"), "a file of another key")
        XCTAssertNil(ACFileHandle(forReadingAtPath: p, encryptionGroupId: ""), "an empty group ID")
        try rawBytes(p).write(to: URL(fileURLWithPath: path("copy")))
        services.lock()
        XCTAssertNil(ACFileHandle(forReadingAtPath: p), "no keys")
        try services.unlock(passcode: nil)
        let h = try XCTUnwrap(ACFileHandle(forUpdatingAtPath: p))
        XCTAssertEqual(h.path, p)
        XCTAssertNil(h.encryptionGroupId)
    }

    func testURLAndPathErrors() throws {
        XCTAssertEqual(mkdir(path("dir"), 0o700), 0)
        assertError(ACErrorDomain, ACErrorRegularFileOnly) { _ = try ACFileHandle.fileHandleForReading(atPath: self.path("dir")) }
        assertError(ACErrorDomain, ACErrorRegularFileOnly) { _ = try ACFileHandle.fileHandleForUpdating(atPath: self.path("dir")) }
        assertError(ACErrorDomain, ACErrorRegularFileOnly) { _ = try ACFileHandle.fileHandleForReading(from: URL(string: "https://example.com/x")!) }
        assertError(ACErrorDomain, ACErrorRegularFileOnly) { _ = try ACFileHandle.fileHandleForWriting(to: URL(string: "data:,x")!) }
        assertError(ACErrorDomain, ACErrorRegularFileOnly) { _ = try ACFileHandle(forUpdating: URL(string: "https://example.com/x")!) }
        assertError(NSPOSIXErrorDomain, Int(ENOENT)) { _ = try ACFileHandle.fileHandleForReading(atPath: self.path("missing")) }
        assertError(NSPOSIXErrorDomain, Int(ENOENT)) { _ = try ACFileHandle(forReadingFrom: URL(fileURLWithPath: self.path("missing"))) }
        XCTAssertEqual(mkfifo(path("fifo"), 0o600), 0)
        assertError(ACErrorDomain, ACErrorRegularFileOnly) { _ = try ACFileHandle.fileHandleForReading(atPath: self.path("fifo")) }
        let p = path("f")
        try Data(repeating: 1, count: 100).write(toSecureFile: p)
        let h = try ACFileHandle.fileHandleForUpdating(atPath: p)
        assertError(ACErrorDomain, ACErrorFileTooBig) { try h.seek(toOffset: UInt64(1) << 50) }
        assertError(ACErrorDomain, ACErrorFileTooBig) { try h.truncate(atOffset: UInt64.max) }
        services.lock()
        assertError(ACErrorDomain, ACErrorNoKeys) { _ = try h.read(upToCount: 10) }
        assertError(ACErrorDomain, ACErrorNoKeys) { try h.write(contentsOf: Data("x".utf8)) }
        assertError(ACErrorDomain, ACErrorNoKeys) { _ = try h.seekToEnd() }
        try services.unlock(passcode: nil)
        XCTAssertEqual(try h.read(upToCount: 200), Data(repeating: 1, count: 100), "the handle works again after unlock")
    }

    func testSharedHandles() throws {
        let p = path("shared")
        XCTAssertTrue(FileManager.default.createFile(atPath: p, contents: nil))
        let w = try ACFileHandle.fileHandleForWriting(atPath: p, encryptionGroupId: "com.example.g")
        XCTAssertEqual(w.encryptionGroupId, "com.example.g")
        try w.write(contentsOf: Data("for the group".utf8))
        try w.close()
        let r = try ACFileHandle.fileHandleForReading(from: URL(fileURLWithPath: p), encryptionGroupId: "com.example.g")
        XCTAssertEqual(try r.readToEnd(), Data("for the group".utf8))
        XCTAssertEqual(try Data(contentsOfSecureFile: p, encryptionGroupId: "com.example.g"), Data("for the group".utf8))
        assertError(ACErrorDomain, ACErrorBadKeyOrCorruptData) { _ = try ACFileHandle.fileHandleForReading(atPath: p) }
        assertError(ACErrorDomain, ACErrorBadKeyOrCorruptData) { _ = try ACFileHandle.fileHandleForReading(atPath: p, encryptionGroupId: "other") }
        assertError(ACErrorDomain, ACErrorInvalidArg) { _ = try ACFileHandle.fileHandleForUpdating(atPath: p, encryptionGroupId: "") }
        assertError(ACErrorDomain, ACErrorInvalidArg) { _ = try ACFileHandle(forReadingFrom: URL(fileURLWithPath: p), encryptionGroupId: "") }
        let u = try ACFileHandle.fileHandleForUpdating(URL(fileURLWithPath: p), encryptionGroupId: "com.example.g")
        u.seekToEndOfFile()
        u.write(Data("!".utf8))
        try u.close()
        let u2 = try ACFileHandle.fileHandleForWriting(to: URL(fileURLWithPath: p), encryptionGroupId: "com.example.g")
        try u2.close()
        let u3 = try XCTUnwrap(ACFileHandle(forUpdatingAtPath: p, encryptionGroupId: "com.example.g"))
        XCTAssertEqual(try u3.readToEnd(), Data("for the group!".utf8))
        XCTAssertNotNil(ACFileHandle(forWritingAtPath: p, encryptionGroupId: "com.example.g"))
        XCTAssertEqual(ACFileHandle(forReadingAtPath: p, encryptionGroupId: "com.example.g")?.availableData, Data("for the group!".utf8))
        XCTAssertEqual(try ACFileHandle(forWritingTo: URL(fileURLWithPath: p), encryptionGroupId: "com.example.g").offset(), 0)
        XCTAssertEqual(try ACFileHandle(forUpdating: URL(fileURLWithPath: p), encryptionGroupId: "com.example.g").seekToEnd(), 14)
        _ = try ACFileHandle.fileHandleForReading(atPath: p, encryptionGroupId: "com.example.g")
    }

    /// A handle released without close writes its cached data: the writes of a handle that is
    /// simply dropped are on disk, and what closeFile() closed stays closed.
    func testReleasedHandleFlushesAndCloses() throws {
        let p = path("released")
        XCTAssertTrue(FileManager.default.createFile(atPath: p, contents: nil))
        do {
            let h = try XCTUnwrap(ACFileHandle(forWritingAtPath: p))
            h.write(Data("kept without close".utf8))
        }
        XCTAssertEqual(try Data(contentsOfSecureFile: p), Data("kept without close".utf8))
        // In a child process that exits right after releasing (or closing) the handle: no other
        // handle of the process can hold the data, so it must have reached the disk.
        for mode in ["release-then-exit", "closefile-then-exit"] {
            let q = path(mode)
            XCTAssertTrue(FileManager.default.createFile(atPath: q, contents: nil))
            let result = try CrashHelper.run([mode, q], home: directory + "/store", appID: appID)
            XCTAssertTrue(result.status.succeeded, "\(mode) (\(result.status)): \(result.output)")
            XCTAssertEqual(try Data(contentsOfSecureFile: q), Data("written by \(mode)".utf8), mode)
        }
    }

    /// When flushing on release fails, the error goes to standard error with the path (it cannot
    /// be thrown from deinit, and must not be dropped).
    func testFailedFlushOnReleaseIsReportedOnStandardError() throws {
        let q = path("flush-fails")
        XCTAssertTrue(FileManager.default.createFile(atPath: q, contents: nil))
        let result = try CrashHelper.run(["release-flush-fails", q], home: directory + "/store", appID: appID)
        XCTAssertTrue(result.output.contains("released"), result.output)
        XCTAssertTrue(result.output.contains("ACFileHandle: \(q) was released without close()"), result.output)
        XCTAssertTrue(result.output.contains("Input/output error"), result.output)
    }

    // MARK: child processes: the plain methods stop the program with a useful message

    /// Each plain method, given an error, must stop the process with a message naming
    /// ACFileHandle, the method, the error and the throwing method to use instead.
    func testPlainMethodsStopWithAMessageNamingTheThrowingMethod() throws {
        let p = path("f")
        try Data("secret".utf8).write(toSecureFile: p)
        let before = rawBytes(p)
        let cases: [(mode: String, method: String, error: String, instead: String)] = [
            ("write-on-reader", "ACFileHandle.write(_:)", "ACE_WRITE_ON_READONLY_ERROR", "write(contentsOf:)"),
            ("truncate-on-reader", "ACFileHandle.truncateFile(atOffset:)", "ACE_TRUNC_ON_READONLY_ERROR", "truncate(atOffset:)"),
            ("read-on-writer", "ACFileHandle.readData(ofLength:)", "ACE_READ_ON_WRITEONLY_ERROR", "read(upToCount:)"),
            ("read-to-end-on-writer", "ACFileHandle.readDataToEndOfFile()", "ACE_READ_ON_WRITEONLY_ERROR", "readToEnd()"),
            ("available-on-writer", "ACFileHandle.availableData", "ACE_READ_ON_WRITEONLY_ERROR", "readToEnd()"),
            ("seek-too-far", "ACFileHandle.seek(toFileOffset:)", "ACE_FILE_TOO_BIG_ERROR", "seek(toOffset:)"),
            ("seek-end-locked", "ACFileHandle.seekToEndOfFile()", "ACE_NO_KEYS_ERROR", "seekToEnd()"),
            ("offset-after-close", "ACFileHandle.offsetInFile", "Bad file descriptor", "offset()"),
            ("synchronize-after-close", "ACFileHandle.synchronizeFile()", "Bad file descriptor", "synchronize()"),
            ("close-twice", "ACFileHandle.closeFile()", "Bad file descriptor", "close()"),
            ("synchronize-fails", "ACFileHandle.synchronizeFile()", "Input/output error", "synchronize()"),
        ]
        for c in cases {
            let result = try CrashHelper.run([c.mode, p], home: directory + "/store", appID: appID)
            XCTAssertTrue(result.output.contains("ready"), "\(c.mode): \(result.output)")
            XCTAssertFalse(result.output.contains("survived"), "\(c.mode) did not stop")
            XCTAssertNotNil(result.status.signal, "\(c.mode) should die by a signal (\(result.status)): \(result.output)")
            for needle in [c.method + " failed on " + p, c.error, "use the throwing ACFileHandle." + c.instead] {
                XCTAssertTrue(result.output.contains(needle), "\(c.mode): no \"\(needle)\" in: \(result.output)")
            }
        }
        // (Outside the tail-copy slots: the sync that fails wrote its copy of the end there first.)
        let slots = FileLayout.headerSize..<Int(FileLayout().dataOffset)
        var after = rawBytes(p), expected = before
        after.removeSubrange(slots)
        expected.removeSubrange(slots)
        XCTAssertEqual(after, expected, "a stopped plain method changed the file")
        XCTAssertEqual(try Data(contentsOfSecureFile: p), Data("secret".utf8))
    }

    // MARK: misuse does not compile

    /// Code that treats an ACFileHandle as a FileHandle, uses asynchronous I/O or reaches for a
    /// descriptor must not compile (it used to compile and crash or lose data). Each snippet is
    /// type-checked against the built modules; a control snippet must compile, so a broken setup
    /// cannot pass as "does not compile".
    func testMisuseDoesNotCompile() throws {
        let checker = try TypeChecker()
        let control = """
            let h = ACFileHandle(forUpdatingAtPath: "/tmp/x")!
            h.write(Data()); h.synchronizeFile(); h.closeFile()
            let g = try ACFileHandle.fileHandleForReading(atPath: "/tmp/x", encryptionGroupId: "g")
            _ = try g.readToEnd()
            """
        XCTAssertEqual(try checker.errors(in: control), [], "the control snippet must compile")
        let misuse: [(String, String)] = [
            ("let f: FileHandle = ACFileHandle(forReadingAtPath: \"/tmp/x\")!", "cannot convert"),
            ("func use(_ f: FileHandle) {}; use(ACFileHandle(forReadingAtPath: \"/tmp/x\")!)", "cannot convert"),
            ("ACFileHandle(forReadingAtPath: \"/tmp/x\")!.readInBackgroundAndNotify()", "does not support asynchronous I/O"),
            ("ACFileHandle(forReadingAtPath: \"/tmp/x\")!.readToEndOfFileInBackgroundAndNotify()", "does not support asynchronous I/O"),
            ("ACFileHandle(forReadingAtPath: \"/tmp/x\")!.readabilityHandler = { _ in }", "does not support asynchronous I/O"),
            ("_ = ACFileHandle(forReadingAtPath: \"/tmp/x\")!.fileDescriptor", "no descriptor for plain I/O"),
            ("_ = try ACFileHandle.fileHandleForReading(atPath: \"/tmp/x\", withEncryptionGroupId: \"g\")", "renamed to 'fileHandleForReading(atPath:encryptionGroupId:)'"),
            ("_ = try ACFileHandle(forReadingAtPath: \"/tmp/x\")!.secureReadToEnd()", "renamed to 'readToEnd()'"),
            ("let d: Data = try ACFileHandle(forReadingAtPath: \"/tmp/x\")!.readToEnd()", "must be unwrapped"),
        ]
        for (snippet, expected) in misuse {
            let errors = try checker.errors(in: snippet)
            XCTAssertFalse(errors.isEmpty, "compiled, but must not: \(snippet)")
            XCTAssertTrue(errors.contains { $0.contains(expected) }, "\(snippet): expected \"\(expected)\" in \(errors)")
        }
    }

    // MARK: across layers

    func testWrittenByTheCAPIReadByData() throws {
        var rng = SplitMix64(seed: 7)
        let contents = randomData(50_000, &rng)
        let fd = ACSecureFile_openWithMode(path("c"), O_RDWR | O_CREAT | O_EXCL, 0o600)
        XCTAssertGreaterThanOrEqual(fd, 0, String(cString: strerror(errno)))
        XCTAssertEqual(contents.withUnsafeBytes { ACSecureFileWrite(fd, $0.baseAddress, $0.count) }, contents.count)
        XCTAssertEqual(ACSecureFileClose(fd), 0)
        XCTAssertEqual(try Data(contentsOfSecureFile: path("c")), contents)
        XCTAssertEqual(try ACFileHandle.fileHandleForReading(atPath: path("c")).readToEnd(), contents)

        let gfd = ACSecureFileOpenWithGroupID(path("cg"), O_WRONLY | O_CREAT, 0o600, "com.example.g")
        XCTAssertGreaterThanOrEqual(gfd, 0)
        XCTAssertEqual(contents.withUnsafeBytes { ACSecureFileWrite(gfd, $0.baseAddress, 1000) }, 1000)
        XCTAssertEqual(ACSecureFileClose(gfd), 0)
        XCTAssertEqual(try Data(contentsOfSecureFile: path("cg"), encryptionGroupId: "com.example.g"), contents.prefix(1000))
    }

    func testWrittenByACFileHandleAndDataReadByTheCAPI() throws {
        var rng = SplitMix64(seed: 8)
        let contents = randomData(70_000, &rng)
        XCTAssertTrue(FileManager.default.createFile(atPath: path("h"), contents: nil))
        let h = try ACFileHandle.fileHandleForWriting(atPath: path("h"))
        try h.write(contentsOf: contents.prefix(30_000))
        h.write(contents.suffix(from: 30_000))
        try h.close()
        XCTAssertEqual(readWithCAPI(path("h")), contents)
        try contents.write(toSecureFile: path("d"), options: .atomic)
        XCTAssertEqual(readWithCAPI(path("d")), contents)
        var st = stat()
        XCTAssertEqual(ACSecureLstat(path("d"), &st), 0)
        XCTAssertEqual(st.st_size, off_t(contents.count))
    }

    private func readWithCAPI(_ p: String) -> Data {
        let fd = ACSecureFile_openWithMode(p, O_RDONLY, 0)
        guard fd >= 0 else { XCTFail("open \(p): \(String(cString: strerror(errno)))"); return Data() }
        defer { XCTAssertEqual(ACSecureFileClose(fd), 0) }
        var out = Data()
        var buffer = [UInt8](repeating: 0, count: 8192)
        while true {
            let n = buffer.withUnsafeMutableBytes { ACSecureFileRead(fd, $0.baseAddress, $0.count) }
            XCTAssertGreaterThanOrEqual(n, 0)
            if n <= 0 { return out }
            out.append(contentsOf: buffer[0..<n])
        }
    }
}
