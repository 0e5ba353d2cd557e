// A child process for ACSecureFoundationTests: it is SIGKILLed in the middle of writing, or it
// must trap when an ACFileHandle is misused as a plain FileHandle. Services come from the
// environment (ACSECURE_HOME, ACSECURE_APP_ID).
#if canImport(Glibc)
import Glibc
#endif
import Foundation
import ACSecureFoundation

/// The contents of version `k`: its number in the first 8 bytes, then pseudo-random bytes; the
/// length varies with `k`. The test regenerates it to check a file is one whole version.
func version(_ k: UInt64) -> Data {
    let count = 150_000 + Int(k % 7) * 20_011
    var out = Data(count: count)
    var state = k &* 0x9E37_79B9_7F4A_7C15
    out.withUnsafeMutableBytes { (buffer: UnsafeMutableRawBufferPointer) in
        for i in 0..<count {
            if i < 8 { buffer[i] = UInt8(truncatingIfNeeded: k >> (8 * UInt64(i))); continue }
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            buffer[i] = UInt8(truncatingIfNeeded: z ^ (z >> 27))
        }
    }
    return out
}

func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

let arguments = CommandLine.arguments
guard arguments.count >= 3 else {
    FileHandle.standardError.write(Data("usage: ACSecureFoundationCrashHelper <mode> <path> [atomic]\n".utf8))
    exit(2)
}
let mode = arguments[1], path = arguments[2]
do {
    switch mode {
    case "write-loop":
        // Rewrites the file with versions 1, 2, 3, ... until killed.
        let atomic = arguments.count > 3 && arguments[3] == "atomic"
        var k: UInt64 = 1
        while true {
            try version(k).write(toSecureFile: path, options: atomic ? .atomic : [])
            if k == 1 { say("ready") }
            k += 1
        }
    case "plain-write":
        let handle: FileHandle = try ACFileHandle.fileHandleForUpdating(atPath: path)
        say("ready")
        handle.write(Data("plaintext that must never reach the disk".utf8))
        say("survived")
    case "background-read":
        let handle = try ACFileHandle.fileHandleForReading(atPath: path)
        say("ready")
        handle.readInBackgroundAndNotify()
        say("survived")
    case "readability-handler":
        let handle = try ACFileHandle.fileHandleForReading(atPath: path)
        say("ready")
        handle.readabilityHandler = { _ in }
        say("survived")
    default:
        FileHandle.standardError.write(Data("unknown mode \(mode)\n".utf8))
        exit(2)
    }
} catch {
    FileHandle.standardError.write(Data("error: \(error.localizedDescription)\n".utf8))
    exit(1)
}
exit(0)
