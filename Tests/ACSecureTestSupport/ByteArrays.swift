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
