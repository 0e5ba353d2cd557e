#if canImport(Glibc)
import Glibc
#endif
import Foundation
import XCTest
import ACCrypto
import ACSecureServices
import ACSecureFileCore
import ACSecureTestSupport

/// A temporary directory (removed at the end) with a store in `store/`.
final class SharingEnvironment {
    let temporary: TemporaryDirectory
    var directory: String { temporary.path }
    var storeDirectory: String { temporary.path("store") }

    init() throws { temporary = try TemporaryDirectory(prefix: "acsharing-test") }

    /// Services of `appID` on this environment's store (created on first use, no passcode).
    func services(_ appID: String = "com.example.provider", passcode: String? = nil) throws -> SecureServices {
        try SecureServices(appID: appID, storeDirectory: storeDirectory,
                           passcode: passcode.map { try SecureBytes(copying: Array($0.utf8)) }, argonCost: .minimum)
    }

    func path(_ name: String) -> String { temporary.path(name) }
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

/// The child process Tests/ACSecureSharingTestHost (built next to the test bundle by `swift build --build-tests`).
enum TestHost {
    struct Result { var stdout: String; var stderr: String; var status: ExitStatus }

    /// Runs the host with `args` and a minimal environment (no ACSECURE_* variables unless given).
    static func run(_ args: [String], environment: [String: String] = [:]) throws -> Result {
        guard let exe = ChildProcess.builtExecutable("ACSecureSharingTestHost") else {
            XCTFail("ACSecureSharingTestHost is not built next to the test bundle: run `swift build --build-tests` first")
            throw XCTSkip("no test host")
        }
        var env = ["PATH": "/usr/bin:/bin", "SWIFT_BACKTRACE": "enable=no"]
        env["HOME"] = environment["HOME"] ?? "/nonexistent-acsharing-home"
        for (k, v) in environment { env[k] = v }
        let r = try ChildProcess.run(exe, args, environment: env)
        return Result(stdout: r.standardOutput.trimmingCharacters(in: .whitespacesAndNewlines), stderr: r.standardError, status: r.status)
    }
}

func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }
