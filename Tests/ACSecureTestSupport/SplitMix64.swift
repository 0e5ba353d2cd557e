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
/// (Stored a draw at a time, low byte first: a debug build's subscript per byte was a tenth of the
/// differential tests' time.)
package func randomBytes(_ count: Int, _ rng: inout SplitMix64) -> [UInt8] {
    [UInt8](unsafeUninitializedCapacity: count) { b, initialized in
        let p = UnsafeMutableRawPointer(b.baseAddress!)
        var i = 0
        while i + 8 <= count {
            p.storeBytes(of: rng.next().littleEndian, toByteOffset: i, as: UInt64.self)
            i += 8
        }
        if i < count {
            var v = rng.next()
            while i < count { p.storeBytes(of: UInt8(truncatingIfNeeded: v), toByteOffset: i, as: UInt8.self); v >>= 8; i += 1 }
        }
        initialized = count
    }
}
