#if canImport(Glibc)
import Glibc
#endif

// Byte-array operations the crash tests run millions of times, done with memcpy/memcmp and one
// hasher call: a debug build copies, compares and hashes an array one element at a time through
// generic code, which made those tests spend most of their time here.

/// `target[at..<at + range.count] = source[range]`; `target` must already be that long.
package func copyBytes(_ source: [UInt8], _ range: Range<Int>, into target: inout [UInt8], at: Int) {
    precondition(range.lowerBound >= 0 && range.upperBound <= source.count && at >= 0 && at + range.count <= target.count)
    guard !range.isEmpty else { return }
    source.withUnsafeBytes { s in
        target.withUnsafeMutableBytes { t in _ = memcpy(t.baseAddress! + at, s.baseAddress! + range.lowerBound, range.count) }
    }
}

/// `a[aStart..<aStart + count] == b[bStart..<bStart + count]`, false when either is shorter.
package func sameBytes(_ a: [UInt8], _ aStart: Int, _ b: [UInt8], _ bStart: Int, count: Int) -> Bool {
    guard aStart >= 0, bStart >= 0, count >= 0, aStart + count <= a.count, bStart + count <= b.count else { return false }
    guard count > 0 else { return true }
    return a.withUnsafeBytes { x in b.withUnsafeBytes { y in memcmp(x.baseAddress! + aStart, y.baseAddress! + bStart, count) == 0 } }
}

/// The array's `hashValue` (the same bytes hash the same), in one call to the hasher.
package func contentHash(_ bytes: [UInt8]) -> Int {
    var hasher = Hasher()
    hasher.combine(bytes.count)
    bytes.withUnsafeBytes { hasher.combine(bytes: $0) }
    return hasher.finalize()
}

/// Byte j of crash-child operation k's data: the crash child (Tests/ACSecureCrashChild) writes these
/// bytes and the tests check for them.
@inlinable package func crashPattern(_ k: Int, _ j: Int) -> UInt8 {
    UInt8(truncatingIfNeeded: (UInt32(truncatingIfNeeded: j &+ k &* 7919) &* 0x9E37_79B1) >> 24)
}

/// `(0..<count).map { crashPattern(k, $0) }` without a closure call per byte (the shapes of a
/// megabyte and more built their bytes that way in a third of each crash child's time).
package func crashPatternBytes(_ k: Int, _ count: Int) -> [UInt8] {
    [UInt8](unsafeUninitializedCapacity: count) { b, initialized in
        let p = b.baseAddress!
        var j = 0
        while j < count { p[j] = crashPattern(k, j); j &+= 1 }
        initialized = count
    }
}
