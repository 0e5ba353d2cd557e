/// The seed file parser as the fuzz target FuzzSeedStoreParse calls it (the fuzz package is another
/// package, so this is SPI rather than `package`).
@_spi(Fuzzing) public enum SeedFileParser {
    /// What a seed file that parses says.
    public struct Parsed: Equatable, Sendable {
        public var passcodeProtected: Bool
        public var opsLimit: UInt64
        public var memLimit: Int
        public var salt: [UInt8]
        public var payload: [UInt8]
        public var aad: [UInt8]
    }

    /// The Argon2id limits a seed file may ask for.
    public static var opsLimitRange: ClosedRange<UInt64> { SeedStore.opsLimitRange }
    public static var memLimitRange: ClosedRange<UInt64> { SeedStore.memLimitRange }

    /// Parses seed file bytes exactly as `SecureServices` does when it loads its store.
    public static func parse(_ bytes: [UInt8]) -> Result<Parsed, SecureServicesError> {
        do {
            let s = try SeedStore.parse(bytes, seedPath: "seed")
            return .success(Parsed(passcodeProtected: s.protection == .passcode, opsLimit: s.cost.opsLimit,
                                   memLimit: s.cost.memLimit, salt: s.salt,
                                   // The raw seed of an unprotected file, copied out for the fuzzer only.
                                   payload: s.seed?.withUnsafeBytes { Array($0) } ?? s.payload, aad: s.aad))
        } catch {
            return .failure(error)
        }
    }
}
