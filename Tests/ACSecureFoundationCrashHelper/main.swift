// A child process for ACSecureFoundationTests: it is SIGKILLed in the middle of writing, it must
// stop when a plain ACFileHandle method meets an error, or it releases a handle without closing it. Services come from the
// environment (ACSECURE_HOME, ACSECURE_APP_ID).
#if canImport(Glibc)
import Glibc
#endif
import Foundation
import ACSecureFoundation
import ACSecureFileCore
import ACSecureServices
import ACSecureTestSupport

/// The contents of version `k` (shared with the test, which regenerates it to check a file is one whole version).
func version(_ k: UInt64) -> Data { Data(writeLoopVersion(k)) }

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
        // The versions are computed before the loop, so a kill lands in a write (what the tests
        // are about), not in computing the next version's bytes.
        let versions = (1...16).map { version(UInt64($0)) }
        var k = 0
        while true {
            try versions[k % versions.count].write(toSecureFile: path, options: atomic ? .atomic : [])
            if k == 0 { say("ready") }
            k += 1
        }
    #if ACSECURE_SYSCALL_MOCKING
    case "atomic-kill-at", "rename-kill-at":
        // Rewrites the file with version 2 atomically (or renames <path>.new, version 2, over it),
        // SIGKILLed right before system call number <killAt> (arguments[3]; -1: not at all).
        // Prints "C <calls>" when the operation completed.
        let killAt = Int(arguments[3]) ?? -1
        final class Counter: @unchecked Sendable { var calls = 0 }
        let counter = Counter()
        let renaming = mode == "rename-kill-at"
        if renaming { try version(2).write(toSecureFile: path + ".new", options: []) }
        let newVersion = version(2)
        SecureFileTesting.faultInjector = { _ in
            defer { counter.calls += 1 }
            if counter.calls == killAt { kill(getpid(), SIGKILL) }
            return nil
        }
        if renaming {
            try SecureFileSystem.rename(path + ".new", path)
        } else {
            try newVersion.write(toSecureFile: path, options: .atomic)
        }
        SecureFileTesting.faultInjector = nil
        say("C \(counter.calls)")
    #endif
    // The plain methods must stop the program with a message naming the throwing method.
    case "write-on-reader":
        let handle = ACFileHandle(forReadingAtPath: path)!
        say("ready")
        handle.write(Data("plaintext that must never reach the disk".utf8))
        say("survived")
    case "truncate-on-reader":
        let handle = ACFileHandle(forReadingAtPath: path)!
        say("ready")
        handle.truncateFile(atOffset: 0)
        say("survived")
    case "read-on-writer":
        let handle = ACFileHandle(forWritingAtPath: path)!
        say("ready")
        _ = handle.readData(ofLength: 3)
        say("survived")
    case "read-to-end-on-writer":
        let handle = ACFileHandle(forWritingAtPath: path)!
        say("ready")
        _ = handle.readDataToEndOfFile()
        say("survived")
    case "available-on-writer":
        let handle = ACFileHandle(forWritingAtPath: path)!
        say("ready")
        _ = handle.availableData
        say("survived")
    case "seek-too-far":
        let handle = ACFileHandle(forUpdatingAtPath: path)!
        say("ready")
        handle.seek(toFileOffset: UInt64(1) << 60)
        say("survived")
    case "seek-end-locked":
        let handle = ACFileHandle(forUpdatingAtPath: path)!
        try SecureServices.currentOrStartFromEnvironment().lock()
        say("ready")
        handle.seekToEndOfFile()
        say("survived")
    case "offset-after-close":
        let handle = ACFileHandle(forUpdatingAtPath: path)!
        try handle.close()
        say("ready")
        _ = handle.offsetInFile
        say("survived")
    case "synchronize-after-close":
        let handle = ACFileHandle(forUpdatingAtPath: path)!
        handle.closeFile()
        say("ready")
        handle.synchronizeFile()
        say("survived")
    case "close-twice":
        let handle = ACFileHandle(forUpdatingAtPath: path)!
        handle.closeFile()
        say("ready")
        handle.closeFile()
        say("survived")
    #if ACSECURE_SYSCALL_MOCKING  // fault injection: debug (test) builds only
    case "synchronize-fails":
        // The writes stay in the cache, then the fsync fails: the data may not be durable.
        let handle = ACFileHandle(forUpdatingAtPath: path)!
        say("ready")
        SecureFileTesting.faultInjector = { $0 == .fsync ? .fail(EIO) : nil }
        handle.synchronizeFile()
        say("survived")
    #endif

    // A released handle flushes and closes.
    case "release-then-exit":
        do {
            let handle = ACFileHandle(forWritingAtPath: path)!
            handle.write(Data("written by \(mode)".utf8))
        }
        say("ready")
    case "closefile-then-exit":
        let handle = ACFileHandle(forWritingAtPath: path)!
        handle.write(Data("written by \(mode)".utf8))
        handle.closeFile()
        say("ready")
    #if ACSECURE_SYSCALL_MOCKING
    case "release-flush-fails":
        do {
            let handle = ACFileHandle(forWritingAtPath: path)!
            handle.write(Data("lost".utf8))
            // Writes are in the file when they return (write-through): the close is what fails.
            SecureFileTesting.faultInjector = { $0 == .close ? .fail(EIO) : nil }
        }
        say("released")
    #endif
    default:
        FileHandle.standardError.write(Data("unknown mode \(mode)\n".utf8))
        exit(2)
    }
} catch {
    FileHandle.standardError.write(Data("error: \(error.localizedDescription)\n".utf8))
    exit(1)
}
exit(0)
