#if canImport(Glibc)
import Glibc
#endif
import Foundation
import XCTest
import ACSecureTestSupport
import ACCrypto
import ACSecureServices
import ACSecureFileCore
@testable import ACSecureFoundation

/// A temporary directory with a fresh store that is the process-wide secure services for the
/// test (the Foundation layer and the C API use `SecureServices.current`).
class SecureFoundationTestCase: XCTestCase {
    var temporary: TemporaryDirectory!
    var directory: String { temporary.path }
    var services: SecureServices!
    let appID = "com.example.foundation-tests"

    override func setUpWithError() throws {
        temporary = try TemporaryDirectory(prefix: "acsecure-foundation")
        services = try SecureServices(appID: appID, storeDirectory: directory + "/store", argonCost: .minimum)
        SecureServices.current = services
    }

    override func tearDownWithError() throws {
        if SecureServices.current === services { SecureServices.current = nil }
        temporary = nil
    }

    func path(_ name: String) -> String { directory + "/" + name }

    /// The NSError a throwing call produced (fails the test if it did not throw).
    func nsError(_ body: () throws -> Void, file: StaticString = #filePath, line: UInt = #line) -> NSError? {
        do { try body() } catch { return error as NSError }
        XCTFail("expected an error", file: file, line: line)
        return nil
    }

    func assertError(_ domain: String, _ code: Int, file: StaticString = #filePath, line: UInt = #line, _ body: () throws -> Void) {
        guard let e = nsError(body, file: file, line: line) else { return }
        XCTAssertEqual(e.domain, domain, "domain of \(e)", file: file, line: line)
        XCTAssertEqual(e.code, code, "code of \(e)", file: file, line: line)
    }

    func rawBytes(_ path: String) -> Data { FileManager.default.contents(atPath: path) ?? Data() }

    /// Files in the test directory other than the store (to catch leftover temporary files).
    func directoryEntries() -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).filter { $0 != "store" }.sorted()
    }
}

func randomData(_ count: Int, _ rng: inout SplitMix64) -> Data {
    Data(randomBytes(count, &rng))
}
