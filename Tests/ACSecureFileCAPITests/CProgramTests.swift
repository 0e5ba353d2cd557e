#if canImport(Glibc)
import Glibc
#endif
import Foundation
import XCTest
import ACSecureTestSupport

/// Compiles the C test programs with the system C compiler against the headers and the built
/// `libACSecureFile.so`, as a C user would, and runs them. Skipped when there is no C compiler or
/// the library has not been built (`swift build` builds it; `scripts/test-c.sh` does the same
/// against an installed copy).
final class CProgramTests: XCTestCase {
    private static let packageRoot = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path

    private func compiler() throws -> String {
        for dir in (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin").split(separator: ":") {
            for name in ["cc", "gcc", "clang"] where access("\(dir)/\(name)", X_OK) == 0 {
                return "\(dir)/\(name)"
            }
        }
        throw XCTSkip("no C compiler on PATH")
    }

    /// The directory of the test binary is SwiftPM's bin directory, where the library product is.
    private func libraryDirectory() throws -> String {
        var candidates = [URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().path]
        candidates.append(Bundle.main.bundleURL.deletingLastPathComponent().path)
        for dir in candidates where access("\(dir)/libACSecureFile.so", R_OK) == 0 { return dir }
        throw XCTSkip("libACSecureFile.so not built next to the tests (looked in \(candidates)); run `swift build` first")
    }

    @discardableResult
    private func run(_ executable: String, _ arguments: [String], environment: [String: String] = [:],
                     stdoutFile: String? = nil) throws -> (Int32, String) {
        var env = ChildProcess.inheritedEnvironment
        env.merge(environment) { $1 }
        let result = try ChildProcess.run(executable, arguments, environment: env,
                                          standardOutput: stdoutFile.map { .file($0) } ?? .pipe,
                                          standardError: stdoutFile == nil ? .standardOutput : .pipe)
        return (result.status.exitCode ?? -1, result.standardOutput + result.standardError)
    }

    private func build(_ source: String, _ output: String) throws -> String {
        let cc = try compiler()
        let lib = try libraryDirectory()
        let (status, log) = try run(cc, [
            "-std=c11", "-Wall", "-Wextra", "-Werror", "-O1",
            "\(Self.packageRoot)/\(source)", "-I", "\(Self.packageRoot)/CShim/include",
            "-L", lib, "-lACSecureFile", "-Wl,-rpath,\(lib)", "-o", output,
        ])
        XCTAssertEqual(status, 0, "compiling \(source) failed:\n\(log)")
        return output
    }

    private func temporaryDirectory() throws -> String {
        let temporary = try TemporaryDirectory(prefix: "acsecure-cprog")
        addTeardownBlock { temporary.remove() }
        return temporary.path
    }

    func testACECodesProgram() throws {
        let dir = try temporaryDirectory()
        let exe = try build("Tests/CDifferential/ace_codes.c", dir + "/ace_codes")
        let (status, output) = try run(exe, [dir + "/files"])
        XCTAssertEqual(status, 0, output)
        XCTAssertTrue(output.contains(" 0 failed"), output)
    }

    /// ACSecureHardenProcess in a process of its own (Tests/CDifferential/harden.c reads the core
    /// limit and the dumpable flag back from the kernel).
    func testHardenProcessProgram() throws {
        let dir = try temporaryDirectory()
        let exe = try build("Tests/CDifferential/harden.c", dir + "/harden")
        let (status, output) = try run(exe, [])
        XCTAssertEqual(status, 0, output)
        XCTAssertTrue(output.contains("after: core limit 0/0, dumpable 0"), output)
    }

    func testDifferentialProgram() throws {
        let dir = try temporaryDirectory()
        let exe = try build("Tests/CDifferential/differential.c", dir + "/differential")
        let (status, output) = try run(exe, ["42", "300", "60", dir + "/files"])
        XCTAssertEqual(status, 0, output)
        XCTAssertTrue(output.contains("differential: 300 passed, 0 failed"), output)
    }

    func testExamplesWithServicesFromTheEnvironment() throws {
        let dir = try temporaryDirectory()
        let copy = try build("Examples/c/secure-copy.c", dir + "/secure-copy")
        let cat = try build("Examples/c/securecat.c", dir + "/securecat")
        let env = ["ACSECURE_HOME": dir + "/store", "ACSECURE_APP_ID": "c-examples"]
        let plain = (0..<100_003).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 7) }
        try Data(plain).write(to: URL(fileURLWithPath: dir + "/plain"))
        // No store yet: a file call does not create one (issue 15, finding 6) ...
        var (status, output) = try run(copy, [dir + "/plain", dir + "/secure"], environment: env)
        XCTAssertNotEqual(status, 0, "a file call created a store: \(output)")
        XCTAssertTrue(output.contains(String(cString: strerror(EACCES))), "EACCES (ACE_NO_KEYS_ERROR): \(output)")
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/store"), "no store was created")
        // ... nor invents an app ID.
        (status, output) = try run(copy, [dir + "/plain", dir + "/secure"],
                                   environment: ["ACSECURE_HOME": dir + "/store", "ACSECURE_CREATE_STORE": "1", "ACSECURE_APP_ID": ""])
        XCTAssertNotEqual(status, 0, "an app ID was invented: \(output)")
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/store"), "no store was created")
        // Asked for explicitly, it is.
        (status, output) = try run(copy, [dir + "/plain", dir + "/secure"], environment: env.merging(["ACSECURE_CREATE_STORE": "1"]) { $1 })
        XCTAssertEqual(status, 0, output)
        let raw = try Data(contentsOf: URL(fileURLWithPath: dir + "/secure"))
        XCTAssertNil(raw.range(of: Data(plain[1000..<1064])), "the secure file holds plaintext")
        (status, output) = try run(cat, [dir + "/secure"], environment: env, stdoutFile: dir + "/roundtrip")
        XCTAssertEqual(status, 0, output)
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: dir + "/roundtrip")), Data(plain), "securecat output")
        // Another app ID cannot read it.
        (status, _) = try run(cat, [dir + "/secure"], environment: env.merging(["ACSECURE_APP_ID": "other"]) { $1 })
        XCTAssertNotEqual(status, 0)
    }
}
