// The harness runs on the in-memory file system, which exists only in builds with system-call
// mocking (debug, and the fuzzers' release build): elsewhere (a release build of the main package)
// this file compiles to nothing.
#if ACSECURE_SYSCALL_MOCKING
import Foundation
@_spi(Fuzzing) import ACSecureSharing

/// Fuzz target 4: untrusted bytes as a crypto block (`CryptoBlock.parse`, what
/// `ACWrappedFile.wrapFile(atPath:toPath:cryptoBlock:)` reads). A block is accepted only if it is
/// exactly what the provider hands out: "ACCB", version 1, 56 bytes, scope 0 or 1, zero reserved
/// bytes, and the fingerprint of its key; then the parsed fingerprint is the stored one. A refusal must
/// be an `NSError` in `ACErrorDomain` with `ACErrorInvalidArg` that does not echo the key bytes.
///
/// Input: byte 0 & 1 = 0 takes the rest as the block; otherwise a valid block (group scope if
/// byte 0 & 2) gets the rest as (offset, XOR value) edits, and byte 0 >> 4 bytes cut from its end.
public enum CryptoBlockParseFuzzer {
    nonisolated(unsafe) private static var valid: [[UInt8]] = []

    static func templates() -> [[UInt8]] {
        if !valid.isEmpty { return valid }
        let key = (0..<32).map { UInt8(truncatingIfNeeded: $0 &* 11 &+ 3) }
        do { valid = [try CryptoBlockParser.encode(key: key, group: false), try CryptoBlockParser.encode(key: key, group: true)] } catch {
            fatalError("cannot make the template crypto blocks: \(error)")
        }
        return valid
    }

    static func block(_ input: [UInt8]) -> [UInt8] {
        guard let mode = input.first else { return [] }
        if mode & 1 == 0 { return Array(input.dropFirst()) }
        var b = templates()[Int(mode >> 1) & 1]
        var i = 1
        while i + 1 < input.count {
            b[Int(input[i]) % b.count] ^= input[i + 1]
            i += 2
        }
        b.removeLast(min(Int(mode >> 4), b.count))
        return b
    }

    /// Runs one input. Returns a finding, or nil when the parser behaved.
    public static func run(_ input: [UInt8]) -> FuzzFinding? {
        let b = block(input)
        let original = templates().contains(b)
        let wellFormed = b.count == CryptoBlockParser.size && Array(b[0..<4]) == Array("ACCB".utf8) && b[4] == 1 && b[5] <= 1 && b[6] == 0 && b[7] == 0
        switch CryptoBlockParser.parse(b) {
        case .success(let (scope, fingerprint)):
            guard wellFormed else { return FuzzFinding("a malformed crypto block of \(b.count) bytes was accepted") }
            if scope != b[5] || fingerprint != Array(b[8..<24]) { return FuzzFinding("crypto block fields misread") }
            // A block that differs from a valid one only in its key or fingerprint would have to
            // have found a fingerprint collision: note it as a finding, it is not expected.
            return original ? nil : FuzzFinding("an edited crypto block was accepted (fingerprint collision?)")
        case .failure(let error):
            if original { return FuzzFinding("a valid crypto block was refused: \(error)") }
            let e = error as NSError
            guard e.domain == "ACErrorDomain" else { return FuzzFinding("refused with domain \(e.domain) code \(e.code)") }
            if b.count >= 56 {
                let digits = Array("0123456789abcdef".utf8)
                let key = String(decoding: b[24..<56].flatMap { [digits[Int($0 >> 4)], digits[Int($0 & 15)]] }, as: UTF8.self)
                if e.localizedDescription.contains(key) || "\(e)".contains(key) { return FuzzFinding("the error echoes the key bytes") }
            }
            return nil
        }
    }
}
#endif
