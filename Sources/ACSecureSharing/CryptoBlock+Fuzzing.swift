import ACCrypto
import ACSecureServices
import ACSecureSharingCore
import ACSecureFileCore

/// The crypto block parser as the fuzz target FuzzCryptoBlockParse calls it (SPI: the fuzz package
/// is another package).
@_spi(Fuzzing) public enum CryptoBlockParser {
    /// A crypto block's size in bytes.
    public static var size: Int { CryptoBlock.size }

    /// Parses untrusted crypto block bytes as `ACWrappedFile.wrapFile` does. Returns the scope byte
    /// and the key's fingerprint, or the `NSError` the API would throw.
    public static func parse(_ bytes: [UInt8]) -> Result<(scope: UInt8, fingerprint: [UInt8]), any Error> {
        do {
            // Through the same bridge as ACWrappedFile.wrapFile: a refusal is an NSError in ACErrorDomain.
            let block = try ACSharingErrors.bridging { () throws(SecureFileError) -> CryptoBlock in
                let raw = UnsafeMutableRawBufferPointer.allocate(byteCount: bytes.count, alignment: 1)
                defer { raw.deallocate() }
                raw.copyBytes(from: bytes)
                return try CryptoBlock.parse(UnsafeRawBufferPointer(raw))
            }
            return .success((block.scope.rawValue, block.kek.fingerprint))
        } catch {
            return .failure(error)
        }
    }

    /// Encodes a crypto block for `key` (32 bytes), as the provider app hands it out.
    public static func encode(key: [UInt8], group: Bool) throws -> [UInt8] {
        let kek = try KeyEncryptionKey(key: SecureBytes(copying: key), keyClass: .cryptoBlock)
        let data = try CryptoBlock(scope: group ? .group : .allApps, kek: kek).encoded()
        return data.withUnsafeBytes { Array($0) }
    }
}
