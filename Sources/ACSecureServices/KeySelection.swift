import ACCrypto

/// Which key-encryption key protects a file's data key.
public enum KeySelection: Hashable, Sendable, CustomStringConvertible {
    /// The app's own key: HKDF(seed, app ID). Only this app ID can open the file.
    case app
    /// An encryption group's key: HKDF(seed, group ID). Every app that names the group can open it.
    case group(String)

    public var description: String {
        switch self {
        case .app: return "app"
        case .group(let id): return "group \(id)"
        }
    }
}

/// A key-encryption key: wraps and unwraps per-file data keys.
public struct KeyEncryptionKey: Sendable {
    /// Stored in the file header so a reader can tell which kind of key it needs.
    public enum KeyClass: UInt8, Sendable {
        case app = 1
        case group = 2
        /// A key handed over in a crypto block (extension wrapped files).
        case cryptoBlock = 3
    }

    public let key: SecureBytes
    public let keyClass: KeyClass
    /// 16 bytes that identify the key without revealing it: HKDF(key, "key fingerprint").
    public let fingerprint: [UInt8]

    public init(key: SecureBytes, keyClass: KeyClass) throws(CryptoError) {
        self.key = key
        self.keyClass = keyClass
        let fp = try HKDF.sha256(key: key, salt: "ACSF v1", info: "key fingerprint", outputCount: 16)
        self.fingerprint = fp.withUnsafeBytes { Array($0) }
    }
}
