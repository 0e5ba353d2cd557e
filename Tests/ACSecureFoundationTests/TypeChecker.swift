#if canImport(Glibc)
import Glibc
#endif
import Foundation
import XCTest
import ACSecureTestSupport

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
    /// Every C module the Swift modules may need: the system libraries' module maps in Sources/ and
    /// the ones SwiftPM generated for this package's C targets (`<target>.build/module.modulemap`
    /// beside Modules/).
    var moduleMaps: [String] {
        let fm = FileManager.default
        let sources = (try? fm.contentsOfDirectory(atPath: packageRoot + "/Sources")) ?? []
        let declared = sources.map { "\(packageRoot)/Sources/\($0)/module.modulemap" }
        let buildDirectory = URL(fileURLWithPath: modules).deletingLastPathComponent().path
        // Only this package's C targets: the build directory may also hold other packages' modules
        // (the bench smoke builds Benchmarks/ into it), whose maps would clash with each other.
        let built = sources.map { "\(buildDirectory)/\($0).build/module.modulemap" }
        return (declared + built).filter { fm.fileExists(atPath: $0) }.sorted()
    }

    func errors(in snippet: String, imports: [String] = ["Foundation", "ACSecureFoundation"]) throws -> [String] {
        let temporary = try TemporaryDirectory(prefix: "acsecure-typecheck")
        defer { temporary.remove() }
        let source = temporary.path("snippet.swift")
        try (imports.map { "import \($0)" }.joined(separator: "\n") + "\n" + snippet + "\n").write(toFile: source, atomically: true, encoding: .utf8)
        let arguments = ["-typecheck", "-I", modules] + moduleMaps.flatMap { ["-Xcc", "-fmodule-map-file=\($0)"] } + [source]
        let result = try ChildProcess.run(swiftc, arguments, environment: ChildProcess.inheritedEnvironment, standardError: .standardOutput)
        let output = result.standardOutput
        let errors = output.split(separator: "\n").map(String.init).filter { $0.contains("error:") }
        if !result.status.succeeded && errors.isEmpty {
            throw NSError(domain: "TypeChecker", code: 2, userInfo: [NSLocalizedDescriptionKey: "swiftc failed without an error line: \(output)"])
        }
        return errors
    }
}
