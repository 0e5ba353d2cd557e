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
        // A 32-byte random key cannot be refused by AES-GCM; failure here is an OpenSSL breakdown
        // or no guarded memory left (this NSObject-shaped API cannot fail: see ACSensitiveData).
        let c: AESGCMContext
        do { c = try AESGCMContext(key: SecureBytes(randomCount: AESGCMContext.keySize)) } catch {
            fatalError("ACSensitiveDataContainer: AES-GCM context setup failed: \(error)")
        }
        ctx = c
        return c
    }

    private static func seal(_ secret: SecureBytes, id: [UInt8]) -> [UInt8] {
        processKey.withLock { ctx in
            do { return try secret.withUnsafeBytes { (s: UnsafeRawBufferPointer) throws(CryptoError) in try context(&ctx).sealWithRandomNonce(s, aad: id) } } catch {
                fatalError("ACSensitiveDataContainer: AES-GCM seal failed: \(error)")
            }
        }
    }

    private static func open(_ sealed: [UInt8], id: [UInt8]) -> Result<SecureBytes?, CryptoError> {
        processKey.withLock { ctx in
            do throws(CryptoError) { return .success(try context(&ctx).openSealed(sealed, aad: id)) } catch { return .failure(error) }
        }
    }

    /// Keeps a sealed copy of `data`'s bytes.
    public init(data: ACSensitiveData) {
        id = SecureRandom.bytes(16)
        length = data.length
        // A guarded copy to hand to the lock (key material is Sendable; the object's storage is not).
        let secret: SecureBytes
        do { secret = try data.secureBytes() } catch { fatalError("ACSensitiveDataContainer: \(error)") }
        sealed = Self.seal(secret, id: id)
        super.init()
    }

    /// The reference's `+containerWithData:`.
    public static func container(with data: ACSensitiveData) -> ACSensitiveDataContainer {
        ACSensitiveDataContainer(data: data)
    }

    /// A new `ACSensitiveData` with the contents.
    public var data: ACSensitiveData {
        // The sealed bytes are private to this object and the key never changes: failure is memory corruption
        // (or no guarded memory left: this property cannot fail, see ACSensitiveData).
        let opened: SecureBytes?
        switch Self.open(sealed, id: id) {
        case .success(let o): opened = o
        case .failure(let e): fatalError("ACSensitiveDataContainer.data: \(e)")
        }
        guard let opened else { fatalError("ACSensitiveDataContainer: sealed contents do not authenticate") }
        return ACSensitiveData(adopting: opened)
    }

    public override var description: String { "<ACSensitiveDataContainer: \(length) bytes>" }
}
