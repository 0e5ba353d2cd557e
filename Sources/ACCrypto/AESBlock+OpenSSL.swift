import CACSecureLibCrypto

/// Raw AES-256 block encryption (ECB, no padding) through OpenSSL's EVP interface: a PRF on
/// 16-byte blocks, used to derive keys. Never used to encrypt data.
///
/// The expanded key schedule lives in OpenSSL's heap (as for `AESGCMContext`), not in guarded memory;
/// the context comes from `CipherContextPool`, which re-keys it with zeros when it is given back.
/// Not thread-safe (each call writes the OpenSSL context), so not `Sendable`: the owner serialises
/// its use.
public final class AESBlockCipher {
    private let context: OpaquePointer

    /// - Throws: `CryptoError` if the key is not 32 bytes or OpenSSL refuses it.
    public init(key: SecureBytes) throws(CryptoError) {
        guard key.count == 32 else { throw CryptoError.invalidKeySize }
        let ctx = try key.withUnsafeBytes { (k: UnsafeRawBufferPointer) throws(CryptoError) in
            try CipherContextPool.aes256ECB.take(key: k.baseAddress!)
        }
        guard EVP_CIPHER_CTX_set_padding(ctx, 0) == 1 else {
            CipherContextPool.aes256ECB.give(ctx)
            throw CryptoError.openSSL("EVP_CIPHER_CTX_set_padding(aes-256-ecb)")
        }
        context = ctx
    }

    deinit { CipherContextPool.aes256ECB.give(context) }

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
