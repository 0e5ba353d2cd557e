#if canImport(Glibc)
import Glibc
#endif
import Foundation
import XCTest
import ACCrypto
import ACSecureServices
import ACSecureFileCore

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

func randomBytes(_ n: Int, _ rng: inout SplitMix64) -> [UInt8] {
    var out = [UInt8](repeating: 0, count: n)
    var i = 0
    while i < n {
        var v = rng.next()
        for _ in 0..<8 where i < n { out[i] = UInt8(truncatingIfNeeded: v); v >>= 8; i += 1 }
    }
    return out
}

/// A temporary directory (removed at the end) with a store in `store/`.
final class SharingEnvironment {
    let directory: String
    var storeDirectory: String { directory + "/store" }

    init() throws {
        var template = Array("/tmp/acsharing-test-XXXXXX".utf8CString)
        guard let p = mkdtemp(&template) else { throw XCTSkip("mkdtemp failed") }
        directory = String(cString: p)
    }

    /// Services of `appID` on this environment's store (created on first use, no passcode).
    func services(_ appID: String = "com.example.provider", passcode: String? = nil) throws -> SecureServices {
        try SecureServices(appID: appID, storeDirectory: storeDirectory,
                           passcode: passcode.map { try SecureBytes(copying: Array($0.utf8)) }, argonCost: .minimum)
    }

    func path(_ name: String) -> String { directory + "/" + name }

    deinit { try? FileManager.default.removeItem(atPath: directory) }
}

func readPlain(_ path: String) -> [UInt8] {
    guard let d = try? Data(contentsOf: URL(fileURLWithPath: path)) else { return [] }
    return [UInt8](unsafeUninitializedCapacity: d.count) { buf, n in n = d.copyBytes(to: buf) }
}
func writePlain(_ path: String, _ bytes: [UInt8]) { precondition(FileManager.default.createFile(atPath: path, contents: Data(bytes)), "cannot create \(path)") }

/// Writes a secure file.
func writeSecure(_ path: String, _ bytes: [UInt8], key: KeySelection = .app, services: any KeyProvider) throws {
    let f = try SecureFile.open(path, flags: O_WRONLY | O_CREAT | O_TRUNC, mode: 0o600, key: key, services: services)
    if !bytes.isEmpty { _ = try bytes.withUnsafeBytes { try f.write($0) } }
    try f.close()
}

/// Reads a secure file whole.
func readSecure(_ path: String, key: KeySelection = .app, services: any KeyProvider) throws -> [UInt8] {
    let f = try SecureFile.open(path, flags: O_RDONLY, key: key, services: services)
    defer { try? f.close() }
    var out: [UInt8] = []
    var buf = [UInt8](repeating: 0, count: 1 << 16)
    var at: Int64 = 0
    while true {
        let n = try buf.withUnsafeMutableBytes { try f.pread(into: $0, at: at) }
        if n == 0 { return out }
        out += buf[0..<n]
        at += Int64(n)
    }
}

/// The ACE_* code of a thrown SecureFileError (nil if nothing was thrown).
func aceCode(_ body: () throws -> Void) -> ACErrorCode? {
    do { try body(); return nil } catch let e as SecureFileError { return e.code } catch { return .internalError }
}

/// The (domain, code) of a thrown error as NSError (nil if nothing was thrown).
func nsErrorOf(_ body: () throws -> Void) -> (String, Int)? {
    do { try body(); return nil } catch { let e = error as NSError; return (e.domain, e.code) }
}

/// The child process executable (built next to the test bundle by `swift build --build-tests`).
enum TestHost {
    static var path: String? {
        var buf = [CChar](repeating: 0, count: 4096)
        let n = readlink("/proc/self/exe", &buf, buf.count - 1)
        guard n > 0 else { return nil }
        var dir = String(decoding: buf[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        while let slash = dir.lastIndex(of: "/"), slash != dir.startIndex {
            dir = String(dir[..<slash])
            let candidate = dir + "/ACSecureSharingTestHost"
            if access(candidate, X_OK) == 0 { return candidate }
        }
        return nil
    }

    struct Result { var stdout: String; var stderr: String; var status: Int32 }

    /// Runs the host with `args` and a minimal environment (no ACSECURE_* variables unless given).
    static func run(_ args: [String], environment: [String: String] = [:]) throws -> Result {
        guard let exe = path else {
            XCTFail("ACSecureSharingTestHost is not built next to the test bundle: run `swift build --build-tests` first")
            throw XCTSkip("no test host")
        }
        let p = Process()
        p.executableURL = URL(fileURLWithPath: exe)
        p.arguments = args
        var env = ["PATH": "/usr/bin:/bin", "SWIFT_BACKTRACE": "enable=no"]
        env["HOME"] = environment["HOME"] ?? "/nonexistent-acsharing-home"
        for (k, v) in environment { env[k] = v }
        p.environment = env
        let out = Pipe(), err = Pipe()
        p.standardOutput = out
        p.standardError = err
        try p.run()
        let o = out.fileHandleForReading.readDataToEndOfFile()
        let e = err.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        return Result(stdout: String(decoding: o, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines),
                      stderr: String(decoding: e, as: UTF8.self), status: p.terminationStatus)
    }
}

func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }
