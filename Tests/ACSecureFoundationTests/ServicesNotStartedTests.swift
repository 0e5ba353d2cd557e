#if canImport(Glibc)
import Glibc
#endif
import Foundation
import XCTest
import ACSecureTestSupport
import ACSecureServices
import ACSecureFoundation

/// Issue 13 / issue 15 finding 6: with `SecureServices.current` not set and no app ID in the
/// environment, the Data and FileManager APIs fail with ACE_NO_KEYS_ERROR and say how to start
/// services. They used to create a passcode-less store for app ID "default" instead.
final class ServicesNotStartedTests: XCTestCase {
    private var temporary: TemporaryDirectory!
    private var directory: String { temporary.path }
    private var savedServices: SecureServices?
    private var savedEnvironment: [String: String?] = [:]

    override func setUpWithError() throws {
        temporary = try TemporaryDirectory(prefix: "acsecure-not-started")
        savedServices = SecureServices.current
        SecureServices.current = nil
        for name in ["ACSECURE_HOME", "ACSECURE_APP_ID", "ACSECURE_PASSCODE", "ACSECURE_CREATE_STORE"] {
            savedEnvironment.updateValue(getenv(name).map { String(cString: $0) }, forKey: name)
            unsetenv(name)
        }
        setenv("ACSECURE_HOME", directory + "/store", 1)
        setenv("ACSECURE_CREATE_STORE", "1", 1)  // even so: no app ID, no store
    }

    override func tearDownWithError() throws {
        for (name, value) in savedEnvironment {
            if let value { setenv(name, value, 1) } else { unsetenv(name) }
        }
        SecureServices.current = savedServices
        temporary = nil
    }

    private func assertNoKeys(_ what: String, _ body: () throws -> Void, line: UInt = #line) {
        do {
            try body()
            XCTFail("\(what): succeeded without secure services", line: line)
        } catch {
            let e = error as NSError
            XCTAssertEqual(e.domain, ACErrorDomain, "\(what): \(e)", line: line)
            XCTAssertEqual(e.code, ACErrorNoKeys, "\(what): \(e)", line: line)
            XCTAssertTrue(e.localizedDescription.contains("ACSecureServicesStart")
                          && e.localizedDescription.contains("SecureServices.current"),
                          "\(what): the message says how to start services: \(e.localizedDescription)", line: line)
        }
    }

    func testDataAndFileManagerFailWithNoKeysAndCreateNothing() {
        let file = directory + "/f"
        assertNoKeys("Data.write(toSecureFile:)") { try Data("x".utf8).write(toSecureFile: file) }
        assertNoKeys("Data.write(toSecureFile:options: .atomic)") { try Data("x".utf8).write(toSecureFile: file, options: .atomic) }
        assertNoKeys("Data(contentsOfSecureFile:)") { _ = try Data(contentsOfSecureFile: file) }
        XCTAssertFalse(Data("x".utf8).write(toSecureFile: file, atomically: true))
        XCTAssertNil(SecureServices.current, "no services were started")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: directory), [], "no store and no file created")
    }
}
