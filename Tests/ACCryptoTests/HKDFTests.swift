import XCTest
import ACCrypto

/// RFC 5869 Appendix A, test cases 1-3 (the SHA-256 ones).
final class HKDFTests: XCTestCase {

    func testRFC5869Case1Basic() throws {
        let okm = try HKDF.sha256(key: try SecureBytes(copying: [UInt8](repeating: 0x0b, count: 22)),
                                  salt: hex("000102030405060708090a0b0c"),
                                  info: hex("f0f1f2f3f4f5f6f7f8f9"), outputCount: 42)
        XCTAssertEqual(hexString(okm.bytes),
                       "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865")
    }

    func testRFC5869Case2LongInputs() throws {
        let okm = try HKDF.sha256(key: try SecureBytes(copying: Array(UInt8(0x00)...UInt8(0x4f))),
                                  salt: Array(UInt8(0x60)...UInt8(0xaf)),
                                  info: Array(UInt8(0xb0)...UInt8(0xff)), outputCount: 82)
        XCTAssertEqual(hexString(okm.bytes),
                       "b11e398dc80327a1c8e7f78c596a49344f012eda2d4efad8a050cc4c19afa97c"
                       + "59045a99cac7827271cb41c65e590e09da3275600c2f09b8367793a9aca3db71"
                       + "cc30c58179ec3e87c14c01d5c1f3434f1d87")
    }

    func testRFC5869Case3EmptySaltAndInfo() throws {
        let ikm = try SecureBytes(copying: [UInt8](repeating: 0x0b, count: 22))
        let expected = "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8"
        XCTAssertEqual(hexString(try HKDF.sha256(key: ikm, salt: [UInt8](), info: [], outputCount: 42).bytes), expected)
        XCTAssertEqual(hexString(try HKDF.sha256(key: ikm, salt: "", info: "", outputCount: 42).bytes), expected)
        // RFC 5869 §2.2: an absent salt means HashLen zero bytes.
        XCTAssertEqual(hexString(try HKDF.sha256(key: ikm, salt: [UInt8](repeating: 0, count: 32), info: [],
                                                 outputCount: 42).bytes), expected)
    }

    func testStringOverloadIsUTF8() throws {
        let key = try SecureBytes(randomCount: 32)
        let a = try HKDF.sha256(key: key, salt: "ACSF v1", info: "key fingerprint", outputCount: 16)
        let b = try HKDF.sha256(key: key, salt: Array("ACSF v1".utf8), info: Array("key fingerprint".utf8), outputCount: 16)
        XCTAssertEqual(a, b)
        XCTAssertEqual(a.count, 16)
    }

    func testDefaultLengthAndDomainSeparation() throws {
        let key = try SecureBytes(randomCount: 32)
        let a = try HKDF.sha256(key: key, salt: "s", info: "a")
        XCTAssertEqual(a.count, 32)
        XCTAssertEqual(a, try HKDF.sha256(key: key, salt: "s", info: "a"), "deterministic")
        XCTAssertNotEqual(a, try HKDF.sha256(key: key, salt: "s", info: "b"), "info separates")
        XCTAssertNotEqual(a, try HKDF.sha256(key: key, salt: "t", info: "a"), "salt separates")
        XCTAssertNotEqual(a, try HKDF.sha256(key: try SecureBytes(randomCount: 32), salt: "s", info: "a"), "key separates")
        // A shorter output is a prefix of a longer one (same PRK, same T(1)).
        let long = try HKDF.sha256(key: key, salt: "s", info: "a", outputCount: 64)
        XCTAssertEqual(Array(long.bytes.prefix(32)), a.bytes)
    }

    func testOutputLengthBounds() throws {
        let key = try SecureBytes(randomCount: 32)
        for bad in [0, -1, 255 * 32 + 1] {
            XCTAssertThrowsError(try HKDF.sha256(key: key, salt: "s", info: "i", outputCount: bad), "length \(bad)") { e in
                guard case .invalidArgument? = e as? CryptoError else { return XCTFail("unexpected \(e)") }
            }
        }
        XCTAssertEqual(try HKDF.sha256(key: key, salt: "s", info: "i", outputCount: 255 * 32).count, 255 * 32)
        XCTAssertEqual(try HKDF.sha256(key: key, salt: "s", info: "i", outputCount: 1).count, 1)
    }
}
