import CACSecureLibCrypto

/// HKDF-SHA-256 (RFC 5869) through OpenSSL's EVP_KDF.
public enum HKDF {
    /// Derives `outputCount` bytes from `key` into guarded memory.
    public static func sha256(key: SecureBytes, salt: [UInt8], info: [UInt8], outputCount: Int = 32) throws(CryptoError) -> SecureBytes {
        guard outputCount > 0, outputCount <= 255 * 32 else { throw CryptoError.invalidArgument("HKDF output length") }
        guard let kdf = EVP_KDF_fetch(nil, "HKDF", nil) else { throw CryptoError.openSSL("EVP_KDF_fetch(HKDF)") }
        defer { EVP_KDF_free(kdf) }
        guard let ctx = EVP_KDF_CTX_new(kdf) else { throw CryptoError.openSSL("EVP_KDF_CTX_new") }
        defer { EVP_KDF_CTX_free(ctx) }

        var salt = salt, info = info
        if salt.isEmpty { salt = [0] ; salt.removeAll(keepingCapacity: true) }
        return try SecureBytes(count: outputCount) { (o: UnsafeMutableRawBufferPointer) throws(CryptoError) in
            let ok: Bool = key.withUnsafeBytes { k in
                salt.withUnsafeMutableBytes { s in
                    info.withUnsafeMutableBytes { i in
                        "SHA256".withCString { digest in
                            var params: [OSSL_PARAM] = [
                                OSSL_PARAM_construct_utf8_string(paramName("digest"), UnsafeMutablePointer(mutating: digest), 0),
                                OSSL_PARAM_construct_octet_string(paramName("key"), UnsafeMutableRawPointer(mutating: k.baseAddress!), k.count),
                            ]
                            if s.count > 0 { params.append(OSSL_PARAM_construct_octet_string(paramName("salt"), s.baseAddress!, s.count)) }
                            if i.count > 0 { params.append(OSSL_PARAM_construct_octet_string(paramName("info"), i.baseAddress!, i.count)) }
                            params.append(OSSL_PARAM_construct_end())
                            return EVP_KDF_derive(ctx, o.baseAddress!.assumingMemoryBound(to: UInt8.self), o.count, &params) == 1
                        }
                    }
                }
            }
            guard ok else { throw CryptoError.openSSL("EVP_KDF_derive(HKDF)") }
        }
    }

    /// An OSSL_PARAM key (`OSSL_KDF_PARAM_*`). OSSL_PARAM keeps the name pointer until EVP_KDF_derive reads
    /// it, so it must outlive the array: a StaticString's bytes are static. (Passing the imported
    /// `OSSL_KDF_PARAM_*` String constants makes a temporary C string that dies before the derive call.)
    private static func paramName(_ name: StaticString) -> UnsafePointer<CChar> {
        UnsafeRawPointer(name.utf8Start).assumingMemoryBound(to: CChar.self)
    }

    public static func sha256(key: SecureBytes, salt: String, info: String, outputCount: Int = 32) throws(CryptoError) -> SecureBytes {
        try sha256(key: key, salt: Array(salt.utf8), info: Array(info.utf8), outputCount: outputCount)
    }
}
