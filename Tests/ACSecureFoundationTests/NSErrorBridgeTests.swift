#if canImport(Glibc)
import Glibc
#endif
import Foundation
import XCTest
import ACCrypto
import ACSecureFileCore
import ACSecureFoundation

/// The NSError bridge reads ACErrorTable: every code becomes the table's domain and code, and the
/// engine's error (cause, location) travels in the userInfo.
final class NSErrorBridgeTests: XCTestCase {
    func testEveryCodeBridgesThroughTheTable() {
        for code in ACErrorCode.allCases {
            let errno = code == .noError ? ENOENT : code.mapping.errno
            let ns = SecureFileError(code: code, errno: errno, message: "f: m").nsError(path: "f")
            if let nsCode = code.mapping.nsErrorCode {
                XCTAssertEqual(ns.domain, ACErrorDomain, code.name)
                XCTAssertEqual(ns.code, nsCode, code.name)
                XCTAssertEqual(ACErrorCode(nsErrorCode: ns.code), code)
                XCTAssertEqual(ns.userInfo[ACErrorNameKey] as? String, code.name)
                XCTAssertEqual((ns.userInfo[NSUnderlyingErrorKey] as? NSError)?.code, Int(errno), code.name)
            } else {
                XCTAssertEqual(ns.domain, NSPOSIXErrorDomain)
                XCTAssertEqual(ns.code, Int(ENOENT))
            }
            XCTAssertEqual(ns.userInfo[NSFilePathErrorKey] as? String, "f")
        }
        let constants = [ACErrorNoKeys, ACErrorFileTooBig, ACErrorNegativeFileLength, ACErrorLowMemory,
                         ACErrorBadKeyOrCorruptData, ACErrorInvalidArg, ACErrorRegularFileOnly, ACErrorInternal,
                         ACErrorReadOnWriteOnly, ACErrorWriteOnReadOnly, ACErrorTruncOnReadOnly]
        XCTAssertEqual(constants, ACErrorCode.allCases.compactMap(\.mapping.nsErrorCode))
    }

    func testTheEngineErrorAndItsCauseTravelInUserInfo() {
        let crypto = CryptoError.outOfMemory(32)
        let ns = SecureFileError.crypto(crypto, "f: data key").nsError()
        XCTAssertEqual(ns.code, ACErrorLowMemory)
        let engine = ns.userInfo[ACSecureFileErrorKey] as? SecureFileError
        XCTAssertEqual(engine?.cause as? CryptoError, crypto)
        XCTAssertEqual(engine?.location.fileID, #fileID)
    }
}
