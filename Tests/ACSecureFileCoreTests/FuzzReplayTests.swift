#if canImport(Glibc)
import Glibc
#endif
import XCTest
import ACSecureTestSupport
import ACSecureFuzzHarness

/// Replays every input under fuzz/FailCases/ (crash and finding inputs saved from fuzzing runs, kept
/// for ever) and fuzz/Corpus/ (the seed corpus) through the fuzz targets' logic, without sanitizers;
/// then a few thousand deterministic random inputs, so the harnesses themselves stay honest.
final class FuzzReplayTests: XCTestCase {
    static var fuzzDirectory: String {
        var path = "\(#filePath)"
        for _ in 0..<3 { path = String(path[..<path.lastIndex(of: "/")!]) }
        return path + "/fuzz"
    }

    func inputs(_ folder: String) -> [(String, [UInt8])] {
        let dir = Self.fuzzDirectory + "/" + folder
        guard let d = opendir(dir) else { return [] }
        var names: [String] = []
        while let e = readdir(d) {
            let name = withUnsafePointer(to: e.pointee.d_name) { String(cString: UnsafeRawPointer($0).assumingMemoryBound(to: CChar.self)) }
            if !name.hasPrefix(".") { names.append(name) }
        }
        closedir(d)
        return names.sorted().map { ("\(folder)/\($0)", readWholeFile(dir + "/" + $0)) }
    }

    /// Every fuzz target (fuzz/Sources/<name>) and its logic.
    static let targets: [(String, @Sendable ([UInt8]) -> FuzzFinding?)] = [
        ("FuzzSecureFileParse", SecureFileParseFuzzer.run), ("FuzzOperationSequence", OperationSequenceFuzzer.run),
        ("FuzzSeedStoreParse", SeedStoreParseFuzzer.run), ("FuzzCryptoBlockParse", CryptoBlockParseFuzzer.run),
        ("FuzzWrappedFileParse", WrappedFileParseFuzzer.run), ("FuzzCAPIArguments", CAPIArgumentsFuzzer.run),
    ]

    func testReplayFailCasesAndCorpus() throws {
        XCTAssertEqual(access(Self.fuzzDirectory + "/Corpus/FuzzSecureFileParse", F_OK), 0, "fuzz/Corpus is missing")
        var replayed = 0
        for (target, run) in Self.targets {
            XCTAssertFalse(inputs("Corpus/\(target)").isEmpty, "fuzz/Corpus/\(target) is empty")
            for folder in ["FailCases/\(target)", "Corpus/\(target)"] {
                for (name, bytes) in inputs(folder) {
                    let finding = run(bytes)
                    XCTAssertNil(finding, "\(name): \(finding.map { "\($0)" } ?? "")")
                    replayed += 1
                }
            }
        }
        XCTAssertGreaterThan(replayed, 10)
        print("FuzzReplay: \(replayed) saved inputs replayed")
    }

    func testRandomInputs() {
        var rng = SplitMix64(seed: 2024)
        for i in 0..<1500 {
            let n = Int.random(in: 0...300, using: &rng)
            var input = randomBytes(n, &rng)
            if i % 2 == 0, !input.isEmpty { input[0] = UInt8(1 + i % 3) }  // mutation mode
            if let f = SecureFileParseFuzzer.run(input) { XCTFail("parse input \(i): \(f)"); break }
        }
        for i in 0..<300 {
            let input = randomBytes(Int.random(in: 0...250, using: &rng), &rng)
            if let f = OperationSequenceFuzzer.run(input) { XCTFail("operation input \(i): \(f)"); break }
        }
        for i in 0..<3000 {
            var input = randomBytes(Int.random(in: 0...120, using: &rng), &rng)
            if i % 3 != 0, !input.isEmpty { input[0] |= 1 }  // mostly edits of valid files
            if let f = SeedStoreParseFuzzer.run(input) { XCTFail("seed file input \(i): \(f)"); break }
            if let f = CryptoBlockParseFuzzer.run(input) { XCTFail("crypto block input \(i): \(f)"); break }
        }
        for i in 0..<300 {
            let input = randomBytes(Int.random(in: 0...200, using: &rng), &rng)
            if let f = WrappedFileParseFuzzer.run(input) { XCTFail("wrapped file input \(i): \(f)"); break }
            if let f = CAPIArgumentsFuzzer.run(input) { XCTFail("C API input \(i): \(f)"); break }
        }
    }
}
