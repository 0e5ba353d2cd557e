import ACCrypto

/// Decodes a hex string (spaces allowed); traps on malformed input, which is a bug in the test itself.
func hex(_ s: String) -> [UInt8] {
    let digits = Array(s.utf8).filter { $0 != UInt8(ascii: " ") }
    precondition(digits.count % 2 == 0, "odd hex length")
    func nibble(_ c: UInt8) -> UInt8 {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return c - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return c - UInt8(ascii: "A") + 10
        default: preconditionFailure("bad hex digit")
        }
    }
    return stride(from: 0, to: digits.count, by: 2).map { nibble(digits[$0]) << 4 | nibble(digits[$0 + 1]) }
}

func hexString(_ bytes: some Sequence<UInt8>) -> String {
    bytes.map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined()
}

extension SecureBytes {
    /// Test-only copy of the contents, so assertions can compare against published vectors.
    var bytes: [UInt8] { withUnsafeBytes { Array($0) } }
}

extension SecureBuffer {
    /// Test-only copy of the contents.
    var bytes: [UInt8] { withUnsafeBytes { Array($0) } }
}

/// Array-based wrappers around the pointer API.
extension AESGCMContext {
    convenience init(hexKey: String) throws {
        try self.init(key: try SecureBytes(copying: hex(hexKey)))
    }

    func seal(nonce: [UInt8], aad: [UInt8], plaintext: [UInt8]) throws -> (ciphertext: [UInt8], tag: [UInt8]) {
        precondition(nonce.count == Self.nonceSize)
        // Allocate at least one byte so baseAddress is never nil, as a real caller's buffer would be.
        var ct = [UInt8](repeating: 0xEE, count: max(plaintext.count, 1))
        var tag = [UInt8](repeating: 0, count: Self.tagSize)
        try nonce.withUnsafeBytes { n in
            try aad.withUnsafeBytes { a in
                try plaintext.withUnsafeBytes { p in
                    try ct.withUnsafeMutableBytes { c in
                        try tag.withUnsafeMutableBytes { t in
                            try seal(nonce: n.baseAddress!, aad: a, plaintext: p, ciphertext: c.baseAddress!, tag: t.baseAddress!)
                        }
                    }
                }
            }
        }
        return (Array(ct.prefix(plaintext.count)), tag)
    }

    /// Returns (authenticated, plaintext buffer as left by `open`).
    func open(nonce: [UInt8], aad: [UInt8], ciphertext: [UInt8], tag: [UInt8],
              prefill: UInt8 = 0xA5) -> (ok: Bool, plaintext: [UInt8]) {
        precondition(nonce.count == Self.nonceSize && tag.count == Self.tagSize)
        var pt = [UInt8](repeating: prefill, count: max(ciphertext.count, 1))
        let ok = nonce.withUnsafeBytes { n in
            aad.withUnsafeBytes { a in
                ciphertext.withUnsafeBytes { c in
                    tag.withUnsafeBytes { t in
                        pt.withUnsafeMutableBytes { p in
                            open(nonce: n.baseAddress!, aad: a, ciphertext: c, tag: t.baseAddress!, plaintext: p.baseAddress!)
                        }
                    }
                }
            }
        }
        return (ok, Array(pt.prefix(ciphertext.count)))
    }
}
