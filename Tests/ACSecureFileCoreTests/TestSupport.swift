#if canImport(Glibc)
import Glibc
#endif
import XCTest
import ACCrypto
import ACSecureServices
import ACSecureTestSupport
import ACSystemCalls
@testable import ACSecureFileCore

/// A temporary directory with a fresh store, removed at the end of the test.
final class TestEnvironment {
    let temporary: TemporaryDirectory
    let services: SecureServices
    var directory: String { temporary.path }

    init(appID: String = "com.example.tests", passcode: String? = nil) throws {
        temporary = try TemporaryDirectory(prefix: "acsecure-test")
        services = try SecureServices(appID: appID, storeDirectory: temporary.path("store"),
                                      passcode: passcode.map { try SecureBytes(copying: Array($0.utf8)) },
                                      argonCost: .minimum)
    }

    func path(_ name: String) -> String { temporary.path(name) }
}

func readWholeFile(_ path: String) -> [UInt8] {
    let fd = open(path, O_RDONLY)
    guard fd >= 0 else { return [] }
    defer { close(fd) }
    var out: [UInt8] = []
    var buf = [UInt8](repeating: 0, count: 65536)
    while true {
        let n = buf.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        if n <= 0 { return out }
        out += buf[0..<n]
    }
}

func writeWholeFile(_ path: String, _ bytes: [UInt8]) {
    let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
    precondition(fd >= 0)
    _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    close(fd)
}

extension SecureFile {
    /// Reads the whole plaintext from offset 0.
    func readAll() throws -> [UInt8] {
        var out: [UInt8] = []
        var buf = [UInt8](repeating: 0, count: 70_000)
        var at: Int64 = 0
        while true {
            let n = try buf.withUnsafeMutableBytes { try pread(into: $0, at: at) }
            if n == 0 { return out }
            out += buf[0..<n]
            at += Int64(n)
        }
    }

    @discardableResult
    func write(_ bytes: [UInt8]) throws -> Int { try bytes.withUnsafeBytes { try write($0) } }

    @discardableResult
    func pwrite(_ bytes: [UInt8], at offset: Int64) throws -> Int { try bytes.withUnsafeBytes { try pwrite($0, at: offset) } }

    func pread(count: Int, at offset: Int64) throws -> [UInt8] {
        var buf = [UInt8](repeating: 0, count: count)
        let n = try buf.withUnsafeMutableBytes { try pread(into: $0, at: offset) }
        return Array(buf[0..<n])
    }
}

/// The error code a throwing secure call produced, for assertions.
func aceCode(_ body: () throws -> Void) -> ACErrorCode? {
    do { try body(); return nil } catch let e as SecureFileError { return e.code } catch { return .internalError }
}

func errnoOf(_ body: () throws -> Void) -> Int32? {
    do { try body(); return nil } catch let e as SecureFileError { return e.errno } catch { return -1 }
}

/// The physical size of a file, or -1 when it does not exist.
func fileSize(_ path: String) -> Int64 {
    var st = stat()
    return stat(path, &st) == 0 ? Int64(st.st_size) : -1
}

/// Whether a file `size` bytes long accepts a change after a crash: nil when one byte appended at its
/// end reads back, else why not.
func appendedByteProblem(_ path: BytePath, size: Int, services: SecureServices, create: Bool = false) -> String? {
    do {
        let w = try SecureFile.open(path, flags: O_RDWR | (create ? O_CREAT : 0), services: services)
        _ = try w.pwrite([0xA5], at: Int64(size))
        try w.close()
        let r = try SecureFile.open(path, flags: O_RDONLY, services: services)
        defer { try? r.close() }
        if try r.pread(count: 1, at: Int64(size)) != [0xA5] || (try r.size) != Int64(size + 1) {
            return "a byte appended at \(size) does not read back"
        }
        return nil
    } catch {
        return "refuses a change: \((error as? SecureFileError).map(\.message) ?? "\(error)")"
    }
}

/// The file's bytes `after` with the 512-byte sector holding `offset` taken from `before`: a power
/// loss that did not write that sector back.
func withSectorFrom(_ before: [UInt8], _ after: [UInt8], at offset: Int) -> [UInt8] {
    var torn = after
    let lo = offset / 512 * 512, hi = min(lo + 512, before.count, after.count)
    torn.replaceSubrange(lo..<hi, with: before[lo..<hi])
    return torn
}
