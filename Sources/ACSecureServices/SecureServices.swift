#if canImport(Glibc)
import Glibc
#endif
import Dispatch
import Synchronization
import ACCrypto
import ACSystemCalls

/// Whether secure file I/O can be used now (the reference's `ACSecureServicesAvailability`).
public enum SecureServicesAvailability: Int32, Sendable {
    case unavailable = 0
    case available = 1
}

/// The secure services of one app on one store ("device"): the seed, its passcode, lock state and keys.
///
/// The seed is a per-store random secret. Every key is derived from it with HKDF-SHA-256, so nothing
/// but the seed is stored. While services are unavailable no seed or key is held in memory and every
/// secure operation fails with `.noKeys`.
public final class SecureServices: Sendable {
    public let appID: String
    /// The store directory, byte for byte.
    public let storePath: BytePath
    /// The store directory as text (a name that is not UTF-8 printed as `BytePath.description` does).
    public var storeDirectory: String { storePath.description }
    /// The HKDF info of the app's key-encryption key, made once: every open looks the key up by it.
    private let appKEKInfo: [UInt8]
    /// Whether these services refuse a seed that is not sealed under a passcode (`.noKeys`): asked
    /// for with `requireProtectedStore`, or implied by a passcode given when starting or set with
    /// `setPasscode`. Checked at start and at every unlock, so a seed swapped on disk while locked
    /// is refused too.
    public var requiresProtectedStore: Bool { protectedStoreRequested || protectedStoreImplied.load(ordering: .acquiring) }
    /// `requireProtectedStore: true`: the passcode cannot be removed.
    private let protectedStoreRequested: Bool
    /// A passcode is configured; removing it with `setPasscode(old:new: nil)` ends the requirement.
    private let protectedStoreImplied: Atomic<Bool>
    /// The file I/O policy is always "required", as on AppConnect.
    public var secureFileIOPolicyIsRequired: Bool { true }

    private struct State {
        var seed: SecureBytes?
        var generation: UInt64 = 1
        var observers: [UInt64: @Sendable (SecureServicesAvailability) -> Void] = [:]
        var continuations: [UInt64: AsyncStream<SecureServicesAvailability>.Continuation] = [:]
        var nextObserverID: UInt64 = 1
        var autoLockSeconds: Double?
        private(set) var autoLockTimer: DispatchSourceTimer?
        /// Timers armed and not yet cancelled: 0 or 1 unless one leaked (the tests check it).
        private(set) var armedAutoLockTimers = 0

        mutating func armAutoLock(_ timer: DispatchSourceTimer) {
            autoLockTimer = timer
            armedAutoLockTimers += 1
        }

        mutating func disarmAutoLock() {
            guard let timer = autoLockTimer else { return }
            timer.cancel()
            autoLockTimer = nil
            armedAutoLockTimers -= 1
        }
        /// Key-encryption keys derived since the last unlock, by HKDF info: each open needs its
        /// file's KEK, and deriving it (two HKDFs) is most of what opening costs in crypto. Emptied
        /// with the seed at lock(), so no KEK outlives the unlocked period (docs/FORMAT.md).
        var keks: [[UInt8]: KeyEncryptionKey] = [:]
    }

    private let state = LockedValue(State())
    private let store: SeedStore
    private let argonCost: Argon2id.Cost
    /// Non-zero while keys are available; changes at every lock and unlock. The engine compares it
    /// on every call to notice a lock cheaply and to reload keys after an unlock.
    private let availableGeneration = Atomic<UInt64>(0)
    /// Set by every operation (`noteActivity`), taken back by the auto-lock timer, which then
    /// moves `lastActivity` to its own tick: the engine's calls pay a load (a clock read was 5 % of
    /// a 100-byte write-back append), the timer reads the clock.
    private let active = Atomic<Bool>(false)
    /// When the auto-lock timer last saw activity (its own clock, so at most one period late).
    private let lastActivity = Atomic<UInt64>(0)
    /// Run (in registration order) before the seed is dropped: the engine flushes and wipes its caches.
    private let lockHandlers = LockedValue<[@Sendable () -> Void]>([])
    private let wrappedProviders = LockedValue<[String: any KeyProvider]>([:])

    // MARK: starting

    /// Opens (or creates) the store and unlocks it when it has no passcode or `passcode` is right.
    ///
    /// This is the explicit start: it creates a missing store unless `createStoreIfMissing` is false.
    /// Nothing else creates one (`currentOrStartFromEnvironment` only with `ACSECURE_CREATE_STORE=1`).
    ///
    /// - Parameters:
    ///   - appID: identifies the app; its files are keyed by it. Must not be empty.
    ///   - storeDirectory: the store; nil means `$ACSECURE_HOME`, else `$XDG_DATA_HOME/acsecure`,
    ///     else `~/.local/share/acsecure`.
    ///   - passcode: used when creating a new store (nil: no passcode) and to unlock an existing one.
    ///     A non-empty passcode implies `requireProtectedStore`.
    ///   - requireProtectedStore: refuse a store whose seed is not sealed under a passcode, at start
    ///     and at every later unlock: a planted unprotected seed must not replace a protected one.
    ///   - createStoreIfMissing: create a new store when there is none (default: this is an explicit
    ///     start); false fails with `.noKeys` instead.
    ///   - argonCost: Argon2id cost for a new or changed passcode (default `.moderate`). Existing seeds
    ///     open with the cost stored in them. Tests pass `.minimum` to stay fast.
    /// - Throws: `.invalidArgument` for an empty app ID or a protected store required without a
    ///   passcode to create it; `.noKeys` for a missing store not to be created, or an unprotected
    ///   seed when a protected store is required; `.corruptStore`/`.storeIO` for a bad store (a store
    ///   directory or seed that others can access is `.storeIO` with `EACCES`); `.wrongPasscode`
    ///   when a passcode was given and is wrong. A store that needs a passcode and got none starts
    ///   unavailable, without error.
    public convenience init(appID: String, storeDirectory: String? = nil, passcode: SecureBytes? = nil,
                            requireProtectedStore: Bool = false, createStoreIfMissing: Bool = true,
                            argonCost: Argon2id.Cost = .moderate) throws(SecureServicesError) {
        try self.init(appID: appID, storePath: storeDirectory.map { BytePath($0) }, passcode: passcode,
                      requireProtectedStore: requireProtectedStore, createStoreIfMissing: createStoreIfMissing, argonCost: argonCost)
    }

    /// `init(appID:storeDirectory:...)` for a store directory of any bytes (a name that is not UTF-8 included).
    public convenience init(appID: String, storePath: BytePath?, passcode: SecureBytes? = nil,
                            requireProtectedStore: Bool = false, createStoreIfMissing: Bool = true,
                            argonCost: Argon2id.Cost = .moderate) throws(SecureServicesError) {
        try self.init(appID: appID, storeDirectory: storePath, passcode: passcode, requireProtectedStore: requireProtectedStore,
                      creation: createStoreIfMissing ? .ifMissing : .never, argonCost: argonCost)
    }

    /// Creates a new store and starts services on it (what `acsecure init` does). Unlike `init`, it
    /// never opens an existing store: a store that exists, including one another process published
    /// while this one was making its seed, is `.storeIO` with `EEXIST`, and nothing is changed.
    public static func createStore(appID: String, storeDirectory: String? = nil, passcode: SecureBytes? = nil,
                                   argonCost: Argon2id.Cost = .moderate) throws(SecureServicesError) -> SecureServices {
        try createStore(appID: appID, storePath: storeDirectory.map { BytePath($0) }, passcode: passcode, argonCost: argonCost)
    }

    public static func createStore(appID: String, storePath: BytePath?, passcode: SecureBytes? = nil,
                                   argonCost: Argon2id.Cost = .moderate) throws(SecureServicesError) -> SecureServices {
        try SecureServices(appID: appID, storeDirectory: storePath, passcode: passcode, requireProtectedStore: false,
                           creation: .required, argonCost: argonCost)
    }

    private enum Creation { case ifMissing, never, required }

    private init(appID: String, storeDirectory: BytePath?, passcode: SecureBytes?, requireProtectedStore: Bool,
                 creation: Creation, argonCost: Argon2id.Cost) throws(SecureServicesError) {
        guard !appID.isEmpty, !appID.utf8.contains(0) else {
            throw SecureServicesError(.invalidArgument, "the app ID must be a non-empty string")
        }
        let hasPasscode = (passcode?.count ?? 0) > 0
        self.appID = appID
        self.appKEKInfo = lengthPrefixed("app-kek", appID)
        self.storePath = storeDirectory ?? Self.defaultStorePath()
        self.store = SeedStore(directory: self.storePath)
        self.argonCost = argonCost
        self.protectedStoreRequested = requireProtectedStore
        self.protectedStoreImplied = Atomic(hasPasscode)
        let exists = try store.exists()
        if exists && creation == .required { throw storeAlreadyExists(raced: false) }
        if !exists {
            guard creation != .never else {
                throw SecureServicesError(.noKeys, "no secure services store at \(self.storeDirectory) (no seed file); create one with "
                                          + "`acsecure init`, ACSecureServicesStart, or ACSECURE_CREATE_STORE=1")
            }
            guard hasPasscode || !requireProtectedStore else {
                throw SecureServicesError(.invalidArgument, "\(self.storeDirectory): a protected store is required, but no passcode was given to create one")
            }
            let seed: SecureBytes
            do { seed = try SecureBytes(randomCount: SeedStore.seedSize) } catch {
                throw .crypto(error, "\(self.storeDirectory): cannot make a seed")
            }
            // Published without replacing: when another process created the store meanwhile, its
            // seed wins and is loaded below, so every starter ends up with the same keys.
            if try store.save(seed: seed, passcode: passcode, cost: argonCost, replacing: false) {
                becomeAvailable(seed: seed)
                return
            }
            if creation == .required { throw storeAlreadyExists(raced: true) }
        }
        let sealed = try store.load()
        let required = requireProtectedStore || hasPasscode
        if sealed.protection == .none && required { throw store.unprotectedSeedRefused() }
        if sealed.protection == .none || passcode != nil {
            becomeAvailable(seed: try store.openSeed(passcode: passcode, requireProtected: required))
        }
    }

    deinit {
        state.withLock { $0.disarmAutoLock() }
    }

    private func storeAlreadyExists(raced: Bool) -> SecureServicesError {
        SecureServicesError(.storeIO, "a store already exists at \(storeDirectory)" + (raced ? " (another process created it meanwhile)" : ""),
                            errno: EEXIST)
    }

    /// Whether a store (its seed file) exists in `storeDirectory`. Only a missing seed is `false`: a
    /// seed that cannot be examined throws `.storeIO`, since it is not a missing store.
    public static func storeExists(in storeDirectory: String) throws(SecureServicesError) -> Bool {
        try storeExists(in: BytePath(storeDirectory))
    }

    public static func storeExists(in storePath: BytePath) throws(SecureServicesError) -> Bool {
        try SeedStore(directory: storePath).exists()
    }

    /// The store directory when none is named, byte for byte from the environment.
    public static func defaultStorePath() -> BytePath {
        func variable(_ name: String) -> BytePath? {
            guard let v = getenv(name), v[0] != 0 else { return nil }
            return BytePath(platformString: v)
        }
        if let home = variable("ACSECURE_HOME") { return home }
        if let xdg = variable("XDG_DATA_HOME") { return xdg.appending("/acsecure".utf8) }
        return (variable("HOME") ?? "/tmp").appending("/.local/share/acsecure".utf8)
    }

    /// `defaultStorePath()` as text.
    public static func defaultStoreDirectory() -> String { defaultStorePath().description }

    // MARK: the process-wide instance

    private static let currentInstance = LockedValue<SecureServices?>(nil)

    /// The services the engine uses when no other are named.
    public static var current: SecureServices? {
        get { currentInstance.withLock { $0 } }
        set { currentInstance.withLock { $0 = newValue } }
    }

    /// The current services, or ones started from the environment when it names an app:
    /// - `ACSECURE_APP_ID`: the app ID (required: none is invented);
    /// - `ACSECURE_HOME`: the store directory (default: see `defaultStoreDirectory()`);
    /// - `ACSECURE_PASSCODE`: unlocks a protected store; when set (non-empty), an unprotected seed is
    ///   refused (meant for tests and CI, not production);
    /// - `ACSECURE_REQUIRE_PROTECTED_STORE=1`: refuse an unprotected seed even without a passcode;
    /// - `ACSECURE_CREATE_STORE=1`: create the store if it is missing (otherwise a missing store fails).
    ///
    /// - Throws: `.noKeys` with a message saying how to start services when none are set and the
    ///   environment names no app ID, or when the store is missing and is not to be created; the
    ///   errors of `init`.
    public static func currentOrStartFromEnvironment() throws(SecureServicesError) -> SecureServices {
        try currentInstance.withLock { (cur: inout SecureServices?) throws(SecureServicesError) -> SecureServices in
            if let cur { return cur }
            guard let appID = environment("ACSECURE_APP_ID"), !appID.isEmpty else {
                throw SecureServicesError(.noKeys, "secure services are not started: set SecureServices.current (Swift) or call "
                                          + "ACSecureServicesStart (C) with your app ID, or set ACSECURE_APP_ID (and ACSECURE_HOME; "
                                          + "ACSECURE_CREATE_STORE=1 to create a new store) to start them from the environment")
            }
            var pass: SecureBytes?
            if let p = environment("ACSECURE_PASSCODE"), !p.isEmpty {
                do throws(CryptoError) { pass = try SecureBytes(copying: Array(p.utf8)) } catch { throw .crypto(error, "ACSECURE_PASSCODE") }
            }
            let s = try SecureServices(appID: appID, passcode: pass,
                                       requireProtectedStore: environmentFlag("ACSECURE_REQUIRE_PROTECTED_STORE"),
                                       createStoreIfMissing: environmentFlag("ACSECURE_CREATE_STORE"))
            cur = s
            return s
        }
    }

    /// Whether the environment variable `name` is set to `1`.
    public static func environmentFlag(_ name: String) -> Bool { environment(name) == "1" }

    // MARK: availability

    public var availability: SecureServicesAvailability {
        availableGeneration.load(ordering: .acquiring) != 0 ? .available : .unavailable
    }

    /// Non-zero while available; different after every lock/unlock cycle.
    public var keyGeneration: UInt64 { availableGeneration.load(ordering: .acquiring) }

    public var isPasscodeSet: Bool {
        (try? store.load().protection == .passcode) ?? false
    }

    /// Unlocks with the passcode (nil when the store has none).
    /// - Throws: `.wrongPasscode`, `.noKeys` if the store was retired, `.corruptStore`.
    public func unlock(passcode: SecureBytes?) throws(SecureServicesError) {
        if availability == .available { return }
        let seed = try store.openSeed(passcode: passcode, requireProtected: requiresProtectedStore)
        becomeAvailable(seed: seed)
    }

    /// Makes services unavailable: caches are flushed and wiped, then the seed is dropped.
    public func lock() {
        guard availability == .available else { return }
        // Unavailable first, so no operation can derive keys again; then the engine flushes dirty
        // chunks with the keys it already holds and wipes them; then the seed goes.
        availableGeneration.store(0, ordering: .releasing)
        for handler in lockHandlers.withLock({ $0 }) { handler() }
        let (observers, continuations): ([@Sendable (SecureServicesAvailability) -> Void], [AsyncStream<SecureServicesAvailability>.Continuation]) = state.withLock { s in
            // A concurrent lock() got here first and has already notified: do not notify twice.
            guard s.seed != nil else { return ([], []) }
            // The only reference (`derive` never takes the seed out of this lock): dropping it
            // releases the seed's guarded memory now, zeroed.
            s.seed = nil
            s.keks.removeAll()
            s.generation &+= 1
            s.disarmAutoLock()
            return (Array(s.observers.values), Array(s.continuations.values))
        }
        notify(.unavailable, observers, continuations)
    }

    /// Changes the passcode (nil or empty removes it). Only the seed is re-sealed (at `argonCost`); no
    /// file is re-encrypted. Setting a passcode makes these services require a protected store from
    /// now on; removing it ends that requirement unless it was asked for with `requireProtectedStore`.
    /// - Throws: `.wrongPasscode` if `old` does not open the store; `.noKeys` for an unprotected seed
    ///   while a protected store is required; `.invalidArgument` when removing the passcode of
    ///   services started with `requireProtectedStore: true`.
    public func setPasscode(old: SecureBytes?, new: SecureBytes?) throws(SecureServicesError) {
        let removing = (new?.count ?? 0) == 0
        if removing && protectedStoreRequested {
            throw SecureServicesError(.invalidArgument, "\(storeDirectory): these services require a protected store: the passcode cannot be removed")
        }
        let seed = try store.openSeed(passcode: old, requireProtected: requiresProtectedStore)
        try store.save(seed: seed, passcode: new, cost: argonCost)
        protectedStoreImplied.store(!removing, ordering: .releasing)
    }

    /// Destroys the seed and the store: every secure file of this store becomes unreadable for ever.
    /// The seed and any temporary seed file are overwritten with zeros, synced and removed.
    public func retire() throws(SecureServicesError) {
        lock()
        try store.destroy()
    }

    /// Locks automatically after `seconds` without secure file activity (nil: never).
    public func setAutoLock(seconds: Double?) {
        state.withLock { s in
            s.autoLockSeconds = seconds
            s.disarmAutoLock()
            if s.seed != nil, let seconds { s.armAutoLock(makeAutoLockTimer(seconds)) }
        }
        noteActivity()
    }

    /// Auto-lock timers armed and not cancelled (for tests: more than one means a timer leaked).
    var armedAutoLockTimers: Int { state.withLock { $0.armedAutoLockTimers } }

    /// Called by the engine on each operation, so the auto-lock measures inactivity. Stores only
    /// when the timer has taken the last note back: a busy file does not write a shared line per call.
    @inline(__always) public func noteActivity() {
        if !active.load(ordering: .relaxed) { active.store(true, ordering: .relaxed) }
    }

    // MARK: observers

    /// Calls `handler` on every availability change until the token is removed.
    @discardableResult
    public func addObserver(_ handler: @escaping @Sendable (SecureServicesAvailability) -> Void) -> UInt64 {
        state.withLock { s in
            let id = s.nextObserverID
            s.nextObserverID += 1
            s.observers[id] = handler
            return id
        }
    }

    public func removeObserver(_ token: UInt64) {
        _ = state.withLock { $0.observers.removeValue(forKey: token) }
    }

    /// Availability changes as an async sequence (starting with the current value).
    public var availabilityUpdates: AsyncStream<SecureServicesAvailability> {
        AsyncStream { continuation in
            let id: UInt64 = state.withLock { s in
                let id = s.nextObserverID
                s.nextObserverID += 1
                s.continuations[id] = continuation
                return id
            }
            continuation.yield(availability)
            continuation.onTermination = { [weak self] _ in
                _ = self?.state.withLock { $0.continuations.removeValue(forKey: id) }
            }
        }
    }

    /// The engine registers here to flush dirty chunks and wipe plaintext before keys go away.
    public func addLockHandler(_ handler: @escaping @Sendable () -> Void) {
        lockHandlers.withLock { $0.append(handler) }
    }

    // MARK: keys

    /// The key-encryption key for app files or for an encryption group's files.
    /// - Throws: `.noKeys` while unavailable, `.invalidArgument` for an empty group ID.
    public func keyEncryptionKey(for selection: KeySelection) throws(SecureServicesError) -> KeyEncryptionKey {
        switch selection {
        case .app:
            return try makeKEK(info: appKEKInfo, keyClass: .app)
        case .group(let id):
            guard !id.isEmpty else { throw SecureServicesError(.invalidArgument, "the encryption group ID must not be empty") }
            return try makeKEK(info: lengthPrefixed("group-kek", id), keyClass: .group)
        }
    }

    /// The key-encryption key of extension wrapped files (the key a crypto block carries): one per
    /// encryption group, or one for every app of this store when `groupID` is nil. It is distinct from
    /// the app and group file keys, so whoever holds a crypto block can wrap and unwrap wrapped files
    /// but cannot open the provider's own files or the group's files.
    /// - Throws: `.noKeys` while unavailable, `.invalidArgument` for an empty group ID.
    public func wrappedFileKeyEncryptionKey(groupID: String?) throws(SecureServicesError) -> KeyEncryptionKey {
        guard let groupID else { return try makeKEK(info: lengthPrefixed("wrapped-file-kek-all", ""), keyClass: .cryptoBlock) }
        guard !groupID.isEmpty else { throw SecureServicesError(.invalidArgument, "the shared group ID must not be empty (pass nil for every app)") }
        return try makeKEK(info: lengthPrefixed("wrapped-file-kek-group", groupID), keyClass: .cryptoBlock)
    }

    /// A key provider that serves `wrappedFileKeyEncryptionKey(groupID:)` and follows these services'
    /// lock state: handles opened with it fail with `.noKeys` while services are locked, like any
    /// other secure handle. One instance per group is kept, so the engine registers one lock handler.
    public func wrappedFileKeyProvider(groupID: String?) -> any KeyProvider {
        wrappedProviders.withLock { cache in
            if let p = cache[groupID ?? ""] { return p }
            let p = ServicesDerivedKeyProvider(services: self) { s throws(SecureServicesError) in
                try s.wrappedFileKeyEncryptionKey(groupID: groupID)
            }
            cache[groupID ?? ""] = p
            return p
        }
    }

    /// A 32-byte key unique to this app, this store and `identifier` (`derivedAppKeyWithIdentifier:`).
    public func derivedAppKey(identifier: String) throws(SecureServicesError) -> SecureBytes {
        guard !identifier.isEmpty else { throw SecureServicesError(.invalidArgument, "the identifier must not be empty") }
        return try derive(info: lengthPrefixed("derived-app", appID) + lengthPrefixed("id", identifier)).0
    }

    /// A 32-byte key shared by every app of this store that uses `identifier` (`derivedSharedKeyWithIdentifier:`).
    public func derivedSharedKey(identifier: String) throws(SecureServicesError) -> SecureBytes {
        guard !identifier.isEmpty else { throw SecureServicesError(.invalidArgument, "the identifier must not be empty") }
        return try derive(info: lengthPrefixed("derived-shared", identifier)).0
    }

    // MARK: private

    private func makeKEK(info: [UInt8], keyClass: KeyEncryptionKey.KeyClass) throws(SecureServicesError) -> KeyEncryptionKey {
        if availability == .available, let kek = state.withLock({ $0.seed == nil ? nil : $0.keks[info] }) {
            noteActivity()
            return kek
        }
        let (key, generation) = try derive(info: info)
        let kek: KeyEncryptionKey
        do { kek = try KeyEncryptionKey(key: key, keyClass: keyClass) } catch {
            throw .crypto(error, "key fingerprint")
        }
        // Cached only if the seed it comes from is still installed (no lock() in between).
        state.withLock { s in
            if s.seed != nil, s.generation == generation { s.keks[info] = kek }
        }
        return kek
    }

    /// HKDF of the seed, and the generation of the seed it came from.
    private func derive(info: [UInt8]) throws(SecureServicesError) -> (SecureBytes, UInt64) {
        guard availability == .available else { throw .noKeys() }
        // Under the state lock, from the seed installed now: the seed never leaves this lock, so
        // lock() releases (and zeroes) it at once, and a derivation racing lock() either ran before
        // it or finds no seed.
        let derived: Result<(SecureBytes, UInt64), SecureServicesError> = state.withLock { s in
            guard let seed = s.seed else { return .failure(.noKeys()) }
            do throws(CryptoError) { return .success((try HKDF.sha256(key: seed, salt: Array("ACSF v1".utf8), info: info), s.generation)) } catch {
                return .failure(.crypto(error, "key derivation failed"))
            }
        }
        noteActivity()
        return try derived.get()
    }

    private func becomeAvailable(seed: SecureBytes) {
        let (observers, continuations): ([@Sendable (SecureServicesAvailability) -> Void], [AsyncStream<SecureServicesAvailability>.Continuation]) = state.withLock { s in
            // A concurrent unlock() won: keep its seed, generation and auto-lock timer (replacing the
            // timer here would leak the old one, still armed), and do not notify twice.
            guard s.seed == nil else { return ([], []) }
            s.seed = seed
            s.generation &+= 1
            availableGeneration.store(s.generation, ordering: .releasing)
            if let seconds = s.autoLockSeconds { s.armAutoLock(makeAutoLockTimer(seconds)) }
            return (Array(s.observers.values), Array(s.continuations.values))
        }
        noteActivity()
        notify(.available, observers, continuations)
    }

    private func notify(_ value: SecureServicesAvailability,
                        _ observers: [@Sendable (SecureServicesAvailability) -> Void],
                        _ continuations: [AsyncStream<SecureServicesAvailability>.Continuation]) {
        for o in observers { o(value) }
        for c in continuations { c.yield(value) }
    }

    private func makeAutoLockTimer(_ seconds: Double) -> DispatchSourceTimer {
        let timer = DispatchSource.makeTimerSource(queue: .global())
        // Activity is seen at the tick after it: the lock comes between `seconds` and two periods
        // after the last operation, at most 1.25 × `seconds` (as with a clock read per operation
        // and a period of a quarter).
        let period = max(0.01, seconds / 8)
        lastActivity.store(Self.monotonicNanoseconds(), ordering: .relaxed)
        timer.schedule(deadline: .now() + period, repeating: period)
        timer.setEventHandler { [weak self] in
            guard let self else { return }
            let now = Self.monotonicNanoseconds()
            if self.active.exchange(false, ordering: .relaxed) {
                self.lastActivity.store(now, ordering: .relaxed)
                return
            }
            let idle = Double(now &- self.lastActivity.load(ordering: .relaxed)) / 1e9
            if idle >= seconds { self.lock() }
        }
        timer.resume()
        return timer
    }

    /// The coarse monotonic clock (a few milliseconds of resolution, plenty for an idle timeout in
    /// seconds), read by the auto-lock timer.
    static func monotonicNanoseconds() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC_COARSE, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }
}

/// Domain-separated HKDF info: a label and a value, each length-prefixed so no two inputs collide.
func lengthPrefixed(_ label: String, _ value: String) -> [UInt8] {
    var out: [UInt8] = []
    for part in [Array(label.utf8), Array(value.utf8)] {
        let n = UInt32(part.count)
        out += [UInt8(n >> 24), UInt8(truncatingIfNeeded: n >> 16), UInt8(truncatingIfNeeded: n >> 8), UInt8(truncatingIfNeeded: n)]
        out += part
    }
    return out
}

func environment(_ name: String) -> String? {
    guard let v = getenv(name) else { return nil }
    return String(cString: v)
}
