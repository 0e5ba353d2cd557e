import Foundation
import XCTest
import ACCrypto

final class Argon2idTests: XCTestCase {
    private var passcode: SecureBytes { get throws { try SecureBytes(copying: Array("correct horse battery staple".utf8)) } }
    private let salt: [UInt8] = Array(0..<16)

    /// The default cost of new seeds is libsodium's MODERATE: 3 passes over 256 MiB.
    func testModerateCostIsLibsodiumModerate() throws {
        XCTAssertEqual(Argon2id.Cost.moderate.opsLimit, 3)
        XCTAssertEqual(Argon2id.Cost.moderate.memLimit, 256 << 20)
    }

    /// The figures of docs/FORMAT.md ("What a passcode costs an attacker"): the time of one
    /// derivation at each cost, median of 5. Opt-in (ACSECURE_MEASURE_ARGON2ID=1): it takes seconds.
    func testMeasureDerivationTime() throws {
        guard let v = getenv("ACSECURE_MEASURE_ARGON2ID"), String(cString: v) == "1" else {
            throw XCTSkip("set ACSECURE_MEASURE_ARGON2ID=1 to measure")
        }
        let pin = try SecureBytes(copying: Array("123456".utf8))
        for (name, cost) in [("interactive", Argon2id.Cost.interactive), ("moderate", .moderate)] {
            var times: [Double] = []
            for _ in 0..<5 {
                let start = DispatchTime.now().uptimeNanoseconds
                _ = try Argon2id.deriveKey(passcode: pin, salt: salt, cost: cost)
                times.append(Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9)
            }
            let median = times.sorted()[2]
            print("Argon2id \(name) (ops \(cost.opsLimit), \(cost.memLimit >> 20) MiB): median \(String(format: "%.3f", median)) s "
                  + "of \(times.map { String(format: "%.3f", $0) }); 10^6 PINs: \(String(format: "%.0f", median * 1e6)) core-seconds")
        }
    }

    func testSaltSizeIsSixteen() throws {
        XCTAssertEqual(Argon2id.saltSize, 16)
    }

    func testDeterministicForSameSaltAndPasscode() throws {
        let a = try Argon2id.deriveKey(passcode: try passcode, salt: salt, cost: .minimum)
        let b = try Argon2id.deriveKey(passcode: try SecureBytes(copying: try passcode.bytes), salt: salt, cost: .minimum)
        XCTAssertEqual(a.count, 32)
        XCTAssertEqual(a, b)
        XCTAssertNotEqual(a.bytes, [UInt8](repeating: 0, count: 32))
    }

    func testDifferentSaltPasscodeOrCostGiveDifferentKeys() throws {
        let base = try Argon2id.deriveKey(passcode: try passcode, salt: salt, cost: .minimum)
        var otherSalt = salt
        otherSalt[15] ^= 1
        XCTAssertNotEqual(base, try Argon2id.deriveKey(passcode: try passcode, salt: otherSalt, cost: .minimum))
        XCTAssertNotEqual(base, try Argon2id.deriveKey(passcode: try SecureBytes(copying: Array("correct horse battery stapl3".utf8)),
                                                       salt: salt, cost: .minimum))
        let costlier = Argon2id.Cost(opsLimit: Argon2id.Cost.minimum.opsLimit + 1, memLimit: Argon2id.Cost.minimum.memLimit)
        XCTAssertNotEqual(base, try Argon2id.deriveKey(passcode: try passcode, salt: salt, cost: costlier))
    }

    func testOutputCount() throws {
        let k64 = try Argon2id.deriveKey(passcode: try passcode, salt: salt, cost: .minimum, outputCount: 64)
        XCTAssertEqual(k64.count, 64)
    }

    func testEmptyPasscodeIsAccepted() throws {
        let a = try Argon2id.deriveKey(passcode: try SecureBytes(count: 0), salt: salt, cost: .minimum)
        let b = try Argon2id.deriveKey(passcode: try SecureBytes(count: 0), salt: salt, cost: .minimum)
        XCTAssertEqual(a, b)
        XCTAssertNotEqual(a, try Argon2id.deriveKey(passcode: try passcode, salt: salt, cost: .minimum))
    }

    func testInvalidSaltLengthThrows() throws {
        for n in [0, 8, 15, 17, 32] {
            XCTAssertThrowsError(try Argon2id.deriveKey(passcode: try passcode, salt: [UInt8](repeating: 7, count: n), cost: .minimum),
                                 "salt of \(n) bytes") { e in
                guard case .invalidArgument? = e as? CryptoError else { return XCTFail("unexpected \(e)") }
            }
        }
    }

    func testCostBelowLibsodiumMinimumThrows() throws {
        let tooSmall = Argon2id.Cost(opsLimit: 0, memLimit: Argon2id.Cost.minimum.memLimit)
        XCTAssertThrowsError(try Argon2id.deriveKey(passcode: try passcode, salt: salt, cost: tooSmall))
    }
}
