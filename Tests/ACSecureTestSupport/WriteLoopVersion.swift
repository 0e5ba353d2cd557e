/// Version `k` of the file ACSecureFoundationCrashHelper's write loop rewrites (one definition for
/// the helper and AtomicWriteCrashTests): `k` in the first 8 bytes (little-endian), then bytes of
/// SplitMix64 seeded with `k`. The length varies with `k`, so a file that is not one whole version shows.
package func writeLoopVersion(_ k: UInt64) -> [UInt8] {
    let count = 150_000 + Int(k % 7) * 20_011
    var rng = SplitMix64(seed: k)
    return (0..<8).map { UInt8(truncatingIfNeeded: k >> (8 * UInt64($0))) } + randomBytes(count - 8, &rng)
}
