#if canImport(Glibc)
import Glibc
#endif
import Foundation
import XCTest
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
            try dict.write(toSecureFile: p, atomically: atomic)
            let copy = try NSDictionary(contentsOfSecureFile: p)
            XCTAssertEqual(copy, dict)
            XCTAssertNil(rawBytes(p).range(of: Data("basketball".utf8)), "plaintext on disk")
        }
        let url = URL(fileURLWithPath: path("dict-url"))
        try dict.write(toSecureURL: url, atomically: true)
        XCTAssertEqual(try NSDictionary(contentsOfSecureURL: url), dict)
        let mutable = try NSMutableDictionary(contentsOfSecureFile: path("dict-true"))
        XCTAssertEqual(mutable, dict)
        mutable["added"] = "yes"
        try mutable.write(toSecureFile: path("m"), atomically: true)
        XCTAssertEqual(try NSMutableDictionary(contentsOfSecureURL: URL(fileURLWithPath: path("m")))["added"] as? String, "yes")
        // the same property list the plain method writes
        try dict.write(to: URL(fileURLWithPath: path("plain.plist")), atomically: true)
        XCTAssertEqual(NSDictionary(contentsOfFile: path("plain.plist")), try NSDictionary(contentsOfSecureFile: path("dict-true")))
    }

    func testArrayRoundTrips() throws {
        let array = sampleArray()
        try array.write(toSecureFile: path("arr"), atomically: true)
        XCTAssertEqual(try NSArray(contentsOfSecureFile: path("arr")), array)
        let url = URL(fileURLWithPath: path("arr-url"))
        try array.write(toSecureURL: url, atomically: false)
        XCTAssertEqual(try NSArray(contentsOfSecureURL: url), array)
        let mutable = try NSMutableArray(contentsOfSecureFile: path("arr"))
        mutable.add("more")
        try mutable.write(toSecureFile: path("arr2"), atomically: true)
        XCTAssertEqual(try NSMutableArray(contentsOfSecureURL: URL(fileURLWithPath: path("arr2"))).lastObject as? String, "more")
    }

    func testCollectionErrors() throws {
        try sampleArray().write(toSecureFile: path("arr"), atomically: true)
        assertError(NSCocoaErrorDomain, CocoaError.propertyListReadCorrupt.rawValue) { _ = try NSDictionary(contentsOfSecureFile: self.path("arr")) }
        try sampleDictionary().write(toSecureFile: path("dict"), atomically: true)
        assertError(NSCocoaErrorDomain, CocoaError.propertyListReadCorrupt.rawValue) { _ = try NSArray(contentsOfSecureFile: self.path("dict")) }
        try Data("not a plist".utf8).write(toSecureFile: path("junk"))
        assertError(NSCocoaErrorDomain, CocoaError.propertyListReadCorrupt.rawValue) { _ = try NSMutableArray(contentsOfSecureFile: self.path("junk")) }
        assertError(NSCocoaErrorDomain, CocoaError.propertyListWriteInvalid.rawValue) {
            try (["key": NSObject()] as NSDictionary).write(toSecureFile: self.path("bad"), atomically: true)
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: path("bad")))
        assertError(NSPOSIXErrorDomain, Int(ENOENT)) { _ = try NSMutableDictionary(contentsOfSecureFile: self.path("none")) }
        assertError(ACErrorDomain, ACErrorRegularFileOnly) { _ = try NSArray(contentsOfSecureURL: URL(string: "https://example.com/a")!) }
        assertError(ACErrorDomain, ACErrorRegularFileOnly) { try self.sampleArray().write(toSecureURL: URL(string: "https://example.com/a")!, atomically: true) }
        services.lock()
        assertError(ACErrorDomain, ACErrorNoKeys) { try self.sampleDictionary().write(toSecureFile: self.path("dict"), atomically: true) }
        assertError(ACErrorDomain, ACErrorNoKeys) { _ = try NSArray(contentsOfSecureFile: self.path("arr")) }
    }

    // MARK: tables 26–27

    func testKeyedArchiverRoundTrip() throws {
        // The reference's example: a mutable dictionary archived and unarchived.
        let dict = NSMutableDictionary()
        dict["baseball"] = "white"
        dict["basketball"] = "orange"
        try NSKeyedArchiver.archiveRootObject(dict, toSecureFile: path("archive"))
        let copy = try NSKeyedUnarchiver.unarchiveObject(withSecureFile: path("archive")) as? NSDictionary
        XCTAssertEqual(copy, dict)
        XCTAssertNil(rawBytes(path("archive")).range(of: Data("basketball".utf8)))

        let array = sampleArray()
        try NSKeyedArchiver.archiveRootObject(array, toSecureFile: path("archive2"), atomically: false)
        XCTAssertEqual(try NSKeyedUnarchiver.unarchiveObject(withSecureFile: path("archive2")) as? NSArray, array)

        // the NSSecureCoding path
        try NSKeyedArchiver.archiveRootObject(dict, toSecureFile: path("archive3"), atomically: true, requiringSecureCoding: true)
        let allowed = try NSKeyedUnarchiver.unarchivedObject(ofClasses: [NSDictionary.self, NSString.self], fromSecureFile: path("archive3"))
        XCTAssertEqual(allowed as? NSDictionary, dict)
        XCTAssertEqual(try NSKeyedUnarchiver.unarchivedObject(ofClass: NSDictionary.self, fromSecureFile: path("archive")), dict)
        assertError(NSCocoaErrorDomain, CocoaError.coderReadCorrupt.rawValue) {
            _ = try NSKeyedUnarchiver.unarchivedObject(ofClasses: [NSArray.self], fromSecureFile: self.path("archive3"))
        }

        try Data("not an archive".utf8).write(toSecureFile: path("junk"))
        XCTAssertThrowsError(try NSKeyedUnarchiver.unarchiveObject(withSecureFile: path("junk")))
        var raw = rawBytes(path("archive"))
        raw[200] ^= 1
        try raw.write(to: URL(fileURLWithPath: path("tampered")))
        assertError(ACErrorDomain, ACErrorBadKeyOrCorruptData) { _ = try NSKeyedUnarchiver.unarchiveObject(withSecureFile: self.path("tampered")) }
        services.lock()
        assertError(ACErrorDomain, ACErrorNoKeys) { try NSKeyedArchiver.archiveRootObject(dict, toSecureFile: self.path("archive")) }
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
