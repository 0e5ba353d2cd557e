#if canImport(Glibc)
import Glibc
#endif
import Foundation
import XCTest
import ACCrypto
import ACSecureServices
import ACSecureFileCore
@testable import ACSecureFoundation

/// A temporary directory with a fresh store that is the process-wide secure services for the
/// test (the Foundation layer and the C API use `SecureServices.current`).
class SecureFoundationTestCase: XCTestCase {
    var directory = ""
    var services: SecureServices!
    let appID = "com.example.foundation-tests"

    override func setUpWithError() throws {
        var template = Array("/tmp/acsecure-foundation-XXXXXX".utf8CString)
        guard let p = mkdtemp(&template) else { throw XCTSkip("mkdtemp failed") }
        directory = String(cString: p)
        services = try SecureServices(appID: appID, storeDirectory: directory + "/store", argonCost: .minimum)
        SecureServices.current = services
    }

    override func tearDownWithError() throws {
        if SecureServices.current === services { SecureServices.current = nil }
        try? FileManager.default.removeItem(atPath: directory)
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

/// SplitMix64, so a failing random sequence can be replayed from its seed.
struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

func randomData(_ count: Int, _ rng: inout SplitMix64) -> Data {
    Data((0..<count).map { _ in UInt8.random(in: 0...255, using: &rng) })
}
