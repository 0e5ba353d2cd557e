#if canImport(Glibc)
import Glibc
#endif
import Foundation
import XCTest
import ACSecureTestSupport
import ACCrypto
import ACSecureServices

func passcode(_ s: String) throws -> SecureBytes { try SecureBytes(copying: Array(s.utf8)) }

extension SecureBytes {
    var bytes: [UInt8] { withUnsafeBytes { Array($0) } }
}

/// A thread-safe recorder for callbacks that run on other threads; a test waits for a callback
/// instead of sleeping.
final class Recorder<Element: Sendable>: Sendable {
    private let items = LockedValue<[Element]>([])
    private let appended = DispatchSemaphore(value: 0)

    func append(_ e: Element) {
        items.withLock { $0.append(e) }
        appended.signal()
    }

    var values: [Element] { items.withLock { $0 } }

    /// The values once `count` were recorded, or what was recorded by the time `timeout` passed.
    func values(atLeast count: Int, timeout: Double = 10) -> [Element] {
        let deadline = DispatchTime.now() + timeout
        while values.count < count && appended.wait(timeout: deadline) == .success {}
        return values
    }
}

func fileMode(_ path: String) -> mode_t? {
    var st = stat()
    guard lstat(path, &st) == 0 else { return nil }
    return st.st_mode & 0o7777
}

func readBytes(_ path: String) -> [UInt8]? {
    FileManager.default.contents(atPath: path).map { [UInt8]($0) }
}

/// Writes a file private to the user (0600), as the store requires of its seed.
func writeBytes(_ path: String, _ bytes: [UInt8]) {
    precondition(FileManager.default.createFile(atPath: path, contents: Data(bytes)), "cannot write \(path)")
    precondition(chmod(path, 0o600) == 0, "cannot chmod \(path)")
}

/// Base class: a temporary root per test, and assertion helpers for `SecureServicesError` codes.
class SecureServicesTestCase: XCTestCase {
    var temporary: TemporaryDirectory!
    var root: String { temporary.path }
    /// Where the store lives: a not-yet-existing subdirectory, so SecureServices creates it.
    var storeDirectory: String { root + "/store" }
    var seedPath: String { storeDirectory + "/seed" }

    override func setUpWithError() throws {
        try super.setUpWithError()
        temporary = try TemporaryDirectory(prefix: "acss-tests")
    }

    override func tearDown() {
        temporary = nil
        super.tearDown()
    }

    func makeServices(appID: String = "com.example.app", directory: String? = nil,
                      passcode: SecureBytes? = nil) throws -> SecureServices {
        try SecureServices(appID: appID, storeDirectory: directory ?? storeDirectory, passcode: passcode,
                           argonCost: .minimum)
    }

    func assertThrows<T>(_ code: SecureServicesError.Code, _ expression: @autoclosure () throws -> T,
                         _ message: String = "", file: StaticString = #filePath, line: UInt = #line) {
        do {
            _ = try expression()
            XCTFail("expected \(code), got success. \(message)", file: file, line: line)
        } catch let e as SecureServicesError {
            XCTAssertEqual(e.code, code, "\(message) (\(e.message))", file: file, line: line)
        } catch {
            XCTFail("expected SecureServicesError \(code), got \(error). \(message)", file: file, line: line)
        }
    }
}
