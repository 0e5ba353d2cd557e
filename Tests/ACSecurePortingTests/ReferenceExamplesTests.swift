#if canImport(Glibc)
import Glibc
#endif
import Foundation
import XCTest
import ACSecureTestSupport
import ACSecureServices
import ACSecureFoundation
import ACSecureSharing

// The AppConnect reference's code examples (docs reference: /work/shared/reference, "Secure file
// I/O API details", "Securing sensitive data", "Sharing secure files from an extension"), ported to
// Swift the way docs/PORTING.md's table says. Each example keeps the reference's structure and
// names; the Objective-C original is quoted above each ported line where the spelling changes.
// Every call here is one of the table's spellings, so renaming a method breaks this build.
//
// Paths: the reference writes to /tmp and reads etc/group; here both live in a fresh directory
// per test (`tmp`, and `etcGroup`, a copy of /etc/group).

class PortingTestCase: XCTestCase {
    var temporary: TemporaryDirectory!
    var tmp: String { temporary.path }
    var etcGroup = ""
    var services: SecureServices!

    override func setUpWithError() throws {
        temporary = try TemporaryDirectory(prefix: "acsecure-porting")
        // -startWithLaunchOptions: / -appConnectIsReady: → start the services and make them current.
        services = try SecureServices(appID: "com.example.porting", storeDirectory: tmp + "/store", argonCost: .minimum)
        SecureServices.current = services
        etcGroup = tmp + "/group"
        let group = FileManager.default.contents(atPath: "/etc/group") ?? Data("root:x:0:\nstaff:x:50:alice,bob\n".utf8)
        XCTAssertTrue(FileManager.default.createFile(atPath: etcGroup, contents: group))
    }

    override func tearDownWithError() throws {
        if SecureServices.current === services { SecureServices.current = nil }
        temporary = nil
    }
}

final class ReferenceExamplesTests: PortingTestCase {

    // MARK: Secure services API details

    /// "After the -appConnectIsReady: callback method is called: if the secureServicesAvailability
    /// property has the value ACSECURESERVICESAVAILABILITY_AVAILABLE, use secure file I/O APIs."
    func testSecureServicesProperties() throws {
        // AppConnect *appConnect = [AppConnect sharedInstance];
        let appConnect = try XCTUnwrap(SecureServices.current)
        // appConnect.secureServicesAvailability == ACSECURESERVICESAVAILABILITY_AVAILABLE
        XCTAssertEqual(appConnect.secureServicesAvailability, .available)
        // appConnect.secureFileIOPolicy == ACSECUREFILEIOPOLICY_REQUIRED
        XCTAssertEqual(appConnect.secureFileIOPolicy, .required)
        // [AppConnect version]
        let version: String = SecureServices.version
        XCTAssertFalse(version.isEmpty)
    }

    // MARK: NSFileManager category (table 23)

    // - (void)NSFileManagerCategoryExample
    func NSFileManagerCategoryExample() throws {
        // NSData *etcGroupData = [NSData dataWithContentsOfFile:@"/etc/group"];
        let etcGroupData = FileManager.default.contents(atPath: etcGroup)

        // [[NSFileManager defaultManager] createSecureFileAtPath:secureFileName contents:etcGroupData attributes:nil];
        let secureFileName = tmp + "/secureFile"
        FileManager.default.createSecureFile(atPath: secureFileName, contents: etcGroupData, attributes: nil)

        let anotherSecureFileName = tmp + "/anotherSecureFile"
        let sourceURL = URL(fileURLWithPath: secureFileName)
        // NSURL *destinationURL = [NSURL URLWithString:[NSString stringWithFormat:@"%@", anotherSecureFileName]];
        let destinationURL = URL(string: "\(anotherSecureFileName)")!

        // [[NSFileManager defaultManager] moveSecureFileAtURL:sourceURL toURL:destinationURL error:&error];
        try FileManager.default.moveSecureFile(at: sourceURL, to: destinationURL)
    }

    func testNSFileManagerCategoryExample() throws {
        // The reference builds the destination with URLWithString:, which gives a URL without a
        // scheme, not a file URL: the move is refused (the reference's example has no error
        // handling, so it would not notice). Ported as written, it reports the error.
        let error = try XCTUnwrap(thrown { try self.NSFileManagerCategoryExample() })
        XCTAssertEqual(error.domain, ACErrorDomain)
        XCTAssertEqual(error.code, ACErrorRegularFileOnly)
        XCTAssertEqual(try Data(contentsOfSecureFile: tmp + "/secureFile"), FileManager.default.contents(atPath: etcGroup))
        // With a file URL the move works.
        try FileManager.default.moveSecureFile(at: URL(fileURLWithPath: tmp + "/secureFile"), to: URL(fileURLWithPath: tmp + "/anotherSecureFile"))
        XCTAssertEqual(FileManager.default.secureContents(atPath: tmp + "/anotherSecureFile"), FileManager.default.contents(atPath: etcGroup))
        XCTAssertFalse(FileManager.default.fileExists(atPath: tmp + "/secureFile"))
    }

    // MARK: NSData (ACSecureFile) category (table 24)

    // - (void)NSDataCategoryExample
    func NSDataCategoryExample() throws -> (secureFileData: Data, etcGroupData: Data) {
        // NSData *etcGroupData = [NSData dataWithContentsOfFile:@"etc/group"];
        let etcGroupData = FileManager.default.contents(atPath: etcGroup)!

        // [etcGroupData writeToSecureFile:secureFileName options:0 error:&error];
        let secureFileName = tmp + "/group.sec"
        try etcGroupData.write(toSecureFile: secureFileName, options: [])

        // NSData *secureFileData = [NSData dataWithContentsOfSecureFile:secureFileName options:0 error:&error];
        let secureFileData = try Data(contentsOfSecureFile: secureFileName, options: [])

        // Note: The contents of NSData objects 'secureFileData' and 'etcGroupData' are identical.
        return (secureFileData, etcGroupData)
    }

    func testNSDataCategoryExample() throws {
        let (secureFileData, etcGroupData) = try NSDataCategoryExample()
        XCTAssertEqual(secureFileData, etcGroupData)
        XCTAssertNotEqual(FileManager.default.contents(atPath: tmp + "/group.sec"), etcGroupData, "the file on disk is encrypted")

        // The same with NSData objects, and the methods without an error parameter.
        let nsData = NSData(data: etcGroupData)
        // [nsData writeToSecureFile:path atomically:YES]
        XCTAssertTrue(nsData.write(toSecureFile: tmp + "/ns.sec", atomically: true))
        // [NSData dataWithContentsOfSecureFile:path]
        XCTAssertEqual(NSData(contentsOfSecureFile: tmp + "/ns.sec"), nsData)
        // [NSData dataWithContentsOfSecureFile:path options:0 error:&error]
        XCTAssertEqual(try NSData(contentsOfSecureFile: tmp + "/ns.sec", options: []), nsData)
        // [nsData writeToSecureURL:url options:NSDataWritingAtomic error:&error]
        try nsData.write(toSecureURL: URL(fileURLWithPath: tmp + "/ns-url.sec"), options: .atomic)
        // [NSData dataWithContentsOfSecureURL:url] / [... options:0 error:&error]
        XCTAssertEqual(NSData(contentsOfSecureURL: URL(fileURLWithPath: tmp + "/ns-url.sec")), nsData)
        XCTAssertEqual(try NSData(contentsOfSecureURL: URL(fileURLWithPath: tmp + "/ns-url.sec"), options: []), nsData)
        // [nsData writeToSecureURL:url atomically:NO]
        XCTAssertTrue(nsData.write(toSecureURL: URL(fileURLWithPath: tmp + "/ns-url2.sec"), atomically: false))
        XCTAssertNil(NSData(contentsOfSecureFile: tmp + "/missing.sec"), "nil, as [NSData dataWithContentsOfSecureFile:] returns")
    }

    // MARK: NSData (ACSharedSecureFile) category (table 25)

    var groupId = "com.sample.groupID-value"

    // - (void)NSDataSharedCategoryExample
    func NSDataSharedCategoryExample() throws -> (secureFileData: Data, etcGroupData: Data) {
        let etcGroupData = FileManager.default.contents(atPath: etcGroup)!

        // [etcGroupData writeToSecureFile:secureFileName encryptionGroupId:self.groupId options:0 error:&error];
        let secureFileName = tmp + "/group-shared.sec"
        try etcGroupData.write(toSecureFile: secureFileName, encryptionGroupId: self.groupId, options: [])

        // [NSData dataWithContentsOfSecureFile:secureFileName encryptionGroupId:self.groupId options:0 error:&error];
        let secureFileData = try Data(contentsOfSecureFile: secureFileName, encryptionGroupId: self.groupId, options: [])

        return (secureFileData, etcGroupData)
    }

    func testNSDataSharedCategoryExample() throws {
        let (secureFileData, etcGroupData) = try NSDataSharedCategoryExample()
        XCTAssertEqual(secureFileData, etcGroupData)
        // Another app of the same store that names the group reads it.
        let otherApp = try SecureServices(appID: "com.example.other-app", storeDirectory: tmp + "/store", argonCost: .minimum)
        SecureServices.current = otherApp
        XCTAssertEqual(NSData(contentsOfSecureFile: tmp + "/group-shared.sec", encryptionGroupId: groupId) as Data?, etcGroupData)
        XCTAssertNil(NSData(contentsOfSecureFile: tmp + "/group-shared.sec"), "not with the app's own key")
        SecureServices.current = services
        // The methods without an error parameter.
        XCTAssertTrue(etcGroupData.write(toSecureFile: tmp + "/g2.sec", encryptionGroupId: groupId, atomically: true))
        XCTAssertEqual(NSData(contentsOfSecureURL: URL(fileURLWithPath: tmp + "/g2.sec"), encryptionGroupId: groupId) as Data?, etcGroupData)
    }

    // MARK: ACFileHandle (ACSharedSecureFile) category (tables 22 and 25)

    var destinationPathURL: URL { URL(fileURLWithPath: tmp + "/destination") }
    var decryptedURL: URL { URL(fileURLWithPath: tmp + "/group-copy") }

    // - (void)ACFileHandleSharedCategoryExample
    func ACFileHandleSharedCategoryExample() throws {
        // NSFileHandle *sourceFileHandle = [NSFileHandle fileHandleForReadingAtPath:@"etc/group" error:&err];
        let sourceFileHandle = FileHandle(forReadingAtPath: etcGroup)!

        // As NSFileHandle's, a writing handle opens an existing file.
        _ = FileManager.default.createFile(atPath: destinationPathURL.path, contents: nil)
        // ACFileHandle *destFileHandle = [ACFileHandle fileHandleForWritingToURL:self.destinationPathURL
        //                                  withEncryptionGroupId:self.groupID error:&err];
        let destFileHandle = try ACFileHandle.fileHandleForWriting(to: self.destinationPathURL, encryptionGroupId: self.groupId)

        // while ((data = [sourceFileHandle readDataOfLength:1024]) && (data.length > 0)) {
        //     [destFileHandle writeData:data error:&err];
        var data = sourceFileHandle.readData(ofLength: 1024)
        while data.count > 0 {
            do { try destFileHandle.write(contentsOf: data) } catch { print("Wrote bytes (\(error))") }
            data = sourceFileHandle.readData(ofLength: 1024)
        }
        // [destFileHandle synchronizeFile];
        destFileHandle.synchronizeFile()

        // ACFileHandle *sharedEncryptedFileHandle = [ACFileHandle fileHandleForReadingFromURL:self.destinationPathURL
        //                                             withEncryptionGroupId:self.groupID error:&err];
        let sharedEncryptedFileHandle = try ACFileHandle.fileHandleForReading(from: self.destinationPathURL, encryptionGroupId: self.groupId)

        // [[NSFileManager defaultManager] createFileAtPath:self.decryptedURL.path contents:nil attributes:nil];
        _ = FileManager.default.createFile(atPath: self.decryptedURL.path, contents: nil, attributes: nil)

        // NSFileHandle *writeToFileHandle = [NSFileHandle fileHandleForWritingAtPath:@"/etc/group-copy"];
        let writeToFileHandle = FileHandle(forWritingAtPath: self.decryptedURL.path)!
        // while ((decryptedData = [sharedEncryptedFileHandle readDataOfLength:1024]) && (decryptedData.length > 0)) {
        //     [writeToFileHandle writeData:decryptedData];
        var decryptedData = sharedEncryptedFileHandle.readData(ofLength: 1024)
        while decryptedData.count > 0 {
            writeToFileHandle.write(decryptedData)
            decryptedData = sharedEncryptedFileHandle.readData(ofLength: 1024)
        }
        // [writeToFileHandle synchronizeFile];
        writeToFileHandle.synchronizeFile()
        // Note: The contents of @"/etc/group" and @"/etc/group-copy" are identical.
    }

    func testACFileHandleSharedCategoryExample() throws {
        try ACFileHandleSharedCategoryExample()
        XCTAssertEqual(FileManager.default.contents(atPath: decryptedURL.path), FileManager.default.contents(atPath: etcGroup))
        XCTAssertEqual(try Data(contentsOfSecureFile: destinationPathURL.path, encryptionGroupId: groupId),
                       FileManager.default.contents(atPath: etcGroup))
    }

    /// The ACFileHandle methods of table 22 not used by the example, in their ported spellings.
    func testACFileHandleTable22() throws {
        let path = tmp + "/handle.sec"
        try Data("0123456789".utf8).write(toSecureFile: path)
        // + fileHandleForReadingAtPath:  /  + fileHandleForReadingAtPath:error:  /  + fileHandleForReadingFromURL:error:
        let r1 = ACFileHandle(forReadingAtPath: path)!
        let r2 = try ACFileHandle.fileHandleForReading(atPath: path)
        let r3 = try ACFileHandle(forReadingFrom: URL(fileURLWithPath: path))
        // + fileHandleForUpdatingAtPath:  /  …AtPath:error:  /  + fileHandleForUpdatingURL:error:
        let u1 = ACFileHandle(forUpdatingAtPath: path)!
        let u2 = try ACFileHandle.fileHandleForUpdating(atPath: path)
        let u3 = try ACFileHandle(forUpdating: URL(fileURLWithPath: path))
        // + fileHandleForWritingAtPath:  /  …AtPath:error:  /  + fileHandleForWritingToURL:error:
        let w1 = ACFileHandle(forWritingAtPath: path)!
        let w2 = try ACFileHandle.fileHandleForWriting(atPath: path)
        let w3 = try ACFileHandle(forWritingTo: URL(fileURLWithPath: path))
        // - availableData  /  - availableDataWithError:
        XCTAssertEqual(r1.availableData, Data("0123456789".utf8))
        XCTAssertEqual(try r2.readToEnd() ?? Data(), Data("0123456789".utf8))
        // - readDataOfLength:  /  - readDataOfLength:error:
        XCTAssertEqual(r3.readData(ofLength: 4), Data("0123".utf8))
        XCTAssertEqual(try r3.read(upToCount: 2), Data("45".utf8))
        // - readDataToEndOfFile  /  - readDataToEndOfFileWithError:
        XCTAssertEqual(r3.readDataToEndOfFile(), Data("6789".utf8))
        XCTAssertNil(try r3.readToEnd())
        // - offsetInFile  /  - seekToEndOfFile  /  - seekToFileOffset:
        XCTAssertEqual(r3.offsetInFile, 10)
        r3.seek(toFileOffset: 2)
        XCTAssertEqual(r3.readData(ofLength: 1), Data("2".utf8))
        XCTAssertEqual(u1.seekToEndOfFile(), 10)
        // - writeData:  /  - writeData:error:
        u1.write(Data("AB".utf8))
        try u2.seek(toOffset: 12)
        try u2.write(contentsOf: Data("CD".utf8))
        // NSFileHandle's - truncateFileAtOffset:, - synchronizeFile, - closeFile (inherited by ACFileHandle)
        u3.truncateFile(atOffset: 13)
        u3.synchronizeFile()
        for handle in [r1, r2, r3, u1, u2, u3, w1, w2] { handle.closeFile() }
        try w3.close()
        XCTAssertEqual(try Data(contentsOfSecureFile: path), Data("0123456789ABC".utf8))
    }

    // MARK: NSKeyedArchiver and NSKeyedUnarchiver categories (tables 26, 27)

    // - (void)NSKeyedArchiverCategoryExample
    func NSKeyedArchiverCategoryExample() throws -> (dict: NSMutableDictionary, dictCopy: NSMutableDictionary) {
        // NSMutableDictionary *dict = [NSMutableDictionary dictionary];
        let dict = NSMutableDictionary()

        // [dict setValue:value1 forKey:key1];
        let key1 = "baseball"
        let value1 = "white"
        dict[key1] = value1
        let key2 = "basketball"
        let value2 = "orange"
        dict[key2] = value2

        // [NSKeyedArchiver archiveRootObject:dict toSecureFile:archiveName error:&error];
        let archiveName = tmp + "/secureArchive"
        try NSKeyedArchiver.archiveRootObject(dict, toSecureFile: archiveName, options: .atomic)

        // NSMutableDictionary *dictCopy = (NSMutableDictionary*)[NSKeyedUnarchiver unarchiveObjectWithSecureFile:archiveName error:&error];
        let dictCopy = try NSKeyedUnarchiver.unarchiveObject(withSecureFile: archiveName, options: []) as! NSMutableDictionary

        // Note: The contents of NSMutableDictionary objects 'dict' and 'dictCopy' are identical.
        return (dict, dictCopy)
    }

    func testNSKeyedArchiverCategoryExample() throws {
        let (dict, dictCopy) = try NSKeyedArchiverCategoryExample()
        XCTAssertEqual(dict, dictCopy)
        // + archiveRootObject:toSecureFile:atomically:error:, and the forms without an error parameter
        try NSKeyedArchiver.archiveRootObject(dict, toSecureFile: tmp + "/a2", atomically: false)
        XCTAssertTrue(NSKeyedArchiver.archiveRootObject(dict, toSecureFile: tmp + "/a3"))
        XCTAssertEqual(NSKeyedUnarchiver.unarchiveObject(withSecureFile: tmp + "/a2") as? NSDictionary, dict)
        XCTAssertEqual(NSKeyedUnarchiver.unarchiveObject(withSecureFile: tmp + "/a3") as? NSDictionary, dict)
    }

    // MARK: NSDictionary and NSMutableDictionary categories (tables 28, 29)

    // - (void)NSMutableDictionaryCategoryExample
    func NSMutableDictionaryCategoryExample() throws -> (dict: NSDictionary, dictCopy: NSDictionary) {
        // NSDictionary *dict = [NSDictionary dictionaryWithObjectsAndKeys:@"baseball", @"white", @"basketball", @"orange", nil];
        let dict = NSDictionary(objects: ["baseball", "basketball"], forKeys: ["white" as NSString, "orange" as NSString])

        // [dict writeToSecureFile:secureFileName atomically:TRUE error:&error];
        let secureFileName = tmp + "/secureDictionary"
        try dict.write(toSecureFile: secureFileName, options: .atomic)

        // NSDictionary *dictCopy = [[NSDictionary alloc] initWithContentsOfSecureFile:secureFileName error:&error];
        let dictCopy = try NSDictionary(contentsOfSecureFile: secureFileName, options: [])

        // Note: The contents of objects 'dict' and 'dictCopy' are identical.
        return (dict, dictCopy)
    }

    func testNSMutableDictionaryCategoryExample() throws {
        let (dict, dictCopy) = try NSMutableDictionaryCategoryExample()
        XCTAssertEqual(dict, dictCopy)
        // + dictionaryWithContentsOfSecureURL:error: / - writeToSecureURL:atomically:error:, on NSMutableDictionary
        let url = URL(fileURLWithPath: tmp + "/d.plist")
        try (dict.mutableCopy() as! NSMutableDictionary).write(toSecureURL: url, options: [])
        let mutable = try NSMutableDictionary(contentsOfSecureURL: url, options: [])
        mutable["added"] = "yes"
        XCTAssertEqual(mutable.count, 3)
        // Foundation's spellings (no error parameter): Bool / nil on failure
        XCTAssertTrue(mutable.write(toSecureFile: tmp + "/m.plist", atomically: true))
        XCTAssertEqual(NSMutableDictionary(contentsOfSecureFile: tmp + "/m.plist")?["added"] as? String, "yes")
        XCTAssertEqual(NSDictionary(contentsOfSecureURL: url), dict)
    }

    // MARK: NSArray and NSMutableArray categories (tables 30, 31)

    // - (void)NSArrayCategoryExample
    func NSArrayCategoryExample() throws -> (array: NSArray, arrayCopy: NSArray) {
        // NSArray *array = [NSArray arrayWithObjects:@"one fish", @"two fish", @"red fish", @"blue fish", nil];
        let array = NSArray(array: ["one fish", "two fish", "red fish", "blue fish"])

        // [array writeToSecureFile:secureArrayFileName atomically:TRUE error:&error];
        let secureArrayFileName = tmp + "/secureArray"
        try array.write(toSecureFile: secureArrayFileName, options: .atomic)

        // NSArray *arrayCopy = [[NSArray alloc] initWithContentsOfSecureFile:secureArrayFileName error:&error];
        let arrayCopy = try NSArray(contentsOfSecureFile: secureArrayFileName, options: [])

        // The contents of the objects 'array' and 'arrayCopy' are identical.
        return (array, arrayCopy)
    }

    func testNSArrayCategoryExample() throws {
        let (array, arrayCopy) = try NSArrayCategoryExample()
        XCTAssertEqual(array, arrayCopy)
        let url = URL(fileURLWithPath: tmp + "/a.plist")
        XCTAssertTrue(array.write(toSecureURL: url, atomically: true))
        let mutable = try NSMutableArray(contentsOfSecureURL: url, options: [])
        mutable.add("green fish")
        XCTAssertTrue(mutable.write(toSecureFile: tmp + "/m.plist", atomically: false))
        XCTAssertEqual(NSMutableArray(contentsOfSecureFile: tmp + "/m.plist")?.count, 5)
        XCTAssertEqual(NSArray(contentsOfSecureURL: url), array)
    }

    // MARK: NSError objects that secure Objective-C methods return — the reference's Swift example

    var handledNoKeys = false

    // The reference's Swift example, unchanged except `secureFilename` (a temporary directory) and
    // the flag recording that the no-keys branch ran.
    func errorHandlingExample() {

        // Create data to be securely stored.
        let data = "secret data".data(using: .ascii)! as NSData

        // Set up a couple of data writing options.
        let options: NSData.WritingOptions = [.atomic, .completeFileProtection]

        let secureFilename = tmp + "/data.sec"

        do {
            try data.write(toSecureFile: secureFilename, options: options)
        }

        catch(let error as NSError) {

            if (error.domain == ACErrorDomain && error.code == ACErrorNoKeys) {

                // Provide logic to handle the situation when
                // the encryption key is not available.
                handledNoKeys = true
            }
        }
    }

    func testErrorHandlingExample() throws {
        errorHandlingExample()
        XCTAssertFalse(handledNoKeys)
        XCTAssertEqual(try Data(contentsOfSecureFile: tmp + "/data.sec"), Data("secret data".utf8))
        services.lock()
        errorHandlingExample()
        XCTAssertTrue(handledNoKeys, "the ACErrorNoKeys branch did not run while secure services were locked")
    }

    // MARK: Encryption keys for custom cryptography; securing sensitive data

    func testDerivedKeysAndSensitiveData() throws {
        let appConnect = try XCTUnwrap(SecureServices.current)
        // -derivedAppKeyWithIdentifier:error:  /  -derivedSharedKeyWithIdentifier:error:
        let appKey: ACSensitiveData = try appConnect.derivedAppKey(withIdentifier: "AES")
        let sharedKey: ACSensitiveData = try appConnect.derivedSharedKey(withIdentifier: "AES")
        XCTAssertEqual(appKey.length, 32)
        XCTAssertEqual(sharedKey.length, 32)
        XCTAssertNotEqual(appKey, sharedKey)
        // ACErrorDomain / ACErrorInvalidArg for an empty identifier
        XCTAssertEqual(thrown { _ = try appConnect.derivedAppKey(withIdentifier: "") }?.code, ACErrorInvalidArg)

        // The reference's Swift example:
        let keyData = appKey as NSData
        let key = ACSensitiveData(bytes: keyData.bytes, length: UInt(keyData.length))
        let containerizedKey = ACSensitiveDataContainer(data: key)
        // [ACSensitiveDataContainer containerWithData:key]
        let sameContainer = ACSensitiveDataContainer.container(with: key)
        XCTAssertEqual(containerizedKey.data, appKey)
        XCTAssertEqual(sameContainer.data, appKey)

        // ACErrorDomain / ACErrorNoKeys while secure services are unavailable
        services.lock()
        XCTAssertEqual(thrown { _ = try appConnect.derivedSharedKey(withIdentifier: "AES") }?.code, ACErrorNoKeys)
    }
}

/// The NSError a call threw, or nil.
func thrown(_ body: () throws -> Void) -> NSError? {
    do { try body() } catch { return error as NSError }
    return nil
}
