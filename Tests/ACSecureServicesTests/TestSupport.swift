#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Synchronization
import XCTest
import ACCrypto
import ACSecureServices

/// A fresh private directory under /tmp (mkdtemp), removed by the test case's teardown.
func makeTemporaryDirectory() -> String {
    var template = Array("/tmp/acss-tests-XXXXXX".utf8CString)
    let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
    precondition(made != nil, "mkdtemp failed: errno \(errno)")
    return String(cString: made!)
}

func passcode(_ s: String) throws -> SecureBytes { try SecureBytes(copying: Array(s.utf8)) }

extension SecureBytes {
    var bytes: [UInt8] { withUnsafeBytes { Array($0) } }
}

/// A thread-safe recorder for callbacks that run on other threads.
final class Recorder<Element: Sendable>: Sendable {
    private let items = Mutex<[Element]>([])
    func append(_ e: Element) { items.withLock { $0.append(e) } }
    var values: [Element] { items.withLock { $0 } }
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
    var root = ""
    /// Where the store lives: a not-yet-existing subdirectory, so SecureServices creates it.
    var storeDirectory: String { root + "/store" }
    var seedPath: String { storeDirectory + "/seed" }

    override func setUp() {
        super.setUp()
        root = makeTemporaryDirectory()
    }

    override func tearDown() {
        try? FileManager.default.removeItem(atPath: root)
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

    /// Waits (polling) until `condition` holds or `timeout` passes.
    func waitUntil(timeout: TimeInterval, _ condition: () -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if condition() { return true }
            usleep(10_000)
        }
        return condition()
    }
}
