/// Where the engine gets key-encryption keys and learns that keys went away.
///
/// `SecureServices` is the usual provider. `FixedKeyProvider` serves one key handed over outside of
/// secure services (an extension's crypto block).
public protocol KeyProvider: AnyObject, Sendable {
    /// Non-zero while keys are available; changes whenever keys come back after a lock.
    var keyGeneration: UInt64 { get }
    func keyEncryptionKey(for selection: KeySelection) throws(SecureServicesError) -> KeyEncryptionKey
    /// Called on every operation (for inactivity auto-lock).
    func noteActivity()
    /// Called before keys are dropped, so caches can be flushed and wiped.
    func addLockHandler(_ handler: @escaping @Sendable () -> Void)
}

extension SecureServices: KeyProvider {}

/// Serves exactly one key-encryption key, whatever the selection; never locks.
public final class FixedKeyProvider: KeyProvider {
    public let kek: KeyEncryptionKey

    public init(kek: KeyEncryptionKey) { self.kek = kek }

    public var keyGeneration: UInt64 { 1 }
    public func keyEncryptionKey(for selection: KeySelection) throws(SecureServicesError) -> KeyEncryptionKey { kek }
    public func noteActivity() {}
    public func addLockHandler(_ handler: @escaping @Sendable () -> Void) {}
}

/// Serves one key derived by secure services, available exactly while the services are.
final class ServicesDerivedKeyProvider: KeyProvider, @unchecked Sendable {
    // Weak: the services keep this provider alive (no cycle); set once, never mutated.
    private weak var services: SecureServices?
    private let derive: @Sendable (SecureServices) throws(SecureServicesError) -> KeyEncryptionKey

    init(services: SecureServices, derive: @escaping @Sendable (SecureServices) throws(SecureServicesError) -> KeyEncryptionKey) {
        self.services = services
        self.derive = derive
    }

    var keyGeneration: UInt64 { services?.keyGeneration ?? 0 }

    func keyEncryptionKey(for selection: KeySelection) throws(SecureServicesError) -> KeyEncryptionKey {
        guard let services else { throw SecureServicesError(.noKeys, "secure services are gone") }
        return try derive(services)
    }

    func noteActivity() { services?.noteActivity() }
    func addLockHandler(_ handler: @escaping @Sendable () -> Void) { services?.addLockHandler(handler) }
}
