#if canImport(Glibc)
import Glibc
#endif
import Foundation
import XCTest
import CShim
import ACSecureServices
import ACSecureFileCore
import ACSecureFileCAPI
import ACSecureFoundation

final class ACFileHandleTests: SecureFoundationTestCase {
    /// The same random operations on an ACFileHandle (secure file) and a FileHandle (plain file)
    /// must give the same results and leave the same bytes.
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
                switch Int.random(in: 0..<9, using: &rng) {
                case 0:
                    let n = Int.random(in: 0...9000, using: &rng)
                    XCTAssertEqual(try secure.secureReadData(ofLength: n), plain.readData(ofLength: n), where_)
                case 1:
                    let d = randomData(Int.random(in: 0...9000, using: &rng), &rng)
                    try secure.secureWrite(d); plain.write(d)
                case 2:
                    let o = UInt64.random(in: 0...30_000, using: &rng)
                    try secure.secureSeek(toFileOffset: o); plain.seek(toFileOffset: o)
                case 3:
                    XCTAssertEqual(try secure.secureSeekToEndOfFile(), plain.seekToEndOfFile(), where_)
                case 4:
                    let o = UInt64.random(in: 0...25_000, using: &rng)
                    try secure.secureTruncateFile(atOffset: o); plain.truncateFile(atOffset: o)
                case 5:
                    XCTAssertEqual(try secure.secureReadToEnd(), try plain.readToEnd(), where_)
                case 6:
                    let n = Int.random(in: 0...5000, using: &rng)
                    XCTAssertEqual(try secure.secureRead(upToCount: n), try plain.read(upToCount: n), where_)
                case 7:
                    let d = randomData(Int.random(in: 1...5000, using: &rng), &rng)
                    try secure.secureWrite(contentsOf: d); try plain.write(contentsOf: d)
                default:
                    // For a regular file, availableData is the rest of the file (the documented
                    // FileHandle behaviour; Linux's FileHandle returns one block at a time).
                    XCTAssertEqual(secure.availableData, try plain.readToEnd() ?? Data(), where_)
                }
                XCTAssertEqual(secure.offsetInFile, plain.offsetInFile, where_)
                XCTAssertEqual(try secure.secureOffset(), try plain.offset(), where_)
            }
            try secure.secureSynchronize(); try plain.synchronize()
            try secure.secureClose(); try plain.close()
            XCTAssertEqual(try Data(contentsOfSecureFile: securePath), rawBytes(plainPath), "seed \(seed)")
        }
    }

    func testOpeningModesAndURLs() throws {
        let p = path("f")
        try Data("0123456789".utf8).write(toSecureFile: p)
        let reader = try ACFileHandle.fileHandleForReading(from: URL(fileURLWithPath: p))
        XCTAssertEqual(try reader.secureReadData(ofLength: 4), Data("0123".utf8))
        assertError(ACErrorDomain, ACErrorWriteOnReadOnly) { try reader.secureWrite(Data("x".utf8)) }
        assertError(ACErrorDomain, ACErrorTruncOnReadOnly) { try reader.secureTruncateFile(atOffset: 1) }
        let writer = try ACFileHandle.fileHandleForWriting(to: URL(fileURLWithPath: p))
        try writer.secureSeek(toOffset: 10)
        try writer.secureWrite(Data("AB".utf8))
        assertError(ACErrorDomain, ACErrorReadOnWriteOnly) { _ = try writer.secureReadDataToEndOfFile() }
        try writer.secureCloseFile()
        XCTAssertEqual(try reader.secureReadDataToEndOfFile(), Data("456789AB".utf8), "a reader sees another handle's writes")
        let updater = try ACFileHandle.fileHandleForUpdating(URL(fileURLWithPath: p))
        XCTAssertEqual(try updater.secureAvailableData(), Data("0123456789AB".utf8))
        XCTAssertEqual(try updater.secureAvailableData(), Data(), "empty Data (not nil) at the end of the file")
        XCTAssertEqual(updater.availableData, Data())
        XCTAssertNil(try updater.secureRead(upToCount: 5))
        XCTAssertNil(try updater.secureReadToEnd())
        XCTAssertEqual(try updater.secureSeekToEnd(), 12)
        try updater.secureTruncate(atOffset: 3)
        XCTAssertEqual(updater.offsetInFile, 3)
        try updater.secureSynchronizeFile()
        try updater.secureClose()
        XCTAssertEqual(try Data(contentsOfSecureFile: p), Data("012".utf8))
        // closed: errno only
        assertError(NSPOSIXErrorDomain, Int(EBADF)) { _ = try updater.secureReadData(ofLength: 1) }
        assertError(NSPOSIXErrorDomain, Int(EBADF)) { try updater.secureClose() }
        assertError(NSPOSIXErrorDomain, Int(EBADF)) { _ = try updater.secureOffset() }
        // a writing handle needs an existing file, as FileHandle(forWritingAtPath:)
        assertError(NSPOSIXErrorDomain, Int(ENOENT)) { _ = try ACFileHandle.fileHandleForWriting(atPath: self.path("none")) }
        // an empty file becomes a secure file on its first write
        XCTAssertTrue(FileManager.default.createFile(atPath: path("empty"), contents: nil))
        let w = try ACFileHandle.fileHandleForWriting(atPath: path("empty"))
        try w.secureWrite(Data("now secure".utf8))
        try w.secureClose()
        XCTAssertEqual(try Data(contentsOfSecureFile: path("empty")), Data("now secure".utf8))
    }

    func testURLAndPathErrors() throws {
        XCTAssertEqual(mkdir(path("dir"), 0o700), 0)
        assertError(ACErrorDomain, ACErrorRegularFileOnly) { _ = try ACFileHandle.fileHandleForReading(atPath: self.path("dir")) }
        assertError(ACErrorDomain, ACErrorRegularFileOnly) { _ = try ACFileHandle.fileHandleForUpdating(atPath: self.path("dir")) }
        assertError(ACErrorDomain, ACErrorRegularFileOnly) { _ = try ACFileHandle.fileHandleForReading(from: URL(string: "https://example.com/x")!) }
        assertError(ACErrorDomain, ACErrorRegularFileOnly) { _ = try ACFileHandle.fileHandleForWriting(to: URL(string: "data:,x")!) }
        assertError(NSPOSIXErrorDomain, Int(ENOENT)) { _ = try ACFileHandle.fileHandleForReading(atPath: self.path("missing")) }
        XCTAssertEqual(mkfifo(path("fifo"), 0o600), 0)
        assertError(ACErrorDomain, ACErrorRegularFileOnly) { _ = try ACFileHandle.fileHandleForReading(atPath: self.path("fifo")) }
        let p = path("f")
        try Data(repeating: 1, count: 100).write(toSecureFile: p)
        let h = try ACFileHandle.fileHandleForUpdating(atPath: p)
        assertError(ACErrorDomain, ACErrorFileTooBig) { try h.secureSeek(toFileOffset: UInt64(1) << 50) }
        assertError(ACErrorDomain, ACErrorFileTooBig) { try h.secureTruncateFile(atOffset: UInt64.max) }
        services.lock()
        assertError(ACErrorDomain, ACErrorNoKeys) { _ = try h.secureReadData(ofLength: 10) }
        assertError(ACErrorDomain, ACErrorNoKeys) { try h.secureWrite(Data("x".utf8)) }
        try services.unlock(passcode: nil)
        XCTAssertEqual(try h.secureReadData(ofLength: 200), Data(repeating: 1, count: 100), "the handle works again after unlock")
    }

    func testSharedHandles() throws {
        let p = path("shared")
        XCTAssertTrue(FileManager.default.createFile(atPath: p, contents: nil))
        let w = try ACFileHandle.fileHandleForWriting(atPath: p, withEncryptionGroupId: "com.example.g")
        XCTAssertEqual(w.encryptionGroupId, "com.example.g")
        try w.secureWrite(Data("for the group".utf8))
        try w.secureClose()
        let r = try ACFileHandle.fileHandleForReading(from: URL(fileURLWithPath: p), withEncryptionGroupId: "com.example.g")
        XCTAssertEqual(try r.secureReadDataToEndOfFile(), Data("for the group".utf8))
        XCTAssertEqual(try Data(contentsOfSecureFile: p, encryptionGroupId: "com.example.g"), Data("for the group".utf8))
        assertError(ACErrorDomain, ACErrorBadKeyOrCorruptData) { _ = try ACFileHandle.fileHandleForReading(atPath: p) }
        assertError(ACErrorDomain, ACErrorBadKeyOrCorruptData) { _ = try ACFileHandle.fileHandleForReading(atPath: p, withEncryptionGroupId: "other") }
        assertError(ACErrorDomain, ACErrorInvalidArg) { _ = try ACFileHandle.fileHandleForUpdating(atPath: p, withEncryptionGroupId: "") }
        let u = try ACFileHandle.fileHandleForUpdating(URL(fileURLWithPath: p), withEncryptionGroupId: "com.example.g")
        try u.secureSeekToEndOfFile()
        try u.secureWrite(Data("!".utf8))
        try u.secureClose()
        let u2 = try ACFileHandle.fileHandleForWriting(to: URL(fileURLWithPath: p), withEncryptionGroupId: "com.example.g")
        try u2.secureClose()
        let u3 = try ACFileHandle.fileHandleForUpdating(atPath: p, withEncryptionGroupId: "com.example.g")
        XCTAssertEqual(try u3.secureReadToEnd(), Data("for the group!".utf8))
        _ = try ACFileHandle.fileHandleForReading(atPath: p, withEncryptionGroupId: "com.example.g")
    }

    /// Held as a plain FileHandle, the inherited methods must fail and never touch the file.
    func testInheritedPlainMethodsFailLoudlyAndLeaveTheFileAlone() throws {
        let p = path("f")
        try Data("secret".utf8).write(toSecureFile: p)
        let before = rawBytes(p)
        let handle: FileHandle = try ACFileHandle.fileHandleForUpdating(atPath: p)
        XCTAssertEqual(handle.fileDescriptor, -1)
        XCTAssertThrowsError(try handle.write(contentsOf: Data("plaintext!".utf8)))
        XCTAssertThrowsError(try handle.read(upToCount: 3))
        XCTAssertThrowsError(try handle.readToEnd())
        XCTAssertThrowsError(try handle.seek(toOffset: 2))
        XCTAssertThrowsError(try handle.truncate(atOffset: 0))
        XCTAssertThrowsError(try handle.offset())
        XCTAssertThrowsError(try handle.seekToEnd())
        XCTAssertEqual(rawBytes(p), before, "the file changed through a plain FileHandle method")
        // the overridable members stay secure through the superclass
        XCTAssertEqual(handle.availableData, Data("secret".utf8))
        XCTAssertEqual(handle.offsetInFile, 6)
        XCTAssertNil(handle.readabilityHandler)
    }

    // MARK: child processes: misuse must trap

    func testNonThrowingPlainWriteTrapsBeforeTouchingTheFile() throws {
        let p = path("f")
        try Data("secret".utf8).write(toSecureFile: p)
        let before = rawBytes(p)
        for mode in ["plain-write", "background-read", "readability-handler"] {
            let result = try CrashHelper.run([mode, p], home: directory + "/store", appID: appID)
            XCTAssertTrue(result.output.contains("ready"), "\(mode): \(result.output)")
            XCTAssertFalse(result.output.contains("survived"), "\(mode) did not trap")
            XCTAssertEqual(result.reason, .uncaughtSignal, "\(mode) should die by a signal (status \(result.status))")
        }
        XCTAssertEqual(rawBytes(p), before)
        XCTAssertEqual(try Data(contentsOfSecureFile: p), Data("secret".utf8))
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
        XCTAssertEqual(try ACFileHandle.fileHandleForReading(atPath: path("c")).secureReadToEnd(), contents)

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
        try h.secureWrite(contentsOf: contents.prefix(30_000))
        try h.secureWrite(contents.suffix(from: 30_000))
        try h.secureCloseFile()
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
