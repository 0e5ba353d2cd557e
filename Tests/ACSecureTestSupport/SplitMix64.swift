/// A deterministic generator (SplitMix64), so a failing random sequence can be replayed from its seed.
package struct SplitMix64: RandomNumberGenerator, Sendable {
    package var state: UInt64

    package init(seed: UInt64) { state = seed }

    package mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// `count` bytes from `rng`, eight per draw.
package func randomBytes(_ count: Int, _ rng: inout SplitMix64) -> [UInt8] {
    var out = [UInt8](repeating: 0, count: count)
    var i = 0
    while i < count {
        var v = rng.next()
        for _ in 0..<8 where i < count { out[i] = UInt8(truncatingIfNeeded: v); v >>= 8; i += 1 }
    }
    return out
}
