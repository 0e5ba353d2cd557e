import CACSecureSodium

/// Passcode stretching with Argon2id (`crypto_pwhash`).
public enum Argon2id {
    public static let saltSize = Int(crypto_pwhash_SALTBYTES)

    /// Cost parameters; stored beside the sealed seed so they can be raised later.
    public struct Cost: Sendable, Equatable {
        public var opsLimit: UInt64
        public var memLimit: Int
        public init(opsLimit: UInt64, memLimit: Int) { self.opsLimit = opsLimit; self.memLimit = memLimit }

        /// libsodium's "interactive" limits (2 passes, 64 MiB): ~0.07 s here. Too cheap for a short
        /// passcode (docs/FORMAT.md); kept for seeds sealed with it, which still open.
        public static let interactive = Cost(opsLimit: UInt64(crypto_pwhash_OPSLIMIT_INTERACTIVE),
                                             memLimit: Int(crypto_pwhash_MEMLIMIT_INTERACTIVE))
        /// libsodium's "moderate" limits (3 passes, 256 MiB): ~0.45 s here. The cost of every new or
        /// re-sealed seed unless a caller asks for more (docs/FORMAT.md says what a PIN costs at it).
        public static let moderate = Cost(opsLimit: UInt64(crypto_pwhash_OPSLIMIT_MODERATE),
                                          memLimit: Int(crypto_pwhash_MEMLIMIT_MODERATE))
        /// The smallest limits libsodium accepts (1 pass, 8 KiB); for tests only, which pass it
        /// explicitly (`argonCost: .minimum`) to stay fast. Never a default.
        public static let minimum = Cost(opsLimit: UInt64(crypto_pwhash_OPSLIMIT_MIN), memLimit: Int(crypto_pwhash_MEMLIMIT_MIN))
    }

    public static func deriveKey(passcode: SecureBytes, salt: [UInt8], cost: Cost, outputCount: Int = 32) throws(CryptoError) -> SecureBytes {
        guard salt.count == saltSize else { throw CryptoError.invalidArgument("Argon2id salt length") }
        Sodium.ensureInitialized()
        return try SecureBytes(count: outputCount) { (o: UnsafeMutableRawBufferPointer) throws(CryptoError) in
            let rc = passcode.withUnsafeBytes { p in
                salt.withUnsafeBufferPointer { s in
                    crypto_pwhash(o.baseAddress!.assumingMemoryBound(to: UInt8.self), UInt64(o.count),
                                  p.baseAddress!.assumingMemoryBound(to: CChar.self),
                                  UInt64(p.count), s.baseAddress!,
                                  cost.opsLimit, cost.memLimit, crypto_pwhash_ALG_ARGON2ID13)
                }
            }
            // crypto_pwhash fails only when it cannot allocate its memLimit bytes.
            guard rc == 0 else { throw CryptoError.outOfMemory(cost.memLimit) }
        }
    }
}
