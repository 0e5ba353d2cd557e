import CACSecureLibCrypto

/// Released OpenSSL cipher contexts of one algorithm, kept for reuse so that keying a context does
/// not allocate: a fresh `EVP_CIPHER_CTX` costs two heap allocations (the context and its
/// provider's state), and opening a file keys three or four.
///
/// A context given back is first **re-keyed with an all-zero key**: that overwrites its expanded key
/// schedule and, for GCM, resets the hash state derived from the key (OpenSSL's `CRYPTO_gcm128_init`
/// clears it and computes the hash key of the new key). So a pooled context holds no trace of the
/// key it was used with, as when `EVP_CIPHER_CTX_free` had cleansed it (docs/FORMAT.md "Keys in
/// memory"); what stays is its allocation. Re-keying a context with the same cipher reuses the
/// provider's state (the cipher is passed as nil, so OpenSSL does not reset the context).
///
/// Bounded to `capacity` contexts per algorithm (a few KiB); a context given back to a full pool is
/// freed. The pool itself allocates nothing.
final class CipherContextPool: Sendable {
    static let aes256GCM = CipherContextPool("AES-256-GCM")
    static let aes256ECB = CipherContextPool("AES-256-ECB")

    typealias Contexts = InlineArray<32, UInt>
    static let capacity = Contexts.count

    /// The algorithm, fetched from OpenSSL's providers once (given `EVP_aes_256_gcm()`, every init
    /// fetches it again). A fetched cipher is immutable and may be shared between threads.
    nonisolated(unsafe) private let cipher: OpaquePointer?
    private let name: StaticString

    private struct State {
        var count = 0
        /// Addresses of idle contexts (integers: pointers are not Sendable), `[0..<count]`.
        var contexts = Contexts(repeating: 0)
    }

    // A context is owned by the pool while it is in it; the mutex serialises every access.
    private let state = LockedValue<State>(State())

    private init(_ name: StaticString) {
        self.name = name
        self.cipher = EVP_CIPHER_fetch(nil, UnsafeRawPointer(name.utf8Start).assumingMemoryBound(to: CChar.self), nil)
    }

    /// A context of this algorithm keyed with the 32 bytes at `key`, set up for encryption.
    /// - Throws: `CryptoError.openSSL` if OpenSSL cannot make or key one.
    func take(key: UnsafeRawPointer) throws(CryptoError) -> OpaquePointer {
        let k = key.assumingMemoryBound(to: UInt8.self)
        let address: UInt = state.withLock { s in
            guard s.count > 0 else { return 0 }
            s.count -= 1
            return s.contexts[s.count]
        }
        if let idle = OpaquePointer(bitPattern: address) {
            guard EVP_CipherInit_ex(idle, nil, nil, k, nil, 1) == 1 else {
                EVP_CIPHER_CTX_free(idle)
                throw CryptoError.openSSL("EVP_CipherInit_ex(\(name))")
            }
            return idle
        }
        guard let cipher else { throw CryptoError.openSSL("EVP_CIPHER_fetch(\(name))") }
        guard let fresh = EVP_CIPHER_CTX_new() else { throw CryptoError.openSSL("EVP_CIPHER_CTX_new") }
        guard EVP_CipherInit_ex(fresh, cipher, nil, k, nil, 1) == 1 else {
            EVP_CIPHER_CTX_free(fresh)
            throw CryptoError.openSSL("EVP_CipherInit_ex(\(name))")
        }
        return fresh
    }

    /// Takes back a context from `take`: re-keys it with zeros and keeps it, or frees it
    /// (`EVP_CIPHER_CTX_free`, which cleanses it) when the pool is full or the re-key fails.
    func give(_ context: OpaquePointer) {
        let zeroKey = (UInt64(0), UInt64(0), UInt64(0), UInt64(0))
        let wiped = withUnsafeBytes(of: zeroKey) { z in
            EVP_CipherInit_ex(context, nil, nil, z.baseAddress!.assumingMemoryBound(to: UInt8.self), nil, 1) == 1
        }
        let kept = wiped && state.withLock { s in
            guard s.count < Self.capacity else { return false }
            s.contexts[s.count] = UInt(bitPattern: UnsafeRawPointer(context))
            s.count += 1
            return true
        }
        if !kept { EVP_CIPHER_CTX_free(context) }
    }

    /// How many idle contexts the pool holds (tests).
    var idleCount: Int { state.withLock { $0.count } }
}
