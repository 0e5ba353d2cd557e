import Foundation
import ACCrypto

/// Holds sensitive data for a long time: the reference's `ACSensitiveDataContainer`.
///
/// The container does not keep an `ACSensitiveData` alive (so the lifetime check stays meaningful for
/// short-lived objects): it keeps the bytes sealed with AES-256-GCM under a random per-process key
/// that lives in guarded memory. `data` opens them into a new `ACSensitiveData` each time; release it
/// when done.
public final class ACSensitiveDataContainer: NSObject, @unchecked Sendable {
    /// nonce ‖ ciphertext ‖ tag; AAD = the container's random ID.
    private let sealed: [UInt8]
    private let id: [UInt8]
    /// The length of the contents.
    public let length: Int

    /// The process key's context. `AESGCMContext` is not thread-safe (nor Sendable): it is created,
    /// used and kept only inside this lock.
    private static let processKey = LockedValue<AESGCMContext?>(nil)

    private static func context(_ ctx: inout AESGCMContext?) -> AESGCMContext {
        if let ctx { return ctx }
        // A 32-byte random key cannot be refused by AES-GCM; failure here is an OpenSSL breakdown.
        guard let c = try? AESGCMContext(key: SecureBytes(randomCount: AESGCMContext.keySize)) else {
            fatalError("AES-GCM context setup failed")
        }
        ctx = c
        return c
    }

    private static func seal(_ secret: SecureBytes, id: [UInt8]) -> [UInt8] {
        processKey.withLock { ctx in
            guard let s = try? context(&ctx).sealWithRandomNonce(secret, aad: id) else { fatalError("AES-GCM seal failed") }
            return s
        }
    }

    private static func open(_ sealed: [UInt8], id: [UInt8]) -> SecureBytes? {
        processKey.withLock { ctx in
            let c = context(&ctx)
            return sealed.withUnsafeBytes { c.openSealed($0, aad: id) }
        }
    }

    /// Keeps a sealed copy of `data`'s bytes.
    public init(data: ACSensitiveData) {
        id = SecureRandom.bytes(16)
        length = data.length
        let secret = data.secureBytes()
        sealed = Self.seal(secret, id: id)
        super.init()
    }

    /// The reference's `+containerWithData:`.
    public static func container(with data: ACSensitiveData) -> ACSensitiveDataContainer {
        ACSensitiveDataContainer(data: data)
    }

    /// A new `ACSensitiveData` with the contents.
    public var data: ACSensitiveData {
        let opened = Self.open(sealed, id: id)
        // The sealed bytes are private to this object and the key never changes: failure is memory corruption.
        guard let opened else { fatalError("ACSensitiveDataContainer: sealed contents do not authenticate") }
        return ACSensitiveData(adopting: opened)
    }

    public override var description: String { "<ACSensitiveDataContainer: \(length) bytes>" }
}
