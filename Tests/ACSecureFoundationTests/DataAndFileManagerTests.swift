#if canImport(Glibc)
import Glibc
#endif
import Foundation
import XCTest
import ACSecureTestSupport
import ACSecureServices
import ACSecureFileCore
import ACSecureFoundation

final class DataAndFileManagerTests: SecureFoundationTestCase {
    // MARK: Data (tables 24, 25)

    func testDataRoundTripsAtEverySizeAtomicallyAndNot() throws {
        var rng = SplitMix64(seed: 24)
        for (i, size) in [0, 1, 4095, 4096, 4097, 100_003].enumerated() {
            let plain = randomData(size, &rng)
            for atomic in [false, true] {
                let p = path("d\(i)-\(atomic)")
                try plain.write(toSecureFile: p, options: atomic ? .atomic : [])
                XCTAssertEqual(try Data(contentsOfSecureFile: p), plain, "size \(size) atomic \(atomic)")
                XCTAssertEqual(try SecureFileSystem.info(p).plaintextSize, Int64(size))
                if size >= 16 { XCTAssertNil(rawBytes(p).range(of: plain.prefix(16)), "plaintext on disk") }
            }
        }
        XCTAssertEqual(directoryEntries().filter { $0.contains("acsecure-tmp") }, [], "temporary files left behind")
    }

    func testAtomicWriteReplacesAndKeepsPermissions() throws {
        let p = path("perm")
        try Data("one".utf8).write(toSecureFile: p, options: .atomic)
        XCTAssertEqual(chmod(p, 0o640), 0)
        try Data("two, longer".utf8).write(toSecureFile: p, options: .atomic)
        XCTAssertEqual(String(decoding: try Data(contentsOfSecureFile: p), as: UTF8.self), "two, longer")
        var st = stat()
        XCTAssertEqual(stat(p, &st), 0)
        XCTAssertEqual(st.st_mode & 0o777, 0o640)
        assertError(NSPOSIXErrorDomain, Int(EEXIST)) { try Data("x".utf8).write(toSecureFile: p, options: [.atomic, .withoutOverwriting]) }
        assertError(NSPOSIXErrorDomain, Int(EEXIST)) { try Data("x".utf8).write(toSecureFile: p, options: .withoutOverwriting) }
        XCTAssertEqual(String(decoding: try Data(contentsOfSecureFile: p), as: UTF8.self), "two, longer")
        try Data("new".utf8).write(toSecureFile: path("fresh"), options: [.atomic, .withoutOverwriting])
        XCTAssertEqual(try Data(contentsOfSecureFile: path("fresh")), Data("new".utf8))
        XCTAssertEqual(directoryEntries(), ["fresh", "perm"])
    }

    func testAtomicWriteThroughASymlinkReplacesTheTarget() throws {
        try Data("old".utf8).write(toSecureFile: path("target"))
        XCTAssertEqual(symlink(path("target"), path("link")), 0)
        try Data("new".utf8).write(toSecureFile: path("link"), options: .atomic)
        var st = stat()
        XCTAssertEqual(lstat(path("link"), &st), 0)
        XCTAssertEqual(st.st_mode & S_IFMT, S_IFLNK)
        XCTAssertEqual(try Data(contentsOfSecureFile: path("target")), Data("new".utf8))
    }

    func testURLAndBoolVariants() throws {
        let url = URL(fileURLWithPath: path("u"))
        try Data("via url".utf8).write(toSecureURL: url, options: .atomic)
        XCTAssertEqual(try Data(contentsOfSecureURL: url), Data("via url".utf8))
        XCTAssertTrue(Data("bool".utf8).write(toSecureFile: path("b"), atomically: true))
        XCTAssertEqual(try Data(contentsOfSecureFile: path("b")), Data("bool".utf8))
        XCTAssertTrue(Data("bool url".utf8).write(toSecureURL: url, atomically: false))
        XCTAssertEqual(NSData(contentsOfSecureURL: url) as Data?, Data("bool url".utf8))
        XCTAssertEqual(try NSData(contentsOfSecureURL: url, options: []) as Data, Data("bool url".utf8))
        XCTAssertNil(NSData(contentsOfSecureURL: URL(string: "https://example.com/x")!))
        XCTAssertNil(NSData(contentsOfSecureFile: path("missing")), "NSData's plain initializer is failable")
        XCTAssertFalse(Data("x".utf8).write(toSecureFile: path("missing-dir/x"), atomically: true))
        XCTAssertFalse(Data("x".utf8).write(toSecureURL: URL(string: "https://example.com/x")!, atomically: true))
        try (Data("nsdata".utf8) as NSData).write(toSecureFile: path("n"), options: [])
        XCTAssertEqual(NSData(contentsOfSecureFile: path("n")) as Data?, Data("nsdata".utf8))
        XCTAssertEqual(try NSData(contentsOfSecureFile: path("n"), options: []) as Data, Data("nsdata".utf8))
        XCTAssertTrue((Data("nsdata2".utf8) as NSData).write(toSecureFile: path("n2"), atomically: true))
        XCTAssertTrue((Data("nsdata3".utf8) as NSData).write(toSecureURL: URL(fileURLWithPath: path("n3")), atomically: false))
        XCTAssertEqual(try Data(contentsOfSecureFile: path("n3")), Data("nsdata3".utf8))
    }

    func testSharedVariantsUseTheGroupKey() throws {
        let p = path("shared")
        try Data("group data".utf8).write(toSecureFile: p, encryptionGroupId: "com.example.group", options: .atomic)
        XCTAssertEqual(try Data(contentsOfSecureFile: p, encryptionGroupId: "com.example.group"), Data("group data".utf8))
        XCTAssertEqual(try SecureFileSystem.info(p).keyClassName, "group")
        assertError(ACErrorDomain, ACErrorBadKeyOrCorruptData) { _ = try Data(contentsOfSecureFile: p) }
        assertError(ACErrorDomain, ACErrorBadKeyOrCorruptData) { _ = try Data(contentsOfSecureFile: p, encryptionGroupId: "com.example.other") }
        assertError(ACErrorDomain, ACErrorInvalidArg) { _ = try Data(contentsOfSecureFile: p, encryptionGroupId: "") }
        let url = URL(fileURLWithPath: path("shared-url"))
        try Data("g".utf8).write(toSecureURL: url, encryptionGroupId: "g1")
        XCTAssertEqual(try Data(contentsOfSecureURL: url, encryptionGroupId: "g1"), Data("g".utf8))
        XCTAssertTrue(Data("h".utf8).write(toSecureFile: path("s2"), encryptionGroupId: "g1", atomically: true))
        XCTAssertEqual(NSData(contentsOfSecureFile: path("s2"), encryptionGroupId: "g1") as Data?, Data("h".utf8))
        XCTAssertEqual(try NSData(contentsOfSecureFile: path("s2"), encryptionGroupId: "g1", options: []) as Data, Data("h".utf8))
        XCTAssertNil(NSData(contentsOfSecureFile: path("s2")), "another key")
        XCTAssertTrue((Data("i".utf8) as NSData).write(toSecureURL: URL(fileURLWithPath: path("s3")), encryptionGroupId: "g1", atomically: true))
        try (Data("j".utf8) as NSData).write(toSecureURL: URL(fileURLWithPath: path("s4")), encryptionGroupId: "g1", options: .atomic)
        XCTAssertEqual(NSData(contentsOfSecureURL: URL(fileURLWithPath: path("s3")), encryptionGroupId: "g1") as Data?, Data("i".utf8))
        XCTAssertEqual(try NSData(contentsOfSecureURL: URL(fileURLWithPath: path("s4")), encryptionGroupId: "g1", options: []) as Data, Data("j".utf8))
    }

    // MARK: the reference's Swift example ("NSError objects that secure Objective-C methods return")

    func testReferenceSwiftErrorHandlingExample() throws {
        services.lock()
        let data = "secret data".data(using: .ascii)! as NSData
        let options: NSData.WritingOptions = [.atomic, .completeFileProtection]
        var handled = false
        do {
            try data.write(toSecureFile: path("data.sec"), options: options)
        } catch let error as NSError {
            if error.domain == ACErrorDomain && error.code == ACErrorNoKeys { handled = true }
        }
        XCTAssertTrue(handled)
        XCTAssertEqual(directoryEntries(), [], "a failed write left files behind")
    }

    // MARK: errors

    func testErrorsHaveTheDocumentedDomainsAndCodes() throws {
        let p = path("f")
        try Data("contents".utf8).write(toSecureFile: p)
        // missing file: errno only
        assertError(NSPOSIXErrorDomain, Int(ENOENT)) { _ = try Data(contentsOfSecureFile: self.path("nope")) }
        assertError(NSPOSIXErrorDomain, Int(ENOENT)) { try Data().write(toSecureFile: self.path("no-dir/f"), options: .atomic) }
        // directory
        XCTAssertEqual(mkdir(path("dir"), 0o700), 0)
        assertError(ACErrorDomain, ACErrorRegularFileOnly) { _ = try Data(contentsOfSecureFile: self.path("dir")) }
        assertError(ACErrorDomain, ACErrorRegularFileOnly) { try Data().write(toSecureFile: self.path("dir")) }
        assertError(ACErrorDomain, ACErrorRegularFileOnly) { try Data().write(toSecureFile: self.path("dir"), options: .atomic) }
        // non-file URL
        assertError(ACErrorDomain, ACErrorRegularFileOnly) { _ = try Data(contentsOfSecureURL: URL(string: "https://example.com/f")!) }
        assertError(ACErrorDomain, ACErrorRegularFileOnly) { try Data().write(toSecureURL: URL(string: "ftp://example.com/f")!) }
        // not a secure file, and a corrupt one
        try Data("plain text file".utf8).write(to: URL(fileURLWithPath: path("plain")))
        assertError(ACErrorDomain, ACErrorBadKeyOrCorruptData) { _ = try Data(contentsOfSecureFile: self.path("plain")) }
        var raw = rawBytes(p)
        raw[Int(FileLayout().dataOffset) + 40] ^= 0x01  // inside chunk 0
        try raw.write(to: URL(fileURLWithPath: path("corrupt")))
        assertError(ACErrorDomain, ACErrorBadKeyOrCorruptData) { _ = try Data(contentsOfSecureFile: self.path("corrupt")) }
        // the underlying errno and the path travel with an ACErrorDomain error
        let e = nsError { _ = try Data(contentsOfSecureFile: self.path("corrupt")) }
        XCTAssertEqual((e?.userInfo[NSUnderlyingErrorKey] as? NSError)?.domain, NSPOSIXErrorDomain)
        XCTAssertEqual(e?.userInfo[NSFilePathErrorKey] as? String, path("corrupt"))
        XCTAssertEqual(e?.userInfo[ACErrorNameKey] as? String, "ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR")
        // keys unavailable
        services.lock()
        assertError(ACErrorDomain, ACErrorNoKeys) { _ = try Data(contentsOfSecureFile: p) }
        assertError(ACErrorDomain, ACErrorNoKeys) { try Data("x".utf8).write(toSecureFile: p) }
        assertError(ACErrorDomain, ACErrorNoKeys) { try Data("x".utf8).write(toSecureFile: p, options: .atomic) }
        assertError(ACErrorDomain, ACErrorNoKeys) { _ = try FileManager.default.secureContents(atPath: p, options: []) }
        XCTAssertNil(FileManager.default.secureContents(atPath: p))
        XCTAssertFalse(FileManager.default.createSecureFile(atPath: p, contents: Data("x".utf8)))
        assertError(ACErrorDomain, ACErrorNoKeys) { try FileManager.default.moveSecureFile(atPath: p, toPath: self.path("g")) }
        assertError(ACErrorDomain, ACErrorNoKeys) { try FileManager.default.copySecureFile(atPath: p, toPath: self.path("g")) }
        assertError(ACErrorDomain, ACErrorNoKeys) { _ = try FileManager.default.attributesOfSecureFile(atPath: p) }
        assertError(ACErrorDomain, ACErrorNoKeys) { _ = try NSDictionary(contentsOfSecureFile: p, options: []) }
        assertError(ACErrorDomain, ACErrorNoKeys) { _ = try ACFileHandle.fileHandleForReading(atPath: p) }
        try services.unlock(passcode: nil)
        XCTAssertEqual(try Data(contentsOfSecureFile: p), Data("contents".utf8), "a refused write changed the file")
    }

    // MARK: close failures are reported, never dropped

    func testCloseFailuresAreReported() throws {
        let p = path("f")
        try Data("contents".utf8).write(toSecureFile: p)
        let handle = try XCTUnwrap(ACFileHandle(forReadingAtPath: p))
        SecureFileTesting.faultInjector = { $0 == .close ? .fail(EIO) : nil }
        defer { SecureFileTesting.faultInjector = nil }
        assertError(NSPOSIXErrorDomain, Int(EIO)) { _ = try Data(contentsOfSecureFile: p) }
        assertError(NSPOSIXErrorDomain, Int(EIO)) { _ = try FileManager.default.attributesOfSecureFile(atPath: p) }
        assertError(NSPOSIXErrorDomain, Int(EIO)) { _ = try FileManager.default.secureContentsEqual(atPath: p, andPath: p) }
        assertError(NSPOSIXErrorDomain, Int(EIO)) { try FileManager.default.copySecureFile(atPath: p, toPath: self.path("copy")) }
        assertError(NSPOSIXErrorDomain, Int(EIO)) { try Data("x".utf8).write(toSecureFile: self.path("new"), options: .atomic) }
        assertError(NSPOSIXErrorDomain, Int(EIO)) { try Data("x".utf8).write(toSecureFile: self.path("new2")) }
        assertError(NSPOSIXErrorDomain, Int(EIO)) { try handle.close() }
        XCTAssertNil(FileManager.default.secureContents(atPath: p), "the Foundation-style form reports a failed close as nil")
        XCTAssertEqual(directoryEntries().filter { $0.contains("acsecure-tmp") }, [], "a failed write left a temporary file")

        SecureFileTesting.faultInjector = nil
        XCTAssertEqual(try Data(contentsOfSecureFile: p), Data("contents".utf8))
    }

    /// A read that fails, then a close that fails: the first error is reported, with the second.
    func testAFailedCloseAfterAFailedReadIsAddedToTheError() async throws {
        let p = path("big")
        try Data(repeating: 9, count: 200_000).write(toSecureFile: p)
        var chunks = SecureFileChunks(path: p, chunkSize: 50_000).makeAsyncIterator()
        let first = try await chunks.next()
        XCTAssertEqual(first?.count, 50_000)
        SecureFileTesting.faultInjector = { $0 == .close || $0 == .pread ? .fail(EIO) : nil }
        defer { SecureFileTesting.faultInjector = nil }
        do {
            _ = try await chunks.next()
            XCTFail("the read did not fail")
        } catch {
            XCTAssertTrue(error.localizedDescription.contains("closing \(p) afterwards also failed"), error.localizedDescription)
        }
    }

    // MARK: FileManager (table 23)

    func testCreateSecureFileAndAttributes() throws {
        let fm = FileManager.default
        let p = path("created")
        let contents = Data(repeating: 7, count: 10_000)
        try fm.createSecureFile(atPath: p, contents: contents, attributes: [.posixPermissions: 0o600], options: .atomic)
        XCTAssertEqual(fm.secureContents(atPath: p), contents)
        let attributes = try fm.attributesOfSecureFile(atPath: p)
        XCTAssertEqual((attributes[.size] as? NSNumber)?.int64Value, 10_000)
        XCTAssertEqual((attributes[.posixPermissions] as? NSNumber)?.intValue, 0o600)
        XCTAssertGreaterThan(((try fm.attributesOfItem(atPath: p))[.size] as? NSNumber)?.int64Value ?? 0, 10_000,
                             "the plain attributes show the larger ciphertext")
        XCTAssertTrue(fm.createSecureFile(atPath: path("empty"), contents: nil))
        XCTAssertFalse(fm.createSecureFile(atPath: path("no-dir/x"), contents: nil))
        assertError(NSPOSIXErrorDomain, Int(EEXIST)) { try fm.createSecureFile(atPath: p, contents: nil, options: .withoutOverwriting) }
        XCTAssertEqual(try fm.secureContents(atPath: path("empty"), options: []), Data())
        XCTAssertEqual((try fm.attributesOfSecureFile(atPath: path("empty"))[.size] as? NSNumber)?.int64Value, 0)
    }

    func testMoveSecureFile() throws {
        let fm = FileManager.default
        try fm.createSecureFile(atPath: path("a"), contents: Data("moving".utf8), options: .atomic)
        let idBefore = try SecureFileSystem.info(path("a")).fileID
        try fm.moveSecureFile(atPath: path("a"), toPath: path("b"))
        XCTAssertFalse(fm.fileExists(atPath: path("a")))
        XCTAssertEqual(try fm.secureContents(atPath: path("b"), options: []), Data("moving".utf8))
        XCTAssertEqual(try SecureFileSystem.info(path("b")).fileID, idBefore, "a move does not re-encrypt")
        try fm.moveSecureFile(at: URL(fileURLWithPath: path("b")), to: URL(fileURLWithPath: path("c")))
        XCTAssertEqual(try fm.secureContents(atPath: path("c"), options: []), Data("moving".utf8))
        XCTAssertTrue(fm.createSecureFile(atPath: path("d"), contents: Data("other".utf8)))
        assertError(NSPOSIXErrorDomain, Int(EEXIST)) { try fm.moveSecureFile(atPath: self.path("c"), toPath: self.path("d")) }
        XCTAssertEqual(try fm.secureContents(atPath: path("d"), options: []), Data("other".utf8))
        assertError(NSPOSIXErrorDomain, Int(ENOENT)) { try fm.moveSecureFile(atPath: self.path("zz"), toPath: self.path("yy")) }
        assertError(ACErrorDomain, ACErrorRegularFileOnly) {
            try fm.moveSecureFile(at: URL(string: "https://example.com/c")!, to: URL(fileURLWithPath: self.path("e")))
        }
        XCTAssertEqual(mkdir(path("dir"), 0o700), 0)
        assertError(ACErrorDomain, ACErrorRegularFileOnly) { try fm.moveSecureFile(atPath: self.path("dir"), toPath: self.path("e")) }
        try Data("plain".utf8).write(to: URL(fileURLWithPath: path("plain")))
        assertError(ACErrorDomain, ACErrorBadKeyOrCorruptData) { try fm.moveSecureFile(atPath: self.path("plain"), toPath: self.path("e")) }
        // a group file moves too (no key is needed to rename)
        try Data("g".utf8).write(toSecureFile: path("g"), encryptionGroupId: "grp")
        try fm.moveSecureFile(atPath: path("g"), toPath: path("g2"))
        XCTAssertEqual(try Data(contentsOfSecureFile: path("g2"), encryptionGroupId: "grp"), Data("g".utf8))
    }

    func testCopySecureFileGetsAFreshKey() throws {
        let fm = FileManager.default
        var rng = SplitMix64(seed: 23)
        let contents = randomData(300_000, &rng)
        try fm.createSecureFile(atPath: path("src"), contents: contents, options: [])
        try fm.copySecureFile(atPath: path("src"), toPath: path("dst"))
        XCTAssertEqual(try fm.secureContents(atPath: path("dst"), options: []), contents)
        XCTAssertNotEqual(try SecureFileSystem.info(path("src")).fileID, try SecureFileSystem.info(path("dst")).fileID)
        XCTAssertNotEqual(rawBytes(path("src")).suffix(1000), rawBytes(path("dst")).suffix(1000), "a copy must not be a byte copy")
        XCTAssertTrue(try fm.secureContentsEqual(atPath: path("src"), andPath: path("dst")))
        try fm.copySecureFile(at: URL(fileURLWithPath: path("src")), to: URL(fileURLWithPath: path("dst2")))
        XCTAssertEqual(try fm.secureContents(atPath: path("dst2"), options: []), contents)
        assertError(NSPOSIXErrorDomain, Int(EEXIST)) { try fm.copySecureFile(atPath: self.path("src"), toPath: self.path("dst")) }
        try Data("g".utf8).write(toSecureFile: path("g"), encryptionGroupId: "grp")
        try fm.copySecureFile(atPath: path("g"), toPath: path("g-copy"), encryptionGroupId: "grp")
        XCTAssertEqual(try Data(contentsOfSecureFile: path("g-copy"), encryptionGroupId: "grp"), Data("g".utf8))
        XCTAssertEqual(directoryEntries(), ["dst", "dst2", "g", "g-copy", "src"])
    }

    func testSecureContentsEqual() throws {
        let fm = FileManager.default
        var rng = SplitMix64(seed: 99)
        let a = randomData(200_000, &rng)
        var b = a
        b[150_000] ^= 0x80
        try a.write(toSecureFile: path("a"))
        try a.write(toSecureFile: path("a2"))
        try b.write(toSecureFile: path("b"))
        try a.prefix(199_999).write(toSecureFile: path("short"))
        XCTAssertTrue(try fm.secureContentsEqual(atPath: path("a"), andPath: path("a2")))
        XCTAssertTrue(try fm.secureContentsEqual(atPath: path("a"), andPath: path("a")))
        XCTAssertFalse(try fm.secureContentsEqual(atPath: path("a"), andPath: path("b")))
        XCTAssertFalse(try fm.secureContentsEqual(atPath: path("a"), andPath: path("short")))
        assertError(NSPOSIXErrorDomain, Int(ENOENT)) { _ = try fm.secureContentsEqual(atPath: self.path("a"), andPath: self.path("none")) }
    }
}
