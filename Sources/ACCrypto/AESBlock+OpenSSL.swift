import CACSecureLibCrypto

/// Raw AES-256 block encryption (ECB, no padding) through OpenSSL's EVP interface: a PRF on
/// 16-byte blocks, used to derive keys. Never used to encrypt data.
///
/// The expanded key schedule lives in OpenSSL's heap (as for `AESGCMContext`), not in guarded memory;
/// `EVP_CIPHER_CTX_free` cleanses it. Not thread-safe (each call writes the OpenSSL context), so not
/// `Sendable`: the owner serialises its use.
public final class AESBlockCipher {
    private let context: OpaquePointer

    /// Fetched once, as `AESGCMContext.cipher` (`EVP_aes_256_ecb()` is fetched again at every init).
    nonisolated(unsafe) private static let cipher: OpaquePointer? = EVP_CIPHER_fetch(nil, "AES-256-ECB", nil)

    /// - Throws: `CryptoError` if the key is not 32 bytes or OpenSSL refuses it.
    public init(key: SecureBytes) throws(CryptoError) {
        guard key.count == 32 else { throw CryptoError.invalidKeySize }
        guard let cipher = Self.cipher else { throw CryptoError.openSSL("EVP_CIPHER_fetch(AES-256-ECB)") }
        guard let ctx = EVP_CIPHER_CTX_new() else { throw CryptoError.openSSL("EVP_CIPHER_CTX_new") }
        let ok = key.withUnsafeBytes { k in
            EVP_EncryptInit_ex(ctx, cipher, nil, k.baseAddress!.assumingMemoryBound(to: UInt8.self), nil) == 1
        }
        guard ok, EVP_CIPHER_CTX_set_padding(ctx, 0) == 1 else {
            EVP_CIPHER_CTX_free(ctx)
            throw CryptoError.openSSL("EVP_EncryptInit_ex(aes-256-ecb)")
        }
        context = ctx
    }

    deinit { EVP_CIPHER_CTX_free(context) }

    /// Encrypts `blocks` (a multiple of 16 bytes) into `output` (same length; may be the same memory).
    public func encryptBlocks(_ blocks: UnsafeRawBufferPointer, into output: UnsafeMutableRawPointer) throws(CryptoError) {
        precondition(blocks.count % 16 == 0 && blocks.count > 0, "whole blocks only")
        var outLen: Int32 = 0
        guard EVP_EncryptUpdate(context, output.assumingMemoryBound(to: UInt8.self), &outLen,
                                blocks.baseAddress!.assumingMemoryBound(to: UInt8.self), Int32(blocks.count)) == 1,
              Int(outLen) == blocks.count
        else { throw CryptoError.openSSL("EVP_EncryptUpdate(aes-256-ecb)") }
    }
}
