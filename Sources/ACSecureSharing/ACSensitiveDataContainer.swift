import Foundation
import Synchronization
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

    private static let processKey = Mutex<AESGCMContext?>(nil)

    private static func withContext<R>(_ body: (AESGCMContext) -> R) -> R {
        processKey.withLock { ctx in
            if ctx == nil {
                // A 32-byte random key cannot be refused by AES-GCM; failure here is an OpenSSL breakdown
                // or no guarded memory left (this NSObject-shaped API cannot fail: see ACSensitiveData).
                let c: AESGCMContext
                do { c = try AESGCMContext(key: SecureBytes(randomCount: AESGCMContext.keySize)) } catch {
                    fatalError("ACSensitiveDataContainer: AES-GCM context setup failed: \(error)")
                }
                ctx = c
            }
            return body(ctx!)
        }
    }

    /// Keeps a sealed copy of `data`'s bytes.
    public init(data: ACSensitiveData) {
        id = SecureRandom.bytes(16)
        length = data.length
        let id = self.id
        sealed = Self.withContext { ctx in
            // Seals straight from the object's guarded storage: no second guarded copy is needed.
            do { return try data.withUnsafeBytes { (b: UnsafeRawBufferPointer) throws(CryptoError) in try ctx.sealWithRandomNonce(b, aad: id) } } catch {
                fatalError("ACSensitiveDataContainer: AES-GCM seal failed: \(error)")
            }
        }
        super.init()
    }

    /// The reference's `+containerWithData:`.
    public static func container(with data: ACSensitiveData) -> ACSensitiveDataContainer {
        ACSensitiveDataContainer(data: data)
    }

    /// A new `ACSensitiveData` with the contents.
    public var data: ACSensitiveData {
        let id = self.id
        let result: Result<SecureBytes?, CryptoError> = Self.withContext { ctx in
            do throws(CryptoError) { return .success(try ctx.openSealed(sealed, aad: id)) } catch { return .failure(error) }
        }
        // The sealed bytes are private to this object and the key never changes: failure is memory corruption
        // (or no guarded memory left: this property cannot fail, see ACSensitiveData).
        let opened: SecureBytes?
        switch result {
        case .success(let o): opened = o
        case .failure(let e): fatalError("ACSensitiveDataContainer.data: \(e)")
        }
        guard let opened else { fatalError("ACSensitiveDataContainer: sealed contents do not authenticate") }
        return ACSensitiveData(adopting: opened)
    }

    public override var description: String { "<ACSensitiveDataContainer: \(length) bytes>" }
}
