import Foundation
import XCTest
import ACCrypto
import ACSecureServices
import ACSecureSharing

/// A wrapped file opened by the host app is a secure handle like any other: locked services stop it.
final class WrappedFileLockTests: XCTestCase {
    func testReadsOfAWrappedFileFailWhileServicesAreLockedAndResumeAfterUnlock() throws {
        let env = try SharingEnvironment()
        let services = try env.services(passcode: "1234")
        let block = try ACWrappedAppKey.getCryptoKeysForACFileEncryption(sharedGroupID: "group-a", services: services)
        let source = env.path("source.txt"), wrapped = env.path("wrapped.acsf")
        writePlain(source, Array(repeating: 0x61, count: 10_000))
        try ACWrappedFile.wrapFile(atPath: source, toPath: wrapped, cryptoBlock: block, actualFileName: "report.txt")

        let handle = try ACUnwrappedFile.readWrappedFile(atPath: wrapped, sharedGroupID: "group-a", services: services)
        XCTAssertEqual(handle.readData(ofLength: 100).count, 100)
        services.lock()
        XCTAssertThrowsError(try handle.read(upToCount: 100)) { error in
            let e = error as NSError
            XCTAssertEqual(e.domain, "ACErrorDomain")
            XCTAssertEqual(e.code, 1, "ACErrorNoKeys")
        }
        try services.unlock(passcode: try SecureBytes(copying: Array("1234".utf8)))
        XCTAssertEqual(handle.readData(ofLength: 100), Data(repeating: 0x61, count: 100))
        try handle.close()
    }
}
