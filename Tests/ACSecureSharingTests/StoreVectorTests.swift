#if canImport(Glibc)
import Glibc
#endif
import Foundation
import XCTest
import ACCrypto
import ACSecureServices
import ACSecureFileCore
import ACSecureSharingCore
import ACSystemCalls

/// The store test vectors in docs/test-vectors/store: a secure services store (its seed file with
/// protection 0 and with protection 1), an app file, a group file, the crypto blocks and a wrapped
/// file, all from one seed. Generated with the randomness fixed (`DeterministicRandomness`, debug
/// builds), so this test proves that the current code still produces them byte for byte, and that it
/// still reads them. `FormatVectorTests`' independent decoder reads them from docs/FORMAT.md alone.
final class StoreVectorTests: XCTestCase {
    static let appID = "com.example.vectors.app"
    static let groupID = "com.example.vectors.group"
    static let passcode = "correct horse battery staple"
    static let wrappedName = "report.txt"
    /// The seed of the fixed random stream the vectors were generated with.
    static let randomnessSeed: [UInt8] = Array(0..<32)
    static let files = ["seed-protection-0", "seed-protection-1", "app.acsf", "group.acsf",
                        "crypto-block-group.bin", "crypto-block-all-apps.bin", "wrapped.acsf"]

    static var directory: String {
        let file = "\(#filePath)"
        return String(file[..<file.range(of: "/Tests/")!.lowerBound]) + "/docs/test-vectors/store"
    }

    /// Plaintext: byte i is i mod 251 (as the other vectors).
    static func plaintext(_ size: Int) -> [UInt8] { (0..<size).map { UInt8($0 % 251) } }
    static let appSize = 5000, groupSize = 100, wrappedSize = 300

    static func contents(_ path: String) throws -> [UInt8] {
        guard let data = FileManager.default.contents(atPath: path) else { throw POSIXError(.ENOENT) }
        return [UInt8](data)
    }

    static func write(_ bytes: [UInt8], to path: String) throws {
        guard FileManager.default.createFile(atPath: path, contents: Data(bytes), attributes: [.posixPermissions: 0o600]) else {
            throw POSIXError(.EIO)
        }
    }

    static func readAll(_ f: SecureFile) throws -> [UInt8] {
        var out: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = try buffer.withUnsafeMutableBytes { b in try f.pread(into: b, at: Int64(out.count)) }
            if n == 0 { return out }
            out += buffer[0..<n]
        }
    }

    /// Writes every vector into `directory`: the store with a fresh seed, then its files.
    static func generate(into directory: String) throws {
        let store = directory + "/store"
        let services = try SecureServices(appID: appID, storeDirectory: store, passcode: nil, argonCost: .minimum)
        try write(try contents(store + "/seed"), to: directory + "/seed-protection-0")
        try services.setPasscode(old: nil, new: SecureBytes(copying: Array(passcode.utf8)))
        try write(try contents(store + "/seed"), to: directory + "/seed-protection-1")
        for (name, key, size) in [("app.acsf", KeySelection.app, appSize), ("group.acsf", .group(groupID), groupSize)] {
            let f = try SecureFile.open(directory + "/" + name, flags: O_RDWR | O_CREAT | O_EXCL, mode: 0o644, key: key,
                                        services: services, sharing: .thisProcess, buffering: .writeThrough)
            _ = try plaintext(size).withUnsafeBytes { b in try f.pwrite(b, at: 0) }
            try f.close()
        }
        for (name, group) in [("crypto-block-group.bin", Optional(groupID)), ("crypto-block-all-apps.bin", nil)] {
            let block = try WrappedFiles.cryptoBlock(sharedGroupID: group, services: services)
            try write(block.withUnsafeBytes { Array($0) }, to: directory + "/" + name)
        }
        try write(plaintext(wrappedSize), to: directory + "/original")
        let block = try contents(directory + "/crypto-block-group.bin")
        try block.withUnsafeBytes { b in
            try WrappedFiles.wrap(atPath: BytePath(directory + "/original"), toPath: BytePath(directory + "/wrapped.acsf"), cryptoBlock: b, actualFileName: wrappedName)
        }
    }

    #if DEBUG
    /// The current code, given the same random stream, writes the committed vectors byte for byte.
    /// With ACSECURE_WRITE_VECTORS=1 it writes them into docs/test-vectors/store instead (only when the
    /// format or the order of random draws changed on purpose: another implementation relies on them).
    func testCurrentCodeProducesTheVectorsByteForByte() throws {
        let env = try SharingEnvironment()
        // Draws that happen once per process (the first open) must not shift the fixed stream.
        let warmUp = try SecureFile.open(env.directory + "/warm-up", flags: O_RDWR | O_CREAT, mode: 0o600,
                                         services: FixedKeyProvider(kek: KeyEncryptionKey(key: SecureBytes(randomCount: 32), keyClass: .app)))
        try warmUp.close()
        let out = env.directory + "/vectors"
        XCTAssertEqual(mkdir(out, 0o700), 0)
        try DeterministicRandomness.run(seed: Self.randomnessSeed) { try Self.generate(into: out) }
        if getenv("ACSECURE_WRITE_VECTORS") != nil {
            mkdir(Self.directory, 0o755)
            for name in Self.files { try Self.write(try Self.contents(out + "/" + name), to: Self.directory + "/" + name) }
            return
        }
        for name in Self.files {
            let produced = try Self.contents(out + "/" + name), committed = try Self.contents(Self.directory + "/" + name)
            let firstDifference = zip(produced, committed).enumerated().first { $0.element.0 != $0.element.1 }?.offset ?? min(produced.count, committed.count)
            XCTAssertTrue(produced == committed,
                          "\(name) differs from byte \(firstDifference) (\(produced.count) bytes produced, \(committed.count) committed): "
                          + "if the format or the order of random draws changed on purpose, regenerate "
                          + "(ACSECURE_WRITE_VECTORS=1 swift test --filter StoreVectorTests) and say so in docs/FORMAT.md")
        }
    }

    /// The hook really fixes the stream (and is off again afterwards).
    func testDeterministicRandomnessRepeatsAndEnds() {
        let a = DeterministicRandomness.run(seed: Self.randomnessSeed) { (SecureRandom.bytes(16), SecureRandom.bytes(16)) }
        let b = DeterministicRandomness.run(seed: Self.randomnessSeed) { (SecureRandom.bytes(16), SecureRandom.bytes(16)) }
        XCTAssertEqual(a.0, b.0)
        XCTAssertEqual(a.1, b.1)
        XCTAssertNotEqual(a.0, a.1)
        XCTAssertNotEqual(SecureRandom.bytes(16), a.0)
    }
    #endif

    /// A store directory holding the vector seed file `name`, private as a store must be.
    private func store(with name: String, _ env: SharingEnvironment) throws -> String {
        let store = env.directory + "/store-" + name
        XCTAssertEqual(mkdir(store, 0o700), 0)
        try Self.write(try Self.contents(Self.directory + "/" + name), to: store + "/seed")
        return store
    }

    /// The current code reads every vector, from either seed file.
    func testCurrentCodeReadsTheVectors() throws {
        let env = try SharingEnvironment()
        for (seedFile, passcode) in [("seed-protection-0", nil), ("seed-protection-1", Optional(Self.passcode))] {
            let services = try SecureServices(appID: Self.appID, storeDirectory: try store(with: seedFile, env),
                                              passcode: passcode.map { try SecureBytes(copying: Array($0.utf8)) },
                                              createStoreIfMissing: false, argonCost: .minimum)
            for (name, key, size) in [("app.acsf", KeySelection.app, Self.appSize), ("group.acsf", .group(Self.groupID), Self.groupSize)] {
                let f = try SecureFile.open(Self.directory + "/" + name, flags: O_RDONLY, key: key, services: services)
                XCTAssertEqual(try Self.readAll(f), Self.plaintext(size), "\(seedFile): \(name)")
                try f.close()
            }
            for (name, group) in [("crypto-block-group.bin", Optional(Self.groupID)), ("crypto-block-all-apps.bin", nil)] {
                let block = try WrappedFiles.cryptoBlock(sharedGroupID: group, services: services)
                XCTAssertEqual(block.withUnsafeBytes { Array($0) }, try Self.contents(Self.directory + "/" + name), "\(seedFile): \(name)")
            }
            let reader: WrappedFileReader
            do { reader = try WrappedFiles.open(atPath: BytePath(Self.directory + "/wrapped.acsf"), sharedGroupID: Self.groupID, services: services) } catch {
                return XCTFail("\(seedFile): wrapped.acsf: \(error)")
            }
            XCTAssertEqual(reader.actualFileName, Self.wrappedName)
            var bytes = [UInt8](repeating: 0, count: Self.wrappedSize + 10)
            let n = try bytes.withUnsafeMutableBytes { b in try reader.read(into: b, at: 0) }
            XCTAssertEqual(Array(bytes[0..<n]), Self.plaintext(Self.wrappedSize), "\(seedFile): wrapped.acsf")
            try reader.close()
        }
    }

    /// The protection-1 seed file does not open with another passcode.
    func testProtectedSeedVectorRefusesAWrongPasscode() throws {
        let env = try SharingEnvironment()
        XCTAssertThrowsError(try SecureServices(appID: Self.appID, storeDirectory: try store(with: "seed-protection-1", env),
                                                passcode: SecureBytes(copying: Array("correct horse battery stapler".utf8)),
                                                createStoreIfMissing: false, argonCost: .minimum)) { error in
            XCTAssertEqual((error as? SecureServicesError)?.code, .wrongPasscode)
        }
    }
}
