import XCTest
import ACCrypto

/// The store vectors in docs/test-vectors/store decoded end to end — seed file → seed → KEK → data
/// key → plaintext — by the independent decoder, from docs/FORMAT.md alone (the library's parsers are
/// not called: only AES-256-GCM, HKDF-SHA-256, AES and Argon2id primitives). `StoreVectorTests`
/// (ACSecureSharingTests) checks that the current code produces them byte for byte and reads them.
final class StoreVectorDecoderTests: XCTestCase {
    static let appID = "com.example.vectors.app"
    static let groupID = "com.example.vectors.group"
    static let passcode = Array("correct horse battery staple".utf8)

    static var directory: String { FormatVectorTests.directory + "/store" }

    static func vector(_ name: String) throws -> [UInt8] {
        guard let data = FileManager.default.contents(atPath: directory + "/" + name) else { throw IndependentDecoder.Invalid(why: "no \(name)") }
        return [UInt8](data)
    }

    /// The seed of both seed files, with its passcode for protection 1.
    static func seedFiles() throws -> [(name: String, bytes: [UInt8], passcode: [UInt8]?)] {
        [("seed-protection-0", try vector("seed-protection-0"), nil), ("seed-protection-1", try vector("seed-protection-1"), passcode)]
    }

    func testSeedFilesHaveTheDocumentedShape() throws {
        let p0 = try Self.vector("seed-protection-0"), p1 = try Self.vector("seed-protection-1")
        XCTAssertEqual(p0.count, 38)
        XCTAssertEqual(p1.count, 98)
        XCTAssertEqual(Array(p0[0..<6]), Array("ACSS".utf8) + [1, 0])
        XCTAssertEqual(Array(p1[0..<6]), Array("ACSS".utf8) + [1, 1])
        // Argon2id at libsodium's minimum (t = 1, 8 KiB) so the tests stay fast.
        XCTAssertEqual(IndependentDecoder.u64(p1, 6), 1)
        XCTAssertEqual(IndependentDecoder.u64(p1, 14), 8192)
    }

    func testIndependentDecoderReadsTheStoreVectorsFromEitherSeedFile() throws {
        let app = try Self.vector("app.acsf"), group = try Self.vector("group.acsf"), wrapped = try Self.vector("wrapped.acsf")
        let blockGroup = try IndependentDecoder.cryptoBlock(try Self.vector("crypto-block-group.bin"))
        let blockAll = try IndependentDecoder.cryptoBlock(try Self.vector("crypto-block-all-apps.bin"))
        XCTAssertEqual(blockGroup.scope, 1)
        XCTAssertEqual(blockAll.scope, 0)
        for s in try Self.seedFiles() {
            let seed = try IndependentDecoder.seed(fromSeedFile: s.bytes, passcode: s.passcode)
            let appKEK = try IndependentDecoder.kek(seed: seed, info: IndependentDecoder.lp("app-kek") + IndependentDecoder.lp(Self.appID))
            let groupKEK = try IndependentDecoder.kek(seed: seed, info: IndependentDecoder.lp("group-kek") + IndependentDecoder.lp(Self.groupID))
            let wrappedKEK = try IndependentDecoder.kek(seed: seed, info: IndependentDecoder.lp("wrapped-file-kek-group") + IndependentDecoder.lp(Self.groupID))
            let allKEK = try IndependentDecoder.kek(seed: seed, info: IndependentDecoder.lp("wrapped-file-kek-all") + IndependentDecoder.lp(""))
            XCTAssertEqual(try IndependentDecoder.decrypt(app, key: appKEK, keyClass: 1), FormatVectorTests.plaintext(5000), s.name)
            XCTAssertEqual(try IndependentDecoder.decrypt(group, key: groupKEK, keyClass: 2), FormatVectorTests.plaintext(100), s.name)
            // The crypto blocks carry exactly the wrapped-file KEKs.
            XCTAssertEqual(blockGroup.key.withUnsafeBytes { Array($0) }, wrappedKEK.withUnsafeBytes { Array($0) }, s.name)
            XCTAssertEqual(blockAll.key.withUnsafeBytes { Array($0) }, allKEK.withUnsafeBytes { Array($0) }, s.name)
            let record = try IndependentDecoder.nameRecord(try IndependentDecoder.decrypt(wrapped, key: wrappedKEK, keyClass: 3))
            XCTAssertEqual(record.name, "report.txt", s.name)
            XCTAssertEqual(record.contents, FormatVectorTests.plaintext(300), s.name)
            // Keys are separated: no other KEK of the store opens these files.
            XCTAssertThrowsError(try IndependentDecoder.decrypt(group, key: appKEK), s.name)
            XCTAssertThrowsError(try IndependentDecoder.decrypt(wrapped, key: groupKEK), s.name)
            XCTAssertThrowsError(try IndependentDecoder.decrypt(wrapped, key: allKEK), s.name)
        }
        // The extension's side: the crypto block alone opens the wrapped file.
        XCTAssertEqual(try IndependentDecoder.nameRecord(try IndependentDecoder.decrypt(wrapped, key: blockGroup.key, keyClass: 3)).contents,
                       FormatVectorTests.plaintext(300))
        XCTAssertThrowsError(try IndependentDecoder.seed(fromSeedFile: try Self.vector("seed-protection-1"), passcode: Array("correct horse battery stapler".utf8)))
    }

    /// Every single-bit flip of a seed file breaks the chain: the seed file is refused, or the seed it
    /// gives does not open the group file. Flips that raise the Argon2id memory limit above 1 MiB are
    /// left out (each would run Argon2id with up to 512 MiB; the tag fails for them as for the others).
    func testEverySingleBitFlipOfTheSeedFilesIsRejected() throws {
        let group = try Self.vector("group.acsf")
        func chain(_ seedFile: [UInt8], _ passcode: [UInt8]?) throws {
            let seed = try IndependentDecoder.seed(fromSeedFile: seedFile, passcode: passcode)
            let kek = try IndependentDecoder.kek(seed: seed, info: IndependentDecoder.lp("group-kek") + IndependentDecoder.lp(Self.groupID))
            _ = try IndependentDecoder.decrypt(group, key: kek, keyClass: 2)
        }
        var checked = 0
        for s in try Self.seedFiles() {
            XCTAssertNoThrow(try chain(s.bytes, s.passcode), s.name)
            for bit in 0..<(s.bytes.count * 8) {
                var b = s.bytes
                b[bit / 8] ^= 1 << (bit % 8)
                if s.passcode != nil, (14..<22).contains(bit / 8), (1 << 20 + 1...1 << 30).contains(IndependentDecoder.u64(b, 14)) { continue }
                XCTAssertThrowsError(try chain(b, s.passcode), "\(s.name): bit \(bit)")
                checked += 1
            }
        }
        XCTAssertEqual(checked, 38 * 8 + 98 * 8 - 10)
    }

    /// Every single-bit flip of the group file and of the wrapped file is rejected; of the app file
    /// (5 000 bytes of plaintext), every bit of the header, of the trailer and of every 8th byte
    /// elsewhere; of the tail-copy slots (version 4), the written part of slot 0 and every 64th byte. The
    /// exceptions are the pending-end record (header bytes 108..<128, version 3) and the tail-copy
    /// slots (version 4, bytes 128 up to chunk 0): hints, not read as the file; a flip that leaves the
    /// record well-formed, and any flip in a slot, must decode to exactly the same plaintext.
    func testEverySingleBitFlipOfTheStoreFilesIsRejected() throws {
        let seed = try IndependentDecoder.seed(fromSeedFile: try Self.vector("seed-protection-0"), passcode: nil)
        let files: [(String, [UInt8], UInt8)] = [("group.acsf", IndependentDecoder.lp("group-kek") + IndependentDecoder.lp(Self.groupID), 2),
                                                 ("wrapped.acsf", IndependentDecoder.lp("wrapped-file-kek-group") + IndependentDecoder.lp(Self.groupID), 3),
                                                 ("app.acsf", IndependentDecoder.lp("app-kek") + IndependentDecoder.lp(Self.appID), 1)]
        for (name, info, keyClass) in files {
            let bytes = try Self.vector(name)
            let kek = try IndependentDecoder.kek(seed: seed, info: info)
            let plaintext = try IndependentDecoder.decrypt(bytes, key: kek, keyClass: keyClass)
            // From version 4: two tail-copy slots (64 + 2^s + 32 + the trailer each) between the header
            // and chunk 0; the trailer is 40 bytes in version 5 (its footer), 32 before.
            let trailer = bytes[5] >= 5 ? 40 : 32
            let first = bytes[5] >= 4 ? 128 + 2 * (64 + (1 << Int(bytes[8])) + 32 + trailer) : 128
            let small = bytes.count - first < 1024
            for byte in 0..<bytes.count where (128..<first).contains(byte)
                ? byte % 64 == 0 || byte < 128 + 64 + trailer
                : small || byte < 128 || byte >= bytes.count - trailer || byte % 8 == 0 {
                for bit in 0..<8 {
                    var b = bytes
                    b[byte] ^= 1 << bit
                    if (108..<128).contains(byte), let decoded = try? IndependentDecoder.decrypt(b, key: kek, keyClass: keyClass) {
                        XCTAssertEqual(decoded, plaintext, "\(name): byte \(byte) bit \(bit) (pending-end record)")
                        continue
                    }
                    // The tail-copy slots (version 4) are not read by a decoder of the file as written.
                    if (128..<first).contains(byte) {
                        XCTAssertEqual(try IndependentDecoder.decrypt(b, key: kek, keyClass: keyClass), plaintext, "\(name): byte \(byte) bit \(bit) (tail copy)")
                        continue
                    }
                    XCTAssertThrowsError(try IndependentDecoder.decrypt(b, key: kek, keyClass: keyClass), "\(name): byte \(byte) bit \(bit)")
                }
            }
        }
    }

    /// Every single-bit flip of a crypto block is refused, except the scope's low bit: the scope is
    /// not authenticated (the fingerprint covers the key only) and no reader relies on it, so the
    /// block then still carries the same key (docs/FORMAT.md).
    func testEverySingleBitFlipOfTheCryptoBlocksIsRejectedButTheScopeBit() throws {
        for name in ["crypto-block-group.bin", "crypto-block-all-apps.bin"] {
            let bytes = try Self.vector(name)
            let key = try IndependentDecoder.cryptoBlock(bytes).key.withUnsafeBytes { Array($0) }
            for bit in 0..<(bytes.count * 8) {
                var b = bytes
                b[bit / 8] ^= 1 << (bit % 8)
                if bit == 5 * 8 {
                    XCTAssertEqual(try IndependentDecoder.cryptoBlock(b).key.withUnsafeBytes { Array($0) }, key, name)
                } else {
                    XCTAssertThrowsError(try IndependentDecoder.cryptoBlock(b), "\(name): bit \(bit)")
                }
            }
        }
    }

    /// The name record's rules, on records built here.
    func testNameRecordRules() throws {
        func record(_ name: [UInt8], length: Int? = nil, version: UInt8 = 1, reserved: UInt8 = 0) -> [UInt8] {
            let n = length ?? name.count
            return Array("ACWF".utf8) + [version, reserved, UInt8(n >> 8), UInt8(n & 0xff)] + name + [1, 2, 3]
        }
        XCTAssertEqual(try IndependentDecoder.nameRecord(record(Array("a".utf8))).contents, [1, 2, 3])
        XCTAssertEqual(try IndependentDecoder.nameRecord(record([UInt8](repeating: 0x61, count: 1024))).name.utf8.count, 1024)
        for bad in [record([]), record([UInt8](repeating: 0x61, count: 1025)), record(Array("a/b".utf8)), record([0x61, 0]),
                    record(Array(".".utf8)), record(Array("..".utf8)), record([0xff, 0xfe]), record(Array("a".utf8), version: 2),
                    record(Array("a".utf8), reserved: 1), record(Array("a".utf8), length: 10)] {
            XCTAssertThrowsError(try IndependentDecoder.nameRecord(bad), "\(bad)")
        }
    }
}

/// The store, key derivation, crypto block and wrapped file parts of the independent decoder.
extension IndependentDecoder {
    /// `lp(x)`: a u32 big-endian length, then the UTF-8 bytes.
    static func lp(_ x: String) -> [UInt8] {
        let b = Array(x.utf8), n = UInt32(b.count)
        return [UInt8(n >> 24), UInt8(n >> 16 & 0xff), UInt8(n >> 8 & 0xff), UInt8(n & 0xff)] + b
    }

    static func u64(_ b: [UInt8], _ at: Int) -> UInt64 { b[at..<at + 8].reduce(0) { $0 << 8 | UInt64($1) } }

    /// The 32-byte seed of a seed file.
    static func seed(fromSeedFile f: [UInt8], passcode: [UInt8]?) throws -> SecureBytes {
        guard f.count >= 6, f[0..<4].elementsEqual("ACSS".utf8), f[4] == 1 else { throw Invalid(why: "not a version 1 seed file") }
        switch f[5] {
        case 0:
            guard f.count == 38 else { throw Invalid(why: "seed file length") }
            return try SecureBytes(copying: Array(f[6..<38]))
        case 1:
            guard f.count == 98 else { throw Invalid(why: "seed file length") }
            let ops = u64(f, 6), memory = u64(f, 14)
            guard (1...16).contains(ops), (8192...(1 << 30)).contains(memory) else { throw Invalid(why: "Argon2id limits") }
            guard let passcode else { throw Invalid(why: "a passcode is needed") }
            let key = try Argon2id.deriveKey(passcode: SecureBytes(copying: passcode), salt: Array(f[22..<38]),
                                             cost: Argon2id.Cost(opsLimit: ops, memLimit: Int(memory)))
            return try SecureBytes(copying: try gcmOpen(key, nonce: Array(f[38..<50]), aad: Array(f[0..<38]),
                                                    ciphertext: Array(f[50..<82]), tag: Array(f[82..<98]), "seed"))
        default:
            throw Invalid(why: "protection \(f[5])")
        }
    }

    /// A key of the store: HKDF-SHA-256(seed, salt "ACSF v1", info), 32 bytes.
    static func kek(seed: SecureBytes, info: [UInt8]) throws -> SecureBytes {
        try HKDF.sha256(key: seed, salt: Array("ACSF v1".utf8), info: info)
    }

    /// A crypto block's scope and key.
    static func cryptoBlock(_ b: [UInt8]) throws -> (scope: UInt8, key: SecureBytes) {
        guard b.count == 56, b[0..<4].elementsEqual("ACCB".utf8), b[4] == 1, b[5] <= 1, b[6] == 0, b[7] == 0 else {
            throw Invalid(why: "crypto block fields")
        }
        let key = try SecureBytes(copying: Array(b[24..<56]))
        let fingerprint = try HKDF.sha256(key: key, salt: "ACSF v1", info: "key fingerprint", outputCount: 16)
        guard fingerprint.withUnsafeBytes({ Array($0) }) == Array(b[8..<24]) else { throw Invalid(why: "crypto block fingerprint") }
        return (b[5], key)
    }

    /// A wrapped file's plaintext split into its name and the original file's bytes.
    static func nameRecord(_ p: [UInt8]) throws -> (name: String, contents: [UInt8]) {
        guard p.count >= 8, p[0..<4].elementsEqual("ACWF".utf8), p[4] == 1, p[5] == 0 else { throw Invalid(why: "name record fields") }
        let n = Int(p[6]) << 8 | Int(p[7])
        guard (1...1024).contains(n), p.count >= 8 + n, let name = String(validating: p[8..<8 + n], as: UTF8.self),
              !p[8..<8 + n].contains(0), !p[8..<8 + n].contains(UInt8(ascii: "/")), name != ".", name != ".." else {
            throw Invalid(why: "name")
        }
        return (name, Array(p[(8 + n)...]))
    }
}
