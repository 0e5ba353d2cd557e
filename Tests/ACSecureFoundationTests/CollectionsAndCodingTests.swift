#if canImport(Glibc)
import Glibc
#endif
import Foundation
import XCTest
import ACSecureTestSupport
import ACSecureFileCore
import ACSecureFoundation

final class CollectionsAndCodingTests: SecureFoundationTestCase {
    private func sampleDictionary() -> NSDictionary {
        ["baseball": "white", "basketball": "orange", "count": 3, "ratio": 0.5, "flag": true,
         "nested": ["a": [1, 2, 3], "b": Data([0, 1, 2])], "when": Date(timeIntervalSince1970: 1_000_000)] as NSDictionary
    }

    private func sampleArray() -> NSArray {
        ["one fish", "two fish", "red fish", "blue fish", 42, ["k": "v"], Data("bytes".utf8)] as NSArray
    }

    // MARK: tables 28–31

    func testDictionaryRoundTrips() throws {
        let dict = sampleDictionary()
        for atomic in [true, false] {
            let p = path("dict-\(atomic)")
            try dict.write(toSecureFile: p, options: atomic ? .atomic : [])
            let copy = try NSDictionary(contentsOfSecureFile: p, options: [])
            XCTAssertEqual(copy, dict)
            XCTAssertNil(rawBytes(p).range(of: Data("basketball".utf8)), "plaintext on disk")
            // the Foundation-style forms
            XCTAssertTrue(dict.write(toSecureFile: p + "-bool", atomically: atomic))
            XCTAssertEqual(NSDictionary(contentsOfSecureFile: p + "-bool"), dict)
        }
        let url = URL(fileURLWithPath: path("dict-url"))
        try dict.write(toSecureURL: url, options: .atomic)
        XCTAssertEqual(try NSDictionary(contentsOfSecureURL: url, options: []), dict)
        XCTAssertTrue(dict.write(toSecureURL: URL(fileURLWithPath: path("dict-url2")), atomically: true))
        XCTAssertEqual(NSDictionary(contentsOfSecureURL: URL(fileURLWithPath: path("dict-url2"))), dict)
        let mutable = try NSMutableDictionary(contentsOfSecureFile: path("dict-true"), options: [])
        XCTAssertEqual(mutable, dict)
        mutable["added"] = "yes"
        XCTAssertTrue(mutable.write(toSecureFile: path("m"), atomically: true))
        XCTAssertEqual(NSMutableDictionary(contentsOfSecureURL: URL(fileURLWithPath: path("m")))?["added"] as? String, "yes")
        let optionalMutable: NSMutableDictionary? = NSMutableDictionary(contentsOfSecureFile: path("m"))
        optionalMutable?["again"] = 1
        XCTAssertEqual(optionalMutable?.count, dict.count + 2, "the mutable class reads into a mutable dictionary")
        // the same property list the plain method writes
        XCTAssertTrue(dict.write(to: URL(fileURLWithPath: path("plain.plist")), atomically: true))
        let plain = try PropertyListSerialization.propertyList(from: Data(contentsOf: URL(fileURLWithPath: path("plain.plist"))), format: nil) as? NSDictionary
        XCTAssertEqual(plain, NSDictionary(contentsOfSecureFile: path("dict-true")))
    }

    func testArrayRoundTrips() throws {
        let array = sampleArray()
        try array.write(toSecureFile: path("arr"), options: .atomic)
        XCTAssertEqual(try NSArray(contentsOfSecureFile: path("arr"), options: []), array)
        XCTAssertEqual(NSArray(contentsOfSecureFile: path("arr")), array)
        let url = URL(fileURLWithPath: path("arr-url"))
        XCTAssertTrue(array.write(toSecureURL: url, atomically: false))
        XCTAssertEqual(try NSArray(contentsOfSecureURL: url, options: []), array)
        XCTAssertEqual(NSArray(contentsOfSecureURL: url), array)
        try array.write(toSecureURL: url, options: [])
        let mutable = try NSMutableArray(contentsOfSecureFile: path("arr"), options: [])
        mutable.add("more")
        XCTAssertTrue(mutable.write(toSecureFile: path("arr2"), atomically: true))
        XCTAssertEqual(try NSMutableArray(contentsOfSecureURL: URL(fileURLWithPath: path("arr2")), options: []).lastObject as? String, "more")
        XCTAssertEqual(NSMutableArray(contentsOfSecureFile: path("arr2"))?.lastObject as? String, "more")
    }

    func testCollectionErrors() throws {
        try sampleArray().write(toSecureFile: path("arr"), options: .atomic)
        assertError(NSCocoaErrorDomain, CocoaError.propertyListReadCorrupt.rawValue) { _ = try NSDictionary(contentsOfSecureFile: self.path("arr"), options: []) }
        XCTAssertNil(NSDictionary(contentsOfSecureFile: path("arr")))
        try sampleDictionary().write(toSecureFile: path("dict"), options: .atomic)
        assertError(NSCocoaErrorDomain, CocoaError.propertyListReadCorrupt.rawValue) { _ = try NSArray(contentsOfSecureFile: self.path("dict"), options: []) }
        XCTAssertNil(NSArray(contentsOfSecureFile: path("dict")))
        try Data("not a plist".utf8).write(toSecureFile: path("junk"))
        assertError(NSCocoaErrorDomain, CocoaError.propertyListReadCorrupt.rawValue) { _ = try NSMutableArray(contentsOfSecureFile: self.path("junk"), options: []) }
        assertError(NSCocoaErrorDomain, CocoaError.propertyListWriteInvalid.rawValue) {
            try (["key": NSObject()] as NSDictionary).write(toSecureFile: self.path("bad"), options: .atomic)
        }
        XCTAssertFalse((["key": NSObject()] as NSDictionary).write(toSecureFile: path("bad"), atomically: true))
        XCTAssertFalse(FileManager.default.fileExists(atPath: path("bad")))
        assertError(NSPOSIXErrorDomain, Int(ENOENT)) { _ = try NSMutableDictionary(contentsOfSecureFile: self.path("none"), options: []) }
        XCTAssertNil(NSMutableDictionary(contentsOfSecureFile: path("none")))
        assertError(ACErrorDomain, ACErrorRegularFileOnly) { _ = try NSArray(contentsOfSecureURL: URL(string: "https://example.com/a")!, options: []) }
        assertError(ACErrorDomain, ACErrorRegularFileOnly) { try self.sampleArray().write(toSecureURL: URL(string: "https://example.com/a")!, options: .atomic) }
        XCTAssertFalse(sampleArray().write(toSecureURL: URL(string: "https://example.com/a")!, atomically: true))
        services.lock()
        assertError(ACErrorDomain, ACErrorNoKeys) { try self.sampleDictionary().write(toSecureFile: self.path("dict"), options: .atomic) }
        assertError(ACErrorDomain, ACErrorNoKeys) { _ = try NSArray(contentsOfSecureFile: self.path("arr"), options: []) }
        XCTAssertFalse(sampleDictionary().write(toSecureFile: path("dict"), atomically: true))
        XCTAssertNil(NSArray(contentsOfSecureFile: path("arr")))
    }

    // MARK: tables 26–27

    func testKeyedArchiverRoundTrip() throws {
        // The reference's example: a mutable dictionary archived and unarchived.
        let dict = NSMutableDictionary()
        dict["baseball"] = "white"
        dict["basketball"] = "orange"
        XCTAssertTrue(NSKeyedArchiver.archiveRootObject(dict, toSecureFile: path("archive")))
        let copy = NSKeyedUnarchiver.unarchiveObject(withSecureFile: path("archive")) as? NSDictionary
        XCTAssertEqual(copy, dict)
        XCTAssertNil(rawBytes(path("archive")).range(of: Data("basketball".utf8)))
        try NSKeyedArchiver.archiveRootObject(dict, toSecureFile: path("archive-t"), options: .atomic)
        XCTAssertEqual(try NSKeyedUnarchiver.unarchiveObject(withSecureFile: path("archive-t"), options: []) as? NSDictionary, dict)

        let array = sampleArray()
        try NSKeyedArchiver.archiveRootObject(array, toSecureFile: path("archive2"), atomically: false)
        XCTAssertEqual(try NSKeyedUnarchiver.unarchiveObject(withSecureFile: path("archive2"), options: []) as? NSArray, array)

        // the NSSecureCoding path
        try NSKeyedArchiver.archiveRootObject(dict, toSecureFile: path("archive3"), atomically: true, requiringSecureCoding: true)
        let allowed = try NSKeyedUnarchiver.unarchivedObject(ofClasses: [NSDictionary.self, NSString.self], fromSecureFile: path("archive3"))
        XCTAssertEqual(allowed as? NSDictionary, dict)
        XCTAssertEqual(try NSKeyedUnarchiver.unarchivedObject(ofClass: NSDictionary.self, fromSecureFile: path("archive")), dict)
        assertError(NSCocoaErrorDomain, CocoaError.coderReadCorrupt.rawValue) {
            _ = try NSKeyedUnarchiver.unarchivedObject(ofClasses: [NSArray.self], fromSecureFile: self.path("archive3"))
        }

        try Data("not an archive".utf8).write(toSecureFile: path("junk"))
        XCTAssertThrowsError(try NSKeyedUnarchiver.unarchiveObject(withSecureFile: path("junk"), options: []))
        XCTAssertNil(NSKeyedUnarchiver.unarchiveObject(withSecureFile: path("junk")))
        var raw = rawBytes(path("archive"))
        raw[Int(FileLayout().dataOffset) + 40] ^= 1  // inside chunk 0
        try raw.write(to: URL(fileURLWithPath: path("tampered")))
        assertError(ACErrorDomain, ACErrorBadKeyOrCorruptData) { _ = try NSKeyedUnarchiver.unarchiveObject(withSecureFile: self.path("tampered"), options: []) }
        XCTAssertNil(NSKeyedUnarchiver.unarchiveObject(withSecureFile: path("tampered")))
        services.lock()
        assertError(ACErrorDomain, ACErrorNoKeys) { try NSKeyedArchiver.archiveRootObject(dict, toSecureFile: self.path("archive"), options: .atomic) }
        assertError(ACErrorDomain, ACErrorNoKeys) { try NSKeyedArchiver.archiveRootObject(dict, toSecureFile: self.path("archive"), atomically: true) }
        XCTAssertFalse(NSKeyedArchiver.archiveRootObject(dict, toSecureFile: path("archive")))
    }

    // MARK: Codable

    struct Settings: Codable, Equatable {
        var name: String
        var count: Int
        var enabled: Bool
        var ratio: Double
        var tags: [String]
        var blob: Data
    }

    func testCodableJSONAndPropertyList() throws {
        let value = Settings(name: "ünïcode ✓", count: -7, enabled: true, ratio: 0.25, tags: ["a", "b"], blob: Data([1, 2, 3]))
        try JSONEncoder().encode(value, toSecureFile: path("s.json"))
        XCTAssertEqual(try JSONDecoder().decode(Settings.self, fromSecureFile: path("s.json")), value)
        let plist = PropertyListEncoder()
        plist.outputFormat = .binary
        try plist.encode(value, toSecureFile: path("s.plist"), encryptionGroupId: "grp", options: [])
        XCTAssertEqual(try PropertyListDecoder().decode(Settings.self, fromSecureFile: path("s.plist"), encryptionGroupId: "grp"), value)
        assertError(ACErrorDomain, ACErrorBadKeyOrCorruptData) { _ = try PropertyListDecoder().decode(Settings.self, fromSecureFile: self.path("s.plist")) }
        XCTAssertThrowsError(try JSONDecoder().decode([Int].self, fromSecureFile: path("s.json"))) { error in
            XCTAssertTrue(error is DecodingError, "\(error)")
        }
        assertError(NSPOSIXErrorDomain, Int(ENOENT)) { _ = try JSONDecoder().decode(Settings.self, fromSecureFile: self.path("none")) }
    }

    // MARK: AsyncSequence

    func testChunksAndBytes() async throws {
        var rng = SplitMix64(seed: 5)
        let contents = randomData(200_001, &rng)
        try contents.write(toSecureFile: path("big"))
        var joined = Data()
        var sizes: [Int] = []
        for try await chunk in SecureFileChunks(path: path("big"), chunkSize: 65_536) {
            joined.append(chunk)
            sizes.append(chunk.count)
        }
        XCTAssertEqual(joined, contents)
        XCTAssertEqual(sizes, [65_536, 65_536, 65_536, 3393])

        var bytes: [UInt8] = []
        for try await b in try SecureFileChunks(url: URL(fileURLWithPath: path("big")), chunkSize: 777).bytes.prefix(5000) { bytes.append(b) }
        XCTAssertEqual(Data(bytes), contents.prefix(5000))

        try Data().write(toSecureFile: path("empty"))
        var count = 0
        for try await _ in SecureFileChunks(path: path("empty")) { count += 1 }
        XCTAssertEqual(count, 0)

        try Data("group".utf8).write(toSecureFile: path("g"), encryptionGroupId: "grp")
        var groupData = Data()
        for try await chunk in SecureFileChunks(path: path("g"), encryptionGroupId: "grp") { groupData.append(chunk) }
        XCTAssertEqual(groupData, Data("group".utf8))

        // typed throws: the error is an NSError without a cast
        do {
            for try await _ in SecureFileChunks(path: path("missing")) {}
            XCTFail("expected ENOENT")
        } catch {
            XCTAssertEqual(error.domain, NSPOSIXErrorDomain)
            XCTAssertEqual(error.code, Int(ENOENT))
        }
        var iterator = SecureFileChunks(path: path("g")).makeAsyncIterator()
        do { _ = try await iterator.next(); XCTFail("expected a key error") } catch {
            XCTAssertEqual(error.domain, ACErrorDomain)
            XCTAssertEqual(error.code, ACErrorBadKeyOrCorruptData)
        }
        let afterError = try await iterator.next()
        XCTAssertNil(afterError, "an iterator ends after its error")
        XCTAssertThrowsError(try SecureFileChunks(url: URL(string: "https://example.com/x")!))
    }
}
