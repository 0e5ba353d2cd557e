import Foundation
import XCTest
import ACSecureServices
import ACSecureFoundation
import ACSecureSharing

// "Sharing secure files from an extension": the provider app, the extension and the host app of
// the reference's sample code, ported as docs/PORTING.md says. The iOS-only parts (Info.plist keys,
// the shared keychain item, AppConnectExtensionInterface's access-control handshake) have no Linux
// counterpart: the crypto block goes from provider to extension through whatever channel the
// apps share (here a variable), and the extension decides itself whether to share.

/// The provider app: "When secure services are available, create an encryption key for
/// encrypting secure files."
final class ProviderApp: AppConnectDelegate {
    /// Stands for the shared keychain item the extension can read.
    var sharedKeychainItem: NSData?

    // -(void)appConnect:(AppConnect *)appConnect secureServicesAvailabilityChangedTo:(ACSecureServicesAvailability)secureServicesAvailability
    func appConnect(_ appConnect: SecureServices, secureServicesAvailabilityChangedTo secureServicesAvailability: ACSecureServicesAvailability) {
        // if (secureServicesAvailability == ACSECURESERVICESAVAILABILITY_AVAILABLE) {
        if secureServicesAvailability == .available {
            // NSData *secureKeyData = [ACWrappedAppKey getCryptoKeysForACFileEncryptionWithSharedGroupID:nil error:nil];
            let secureKeyData = try? ACWrappedAppKey.getCryptoKeysForACFileEncryption(sharedGroupID: nil)

            // Store the secureKeyData object in a shared keychain that the extension can access.
            sharedKeychainItem = secureKeyData
        }
    }
}

/// The Document View Controller extension, step 5 of table 33: wrap the selected file.
enum DocumentPickerExtension {
    static func share(_ selectedFile: String, to wrappedFile: String, keychainItem: NSData) throws {
        // +(BOOL)wrapFileAtPath:(NSString *)path toPath:(NSString *)toPath withCryptoBlock:(NSData *)cryptoBlock
        //      actualFileName:(NSString *)fileName error:(NSError **)error;
        try ACWrappedFile.wrapFile(atPath: selectedFile, toPath: wrappedFile, cryptoBlock: keychainItem, actualFileName: "report.txt")
    }
}

/// The host app: "Coding the host app to access the shared file".
final class HostApp {
    let decURL: URL
    init(decURL: URL) { self.decURL = decURL }

    // -(NSURL *)getDecryptedFileURL:(NSURL *)url
    func getDecryptedFileURL(_ url: URL) throws -> URL {
        do {
            // ACWrappedFileReadHandle *readHandle = [ACUnwrappedFile readWrappedFileAtPath:url.path sharedGroupID:nil error:&error];
            let readHandle = try ACUnwrappedFile.readWrappedFile(atPath: url.path, sharedGroupID: nil)

            // NSFileHandle *writeToFileHandle = [NSFileHandle fileHandleForWritingAtPath:decURL.path];
            _ = FileManager.default.createFile(atPath: decURL.path, contents: nil)
            let writeToFileHandle = FileHandle(forWritingAtPath: decURL.path)!

            // while ((decryptedData = [readHandle readDataOfLength:1024]) && (decryptedData.length > 0)) {
            //     [writeToFileHandle writeData:decryptedData];
            var decryptedData = readHandle.readData(ofLength: 1024)
            while decryptedData.count > 0 {
                writeToFileHandle.write(decryptedData)
                decryptedData = readHandle.readData(ofLength: 1024)
            }

            // [writeToFileHandle synchronizeFile];
            // [writeToFileHandle closeFile];
            writeToFileHandle.synchronizeFile()
            writeToFileHandle.closeFile()

            // [[NSFileManager defaultManager] removeItemAtURL:url error:nil];
            try FileManager.default.removeItem(at: url)
            return decURL
        } catch let error as NSError where error.code == ACWrappedFileReadErrorUnknownWrapperFormat {
            // } else if (error && error.code == ACWrappedFileReadErrorUnknownWrapperFormat) {
            // The file is not wrapped. It is not from an AppConnect app's extension. It can be used directly.
            return url
        }
    }
}

final class SharingExamplesTests: PortingTestCase {
    func testProviderExtensionAndHost() throws {
        // The provider app hears that secure services became available and makes the crypto block.
        let provider = ProviderApp()
        services.delegate = provider
        services.lock()
        XCTAssertNil(provider.sharedKeychainItem)
        try services.unlock(passcode: nil)
        let keychainItem = try XCTUnwrap(provider.sharedKeychainItem, "the provider got no crypto block")

        // The extension wraps the user's file; it needs no secure services.
        let selected = tmp + "/selected.txt"
        let contents = Data((0..<5000).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        XCTAssertTrue(FileManager.default.createFile(atPath: selected, contents: contents))
        let wrapped = tmp + "/wrapped"
        try DocumentPickerExtension.share(selected, to: wrapped, keychainItem: keychainItem)
        XCTAssertNotEqual(FileManager.default.contents(atPath: wrapped), contents)

        // Another AppConnect app (same store, no shared group) reads it.
        SecureServices.current = try SecureServices(appID: "com.example.host", storeDirectory: tmp + "/store", argonCost: .minimum)
        let host = HostApp(decURL: URL(fileURLWithPath: tmp + "/decrypted.txt"))
        let decrypted = try host.getDecryptedFileURL(URL(fileURLWithPath: wrapped))
        XCTAssertEqual(decrypted, host.decURL)
        XCTAssertEqual(FileManager.default.contents(atPath: decrypted.path), contents)
        XCTAssertFalse(FileManager.default.fileExists(atPath: wrapped), "the wrapped file is removed after decrypting")

        // A file that is not wrapped is used directly.
        let plain = URL(fileURLWithPath: selected)
        XCTAssertEqual(try host.getDecryptedFileURL(plain), plain)
    }

    /// The rest of ACWrappedFileReadHandle ("Use the methods in ACFileHandle.h").
    func testWrappedFileReadHandleMethods() throws {
        let block = try ACWrappedAppKey.getCryptoKeysForACFileEncryption(sharedGroupID: "group-1")
        XCTAssertTrue(FileManager.default.createFile(atPath: tmp + "/src", contents: Data("0123456789".utf8)))
        try ACWrappedFile.wrapFile(atPath: tmp + "/src", toPath: tmp + "/w", cryptoBlock: block)
        let h = try ACUnwrappedFile.readWrappedFile(atPath: tmp + "/w", sharedGroupID: "group-1")
        XCTAssertEqual(h.actualFileName, "src")
        XCTAssertEqual(try h.read(upToCount: 3), Data("012".utf8))
        XCTAssertEqual(h.offsetInFile, 3)
        XCTAssertEqual(try h.offset(), 3)
        try h.seek(toOffset: 8)
        XCTAssertEqual(try h.readToEnd(), Data("89".utf8))
        XCTAssertNil(try h.readToEnd())
        XCTAssertEqual(try h.seekToEnd(), 10)
        h.seek(toFileOffset: 1)
        XCTAssertEqual(h.readDataToEndOfFile(), Data("123456789".utf8))
        XCTAssertEqual(h.seekToEndOfFile(), 10)
        h.seek(toFileOffset: 9)
        XCTAssertEqual(h.availableData, Data("9".utf8))
        XCTAssertEqual(h.readData(ofLength: 5), Data(), "empty, not nil, at the end")
        try h.close()
        h.closeFile()  // closing twice is harmless
        XCTAssertEqual(thrown { _ = try h.read(upToCount: 1) }?.code, Int(EBADF))
    }
}
