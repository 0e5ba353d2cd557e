#if canImport(Glibc)
import Glibc
#endif
import XCTest
@_spi(Testing) import ACCrypto
import ACSecureServices
@testable import ACSecureFileCore

/// Issue 12, "One error model": one table from code to errno, ACE value, NSError code and exit
/// status; errors keep their cause and where they were made.
final class ErrorModelTests: XCTestCase {
    override func tearDown() { SecureBytes.simulateGuardedMemoryExhaustion(false) }

    /// Every code has exactly one row, in order, and each column round-trips to the code.
    func testTableIsTotalAndConsistent() {
        XCTAssertEqual(ACErrorTable.rows.map(\.code), ACErrorCode.allCases)
        XCTAssertEqual(Set(ACErrorTable.rows.map(\.name)).count, ACErrorCode.allCases.count, "names are unique")
        for code in ACErrorCode.allCases {
            let row = code.mapping
            XCTAssertEqual(row.code, code)
            XCTAssertEqual(row.aceValue, code.rawValue, "ACError.h and the Swift codes share the numbers")
            XCTAssertEqual(ACErrorCode(aceValue: row.aceValue), code)
            XCTAssertTrue(row.name.hasPrefix("ACE_"), row.name)
            XCTAssertTrue((1...4).contains(row.exitStatus), "\(row.name): exit \(row.exitStatus)")
            XCTAssertEqual(SecureFileError(code: code, message: "m").errno, row.errno)
            XCTAssertEqual(SecureFileError.ace(code, "m").message, "m: \(row.name)")
            if code == .noError {
                XCTAssertEqual(row.errno, 0)
                XCTAssertNil(row.nsErrorCode, "a plain POSIX error is NSPOSIXErrorDomain")
            } else {
                XCTAssertNotEqual(row.errno, 0, row.name)
                XCTAssertEqual(row.nsErrorCode.flatMap { ACErrorCode(nsErrorCode: $0) }, code, row.name)
            }
        }
        XCTAssertNil(ACErrorCode(aceValue: 12))
        XCTAssertNil(ACErrorCode(nsErrorCode: -1))
    }

    /// The secure services' codes go through the same table: one ACE code and errno each.
    func testSecureServicesErrorsMapThroughTheTable() {
        let expected: [(SecureServicesError.Code, ACErrorCode, Int32)] = [
            (.noKeys, .noKeys, EACCES), (.wrongPasscode, .noKeys, EACCES), (.storeIO, .noKeys, EIO),
            (.invalidArgument, .invalidArgument, EINVAL), (.corruptStore, .badKeyOrCorruptData, EIO),
            (.outOfMemory, .lowMemory, ENOMEM),
        ]
        for (servicesCode, code, errno) in expected {
            let e = SecureServicesError(servicesCode, "why")
            let converted = SecureFileError.services(e, "f")
            XCTAssertEqual(converted.code, code, "\(servicesCode)")
            XCTAssertEqual(converted.errno, errno, "\(servicesCode)")
            XCTAssertEqual(converted.message, "f: why: \(code.name)")
            XCTAssertEqual(converted.cause as? SecureServicesError, e)
        }
        let withErrno = SecureFileError(SecureServicesError(.storeIO, "store", errno: EROFS), "f")
        XCTAssertEqual(withErrno.errno, EROFS, "a failed store read or write keeps its errno")
        let retired = SecureFileError(SecureServicesError(.noKeys, "no store", errno: ENOENT), "f")
        XCTAssertEqual(retired.errno, EACCES, "no keys is EACCES whatever made them unavailable (ACSecureServices.h)")
    }

    /// Factories record where the error was made (the caller of the factory).
    func testErrorsRecordWhereTheyWereMade() {
        let line = #line + 1
        let e = SecureFileError.posix(ENOENT, "f")
        XCTAssertEqual(e.location, .init(fileID: #fileID, line: line))
        XCTAssertEqual(e.code, .noError, "a plain POSIX error has no ACE detail")
        XCTAssertEqual(e.message, "f: \(String(cString: strerror(ENOENT)))")
        XCTAssertTrue(e.detailedDescription.contains("ErrorModelTests.swift:\(line)"), e.detailedDescription)
        XCTAssertEqual(e.withMessage("g").location, e.location)
    }

    /// A crypto failure inside the engine keeps the `CryptoError` as its cause, and the error says
    /// where the engine made it.
    func testEngineCryptoFailureKeepsTheCryptoErrorAsCause() throws {
        let env = try TestEnvironment()
        let path = env.path("f")
        try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services).close()
        SecureBytes.simulateGuardedMemoryExhaustion(true)
        do {
            _ = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
            XCTFail("opened without guarded memory")
        } catch {
            guard case .outOfMemory = error.cause as? CryptoError else {
                return XCTFail("cause: \(String(describing: error.cause)) of \(error.detailedDescription)")
            }
            XCTAssertEqual(error.code, .lowMemory)
            XCTAssertEqual(error.errno, ENOMEM)
            XCTAssertTrue(error.location.fileID.hasPrefix("ACSecureFileCore/"), "\(error.location)")
            XCTAssertTrue(error.detailedDescription.contains("cause: out of guarded memory"), error.detailedDescription)
        }
    }

    /// The store keeps the crypto failure too, and the chain reads through both levels.
    func testSecureServicesErrorKeepsTheCryptoErrorAsCause() throws {
        let env = try TestEnvironment(passcode: "1234")
        env.services.lock()
        let passcode = try SecureBytes(copying: Array("1234".utf8))
        SecureBytes.simulateGuardedMemoryExhaustion(true)
        do {
            try env.services.unlock(passcode: passcode)
            XCTFail("unlocked without guarded memory")
        } catch {
            guard case .outOfMemory = error.cause as? CryptoError else { return XCTFail("cause of \(error)") }
            let engine = SecureFileError.services(error, "f")
            XCTAssertEqual(engine.code, .lowMemory)
            XCTAssertTrue(error.location.fileID.hasPrefix("ACSecureServices/"), "the store says where it gave up: \(error.location)")
            XCTAssertTrue(engine.detailedDescription.contains("; cause: \(error.message) at \(error.location); cause: out of guarded memory"),
                          engine.detailedDescription)
        }
    }

    /// An OpenSSL failure becomes ACE_INTERNAL_ERROR with the CryptoError (and its captured
    /// reason) as cause, instead of a bare "encryption failed".
    func testOpenSSLFailureIsKeptAsCause() {
        let crypto = CryptoError.openSSL(call: "EVP_EncryptFinal_ex", detail: "error:reason")
        let e = SecureFileError.crypto(crypto, "f: encryption of chunk 3 failed")
        XCTAssertEqual(e.code, .internalError)
        XCTAssertEqual(e.errno, EIO)
        XCTAssertEqual(e.cause as? CryptoError, crypto)
        XCTAssertEqual(e.message, "f: encryption of chunk 3 failed: OpenSSL EVP_EncryptFinal_ex failed: error:reason: ACE_INTERNAL_ERROR")
    }
}
