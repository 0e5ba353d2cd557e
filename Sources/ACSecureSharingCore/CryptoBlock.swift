import ACCrypto
import ACSecureFileCore
import ACSecureServices

/// The key material a provider app hands to its extension (`ACWrappedAppKey`'s "crypto block").
///
/// **It is a secret key.** Whoever holds it can create wrapped files that the host apps accept, and
/// read wrapped files of its scope. Hand it over only through a private channel (on iOS, a shared
/// keychain item; here, e.g., a 0600 file or a pipe), never log it, and keep it in guarded memory
/// (`SecureBytes`). It does not open the provider's own files or the group's secure files: the key
/// it carries is derived for wrapped files only.
///
/// Layout (version 1, 56 bytes, big-endian):
///
///     0   "ACCB"              4
///     4   version = 1         u8
///     5   scope               u8   0 = every app of the store (nil group), 1 = one encryption group
///     6   reserved, zero      u16
///     8   KEK fingerprint     16   HKDF(KEK, "key fingerprint"), the value stored in file headers
///     24  KEK                 32   the wrapped-file key-encryption key
///
/// The fingerprint doubles as a checksum: a damaged block is refused instead of producing files
/// nobody can read.
package struct CryptoBlock {
    package static let magic: [UInt8] = Array("ACCB".utf8)
    package static let version: UInt8 = 1
    package static let size = 56

    package enum Scope: UInt8 { case allApps = 0, group = 1 }

    package let scope: Scope
    package let kek: KeyEncryptionKey

    package init(scope: Scope, kek: KeyEncryptionKey) {
        self.scope = scope
        self.kek = kek
    }

    /// Encodes into guarded memory.
    /// - Throws: `ENOMEM` + `ACE_LOW_MEMORY_ERROR` when no guarded memory is left.
    package func encoded() throws(SecureFileError) -> SecureBytes {
        var head = Self.magic + [Self.version, scope.rawValue, 0, 0] + kek.fingerprint
        precondition(head.count == 24, "crypto block header layout")
        defer { head.withUnsafeMutableBytes { secureZero($0) } }
        do {
            return try SecureBytes(count: Self.size) { o in
                head.withUnsafeBytes { o.baseAddress!.copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
                kek.key.withUnsafeBytes { k in
                    precondition(k.count == 32, "crypto block key size")
                    (o.baseAddress! + 24).copyMemory(from: k.baseAddress!, byteCount: k.count)
                }
            }
        } catch {
            throw .crypto(error, "crypto block")
        }
    }

    /// Parses untrusted bytes.
    /// - Throws: `SecureFileError` (`invalidArgument`) saying what is wrong; never echoes the bytes.
    package static func parse(_ bytes: UnsafeRawBufferPointer) throws(SecureFileError) -> CryptoBlock {
        guard bytes.count >= 5, Array(bytes[0..<4]) == magic else {
            throw invalid("the crypto block is not an ACSecureSharing crypto block")
        }
        guard bytes[4] == version else {
            throw invalid("unsupported crypto block version \(bytes[4])")
        }
        guard bytes.count == size else {
            throw invalid("the crypto block has \(bytes.count) bytes, expected \(size)")
        }
        guard let scope = Scope(rawValue: bytes[5]), bytes[6] == 0, bytes[7] == 0 else {
            throw invalid("malformed crypto block (scope or reserved bytes)")
        }
        let kek: KeyEncryptionKey
        do {
            let key = try SecureBytes(copying: UnsafeRawBufferPointer(rebasing: bytes[24..<56]))
            kek = try KeyEncryptionKey(key: key, keyClass: .cryptoBlock)
        } catch {
            throw .crypto(error, "crypto block key setup failed")
        }
        let stored = UnsafeRawBufferPointer(rebasing: bytes[8..<24])
        guard kek.fingerprint.withUnsafeBytes({ constantTimeEqual($0, stored) }) else {
            throw invalid("the crypto block is damaged (its key does not match its fingerprint)")
        }
        return CryptoBlock(scope: scope, kek: kek)
    }

    private static func invalid(_ message: String) -> SecureFileError {
        SecureFileError(code: .invalidArgument, message: message)
    }
}
