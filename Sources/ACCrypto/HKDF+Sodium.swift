import CACSecureSodium

/// HKDF-SHA-256 (RFC 5869) on libsodium's HMAC-SHA-256.
///
/// Everything derived from the input key (the HMAC state, the pseudorandom key, each output block)
/// is in guarded memory: one pooled scratch buffer, zeroed when it is released. (OpenSSL's `EVP_KDF`
/// copied the key, salt and info into its heap context and allocated a dozen times per derivation.)
public enum HKDF {
    /// Derives `outputCount` bytes from `key` into guarded memory.
    public static func sha256(key: SecureBytes, salt: [UInt8], info: [UInt8], outputCount: Int = 32) throws(CryptoError) -> SecureBytes {
        try withBytes(salt) { (s) throws(CryptoError) in
            try withBytes(info) { (i) throws(CryptoError) in try sha256(key: key, salt: s, info: i, outputCount: outputCount) }
        }
    }

    public static func sha256(key: SecureBytes, salt: String, info: String, outputCount: Int = 32) throws(CryptoError) -> SecureBytes {
        try withUTF8(salt) { (s) throws(CryptoError) in
            try withUTF8(info) { (i) throws(CryptoError) in try sha256(key: key, salt: s, info: i, outputCount: outputCount) }
        }
    }

    /// HMAC state ‖ PRK (32) ‖ T(i) (32): a multiple of 16 bytes, so the buffer (which libsodium
    /// places at the end of its pages) is aligned for the state.
    private static let stateSize = (MemoryLayout<crypto_auth_hmacsha256_state>.size + 15) / 16 * 16
    private static let scratchSize = stateSize + 64

    /// Derives `outputCount` bytes from `key`, with salt and info in caller memory.
    public static func sha256(key: SecureBytes, salt: UnsafeRawBufferPointer, info: UnsafeRawBufferPointer,
                              outputCount: Int = 32) throws(CryptoError) -> SecureBytes {
        guard outputCount > 0, outputCount <= 255 * 32 else { throw CryptoError.invalidArgument("HKDF output length") }
        return try SecureBytes(count: outputCount) { (out: UnsafeMutableRawBufferPointer) throws(CryptoError) in
            let scratch = try SecureBuffer(count: scratchSize)
            let ok = scratch.withUnsafeMutableBytes { m in
                key.withUnsafeBytes { k in expand(m.baseAddress!, ikm: k, salt: salt, info: info, into: out) }
            }
            guard ok else { throw CryptoError.invalidArgument("HKDF (HMAC-SHA-256 failed)") }
        }
    }

    /// RFC 5869 §2.2–2.3: PRK = HMAC(salt, IKM); T(i) = HMAC(PRK, T(i-1) ‖ info ‖ i). An empty salt is
    /// HMAC's all-zero key, as the RFC's "HashLen zeros" (HMAC pads every key with zeros).
    private static func expand(_ m: UnsafeMutableRawPointer, ikm: UnsafeRawBufferPointer, salt: UnsafeRawBufferPointer,
                               info: UnsafeRawBufferPointer, into out: UnsafeMutableRawBufferPointer) -> Bool {
        let state = m.bindMemory(to: crypto_auth_hmacsha256_state.self, capacity: 1)
        let prk = (m + stateSize).assumingMemoryBound(to: UInt8.self)
        let block = prk + 32
        var zero: UInt8 = 0
        return withUnsafeMutablePointer(to: &zero) { z -> Bool in
            func bytes(_ b: UnsafeRawBufferPointer) -> UnsafePointer<UInt8> {
                b.count > 0 ? b.baseAddress!.assumingMemoryBound(to: UInt8.self) : UnsafePointer(z)
            }
            guard crypto_auth_hmacsha256_init(state, bytes(salt), salt.count) == 0,
                  crypto_auth_hmacsha256_update(state, bytes(ikm), UInt64(ikm.count)) == 0,
                  crypto_auth_hmacsha256_final(state, prk) == 0 else { return false }
            var done = 0
            var counter: UInt8 = 1
            while done < out.count {
                guard crypto_auth_hmacsha256_init(state, prk, 32) == 0,
                      done == 0 || crypto_auth_hmacsha256_update(state, block, 32) == 0,
                      crypto_auth_hmacsha256_update(state, bytes(info), UInt64(info.count)) == 0,
                      crypto_auth_hmacsha256_update(state, &counter, 1) == 0,
                      crypto_auth_hmacsha256_final(state, block) == 0 else { return false }
                let n = min(32, out.count - done)
                (out.baseAddress! + done).copyMemory(from: block, byteCount: n)
                done += n
                counter &+= 1
            }
            return true
        }
    }

    private static func withUTF8<R>(_ string: String, _ body: (UnsafeRawBufferPointer) throws(CryptoError) -> R) throws(CryptoError) -> R {
        var s = string
        let result: Result<R, CryptoError> = s.withUTF8 { u in
            do throws(CryptoError) { return .success(try body(UnsafeRawBufferPointer(u))) } catch { return .failure(error) }
        }
        return try result.get()
    }
}
