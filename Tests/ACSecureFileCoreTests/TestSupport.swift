#if canImport(Glibc)
import Glibc
#endif
import XCTest
import ACCrypto
import ACSecureServices
@testable import ACSecureFileCore

/// A deterministic generator (SplitMix64), so a failing sequence can be replayed from its seed.
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

/// A temporary directory with a fresh store, removed at the end of the test.
final class TestEnvironment {
    let directory: String
    let services: SecureServices

    init(appID: String = "com.example.tests", passcode: String? = nil) throws {
        var template = Array("/tmp/acsecure-test-XXXXXX".utf8CString)
        guard let p = mkdtemp(&template) else { throw XCTSkip("mkdtemp failed") }
        directory = String(cString: p)
        services = try SecureServices(appID: appID, storeDirectory: directory + "/store",
                                      passcode: passcode.map { try SecureBytes(copying: Array($0.utf8)) },
                                      argonCost: .minimum)
    }

    func path(_ name: String) -> String { directory + "/" + name }

    deinit {
        _ = try? FileManagerless.removeTree(directory)
    }
}

enum FileManagerless {
    /// rm -rf without Foundation.
    static func removeTree(_ path: String) throws {
        var st = stat()
        guard lstat(path, &st) == 0 else { return }
        if st.st_mode & S_IFMT == S_IFDIR {
            if let dir = opendir(path) {
                var names: [String] = []
                while let e = readdir(dir) {
                    let name = withUnsafePointer(to: e.pointee.d_name) { String(cString: UnsafeRawPointer($0).assumingMemoryBound(to: CChar.self)) }
                    if name != "." && name != ".." { names.append(name) }
                }
                closedir(dir)
                for n in names { try removeTree(path + "/" + n) }
            }
            rmdir(path)
        } else {
            unlink(path)
        }
    }
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

func randomBytes(_ n: Int, _ rng: inout SplitMix64) -> [UInt8] {
    (0..<n).map { _ in UInt8.random(in: 0...255, using: &rng) }
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
