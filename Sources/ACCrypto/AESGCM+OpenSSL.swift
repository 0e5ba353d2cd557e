import CACSecureLibCrypto

/// AES-256-GCM through OpenSSL's EVP interface.
///
/// A context is keyed once; each seal or open only resets the 96-bit nonce (and the direction), so
/// the hot path performs no allocation and no key expansion. One OpenSSL context serves both
/// directions: GCM uses the same key schedule to seal and to open. A context is not thread-safe
/// (every seal and open writes the OpenSSL context), so it is not `Sendable`: the owner serialises
/// its use (the engine keeps its contexts per open file, used under that file's lock).
///
/// The OpenSSL context comes from `CipherContextPool` and goes back there, re-keyed with zeros,
/// when this object is released: no key schedule outlives it.
public final class AESGCMContext {
    public static let keySize = 32
    public static let nonceSize = 12
    public static let tagSize = 16

    private let context: OpaquePointer
    /// The direction of the last operation that set a nonce (1 seal, 0 open), or -1 after keying
    /// or a failure: only an operation in the same direction sets its nonce the short way.
    private var direction: Int32 = -1
    /// Cleared if OpenSSL ever refuses the short way (then every nonce goes through `EVP_CipherInit_ex`).
    private var nonceShortcut = true

    /// - Throws: `CryptoError` if the key is not 32 bytes or OpenSSL refuses it.
    public convenience init(key: SecureBytes) throws(CryptoError) {
        try self.init(rawKey: key.withUnsafeBytes { $0 })  // guarded memory lives as long as `key`
        withExtendedLifetime(key) {}
    }

    /// A context keyed with a key derived in scratch memory.
    /// - Throws: `CryptoError` if the key is not 32 bytes or OpenSSL refuses it.
    public convenience init(key: SecureBuffer) throws(CryptoError) {
        try self.init(rawKey: key.withUnsafeBytes { $0 })
        withExtendedLifetime(key) {}
    }

    private init(rawKey k: UnsafeRawBufferPointer) throws(CryptoError) {
        guard k.count == Self.keySize else { throw CryptoError.invalidKeySize }
        context = try CipherContextPool.aes256GCM.take(key: k.baseAddress!)
    }

    /// Re-keys this context in place (no allocation): for caches of many short-lived keys.
    /// - Throws: `CryptoError` if the key is not 32 bytes or OpenSSL refuses it.
    public func rekey(_ key: SecureBuffer) throws(CryptoError) {
        guard key.count == Self.keySize else { throw CryptoError.invalidKeySize }
        let ok = key.withUnsafeBytes { k in
            EVP_CipherInit_ex(context, nil, nil, k.baseAddress!.assumingMemoryBound(to: UInt8.self), nil, 1) == 1
        }
        direction = -1
        guard ok else { throw CryptoError.openSSL("EVP_CipherInit_ex") }
    }

    /// Sets the nonce of the next operation (`encrypt` 1: a seal, 0: an open). The first operation
    /// after keying, and one that changes direction, goes through `EVP_CipherInit_ex`; the next ones
    /// in the same direction only replace the nonce (`acsecure_gcm_set_nonce`, CACSecureLibCrypto),
    /// which leaves OpenSSL's context as `EVP_CipherInit_ex` with the same key and direction does —
    /// without asking the provider for the IV length by name on every call (about a quarter of
    /// the cost of sealing a trailer). A nonce that were not replaced could not be used twice:
    /// OpenSSL marks a GCM context's IV used at each final, and refuses the next update until a
    /// new one is set (checked with OpenSSL 3.0: a second `EVP_EncryptUpdate` returns 0), so a
    /// provider that ignored this parameter would make seals fail, not repeat a nonce.
    @inline(__always)
    private func setNonce(_ nonce: UnsafeRawPointer, encrypt: Int32) -> Bool {
        let n = nonce.assumingMemoryBound(to: UInt8.self)
        if direction == encrypt && nonceShortcut {
            if acsecure_gcm_set_nonce(context, n) == 1 { return true }
            nonceShortcut = false
            ERR_clear_error()
        }
        guard EVP_CipherInit_ex(context, nil, nil, nil, n, encrypt) == 1 else {
            direction = -1
            return false
        }
        direction = encrypt
        return true
    }

    deinit {
        // Re-keyed with zeros before it is kept for reuse (or freed, which cleanses it).
        CipherContextPool.aes256GCM.give(context)
    }

    /// Encrypts `plaintext` into `ciphertext` (same length) and writes the 16-byte tag to `tag`.
    /// `plaintext` and `ciphertext` may be the same memory.
    public func seal(
        nonce: UnsafeRawPointer,
        aad: UnsafeRawBufferPointer,
        plaintext: UnsafeRawBufferPointer,
        ciphertext: UnsafeMutableRawPointer,
        tag: UnsafeMutableRawPointer
    ) throws(CryptoError) {
        let ctx = context
        var outLen: Int32 = 0
        guard setNonce(nonce, encrypt: 1) else { throw CryptoError.openSSL("EVP_CipherInit_ex(seal)") }
        if aad.count > 0 {
            guard EVP_EncryptUpdate(ctx, nil, &outLen, aad.baseAddress!.assumingMemoryBound(to: UInt8.self), Int32(aad.count)) == 1
            else { throw CryptoError.openSSL("EVP_EncryptUpdate(aad)") }
        }
        if plaintext.count > 0 {
            guard EVP_EncryptUpdate(
                ctx, ciphertext.assumingMemoryBound(to: UInt8.self), &outLen,
                plaintext.baseAddress!.assumingMemoryBound(to: UInt8.self), Int32(plaintext.count)) == 1
            else { throw CryptoError.openSSL("EVP_EncryptUpdate") }
        }
        guard EVP_EncryptFinal_ex(ctx, ciphertext.assumingMemoryBound(to: UInt8.self) + plaintext.count, &outLen) == 1,
              acsecure_gcm_get_tag(ctx, tag, Self.tagSize) == 1
        else { throw CryptoError.openSSL("EVP_EncryptFinal_ex") }
    }

    /// Decrypts and authenticates. Returns `false` (and leaves `plaintext` zeroed) when the tag does
    /// not match; no unauthenticated byte is ever left in `plaintext`.
    public func open(
        nonce: UnsafeRawPointer,
        aad: UnsafeRawBufferPointer,
        ciphertext: UnsafeRawBufferPointer,
        tag: UnsafeRawPointer,
        plaintext: UnsafeMutableRawPointer
    ) -> Bool {
        let ctx = context
        var outLen: Int32 = 0
        var ok = setNonce(nonce, encrypt: 0)
        if ok, aad.count > 0 {
            ok = EVP_DecryptUpdate(ctx, nil, &outLen, aad.baseAddress!.assumingMemoryBound(to: UInt8.self), Int32(aad.count)) == 1
        }
        if ok, ciphertext.count > 0 {
            ok = EVP_DecryptUpdate(
                ctx, plaintext.assumingMemoryBound(to: UInt8.self), &outLen,
                ciphertext.baseAddress!.assumingMemoryBound(to: UInt8.self), Int32(ciphertext.count)) == 1
        }
        if ok {
            ok = acsecure_gcm_set_tag(ctx, tag, Self.tagSize) == 1
        }
        if ok {
            ok = EVP_DecryptFinal_ex(ctx, plaintext.assumingMemoryBound(to: UInt8.self) + ciphertext.count, &outLen) == 1
        }
        if !ok, ciphertext.count > 0 {
            secureZero(UnsafeMutableRawBufferPointer(start: plaintext, count: ciphertext.count))
        }
        return ok
    }
}

extension AESGCMContext {
    /// Seals a small secret (a key) with a fresh random nonce.
    /// - Returns: nonce ‖ ciphertext ‖ tag.
    public func sealWithRandomNonce(_ secret: SecureBytes, aad: [UInt8]) throws(CryptoError) -> [UInt8] {
        try secret.withUnsafeBytes { (s: UnsafeRawBufferPointer) throws(CryptoError) in try sealWithRandomNonce(s, aad: aad) }
    }

    /// `sealWithRandomNonce` with the AAD in caller memory (no copy of it is made).
    public func sealWithRandomNonce(_ secret: SecureBytes, aad: UnsafeRawBufferPointer) throws(CryptoError) -> [UInt8] {
        try secret.withUnsafeBytes { (s: UnsafeRawBufferPointer) throws(CryptoError) in try sealWithRandomNonce(s, aad: aad) }
    }

    /// Seals `secret` (in guarded memory the caller owns) with a fresh random nonce.
    /// - Returns: nonce ‖ ciphertext ‖ tag.
    public func sealWithRandomNonce(_ s: UnsafeRawBufferPointer, aad: [UInt8]) throws(CryptoError) -> [UInt8] {
        try withBytes(aad) { (a) throws(CryptoError) in try sealWithRandomNonce(s, aad: a) }
    }

    /// Seals `secret` with a fresh random nonce, straight into the array it returns (one allocation).
    /// - Returns: nonce ‖ ciphertext ‖ tag.
    public func sealWithRandomNonce(_ s: UnsafeRawBufferPointer, aad: UnsafeRawBufferPointer) throws(CryptoError) -> [UInt8] {
        let n = s.count
        let total = Self.nonceSize + n + Self.tagSize
        var failure: CryptoError?
        let sealed = [UInt8](unsafeUninitializedCapacity: total) { o, initialized in
            let base = UnsafeMutableRawPointer(o.baseAddress!)
            NonceGenerator.fill(UnsafeMutableRawBufferPointer(start: base, count: Self.nonceSize))
            do throws(CryptoError) {
                try seal(nonce: base, aad: aad, plaintext: s, ciphertext: base + Self.nonceSize, tag: base + Self.nonceSize + n)
            } catch {
                failure = error
                base.initializeMemory(as: UInt8.self, repeating: 0, count: total)
            }
            initialized = total
        }
        if let failure { throw failure }
        return sealed
    }

    /// Opens what `sealWithRandomNonce` produced. Returns nil when it does not authenticate.
    /// - Throws: `CryptoError.outOfMemory` when no guarded memory is left for the secret.
    public func openSealed(_ sealed: UnsafeRawBufferPointer, aad: UnsafeRawBufferPointer) throws(CryptoError) -> SecureBytes? {
        guard sealed.count >= Self.nonceSize + Self.tagSize, let base = sealed.baseAddress else { return nil }
        let n = sealed.count - Self.nonceSize - Self.tagSize
        var authentic = false
        let out = try SecureBytes(count: n) { o in
            authentic = open(nonce: base, aad: aad,
                             ciphertext: UnsafeRawBufferPointer(start: base + Self.nonceSize, count: n),
                             tag: base + Self.nonceSize + n,
                             plaintext: o.baseAddress!)
        }
        return authentic ? out : nil  // when not, `open` zeroed the output; releasing it zeroes it again
    }

    /// `openSealed` with the AAD as an array.
    public func openSealed(_ sealed: UnsafeRawBufferPointer, aad: [UInt8]) throws(CryptoError) -> SecureBytes? {
        try withBytes(aad) { (a) throws(CryptoError) in try openSealed(sealed, aad: a) }
    }

    /// `openSealed` of an array.
    public func openSealed(_ sealed: [UInt8], aad: UnsafeRawBufferPointer) throws(CryptoError) -> SecureBytes? {
        try withBytes(sealed) { (s) throws(CryptoError) in try openSealed(s, aad: aad) }
    }

    /// `openSealed` of an array.
    public func openSealed(_ sealed: [UInt8], aad: [UInt8]) throws(CryptoError) -> SecureBytes? {
        try withBytes(sealed) { (s) throws(CryptoError) in try openSealed(s, aad: aad) }
    }
}
