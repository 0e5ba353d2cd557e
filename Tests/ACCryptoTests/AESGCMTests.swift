import XCTest
import ACCrypto

/// One AES-256-GCM known-answer vector (96-bit IV, 128-bit tag).
struct GCMVector {
    var name: String
    var key: String
    var iv: String
    var aad: String
    var msg: String
    var ct: String
    var tag: String
}

/// McGrew & Viega, "The Galois/Counter Mode of Operation (GCM)", test cases 13-16: the AES-256 cases with
/// a 96-bit IV. (Test cases 17 and 18 use 64-bit and 480-bit IVs, which this API does not accept: its
/// nonce is always 12 bytes.) Bytes as published; copied from nettle's `testsuite/gcm-test.c`.
let mcGrewViegaVectors: [GCMVector] = [
    GCMVector(name: "GCM TC13", key: String(repeating: "00", count: 32), iv: String(repeating: "00", count: 12),
              aad: "", msg: "", ct: "", tag: "530f8afbc74536b9a963b4f1c4cb738b"),
    GCMVector(name: "GCM TC14", key: String(repeating: "00", count: 32), iv: String(repeating: "00", count: 12),
              aad: "", msg: String(repeating: "00", count: 16),
              ct: "cea7403d4d606b6e074ec5d3baf39d18", tag: "d0d1c8a799996bf0265b98b5d48ab919"),
    GCMVector(name: "GCM TC15",
              key: "feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308",
              iv: "cafebabefacedbaddecaf888", aad: "",
              msg: "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a72"
                + "1c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b391aafd255",
              ct: "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa"
                + "8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662898015ad",
              tag: "b094dac5d93471bdec1a502270e3cc6c"),
    GCMVector(name: "GCM TC16",
              key: "feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308",
              iv: "cafebabefacedbaddecaf888", aad: "feedfacedeadbeeffeedfacedeadbeefabaddad2",
              msg: "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a72"
                + "1c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39",
              ct: "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa"
                + "8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662",
              tag: "76fc6ece0f4e1768cddf8853bb2d551b"),
]

/// Wycheproof `testvectors_v1/aes_gcm_test.json` (C2SP/wycheproof), group ivSize 96 / keySize 256,
/// `result: valid`. Bytes as published; the name is the tcId.
let wycheproofValid: [GCMVector] = [
    GCMVector(name: "wycheproof 91", key: "92ace3e348cd821092cd921aa3546374299ab46209691bc28b8752d17f123c20",
              iv: "00112233445566778899aabb", aad: "00000000ffffffff", msg: "00010203040506070809",
              ct: "e27abdd2d2a53d2f136b", tag: "9a4a2579529301bcfb71c78d4060f52c"),
    GCMVector(name: "wycheproof 92 (empty message, AAD only)",
              key: "29d3a44f8723dc640239100c365423a312934ac80239212ac3df3421a2098123",
              iv: "00112233445566778899aabb", aad: "aabbccddeeff", msg: "", ct: "",
              tag: "2a7d77fa526b8250cb296078926b5020"),
    GCMVector(name: "wycheproof 93", key: "80ba3192c803ce965ea371d5ff073cf0f43b6a2ab576b208426e11409c09b9b0",
              iv: "4da5bf8dfd5852c1ea12379d", aad: "", msg: "", ct: "", tag: "4771a7c404a472966cea8f73c8bfe17a"),
    GCMVector(name: "wycheproof 94", key: "cc56b680552eb75008f5484b4cb803fa5063ebd6eab91f6ab6aef4916a766273",
              iv: "99e23ec48985bccdeeab60f1", aad: "", msg: "2a", ct: "06", tag: "633c1e9703ef744ffffb40edf9d14355"),
    GCMVector(name: "wycheproof 97", key: "59d4eafb4de0cfc7d3db99a8f54b15d7b39f0acc8da69763b019c1699f87674a",
              iv: "2fcb1b38a99e71b84740ad9b", aad: "", msg: "549b365af913f3b081131ccb6b825588",
              ct: "f58c16690122d75356907fd96b570fca", tag: "28752c20153092818faba2a334640d6e"),
    GCMVector(name: "wycheproof 98", key: "3b2458d8176e1621c0cc24c0c0e24c1e80d72f7ee9149a4b166176629616d011",
              iv: "45aaa3e5d16d2d42dc03445d", aad: "", msg: "3ff1514b1c503915918f0c0c31094a6e1f",
              ct: "73a6b6f45f6ccc5131e07f2caa1f2e2f56", tag: "2d7379ec1db5952d4e95d30c340b1b1d"),
    GCMVector(name: "wycheproof 101", key: "cdccfe3f46d782ef47df4e72f0c02d9c7f774def970d23486f11a57f54247f17",
              iv: "376187894605a8d45e30de51", aad: "956846a209e087ed", msg: "e28e0e9f9d22463ac0e42639b530f42102fded75",
              ct: "feca44952447015b5df1f456df8ca4bb4eee2ce2", tag: "082e91924deeb77880e1b1c84f9b8d30"),
    GCMVector(name: "wycheproof 102", key: "f32364b1d339d82e4f132d8f4a0ec1ff7e746517fa07ef1a7f422f4e25a48194",
              iv: "5a86a50a0e8a179c734b996d", aad: "ab2ac7c44c60bdf8228c7884adb20184",
              msg: "43891bccb522b1e72a6b53cf31c074e9d6c2df8e",
              ct: "43dda832e942e286da314daa99bef5071d9d2c78", tag: "c3922583476ced575404ddb85dd8cd44"),
    GCMVector(name: "wycheproof 116 (64-byte AAD)",
              key: "0f112e59cdccd851c3b8e76c9f05a3b7c2e4feca5846afeb351c1cbcace82f04",
              iv: "7147973339d86789a2c9a958",
              aad: "37128be45f0a7f329546e1492c3c9c2d2534d5b1f5147e49ab91221e7c3edea2"
                + "1bbe47bfe3619437ce3c61e6e946c504f348296918219e51bf2c5598589cff",
              msg: "102e5804dda1fb5d656077edb15cadb5d0bdee8c",
              ct: "618ac626ae0e8d06c2fd2fb66be253dc26ed6e38", tag: "d8d93ff975cb988f09174dcd439cb6a4"),
    GCMVector(name: "wycheproof 104 (63 bytes)",
              key: "6efca98126918ab564d88c6bec02e8998b2be50e3f906ff9adfdd185f373e756",
              iv: "4abd6cfc83bd06b11efaa2a7", aad: "",
              msg: "bbec79c086d41e602d090f7e40494d6bf3faa1dc6df0ab8a88ea5d35d426b248"
                + "c2ad880351e223f6170d37cc9655e10459e59cbd6d1c092ed31d72ccc7af20",
              ct: "97b4c73a4d8b5b21bc4b50dbb70dfa77b1a7bf0bbe7cf16ecf5bb60ba8070acc"
                + "5740780435ed145a62a613dd9881b721168fbb3f5af385ee5d4f856cf93cba",
              tag: "27ac8c4010d8e81b7051ceb06b30fe2d"),
    GCMVector(name: "wycheproof 129 (special case: all-ones IV, zero tag)",
              key: "00112233445566778899aabbccddeeff102132435465768798a9bacbdcedfe0f",
              iv: "ffffffffffffffffffffffff", aad: "", msg: "c6152244cea1978d3e0bc274cf8c0b3b",
              ct: "7cb6fc7c6abc009efe9551a99f36a421", tag: "00000000000000000000000000000000"),
]

/// Wycheproof tcIds 130-156 (`ModifiedTag`, `result: invalid`): one key, IV, message and ciphertext, with
/// the tag modified in various ways.
enum WycheproofModifiedTag {
    static let key = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
    static let iv = "505152535455565758595a5b"
    static let msg = "202122232425262728292a2b2c2d2e2f"
    static let ct = "b2061457c0759fc1749f174ee1ccadfa"
    static let invalidTags: [(tcId: Int, tag: String)] = [
        (130, "9de8fef6d8ab1bf1bf887232eab590dd"),  // flipped bit 0
        (131, "9ee8fef6d8ab1bf1bf887232eab590dd"),  // flipped bit 1
        (132, "1ce8fef6d8ab1bf1bf887232eab590dd"),  // flipped bit 7
        (137, "9ce8fef6d8ab1b71bf887232eab590dd"),  // flipped bit 63
        (138, "9ce8fef6d8ab1bf1be887232eab590dd"),  // flipped bit 64
        (145, "9ce8fef6d8ab1bf1bf887232eab590dc"),  // flipped bit 120
        (148, "9ce8fef6d8ab1bf1bf887232eab5905d"),  // flipped bit 127
        (151, "9ce8fef6d8ab1b71bf887232eab5905d"),  // flipped bits 63 and 127
        (152, "631701092754e40e40778dcd154a6f22"),  // all bits flipped
        (153, "00000000000000000000000000000000"),  // all zero
        (154, "ffffffffffffffffffffffffffffffff"),  // all one
        (155, "1c687e76582b9b713f08f2b26a35105d"),  // msbs changed
        (156, "9de9fff7d9aa1af0be897333ebb491dc"),  // lsbs changed
    ]
    /// The genuine tag: the bitwise complement of tcId 152's "all bits flipped" tag.
    static var validTag: [UInt8] { hex("631701092754e40e40778dcd154a6f22").map { ~$0 } }
}

final class AESGCMTests: XCTestCase {

    private func checkKnownAnswer(_ v: GCMVector, using ctx: AESGCMContext? = nil,
                                  file: StaticString = #filePath, line: UInt = #line) throws {
        let ctx = try ctx ?? AESGCMContext(hexKey: v.key)
        let sealed = try ctx.seal(nonce: hex(v.iv), aad: hex(v.aad), plaintext: hex(v.msg))
        XCTAssertEqual(hexString(sealed.ciphertext), v.ct, "\(v.name): ciphertext", file: file, line: line)
        XCTAssertEqual(hexString(sealed.tag), v.tag, "\(v.name): tag", file: file, line: line)

        let opened = ctx.open(nonce: hex(v.iv), aad: hex(v.aad), ciphertext: hex(v.ct), tag: hex(v.tag))
        XCTAssertTrue(opened.ok, "\(v.name): open must authenticate", file: file, line: line)
        XCTAssertEqual(hexString(opened.plaintext), v.msg, "\(v.name): plaintext", file: file, line: line)
    }

    func testMcGrewViegaAES256Vectors() throws {
        for v in mcGrewViegaVectors { try checkKnownAnswer(v) }
    }

    func testWycheproofValidVectors() throws {
        for v in wycheproofValid { try checkKnownAnswer(v) }
    }

    /// The engine keys a context once and reuses it for every chunk: vectors must still match when one
    /// context runs many seals and opens, including after a failed open.
    func testContextReuseAcrossOperationsAndFailures() throws {
        let v15 = mcGrewViegaVectors[2], v16 = mcGrewViegaVectors[3]
        XCTAssertEqual(v15.key, v16.key)
        let ctx = try AESGCMContext(hexKey: v15.key)
        for _ in 0..<3 {
            try checkKnownAnswer(v16, using: ctx)
            try checkKnownAnswer(v15, using: ctx)
            var badTag = hex(v16.tag)
            badTag[0] ^= 1
            XCTAssertFalse(ctx.open(nonce: hex(v16.iv), aad: hex(v16.aad), ciphertext: hex(v16.ct), tag: badTag).ok)
        }
        try checkKnownAnswer(v16, using: ctx)
    }

    /// Runs of seals and of opens in one direction set only the nonce (not a full
    /// `EVP_CipherInit_ex`): every one must still match its vector, across direction changes,
    /// failed opens, a failed seal's leftovers and a re-key.
    func testSameDirectionRunsMatchVectors() throws {
        let v15 = mcGrewViegaVectors[2], v16 = mcGrewViegaVectors[3]
        let z13 = mcGrewViegaVectors[0], z14 = mcGrewViegaVectors[1]
        let ctx = try AESGCMContext(hexKey: v15.key)
        func sealMatches(_ v: GCMVector, line: UInt = #line) throws {
            let sealed = try ctx.seal(nonce: hex(v.iv), aad: hex(v.aad), plaintext: hex(v.msg))
            XCTAssertEqual(hexString(sealed.ciphertext), v.ct, "\(v.name): ciphertext", line: line)
            XCTAssertEqual(hexString(sealed.tag), v.tag, "\(v.name): tag", line: line)
        }
        func opens(_ v: GCMVector, tag: [UInt8]? = nil, line: UInt = #line) -> Bool {
            let opened = ctx.open(nonce: hex(v.iv), aad: hex(v.aad), ciphertext: hex(v.ct), tag: tag ?? hex(v.tag))
            if opened.ok { XCTAssertEqual(hexString(opened.plaintext), v.msg, "\(v.name): plaintext", line: line) }
            return opened.ok
        }
        var badTag = hex(v16.tag)
        badTag[15] ^= 0x80
        for _ in 0..<2 {
            for v in [v16, v15, v15, v16, v16] { try sealMatches(v) }
            XCTAssertTrue(opens(v15))
            XCTAssertFalse(opens(v16, tag: badTag))
            XCTAssertTrue(opens(v16))
            XCTAssertTrue(opens(v16))
            XCTAssertFalse(opens(v15, tag: badTag))
            XCTAssertFalse(opens(v15, tag: badTag))
            XCTAssertTrue(opens(v15))
        }
        try hex(z13.key).withUnsafeBytes { try ctx.rekey(try SecureBuffer(copying: $0)) }
        for v in [z14, z13, z14] { try sealMatches(v) }
        XCTAssertTrue(opens(z13))
        XCTAssertTrue(opens(z14))
        try hex(v15.key).withUnsafeBytes { try ctx.rekey(try SecureBuffer(copying: $0)) }
        XCTAssertTrue(opens(v16))
        try sealMatches(v16)
        try sealMatches(v15)
    }

    func testWycheproofModifiedTagsAreRejectedAndPlaintextZeroed() throws {
        typealias W = WycheproofModifiedTag
        let ctx = try AESGCMContext(hexKey: W.key)

        // The shared valid encryption behind these vectors.
        let sealed = try ctx.seal(nonce: hex(W.iv), aad: [], plaintext: hex(W.msg))
        XCTAssertEqual(hexString(sealed.ciphertext), W.ct)
        XCTAssertEqual(sealed.tag, W.validTag)

        for (tcId, tag) in W.invalidTags {
            let r = ctx.open(nonce: hex(W.iv), aad: [], ciphertext: hex(W.ct), tag: hex(tag), prefill: 0xA5)
            XCTAssertFalse(r.ok, "tcId \(tcId) must be rejected")
            XCTAssertEqual(r.plaintext, [UInt8](repeating: 0, count: 16),
                           "tcId \(tcId): no unauthenticated plaintext may be left behind")
        }
        // A context that rejected tags still opens the genuine ciphertext.
        let good = ctx.open(nonce: hex(W.iv), aad: [], ciphertext: hex(W.ct), tag: W.validTag)
        XCTAssertTrue(good.ok)
        XCTAssertEqual(hexString(good.plaintext), W.msg)
    }

    func testTamperedCiphertextAADAndNonceAreRejected() throws {
        let v = mcGrewViegaVectors[3]  // has AAD
        let ctx = try AESGCMContext(hexKey: v.key)
        let (nonce, aad, ct, tag) = (hex(v.iv), hex(v.aad), hex(v.ct), hex(v.tag))

        for i in [0, 17, ct.count - 1] {
            var c = ct
            c[i] ^= 0x80
            let r = ctx.open(nonce: nonce, aad: aad, ciphertext: c, tag: tag)
            XCTAssertFalse(r.ok, "ciphertext byte \(i) flipped")
            XCTAssertTrue(r.plaintext.allSatisfy { $0 == 0 }, "plaintext zeroed after ciphertext byte \(i) flipped")
        }
        for i in [0, aad.count - 1] {
            var a = aad
            a[i] ^= 0x01
            XCTAssertFalse(ctx.open(nonce: nonce, aad: a, ciphertext: ct, tag: tag).ok, "AAD byte \(i) flipped")
        }
        XCTAssertFalse(ctx.open(nonce: nonce, aad: [], ciphertext: ct, tag: tag).ok, "AAD dropped")
        XCTAssertFalse(ctx.open(nonce: nonce, aad: aad, ciphertext: Array(ct.dropLast()), tag: tag).ok, "truncated")
        var n = nonce
        n[11] ^= 0x01
        XCTAssertFalse(ctx.open(nonce: n, aad: aad, ciphertext: ct, tag: tag).ok, "nonce changed")

        let otherKey = try AESGCMContext(key: try SecureBytes(randomCount: 32))
        XCTAssertFalse(otherKey.open(nonce: nonce, aad: aad, ciphertext: ct, tag: tag).ok, "wrong key")
    }

    /// The engine encrypts chunks in place; a same-buffer seal and open must give the published bytes.
    func testInPlaceSealAndOpen() throws {
        let v = mcGrewViegaVectors[3]
        let ctx = try AESGCMContext(hexKey: v.key)
        let nonce = hex(v.iv), aad = hex(v.aad)
        var buffer = hex(v.msg)
        var tag = [UInt8](repeating: 0, count: 16)

        try nonce.withUnsafeBytes { n in
            try aad.withUnsafeBytes { a in
                try buffer.withUnsafeMutableBytes { b in
                    try tag.withUnsafeMutableBytes { t in
                        try ctx.seal(nonce: n.baseAddress!, aad: a, plaintext: UnsafeRawBufferPointer(b),
                                     ciphertext: b.baseAddress!, tag: t.baseAddress!)
                    }
                }
            }
        }
        XCTAssertEqual(hexString(buffer), v.ct)
        XCTAssertEqual(hexString(tag), v.tag)

        func openInPlace(_ tag: [UInt8]) -> Bool {
            nonce.withUnsafeBytes { n in
                aad.withUnsafeBytes { a in
                    tag.withUnsafeBytes { t in
                        buffer.withUnsafeMutableBytes { b in
                            ctx.open(nonce: n.baseAddress!, aad: a, ciphertext: UnsafeRawBufferPointer(b),
                                     tag: t.baseAddress!, plaintext: b.baseAddress!)
                        }
                    }
                }
            }
        }
        XCTAssertTrue(openInPlace(tag))
        XCTAssertEqual(hexString(buffer), v.msg)

        // Back to ciphertext, then a failed in-place open must not leave decrypted bytes in the buffer.
        buffer = hex(v.ct)
        var bad = tag
        bad[15] ^= 0x40
        XCTAssertFalse(openInPlace(bad))
        XCTAssertEqual(buffer, [UInt8](repeating: 0, count: buffer.count))
    }

    func testEmptyPlaintextWithAAD() throws {
        let v = wycheproofValid[1]  // tcId 92: empty message, 6-byte AAD
        XCTAssertTrue(v.msg.isEmpty && !v.aad.isEmpty)
        let ctx = try AESGCMContext(hexKey: v.key)
        let sealed = try ctx.seal(nonce: hex(v.iv), aad: hex(v.aad), plaintext: [])
        XCTAssertEqual(sealed.ciphertext, [])
        XCTAssertEqual(hexString(sealed.tag), v.tag)
        XCTAssertTrue(ctx.open(nonce: hex(v.iv), aad: hex(v.aad), ciphertext: [], tag: hex(v.tag)).ok)

        var aad = hex(v.aad)
        aad[0] ^= 1
        XCTAssertFalse(ctx.open(nonce: hex(v.iv), aad: aad, ciphertext: [], tag: hex(v.tag)).ok)
        XCTAssertFalse(ctx.open(nonce: hex(v.iv), aad: [], ciphertext: [], tag: hex(v.tag)).ok)
    }

    func testInvalidKeySizesAreRejected() throws {
        for n in [0, 16, 24, 31, 33, 64] {
            XCTAssertThrowsError(try AESGCMContext(key: try SecureBytes(count: n)), "key of \(n) bytes") { error in
                XCTAssertEqual(error as? CryptoError, .invalidKeySize)
            }
        }
        XCTAssertNoThrow(try AESGCMContext(key: try SecureBytes(count: 32)))
    }

    // MARK: sealWithRandomNonce / openSealed

    func testSealWithRandomNonceRoundTrip() throws {
        let ctx = try AESGCMContext(key: try SecureBytes(randomCount: 32))
        let secret = try SecureBytes(copying: Array(0..<32))
        let aad = Array("file header v1".utf8)

        let sealed = try ctx.sealWithRandomNonce(secret, aad: aad)
        XCTAssertEqual(sealed.count, AESGCMContext.nonceSize + 32 + AESGCMContext.tagSize)
        XCTAssertNotEqual(Array(sealed[12..<44]), Array(0..<32), "the secret must not appear in clear")

        let opened = try ctx.openSealed(sealed, aad: aad)
        XCTAssertEqual(opened?.bytes, Array(0..<32))
        XCTAssertEqual(opened, secret)

        // The layout is nonce ‖ ciphertext ‖ tag: the pointer API opens it too.
        let manual = ctx.open(nonce: Array(sealed[0..<12]), aad: aad, ciphertext: Array(sealed[12..<44]),
                              tag: Array(sealed[44..<60]))
        XCTAssertTrue(manual.ok)
        XCTAssertEqual(manual.plaintext, Array(0..<32))

        // Fresh nonce every time.
        let again = try ctx.sealWithRandomNonce(secret, aad: aad)
        XCTAssertNotEqual(Array(again[0..<12]), Array(sealed[0..<12]))
        XCTAssertNotEqual(again, sealed)
    }

    func testSealWithRandomNonceEmptyAADAndEmptySecret() throws {
        let ctx = try AESGCMContext(key: try SecureBytes(randomCount: 32))
        let secret = try SecureBytes(randomCount: 48)
        let sealed = try ctx.sealWithRandomNonce(secret, aad: [])
        XCTAssertEqual(try ctx.openSealed(sealed, aad: []), secret)
        XCTAssertNil(try ctx.openSealed(sealed, aad: [0]))

        let empty = try ctx.sealWithRandomNonce(try SecureBytes(count: 0), aad: [1, 2, 3])
        XCTAssertEqual(empty.count, 28)
        let openedEmpty = try ctx.openSealed(empty, aad: [1, 2, 3])
        XCTAssertNotNil(openedEmpty)
        XCTAssertEqual(openedEmpty?.count, 0)
        XCTAssertNil(try ctx.openSealed(empty, aad: [1, 2]))
    }

    func testOpenSealedRejectsEveryTamperedByte() throws {
        let ctx = try AESGCMContext(key: try SecureBytes(randomCount: 32))
        let secret = try SecureBytes(randomCount: 32)
        let aad: [UInt8] = [9, 8, 7]
        let sealed = try ctx.sealWithRandomNonce(secret, aad: aad)

        for i in sealed.indices {
            var t = sealed
            t[i] ^= 0x01
            XCTAssertNil(try ctx.openSealed(t, aad: aad), "byte \(i) flipped")
        }
        XCTAssertNil(try ctx.openSealed(Array(sealed.dropLast()), aad: aad), "truncated")
        XCTAssertNil(try ctx.openSealed((sealed + [0]), aad: aad), "extended")
        XCTAssertNil(try ctx.openSealed(Array(sealed.prefix(27)), aad: aad), "shorter than nonce+tag")
        XCTAssertNil(try ctx.openSealed([UInt8](), aad: aad), "empty")
        XCTAssertNil(try ctx.openSealed(sealed, aad: [9, 8]), "wrong AAD")

        let other = try AESGCMContext(key: try SecureBytes(randomCount: 32))
        XCTAssertNil(try other.openSealed(sealed, aad: aad), "wrong key")
        // Still opens after all those failures.
        XCTAssertEqual(try ctx.openSealed(sealed, aad: aad), secret)
    }
}
