#if canImport(Glibc)
import Glibc
#endif
import XCTest
import ACCrypto
import ACSecureServices
@testable import ACSecureFileCore

/// The committed test vectors in docs/test-vectors: files written by the engine under a published
/// key-encryption key. They are checked twice: through the engine, and through an independent
/// decoder written from docs/FORMAT.md alone (as another implementation would).
final class FormatVectorTests: XCTestCase {
    /// The published KEK of the vectors (never a real key).
    static let kekHex = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
    static let vectors: [(name: String, size: Int)] = [("empty", 0), ("one-byte", 1), ("one-chunk", 4096), ("chunk-plus-one", 4097), ("multi-chunk", 10_000)]

    static var directory: String {
        let file = "\(#filePath)"
        let tests = file[..<file.range(of: "/Tests/")!.lowerBound]
        return String(tests) + "/docs/test-vectors"
    }

    /// Plaintext of a vector: byte i is i mod 251.
    static func plaintext(_ size: Int) -> [UInt8] { (0..<size).map { UInt8($0 % 251) } }

    static func kek() throws -> KeyEncryptionKey {
        let bytes = stride(from: 0, to: kekHex.count, by: 2).map { i -> UInt8 in
            let s = kekHex.index(kekHex.startIndex, offsetBy: i)
            return UInt8(kekHex[s...kekHex.index(after: s)], radix: 16)!
        }
        return try KeyEncryptionKey(key: SecureBytes(copying: bytes), keyClass: .cryptoBlock)
    }

    /// Writes the vectors (run once with ACSECURE_WRITE_VECTORS=1; the files are committed).
    func testWriteVectorsWhenAsked() throws {
        guard getenv("ACSECURE_WRITE_VECTORS") != nil else { return }
        mkdir(Self.directory, 0o755)
        for v in Self.vectors {
            let path = Self.directory + "/\(v.name).acsf"
            unlink(path)
            let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT | O_EXCL, mode: 0o644, services: FixedKeyProvider(kek: Self.kek()))
            if v.size > 0 { try f.write(Self.plaintext(v.size)) }
            try f.close()
        }
    }

    func testEngineReadsTheVectors() throws {
        for v in Self.vectors {
            let path = Self.directory + "/\(v.name).acsf"
            let f = try SecureFile.open(path, flags: O_RDONLY, services: FixedKeyProvider(kek: Self.kek()))
            XCTAssertEqual(try f.readAll(), Self.plaintext(v.size), v.name)
            try f.close()
        }
    }

    func testIndependentDecoderReadsTheVectors() throws {
        for v in Self.vectors {
            let bytes = readWholeFile(Self.directory + "/\(v.name).acsf")
            XCTAssertEqual(try IndependentDecoder.decrypt(bytes, kek: Self.kek()), Self.plaintext(v.size), v.name)
        }
    }

    func testIndependentDecoderRejectsEverySingleBitFlipOfASmallVector() throws {
        let bytes = readWholeFile(Self.directory + "/one-byte.acsf")
        let kek = try Self.kek()
        for bit in 0..<(bytes.count * 8) {
            var b = bytes
            b[bit / 8] ^= 1 << (bit % 8)
            XCTAssertThrowsError(try IndependentDecoder.decrypt(b, kek: kek), "bit \(bit)")
        }
    }
}

/// A decoder written from docs/FORMAT.md, sharing nothing with the engine but AES-256-GCM and HKDF.
enum IndependentDecoder {
    struct Invalid: Error { var why: String }

    static func u16(_ b: [UInt8], _ at: Int) -> Int { Int(b[at]) << 8 | Int(b[at + 1]) }
    static func u64(_ b: [UInt8]) -> [UInt8] { b }

    static func gcmOpen(_ key: SecureBytes, nonce: [UInt8], aad: [UInt8], ciphertext: [UInt8], tag: [UInt8]) throws -> [UInt8] {
        let ctx = try AESGCMContext(key: key)
        var out = [UInt8](repeating: 0, count: ciphertext.count)
        let ok = nonce.withUnsafeBytes { n in aad.withUnsafeBytes { a in ciphertext.withUnsafeBytes { c in tag.withUnsafeBytes { t in
            out.withUnsafeMutableBytes { o in
                ctx.open(nonce: n.baseAddress!, aad: a, ciphertext: c, tag: t.baseAddress!, plaintext: o.baseAddress ?? UnsafeMutableRawPointer(mutating: t.baseAddress!))
            } } } } }
        guard ok else { throw Invalid(why: "authentication failed") }
        return out
    }

    static func decrypt(_ file: [UInt8], kek: KeyEncryptionKey) throws -> [UInt8] {
        guard file.count >= 128 + 28 else { throw Invalid(why: "short") }
        let h = Array(file[0..<128])
        guard h[0..<4].elementsEqual("ACSF".utf8), u16(h, 4) == 1, u16(h, 6) == 128 else { throw Invalid(why: "header") }
        let shift = Int(h[8])
        guard (9...20).contains(shift), h[12..<16].allSatisfy({ $0 == 0 }), h[108..<128].allSatisfy({ $0 == 0 }) else { throw Invalid(why: "fields") }
        let fileID = Array(h[16..<32])
        let fingerprint = try HKDF.sha256(key: kek.key, salt: "ACSF v1", info: "key fingerprint", outputCount: 16)
        guard fingerprint.withUnsafeBytes({ Array($0) }) == Array(h[32..<48]) else { throw Invalid(why: "fingerprint") }
        let dataKey = try gcmOpen(kek.key, nonce: Array(h[48..<60]), aad: Array(h[0..<48]),
                                  ciphertext: Array(h[60..<92]), tag: Array(h[92..<108]))
        let key = SecureBytes(copying: dataKey)

        let chunk = 1 << shift, physical = chunk + 28
        let body = file.count - 128 - 28
        let full = body / physical, rem = body % physical
        guard rem == 0 || rem > 28 else { throw Invalid(why: "length") }
        let chunks = full + (rem > 0 ? 1 : 0)
        var plaintext: [UInt8] = []
        for i in 0..<chunks {
            let start = 128 + i * physical
            let length = (i == chunks - 1 && rem > 0) ? rem - 28 : chunk
            let aad = fileID + (0..<8).reversed().map { UInt8(truncatingIfNeeded: UInt64(i) >> (8 * UInt64($0))) }
            plaintext += try gcmOpen(key, nonce: Array(file[start..<start + 12]), aad: aad,
                                     ciphertext: Array(file[start + 12..<start + 12 + length]),
                                     tag: Array(file[start + 12 + length..<start + 28 + length]))
        }
        let t = file.count - 28
        let size = UInt64(plaintext.count)
        let trailerAAD = Array("ACSF end".utf8) + fileID + (0..<8).reversed().map { UInt8(truncatingIfNeeded: size >> (8 * UInt64($0))) }
        _ = try gcmOpen(key, nonce: Array(file[t..<t + 12]), aad: trailerAAD, ciphertext: [], tag: Array(file[t + 12..<t + 28]))
        return plaintext
    }
}
