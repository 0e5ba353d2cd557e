#if canImport(Glibc)
import Glibc
#endif
import ACSecureServices
import ACSecureTestSupport
import ACSystemCalls
@testable import ACSecureFileCore

// The checks of CrashStateEnumeratorTests: one crash state of a secure file (built by
// Tests/ACSecureTestSupport/CrashStates.swift) opened with the engine.

/// The three properties of issue 24 a crash state can fail.
enum CrashProperty: String, CaseIterable {
    /// (a) every byte acknowledged durable (and not changed since) reads back exactly.
    case durable = "a"
    /// (b) the file opens and accepts a change.
    case usable = "b"
    /// (c) no byte reads as a value it never had.
    case neverHad = "c"
}

/// Opens one crash state with the engine and checks it. Returns the properties it fails, with a
/// line saying why, and whether a chunk holding only unsynced bytes failed to read (allowed).
/// `onlyRewrittenChunksLost`: it fails (a) alone, and only through chunks that do not read and that
/// a call since the last sync wrote (a byte of theirs is not stable) — issue 24 item 4's "least":
/// a torn overwrite damages the chunk it rewrites, never the end, the length or another chunk.
/// - Parameter creationNeverSynced: the state is of a file whose creation no sync completed. The
///   engine refuses one of 0 bytes or with its header torn (no secure file: a cut one looks the
///   same, so it is never taken silently, `ACSecureFileOpen`); that passes (b) when an `O_TRUNC`
///   open starts it anew and it takes a change (`startedAnew`), as the C header documents.
func checkCrashState(_ bytes: [UInt8], epoch: CrashEpoch, stable: [Range<Int>], at path: String,
                     services: SecureServices, chunk: Int = 4096,
                     creationNeverSynced: Bool = false) -> (failed: [CrashProperty: String], unreadableUnsynced: Bool, startedAnew: Bool, onlyRewrittenChunksLost: Bool) {
    var failed: [CrashProperty: String] = [:]
    var unreadableUnsynced = false
    var otherLoss = false  // a failure of (a) that is not a rewritten chunk's
    unlink(path)
    writeWholeFile(path, bytes)
    let file: SecureFile
    do { file = try SecureFile.open(path, flags: O_RDONLY, services: services) } catch {
        if creationNeverSynced, stable.isEmpty, error.code == .badKeyOrCorruptData {
            do {
                try SecureFile.open(path, flags: O_RDWR | O_TRUNC, services: services).close()
                if let problem = appendedByteProblem(BytePath(path), size: 0, services: services) { return ([.usable: "started anew with O_TRUNC, then \(problem)"], false, false, false) }
                return ([:], false, true, false)
            } catch {
                return ([.usable: "refused (\(crashErrorName(error))), and O_TRUNC does not start it anew"], false, false, false)
            }
        }
        failed[.usable] = "does not open: \(error.message)"
        if !stable.isEmpty { failed[.durable] = "does not open, synced bytes lost" }
        return (failed, false, false, false)
    }
    let size: Int
    do { size = Int(try file.size) } catch {
        try? file.close()
        return ([.usable: "no size: \(error.message)"], false, false, false)
    }
    if let lost = stable.first(where: { $0.upperBound > size }) {
        failed[.durable] = "opens at \(size) bytes: synced bytes \(max(lost.lowerBound, size))..<\(lost.upperBound) lost"
        otherLoss = true
    }
    var lo = 0
    while lo < size {
        let hi = min(size, lo + chunk)
        let inside = stable.compactMap { r -> Range<Int>? in
            let c = r.clamped(to: lo..<hi)
            return c.isEmpty ? nil : c
        }
        do {
            let got = try file.pread(count: hi - lo, at: Int64(lo))
            if got.count != hi - lo {
                failed[.neverHad] = failed[.neverHad] ?? "short read at \(lo): \(got.count) of \(hi - lo) inside the length \(size)"
            } else {
                for r in inside where !sameBytes(got, r.lowerBound - lo, epoch.durable, r.lowerBound, count: r.count) {
                    failed[.durable] = failed[.durable] ?? "synced bytes in \(r) read otherwise"
                    otherLoss = true
                }
                if !epoch.models.contains(where: { sameBytes($0, lo, got, 0, count: hi - lo) }) {
                    for x in lo..<hi where !epoch.models.contains(where: { $0.count > x && $0[x] == got[x - lo] }) {
                        failed[.neverHad] = failed[.neverHad] ?? "byte \(x) reads \(got[x - lo]), a value it never had (size \(size))"
                        break
                    }
                }
            }
        } catch {
            if !inside.isEmpty {
                failed[.durable] = failed[.durable] ?? "chunk \(lo / chunk) holding synced bytes \(inside) does not read: \(crashErrorName(error))"
                // Every byte of it stable: no call since the sync wrote it, yet it is lost.
                if inside.reduce(0, { $0 + $1.count }) == hi - lo { otherLoss = true }
            } else {
                unreadableUnsynced = true
            }
        }
        lo = hi
    }
    try? file.close()
    // (b): one byte appended after the crash reads back.
    if let problem = appendedByteProblem(BytePath(path), size: size, services: services) { failed[.usable] = problem }
    return (failed, unreadableUnsynced, false, Set(failed.keys) == [.durable] && !otherLoss)
}

private func crashErrorName(_ error: any Error) -> String {
    (error as? SecureFileError).map(\.message) ?? "\(error)"
}
