// The child process of CrashConsistencyTests: writes to one secure file until it is SIGKILLed.
//
//     ACSecureCrashChild <store directory> <file> <seed> <operations>
//     ACSecureCrashChild --harden          (ProcessHardeningTests, see below)
//
// Protocol on stdout, one line per event, each written with a single write(2) so the parent sees
// exactly what was started:
//     R                    the file exists and is synced (empty); the parent may kill from now on
//     W <k> <offset> <n>   operation k is about to pwrite n bytes (CrashPattern.byte(k, j)) at offset
//     T <k> <length>       operation k is about to ftruncate to length
//     S <k>                fsync returned: every operation announced before this line is durable
//     E <message>          an operation failed (the parent treats this as a test failure)
#if canImport(Glibc)
import Glibc
#endif
import ACSecureServices
import ACSecureFileCore

func emit(_ line: String) {
    let bytes = Array((line + "\n").utf8)
    _ = bytes.withUnsafeBytes { Glibc.write(1, $0.baseAddress, $0.count) }
}

let args = CommandLine.arguments

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

/// SplitMix64, as in the tests.
nonisolated(unsafe) var state = seed
func next() -> UInt64 {
    state &+= 0x9E37_79B9_7F4A_7C15
    var z = state
    z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
    z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
    return z ^ (z >> 31)
}
func below(_ n: Int) -> Int { Int(next() % UInt64(n)) }

/// Byte j of operation k's data: must match CrashPattern in the tests.
@inline(__always) func pattern(_ k: Int, _ j: Int) -> UInt8 {
    UInt8(truncatingIfNeeded: (UInt32(truncatingIfNeeded: j &+ k &* 7919) &* 0x9E37_79B1) >> 24)
}

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
            let data = (0..<n).map { pattern(k, $0) }
            _ = try data.withUnsafeBytes { try file.pwrite($0, at: off) }
            size = max(size, off + Int64(n))
        case 4..<7:  // append
            let n = 1 + below(below(3) == 0 ? 2 * chunk : 300)
            emit("W \(k) \(size) \(n)")
            let data = (0..<n).map { pattern(k, $0) }
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
