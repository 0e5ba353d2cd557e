// The harness runs on the in-memory file system, which exists only in builds with system-call
// mocking (debug, and the fuzzers' release build): elsewhere (a release build of the main package)
// this file compiles to nothing.
#if ACSECURE_SYSCALL_MOCKING
@_spi(Fuzzing) import ACSecureServices

/// Fuzz target 3: untrusted bytes as a store's seed file (`SeedStore.parse`, docs/FORMAT.md "The
/// store"). The parser must accept exactly what the format allows, checked against an independent
/// reading of the format here: "ACSS", version 1, protection 0 with the 32-byte seed (38 bytes), or
/// protection 1 with Argon2id limits inside the accepted ranges, a 16-byte salt and a 60-byte sealed
/// seed (98 bytes). An accepted file must give back its own fields; a refused one must be refused as
/// `corruptStore` (never another error, a crash, or an unbounded cost).
///
/// Input: byte 0 & 3 = 0 takes the rest as the file; otherwise a valid file (protected if byte 0 & 4)
/// gets the rest as edits (offset, XOR value) pairs, with byte 0 >> 4 bytes cut or added at the end.
public enum SeedStoreParseFuzzer {
    static func u64(_ b: ArraySlice<UInt8>) -> UInt64 { b.reduce(0) { $0 << 8 | UInt64($1) } }

    static func template(protected: Bool) -> [UInt8] {
        var b = Array("ACSS".utf8) + [1, protected ? 1 : 0]
        if !protected { return b + (0..<32).map { UInt8($0) } }
        let ops = SeedFileParser.opsLimitRange.lowerBound, mem = SeedFileParser.memLimitRange.lowerBound
        b += (0..<8).reversed().map { UInt8(truncatingIfNeeded: ops >> (8 * UInt64($0))) }
        b += (0..<8).reversed().map { UInt8(truncatingIfNeeded: mem >> (8 * UInt64($0))) }
        return b + (0..<(16 + 60)).map { UInt8(truncatingIfNeeded: $0 &* 7) }
    }

    static func file(_ input: [UInt8]) -> [UInt8] {
        guard let mode = input.first else { return [] }
        if mode & 3 == 0 { return Array(input.dropFirst()) }
        var b = template(protected: mode & 4 != 0)
        var i = 1
        while i + 1 < input.count {
            if !b.isEmpty { b[Int(input[i]) % b.count] ^= input[i + 1] }
            i += 2
        }
        let change = Int(mode >> 4)
        if mode & 8 != 0 { b.removeLast(min(change, b.count)) } else { b += repeatElement(0xA5, count: change) }
        return b
    }

    /// Runs one input. Returns a finding, or nil when the parser behaved.
    public static func run(_ input: [UInt8]) -> FuzzFinding? {
        let b = file(input)
        // The format, read independently.
        var expectValid = b.count >= 6 && Array(b[0..<4]) == Array("ACSS".utf8) && b[4] == 1
        if expectValid {
            switch b[5] {
            case 0: expectValid = b.count == 38
            case 1:
                expectValid = b.count == 98 && SeedFileParser.opsLimitRange.contains(u64(b[6..<14]))
                    && SeedFileParser.memLimitRange.contains(u64(b[14..<22]))
            default: expectValid = false
            }
        }
        switch SeedFileParser.parse(b) {
        case .failure(let e):
            if e.code != .corruptStore { return FuzzFinding("seed file of \(b.count) bytes refused with \(e.code), not corruptStore: \(e.message)") }
            return expectValid ? FuzzFinding("a valid seed file of \(b.count) bytes was refused: \(e.message)") : nil
        case .success(let p):
            guard expectValid else { return FuzzFinding("an invalid seed file of \(b.count) bytes was accepted") }
            if p.passcodeProtected != (b[5] == 1) { return FuzzFinding("protection misread") }
            if p.passcodeProtected {
                let good = p.opsLimit == u64(b[6..<14]) && UInt64(p.memLimit) == u64(b[14..<22]) && p.salt == Array(b[22..<38])
                    && p.payload == Array(b[38...]) && p.aad == Array(b[0..<38])
                return good ? nil : FuzzFinding("passcode seed file fields misread")
            }
            return p.payload == Array(b[6...]) && p.salt.isEmpty ? nil : FuzzFinding("seed misread")
        }
    }
}
#endif
