#if canImport(Glibc)
import Glibc
#endif

// The crash-state enumerator's machinery (docs/TESTING.md "Power loss: every crash state between
// syncs"): a workload's file-changing calls, recorded by `SystemCallRecorder`, are cut into epochs
// at each sync; for each epoch the states a power loss can leave are built from the bytes the file
// had at the epoch's start. The tests open each state and check it against what the workload was
// told was durable: CrashStateEnumeratorTests (one secure file, CrashStateChecks.swift) and
// SQLiteCrashStateTests (a database with its journal or WAL, through the acsecure VFS).

/// One file-changing call on the workload's file.
package enum CrashFileOp: CustomStringConvertible {
    case write(offset: Int, bytes: [UInt8])
    case truncate(Int)

    package var description: String {
        switch self {
        case .write(let offset, let bytes): "pwrite \(bytes.count)@\(offset)"
        case .truncate(let length): "ftruncate \(length)"
        }
    }

    package func apply(to content: inout [UInt8]) {
        switch self {
        case .write(let offset, let bytes):
            if content.count < offset + bytes.count { content += [UInt8](repeating: 0, count: offset + bytes.count - content.count) }
            copyBytes(bytes, 0..<bytes.count, into: &content, at: offset)
        case .truncate(let length):
            if length < content.count { content.removeSubrange(length...) } else { content += [UInt8](repeating: 0, count: length - content.count) }
        }
    }
}

/// What a workload did, in order: the calls on its file (seen by the recorder), its syncs, and
/// after each of its own calls the plaintext it holds (its model), the bytes the call wrote or cut
/// (`touched`), and whether the call made it durable (a completed `sync`, `datasync`, or an
/// `O_DSYNC` write).
package enum CrashEvent {
    case op(CrashFileOp)
    case sync
    case model([UInt8], touched: Range<Int>?, durable: Bool)
}

/// The calls between two syncs, and what a crash among them may show.
package struct CrashEpoch {
    package var index: Int
    /// The file's physical bytes at the epoch's start (everything before its sync is on disk).
    package var base: [UInt8]
    package var ops: [CrashFileOp]
    /// The plaintext acknowledged durable before the epoch started.
    package var durable: [UInt8]
    /// Every plaintext the workload held from `durable` on, up to the end of the call that was
    /// running when the epoch ended (`durable` first).
    package var models: [[UInt8]]
    /// The bytes those calls wrote or cut (a byte rewritten with its own value is touched too).
    package var touched: [Range<Int>]

    package init(index: Int, base: [UInt8], ops: [CrashFileOp], durable: [UInt8], models: [[UInt8]], touched: [Range<Int>]) {
        self.index = index
        self.base = base
        self.ops = ops
        self.durable = durable
        self.models = models
        self.touched = touched
    }

    /// Byte ranges of `durable` that no call since touched: they must read back exactly.
    package var stableRanges: [Range<Int>] {
        var ranges = [0..<durable.count]
        for t in touched {
            ranges = ranges.flatMap { r -> [Range<Int>] in
                guard r.overlaps(t) else { return [r] }
                return [r.lowerBound..<max(r.lowerBound, t.lowerBound), min(r.upperBound, t.upperBound)..<r.upperBound].filter { !$0.isEmpty }
            }
        }
        return ranges.filter { !$0.isEmpty }
    }
}

/// Cuts a recording into epochs (an epoch without calls is dropped).
package func crashEpochs(base: [UInt8], initialModel: [UInt8], events: [CrashEvent]) -> [CrashEpoch] {
    var epochs: [CrashEpoch] = []
    var physical = base
    var ops: [CrashFileOp] = []
    var durable = initialModel
    var models = [initialModel]
    var touched: [Range<Int>] = []
    var awaiting: [Int] = []  // epochs whose running call has not returned yet
    func close() {
        guard !ops.isEmpty else { return }
        epochs.append(CrashEpoch(index: epochs.count, base: physical, ops: ops, durable: durable, models: models, touched: touched))
        awaiting.append(epochs.count - 1)
        for op in ops { op.apply(to: &physical) }
        ops = []
    }
    for event in events {
        switch event {
        case .op(let op): ops.append(op)
        case .sync: close()
        case .model(let m, let t, let isDurable):
            for e in awaiting {
                epochs[e].models.append(m)
                if let t { epochs[e].touched.append(t) }
            }
            awaiting = []
            models.append(m)
            if let t { touched.append(t) }
            if isDurable { durable = m; models = [m]; touched = [] }
        }
    }
    close()
    return epochs
}

/// How thoroughly to enumerate: the sample in the test command, or the full long run.
package struct CrashEnumerationLimits {
    /// Torn versions of a write: "first k sectors", "only sector k", "all but sector k" for every k
    /// of a write of at most this many sectors, for this many evenly spread k of a longer one.
    package var tornPositions: Int
    /// Random sector subsets per write.
    package var randomTears: Int
    /// Every subset of an epoch's writes up to this many writes; `sampledSubsets` beyond.
    package var allSubsetsUpTo: Int
    package var sampledSubsets: Int
    /// Random states mixing reorder and tears (each sector of each write persisted or not).
    package var mixed: Int
    /// The full run (workloads do more rounds too).
    package var full = false

    package static let sample = CrashEnumerationLimits(tornPositions: 12, randomTears: 4, allSubsetsUpTo: 6, sampledSubsets: 32, mixed: 12)
    package static let full = CrashEnumerationLimits(tornPositions: 512, randomTears: 16, allSubsetsUpTo: 10, sampledSubsets: 1024, mixed: 64, full: true)
}

/// The states a power loss can leave in one epoch, under the model of docs/TESTING.md: the device
/// persists 512-byte sectors; the page cache writes sectors back in any order, each holding its
/// content as of some call (a sector persisted "for call i" holds what the file had there after
/// call i); sizes (an extending write's, an `ftruncate`'s) persist in call order, and a size that
/// an extending write set persists only with that write's bytes beyond the previous size (ext4
/// `data=ordered`); a cut frees the bytes beyond it, a growth reads as zeros.
package struct CrashStateBuilder {
    package static let sector = 512
    package let epoch: CrashEpoch
    /// The physical content and size after each call (index 0: before the first).
    package let contents: [[UInt8]]
    /// For each call, the sectors it writes (empty for a truncate).
    package let sectors: [[Int]]

    package init(_ epoch: CrashEpoch) {
        self.epoch = epoch
        var c = [epoch.base]
        var content = epoch.base
        for op in epoch.ops { op.apply(to: &content); c.append(content) }
        contents = c
        sectors = epoch.ops.map { op in
            guard case .write(let offset, let bytes) = op, !bytes.isEmpty else { return [] }
            return Array(offset / Self.sector...(offset + bytes.count - 1) / Self.sector)
        }
    }

    /// The state where call i's sectors `persisted(i, k)` (k indexes `sectors[i]`) reached the disk
    /// and the sizes of the first `sizes` calls did. `ordered`: a persisted size brings the bytes of
    /// the extending writes below it (ext4 `data=ordered`); without it, a size may persist ahead of
    /// them (the torn extension a process kill or another file system may leave).
    package func build(sizes: Int, ordered: Bool = true, _ persisted: (Int, Int) -> Bool) -> [UInt8] {
        var disk = epoch.base
        for (i, op) in epoch.ops.enumerated() {
            switch op {
            case .write:
                let after = contents[i + 1], before = contents[i].count
                let extending = ordered && i < sizes && after.count > before
                for (k, s) in sectors[i].enumerated() {
                    let lo = s * Self.sector, hi = min(lo + Self.sector, after.count)
                    guard lo < hi else { continue }
                    let forced = extending && hi > before
                    guard forced || persisted(i, k) else { continue }
                    if disk.count < hi { disk += [UInt8](repeating: 0, count: hi - disk.count) }
                    copyBytes(after, lo..<hi, into: &disk, at: lo)
                }
            case .truncate:
                if i < sizes { op.apply(to: &disk) }
            }
        }
        let size = contents[sizes].count
        if disk.count > size { disk.removeSubrange(size...) } else { disk += [UInt8](repeating: 0, count: size - disk.count) }
        return disk
    }

    /// Sizes worth distinguishing: 0 and every call that changed the size.
    package var sizePoints: [Int] {
        (0...epoch.ops.count).filter { $0 == 0 || contents[$0].count != contents[$0 - 1].count }
    }

    /// Every state to check, labelled, deterministic for `seed`.
    package func states(_ limits: CrashEnumerationLimits, seed: UInt64) -> [(kind: String, label: String, bytes: [UInt8])] {
        var out: [(kind: String, label: String, bytes: [UInt8])] = []
        forEachState(limits, seed: seed) { out.append(($0, $1, $2)) }
        return out
    }

    /// The states of `states(_:seed:)`, one at a time (an epoch of many large writes has more
    /// states than fit in memory at once).
    package func forEachState(_ limits: CrashEnumerationLimits, seed: UInt64,
                              _ body: (_ kind: String, _ label: String, _ bytes: [UInt8]) throws -> Void) rethrows {
        let n = epoch.ops.count
        var rng = SplitMix64(seed: seed &+ UInt64(epoch.index) &* 0x9E37)
        // Prefixes: the first k calls whole.
        for k in 0...n { try body("prefix", "prefix \(k)", build(sizes: k) { i, _ in i < k }) }
        // Torn: the calls before i whole, call i only for some of its sectors, its size not yet (so
        // only its sectors below the size before it can show).
        for i in 0..<n where !sectors[i].isEmpty {
            let m = sectors[i].filter { $0 * Self.sector < contents[i].count }.count
            // A write that grows the file: its first k sectors with its size (no ordering).
            if contents[i + 1].count > contents[i].count {
                let all = sectors[i].count
                let cuts = all - 1 <= limits.tornPositions ? Array(1..<all) : (1...limits.tornPositions).map { $0 * all / (limits.tornPositions + 1) }
                for k in cuts {
                    try body("torn", "call \(i) torn with its size: first \(k) of \(all) sectors", build(sizes: i + 1, ordered: false) { j, s in j < i || (j == i && s < k) })
                }
            }
            guard m > 1 else { continue }
            let positions = m - 1 <= limits.tornPositions ? Array(0..<m) : (0..<limits.tornPositions).map { $0 * m / limits.tornPositions }
            for k in positions {
                if k > 0 { try body("torn", "call \(i) torn: first \(k) of \(m) sectors", build(sizes: i) { j, s in j < i || (j == i && s < k) }) }
                try body("torn", "call \(i) torn: only sector \(k) of \(m)", build(sizes: i) { j, s in j < i || (j == i && s == k) })
                if m > 2 { try body("torn", "call \(i) torn: all but sector \(k) of \(m)", build(sizes: i) { j, s in j < i || (j == i && s != k) }) }
            }
            for r in 0..<limits.randomTears {
                let keep = sectors[i].map { _ in rng.next() & 1 == 1 }
                try body("torn", "call \(i) torn: random subset \(r) of \(m) sectors", build(sizes: i) { j, s in j < i || (j == i && keep[s]) })
            }
        }
        // Reordered: any subset of the calls whole, with every size the calls allow.
        let writes = (0..<n).filter { !sectors[$0].isEmpty }
        let subsets: [UInt64]
        if writes.count <= limits.allSubsetsUpTo {
            subsets = Array(0..<(UInt64(1) << writes.count))
        } else {
            subsets = (0..<limits.sampledSubsets).map { _ in rng.next() }
        }
        for mask in subsets {
            let chosen = Set(writes.enumerated().filter { mask >> UInt64($0.offset % 64) & 1 == 1 }.map(\.element))
            for p in sizePoints {
                let names = chosen.sorted().map(String.init).joined(separator: ",")
                try body("reordered", "calls {\(names)} persisted, sizes of the first \(p)", build(sizes: p) { i, _ in chosen.contains(i) })
            }
        }
        // Mixed: each sector of each call persisted or not, a random size point.
        let points = sizePoints
        for r in 0..<limits.mixed {
            let p = points[Int(rng.next() % UInt64(points.count))]
            let keep = sectors.map { $0.map { _ in rng.next() & 1 == 1 } }
            try body("mixed", "mixed \(r): random sectors of every call, sizes of the first \(p)", build(sizes: p) { i, s in keep[i][s] })
        }
    }
}

