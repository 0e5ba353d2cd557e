// The child process of CrashConsistencyTests: writes to one secure file until it is SIGKILLed.
//
//     ACSecureCrashChild <store directory> <file> <seed> <operations>
//     ACSecureCrashChild --harden          (ProcessHardeningTests, see below)
//     ACSecureCrashChild exhaust <store> <directory> memory|descriptors   (Exhaustion.swift)
//
// Protocol on stdout, one line per event, each written with a single write(2) so the parent sees
// exactly what was started:
//     R                    the file exists and is synced (empty); the parent may kill from now on
//     W <k> <offset> <n>   operation k is about to pwrite n bytes (crashPattern(k, j), Tests/ACSecureTestSupport) at offset
//     T <k> <length>       operation k is about to ftruncate to length
//     S <k>                fsync returned: every operation announced before this line is durable
//     E <message>          an operation failed (the parent treats this as a test failure)
#if canImport(Glibc)
import Glibc
#endif
import ACSecureServices
import ACSystemCalls
import ACSecureFileCore
import ACSecureTestSupport

func emit(_ line: String) {
    let bytes = Array((line + "\n").utf8)
    _ = bytes.withUnsafeBytes { Glibc.write(1, $0.baseAddress, $0.count) }
}

let args = CommandLine.arguments

/// Runs one mode of the child with services on the store at `store`: exit 0 when `body` returns,
/// "E <error>" and exit 1 when it throws.
func runMode(store: String, _ body: (SecureServices) throws -> Void) -> Never {
    do {
        try body(try SecureServices(appID: "com.example.tests", storeDirectory: store, argonCost: .minimum))
        exit(0)
    } catch {
        emit("E \(error)")
        exit(1)
    }
}

// Shape mode: one write shape, killed (SIGKILL, by the child itself) right before the engine's
// system call number <killAt>, or with that call torn: a pwrite is cut after <tearSectors> whole
// 512-byte sectors of the file, then the process is killed.
//     ACSecureCrashChild shape <store> <file> <shape> <killAt> <tearSectors>
// Prints "K <call>" when it kills, "T <offset> <count>" for the pwrite it tears, "WHOLE" when the
// tear would cover the whole write (no tear),
// "C <calls>" when the operation completed; then leaves with _exit(0), without close.
if args.count == 7, args[1] == "shape" {
    runShape(store: args[2], path: args[3], shape: args[4], killAt: Int(args[5]) ?? -1, tearSectors: Int(args[6]) ?? 0)
}
if args.count == 2, args[1] == "shapes" {
    for s in CrashShape.all { emit("\(s.name) \(s.before) \(s.kind.rawValue) \(s.offset) \(s.count)") }
    exit(0)
}
if args.count == 6, args[1] == "hold-append" {
    runHeldAppend(store: args[2], path: args[3], holdBeforePwrite: Int(args[4]) ?? 0, record: Int(args[5]) ?? 0)
}
if args.count == 5, args[1] == "append-sync" {
    // Tail copies across processes (TailCopyTests): opens the file O_RDWR | O_APPEND in coordinated
    // mode, appends <count> bytes of pattern 7, fsyncs and closes it. Prints "S" when done.
    runMode(store: args[2]) { services in
        let file = try SecureFile.open(args[3], flags: O_RDWR | O_APPEND, services: services, sharing: .processes)
        _ = try crashPatternBytes(7, Int(args[4]) ?? 0).withUnsafeBytes { try file.write($0) }
        try file.sync()
        try file.close()
        emit("S")
    }
}
if args.count == 5, args[1] == "create-append" {
    // Creation race (CreationRaceTests): prints "R", waits for a byte on standard input, then opens
    // the file O_RDWR | O_CREAT | O_APPEND in coordinated mode, appends one 100-byte record
    // (pattern <record>) and closes it. Prints "A" when done.
    runMode(store: args[2]) { services in
        let record = Int(args[4]) ?? 0
        emit("R")
        var byte: UInt8 = 0
        _ = Glibc.read(0, &byte, 1)
        let file = try SecureFile.open(args[3], flags: O_RDWR | O_CREAT | O_APPEND, mode: 0o600, services: services, sharing: .processes)
        _ = try crashPatternBytes(record, 100).withUnsafeBytes { try file.write($0) }
        try file.close()
        emit("A")
    }
}
if args.count == 7, args[1] == "append-loop" {
    // Stress (MultiProcessStaleEndTests): <count> 100-byte records, patterns <first>..., appended
    // through a coordinated O_APPEND handle (mode "steady"), or each through a default-mode handle
    // joined by a coordinated one on the same state (mode "switching": open O_RDWR, read the size,
    // open O_RDWR | O_APPEND coordinated, append, close both); "<mode>-<µs>" pauses before each
    // append. Prints "A <count>" when done.
    runMode(store: args[2]) { services in
        let first = Int(args[4]) ?? 0, count = Int(args[5]) ?? 0
        // "<mode>-<µs>": a pause after each append, so one writer's calls fall between the other's.
        let mode = args[6].split(separator: "-")
        let steady = mode.first == "steady"
        let pause = mode.count > 1 ? UInt32(mode[1]) ?? 0 : 0
        let kept = steady ? try SecureFile.open(args[3], flags: O_RDWR | O_APPEND, services: services, sharing: .processes) : nil
        for k in first..<first + count {
            let data = crashPatternBytes(k, 100)
            if pause > 0 { usleep(pause) }
            if let kept {
                _ = try data.withUnsafeBytes { try kept.write($0) }
                continue
            }
            let plain = try SecureFile.open(args[3], flags: O_RDWR, services: services)
            _ = try plain.size
            let shared = try SecureFile.open(args[3], flags: O_RDWR | O_APPEND, services: services, sharing: .processes)
            _ = try data.withUnsafeBytes { try shared.write($0) }
            try shared.close()
            try plain.close()
        }
        try kept?.close()
        emit("A \(count)")
    }
}
if args.count == 5, args[1] == "writeback-exit" {
    // Write-back buffering: a normal exit() without close writes the buffered bytes.
    do {
        let services = try SecureServices(appID: "com.example.tests", storeDirectory: args[2], argonCost: .minimum)
        let file = try SecureFile.open(args[3], flags: O_RDWR | O_CREAT | O_TRUNC, mode: 0o600, services: services, buffering: .writeBack)
        let n = Int(args[4]) ?? 0
        // 100-byte records, as a logger writes: the last run holds several chunks at exit.
        let bytes = crashPatternBytes(1, n)
        for start in stride(from: 0, to: n, by: 100) {
            _ = try bytes[start..<min(n, start + 100)].withUnsafeBytes { try file.write($0) }
        }
        emit("W")
        exit(0)
    } catch {
        emit("E \(error)")
        exit(1)
    }
}
if args.count == 5, args[1] == "exhaust" {
    runExhaustion(store: args[2], directory: args[3], mode: args[4])
}
// `ACSecureCrashChild --harden`, for ProcessHardeningTests: the core limit and dumpable flag before
// and after ProcessHardening.apply(), as read back from the kernel:
//     before <core soft> <core hard> <dumpable>
//     after <core soft> <core hard> <dumpable>
if args.count == 2 && args[1] == "--harden" {
    do {
        let before = try ProcessHardening.current()
        emit("before \(before.coreLimit.soft) \(before.coreLimit.hard) \(before.dumpable)")
        try ProcessHardening.apply()
        let after = try ProcessHardening.current()
        emit("after \(after.coreLimit.soft) \(after.coreLimit.hard) \(after.dumpable)")
        exit(0)
    } catch {
        emit("E \(error)")
        exit(1)
    }
}

guard args.count == 5, let seed = UInt64(args[3]), let operations = Int(args[4]) else {
    emit("E usage: ACSecureCrashChild <store> <file> <seed> <operations>")
    exit(2)
}

/// The tests' generator, so a failing sequence replays from its seed.
nonisolated(unsafe) var rng = SplitMix64(seed: seed)
func next() -> UInt64 { rng.next() }
func below(_ n: Int) -> Int { Int(next() % UInt64(n)) }

do {
    let services = try SecureServices(appID: "com.example.tests", storeDirectory: args[1], argonCost: .minimum)
    let file = try SecureFile.open(args[2], flags: O_RDWR | O_CREAT, mode: 0o600, services: services)
    try file.sync()
    emit("R")
    let chunk = 4096
    var size: Int64 = 0
    for k in 0..<operations {
        switch below(10) {
        case 0..<4:  // a random write, often across chunk boundaries
            let off = Int64(below(12 * chunk))
            let n = 1 + below(below(4) == 0 ? 3 * chunk : 600)
            emit("W \(k) \(off) \(n)")
            let data = crashPatternBytes(k, n)
            _ = try data.withUnsafeBytes { try file.pwrite($0, at: off) }
            size = max(size, off + Int64(n))
        case 4..<7:  // append
            let n = 1 + below(below(3) == 0 ? 2 * chunk : 300)
            emit("W \(k) \(size) \(n)")
            let data = crashPatternBytes(k, n)
            _ = try data.withUnsafeBytes { try file.pwrite($0, at: size) }
            size += Int64(n)
        case 7:  // truncate: shrink or grow
            let length = Int64(below(14 * chunk))
            emit("T \(k) \(length)")
            try file.truncate(to: length)
            size = length
        default:
            try file.sync()
            emit("S \(k + 1)")
        }
        // Keep the file small (the disk is shared).
        if size > 16 * Int64(chunk) {
            emit("T \(k) \(4 * chunk)")
            try file.truncate(to: Int64(4 * chunk))
            size = Int64(4 * chunk)
        }
    }
    try file.sync()
    emit("S \(operations)")
    try file.close()
    emit("D")
} catch {
    emit("E \(error)")
    exit(1)
}

/// Held mode (`MultiProcessStaleEndTests`): appends one 100-byte record (pattern `record`) through a
/// coordinated O_APPEND handle, and stops right before the operation's `pwrite` number
/// <holdBeforePwrite> (1-based): prints "H" and waits for a byte on standard input, as a preempted
/// writer or a slow disk would hold it between the two writes of a change. Prints "A" when the
/// append returned, then exits.
///     ACSecureCrashChild hold-append <store> <file> <holdBeforePwrite> <record>
func runHeldAppend(store: String, path: String, holdBeforePwrite: Int, record: Int) -> Never {
    #if ACSECURE_SYSCALL_MOCKING
    do {
        let services = try SecureServices(appID: "com.example.tests", storeDirectory: store, argonCost: .minimum)
        let file = try SecureFile.open(path, flags: O_RDWR | O_APPEND, services: services, sharing: .processes)
        final class Counter: @unchecked Sendable { var pwrites = 0 }
        let counter = Counter()
        SecureFileTesting.transferFaultInjector = { call, _, _ in
            guard call == .pwrite else { return nil }
            counter.pwrites += 1
            if counter.pwrites == holdBeforePwrite {
                emit("H")
                var byte: UInt8 = 0
                _ = Glibc.read(0, &byte, 1)
            }
            return nil
        }
        _ = try crashPatternBytes(record, 100).withUnsafeBytes { try file.write($0) }
        SecureFileTesting.transferFaultInjector = nil
        try file.close()
        emit("A \(counter.pwrites)")
        exit(0)
    } catch {
        emit("E \(error)")
        exit(1)
    }
    #else
    emit("E held appends need a build with ACSECURE_SYSCALL_MOCKING (debug)")
    exit(2)
    #endif
}

/// The write shapes of the crash tests: the file's content before, and the operation.
func runShape(store: String, path given: String, shape: String, killAt: Int, tearSectors: Int) -> Never {
    #if ACSECURE_SYSCALL_MOCKING  // kills through the fault hook: debug (test) builds only
    // The file's name is not UTF-8 (names are bytes); the test opens the same bytes.
    let path = BytePath(bytes: Array(given.utf8) + undecodableNameSuffix)!
    do {
        let services = try SecureServices(appID: "com.example.tests", storeDirectory: store, argonCost: .minimum)
        guard let s = CrashShape(name: shape) else { emit("E unknown shape \(shape)"); _exit(2) }
        if s.kind == .createThenWrite {
            _ = Sys.unlink(path)
        } else {
            let setup = try SecureFile.open(path, flags: O_RDWR | O_CREAT | O_TRUNC, mode: 0o600, services: services)
            let old = crashPatternBytes(0, s.before)
            // Records: the last 300 bytes appended 100 at a time, after the rest in the same open.
            let tail = s.kind == .recordsThenWrite ? 300 : 0
            if s.before > 0 { _ = try old[0..<s.before - tail].withUnsafeBytes { try setup.pwrite($0, at: 0) } }
            for start in stride(from: s.before - tail, to: s.before, by: 100) {
                _ = try old[start..<start + 100].withUnsafeBytes { try setup.pwrite($0, at: Int64(start)) }
            }
            try setup.close()
        }
        var warmed: SecureFile?
        if s.kind == .recordsThenWrite {
            // Open and read the last chunk before the kill points start: the handle has it cached.
            let file = try SecureFile.open(path, flags: O_RDWR, services: services)
            var last: UInt8 = 0
            _ = try withUnsafeMutableBytes(of: &last) { try file.pread(into: $0, at: Int64(s.before - 1)) }
            warmed = file
        }
        final class Counter: @unchecked Sendable { var calls = 0; var killNext = false }
        let counter = Counter()
        // Every system call from the operation's open on is a kill point.
        SecureFileTesting.transferFaultInjector = { call, count, offset in
            defer { counter.calls += 1 }
            if counter.killNext || counter.calls == killAt {
                if !counter.killNext, tearSectors > 0 {
                    guard call == .pwrite else { emit("WHOLE"); counter.killNext = true; return nil }
                    let tearEnd = (offset / 512 + Int64(tearSectors)) * 512
                    if tearEnd - offset >= Int64(count) { emit("WHOLE"); counter.killNext = true; return nil }
                    counter.killNext = true
                    emit("T \(offset) \(count)")  // the torn write: which one it was decides what may be lost
                    return .short(Int(tearEnd - offset))
                }
                emit("K \(call.rawValue)")
                kill(getpid(), SIGKILL)
            }
            return nil
        }
        let data = crashPatternBytes(1, s.count)
        switch s.kind {
        case .recordsThenWrite:
            if s.count == 0 {
                try warmed!.truncate(to: Int64(s.offset))
            } else {
                _ = try data.withUnsafeBytes { try warmed!.pwrite($0, at: Int64(s.offset)) }
            }
        case .write, .truncate, .sharedWrite, .sharedTruncate, .dsyncWrite, .doubleWrite, .wholeInPlace:
            let shared = s.kind == .sharedWrite || s.kind == .sharedTruncate
            let file = try SecureFile.open(path, flags: O_RDWR | (s.kind == .dsyncWrite ? O_DSYNC : 0), services: services,
                                           sharing: shared ? .processes : .thisProcess,
                                           partialOverwrites: s.kind == .doubleWrite ? .doubleWrite : .chunkCopy,
                                           wholeChunkOverwrites: s.kind == .wholeInPlace ? .inPlace : .chunkCopy)
            if s.kind == .truncate || s.kind == .sharedTruncate {
                try file.truncate(to: Int64(s.offset))
            } else {
                _ = try data.withUnsafeBytes { try file.pwrite($0, at: Int64(s.offset)) }
            }
        case .truncatingOpenThenWrite, .createThenWrite:
            let file = try SecureFile.open(path, flags: s.kind == .createThenWrite ? O_RDWR | O_CREAT : O_RDWR | O_TRUNC, mode: 0o600, services: services)
            _ = try data.withUnsafeBytes { try file.pwrite($0, at: Int64(s.offset)) }
        case .append:
            let file = try SecureFile.open(path, flags: O_WRONLY | O_APPEND, services: services)
            _ = try data.withUnsafeBytes { try file.write($0) }
        case .writev:
            let file = try SecureFile.open(path, flags: O_RDWR, services: services)
            _ = try file.seek(Int64(s.offset), whence: SEEK_SET)
            let third = s.count / 3
            _ = try data.withUnsafeBytes { b in
                try file.writev([UnsafeRawBufferPointer(rebasing: b[0..<third]), UnsafeRawBufferPointer(rebasing: b[third..<2 * third]),
                                 UnsafeRawBufferPointer(rebasing: b[(2 * third)...])])
            }
        case .writeBackThenClose, .writeBackThenSync, .writeBackThenFlush, .writeBackThenLock:
            // 100-byte writes collected in memory, written by close, fsync, flush or a services lock
            // (that write is the operation).
            let file = try SecureFile.open(path, flags: O_RDWR, services: services, buffering: .writeBack)
            for start in stride(from: 0, to: s.count, by: 100) {
                _ = try data[start..<min(s.count, start + 100)].withUnsafeBytes { try file.pwrite($0, at: Int64(s.offset + start)) }
            }
            switch s.kind {
            case .writeBackThenSync: try file.sync()
            case .writeBackThenFlush: try file.flush()
            case .writeBackThenLock: services.lock()
            default: try file.close()
            }
        }
        SecureFileTesting.transferFaultInjector = nil
        emit("C \(counter.calls)")
        _exit(0)
    } catch {
        emit("E \(error)")
        _exit(1)
    }
    #else
    emit("E write shapes need a build with ACSECURE_SYSCALL_MOCKING (debug)")
    _exit(2)
    #endif
}

/// Each shape of docs/FORMAT.md "What a crash can cost": the file's content before (`before` bytes
/// of pattern 0), then one operation with `count` bytes of pattern 1 at `offset` (a truncation's
/// length is its `offset`). The parent reads this table from `ACSecureCrashChild shapes` (one line
/// each: name before kind offset count).
struct CrashShape {
    enum Kind: String {
        case write, truncate, append, writev
        case dsyncWrite = "dsync-write", sharedWrite = "shared-write", sharedTruncate = "shared-truncate"
        /// A write through a handle that double-writes partial overwrites (its barriers are kill points too).
        case doubleWrite = "double-write"
        /// A write through a handle that rewrites whole chunks in place with no copy (`WholeChunkOverwrites.inPlace`).
        case wholeInPlace = "whole-in-place"
        /// Reopen with O_TRUNC, then write.
        case truncatingOpenThenWrite = "trunc-write"
        /// The file does not exist: a creating open, then a write.
        case createThenWrite = "create-write"
        /// A write-back handle collects the bytes in 100-byte writes; close writes them (or fsync,
        /// flush, a services lock).
        case writeBackThenClose = "writeback"
        case writeBackThenSync = "writeback-sync", writeBackThenFlush = "writeback-flush", writeBackThenLock = "writeback-lock"
        /// Version 5 records: the file's last 300 bytes before are three 100-byte appends (records),
        /// and the operation's handle has read the last chunk (an append then is a record too);
        /// then a write, or a truncation with `count` 0.
        case recordsThenWrite = "records-write"
    }
    let name: String
    let before: Int
    let kind: Kind
    let offset: Int
    let count: Int

    static let all: [CrashShape] = [
        CrashShape("append-inside-last-chunk", 1000, .write, 1000, 2000),
        CrashShape("append-filling-last-chunk", 1000, .write, 1000, 3096),
        // Chunk 0 (at 8576, 384 bytes into a page) rewritten in place across a page boundary:
        // a kill can tear such a rewrite between its pages (a tail copy goes first).
        CrashShape("append-inside-last-chunk-across-pages", 3900, .write, 3900, 100),
        CrashShape("append-filling-last-chunk-across-pages", 3900, .write, 3900, 300),
        CrashShape("overwrite-inside-last-chunk-across-pages", 3900, .write, 1000, 100),
        CrashShape("chunk-aligned-append", 8192, .write, 8192, 4096),
        CrashShape("chunk-aligned-small-append", 8192, .write, 8192, 100),
        CrashShape("chunk-aligned-multi-chunk-append", 12288, .write, 12288, 5000),
        CrashShape("multi-chunk-append", 1000, .write, 1000, 10000),
        CrashShape("multi-batch-append", 4096, .write, 4096, 1_200_000),
        CrashShape("append-to-empty", 0, .write, 0, 9000),
        CrashShape("grow-by-ftruncate", 1000, .truncate, 10000, 0),
        CrashShape("grow-aligned-by-ftruncate", 12288, .truncate, 20000, 0),
        CrashShape("grow-empty-by-ftruncate", 0, .truncate, 10000, 0),
        CrashShape("write-past-eof-hole", 1000, .write, 9000, 3000),
        CrashShape("write-past-aligned-eof-hole", 8192, .write, 20000, 100),
        CrashShape("overwrite-across-end", 5000, .write, 3000, 4000),
        CrashShape("overwrite-across-aligned-end", 8192, .write, 6000, 8000),
        CrashShape("overwrite-inside", 20000, .write, 3000, 9000),
        // Chunks rewritten in part across two pages get a chunk copy first (the last short chunk
        // of the first shape a rewrite's tail copy too, after its first chunk is down).
        CrashShape("overwrite-across-end-across-pages", 7996, .write, 3000, 5000),
        CrashShape("overwrite-inside-one-chunk", 20000, .write, 5000, 100),
        CrashShape("overwrite-across-two-chunks", 20000, .write, 8100, 200),
        CrashShape("coordinated-overwrite-inside-one-chunk", 20000, .sharedWrite, 5000, 100),
        CrashShape("double-write-across-two-chunks", 20000, .doubleWrite, 8100, 200),
        // Whole chunks rewritten in place get a chunk copy too (across the end: the first, and the
        // second from an aligned end or the end's tail copy).
        CrashShape("overwrite-whole-chunk", 20000, .write, 4096, 4096),
        CrashShape("overwrite-two-whole-chunks", 20000, .write, 8192, 8192),
        CrashShape("overwrite-whole-chunk-across-end", 5000, .write, 0, 6000),
        CrashShape("overwrite-two-whole-chunks-across-aligned-end", 8192, .write, 0, 10000),
        CrashShape("double-write-two-whole-chunks", 20000, .doubleWrite, 8192, 8192),
        // Any number of them (stop 41): each chunk rewritten in place goes right after its own copy;
        // across the end, the chunks before the old end's last two first, in a batch of their own;
        // a batch sealed by several threads is written so, chunk by chunk as they are sealed.
        CrashShape("overwrite-four-whole-chunks", 40000, .write, 8192, 16384),
        CrashShape("overwrite-five-chunks-across-end", 20000, .write, 100, 24000),
        CrashShape("overwrite-parallel-sealed-in-place", 200_000, .write, 5000, 140_000),
        // Without copies (the handle said so): a kill's tear may leave the chunk unreadable.
        CrashShape("overwrite-whole-chunk-in-place", 20000, .wholeInPlace, 4096, 4096),
        CrashShape("double-write-across-end", 5000, .doubleWrite, 3000, 4000),
        CrashShape("shrink-inside-middle-chunk", 10000, .truncate, 5000, 0),
        CrashShape("shrink-at-chunk-boundary", 10000, .truncate, 4096, 0),
        CrashShape("shrink-aligned-from-large", 50000, .truncate, 12288, 0),
        CrashShape("shrink-inside-last-chunk", 10000, .truncate, 9000, 0),
        CrashShape("shrink-to-zero", 10000, .truncate, 0, 0),
        CrashShape("shrink-to-zero-large", 1_300_000, .truncate, 0, 0),
        CrashShape("o-trunc-then-write", 65536, .truncatingOpenThenWrite, 0, 6000),
        CrashShape("o-trunc-large-then-write", 1_300_000, .truncatingOpenThenWrite, 0, 100),
        CrashShape("o-append-aligned", 12288, .append, 12288, 5000),
        CrashShape("o-append-inside", 1000, .append, 1000, 100),
        CrashShape("writev-aligned", 8192, .writev, 8192, 9000),
        CrashShape("o-dsync-aligned-append", 8192, .dsyncWrite, 8192, 9000),
        CrashShape("coordinated-aligned-append", 8192, .sharedWrite, 8192, 9000),
        CrashShape("coordinated-shrink", 50000, .sharedTruncate, 12288, 0),
        CrashShape("writeback-into-empty", 0, .writeBackThenClose, 0, 10000),
        CrashShape("create-then-write", 0, .createThenWrite, 0, 9000),
        CrashShape("writeback-aligned-append", 8192, .writeBackThenClose, 8192, 20000),
        CrashShape("writeback-at-fsync", 5000, .writeBackThenSync, 5000, 20000),
        CrashShape("writeback-at-flush", 8192, .writeBackThenFlush, 8192, 9000),
        CrashShape("writeback-at-lock", 0, .writeBackThenLock, 0, 30000),
        // Version 5: appends inside the last chunk are records; every other change first seals them
        // into one chunk again (`compactTail`), an append that fills the chunk writes it whole.
        CrashShape("record-append-inside", 1000, .recordsThenWrite, 1000, 100),
        CrashShape("record-append-across-pages", 3900, .recordsThenWrite, 3900, 100),
        CrashShape("record-append-filling", 3900, .recordsThenWrite, 3900, 300),
        CrashShape("record-append-filling-across-chunks", 7000, .recordsThenWrite, 7000, 6000),
        CrashShape("record-overwrite-inside", 3900, .recordsThenWrite, 1000, 100),
        CrashShape("record-overwrite-across-end", 7000, .recordsThenWrite, 6000, 2000),
        CrashShape("record-shrink-inside", 3900, .recordsThenWrite, 2000, 0),
        CrashShape("record-grow", 3900, .recordsThenWrite, 10000, 0),
    ]

    init(_ name: String, _ before: Int, _ kind: Kind, _ offset: Int, _ count: Int) {
        (self.name, self.before, self.kind, self.offset, self.count) = (name, before, kind, offset, count)
    }
    init?(name: String) {
        guard let s = Self.all.first(where: { $0.name == name }) else { return nil }
        self = s
    }
}
