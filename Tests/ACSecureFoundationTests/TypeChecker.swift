#if canImport(Glibc)
import Glibc
#endif
import Foundation
import XCTest

/// Type-checks Swift snippets against the modules `swift build` produced, to test that misuse of
/// the API does not compile. Needs `swiftc` (on PATH, or next to /opt/swift); without it the test
/// is skipped, never passed.
struct TypeChecker {
    let swiftc: String
    let modules: String
    let packageRoot: String

    init(file: String = #filePath) throws {
        let candidates = (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":").map { "\($0)/swiftc" }
            + ["/opt/swift/usr/bin/swiftc", "/usr/bin/swiftc"]
        guard let swiftc = candidates.first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            throw XCTSkip("swiftc not found: cannot check that misuse does not compile")
        }
        self.swiftc = swiftc
        let binary = URL(fileURLWithPath: (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0])
        // The test binary is .build/<triple>/debug/X.xctest; the modules are in Modules/ beside it.
        let directory = binary.deletingLastPathComponent()
        guard let modules = [directory, directory.deletingLastPathComponent()]
            .map({ $0.appendingPathComponent("Modules").path })
            .first(where: { FileManager.default.fileExists(atPath: $0 + "/ACSecureFoundation.swiftmodule") }) else {
            throw NSError(domain: "TypeChecker", code: 1, userInfo: [NSLocalizedDescriptionKey: "no Modules/ACSecureFoundation.swiftmodule near \(directory.path)"])
        }
        self.modules = modules
        // Tests/<Target>/TypeChecker.swift -> the package root.
        packageRoot = URL(fileURLWithPath: file).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
    }

    /// The compiler's error lines for `snippet` (with the imports added); empty if it compiles.
    func errors(in snippet: String, imports: [String] = ["Foundation", "ACSecureFoundation"]) throws -> [String] {
        let source = FileManager.default.temporaryDirectory.appendingPathComponent("acsecure-typecheck-\(getpid())-\(UUID().uuidString).swift")
        try (imports.map { "import \($0)" }.joined(separator: "\n") + "\n" + snippet + "\n").write(to: source, atomically: true, encoding: .utf8)
        defer { unlink(source.path) }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: swiftc)
        process.arguments = ["-typecheck", "-I", modules,
                             "-Xcc", "-fmodule-map-file=\(packageRoot)/Sources/CACSecureLibCrypto/module.modulemap",
                             "-Xcc", "-fmodule-map-file=\(packageRoot)/Sources/CACSecureSodium/module.modulemap",
                             source.path]
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.run()
        let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        let errors = output.split(separator: "\n").map(String.init).filter { $0.contains("error:") }
        if process.terminationStatus != 0 && errors.isEmpty {
            throw NSError(domain: "TypeChecker", code: 2, userInfo: [NSLocalizedDescriptionKey: "swiftc failed without an error line: \(output)"])
        }
        return errors
    }
}
