// The child process of ACSecureSharingTests: plays another app (another app ID on the same store),
// an extension that has no secure services (only a crypto block), or a fresh process for measurements.
// One command per run; the answer is one line on standard output: "OK ..." or "ERR <domain> <code> <errno>".
#if canImport(Glibc)
import Glibc
#endif
import Foundation
import ACCrypto
import ACSecureFileCore
import ACSecureServices
import ACSecureSharing

func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }
func unhex(_ s: String) -> [UInt8] {
    var out: [UInt8] = []
    var i = s.startIndex
    while i < s.endIndex {
        let j = s.index(i, offsetBy: 2)
        out.append(UInt8(s[i..<j], radix: 16)!)
        i = j
    }
    return out
}

func answer(_ line: String) -> Never {
    print(line)
    exit(0)
}

func fail(_ error: Error) -> Never {
    if let e = error as? SecureFileError { answer("ERR ACErrorDomain \(e.code.rawValue) \(e.errno)") }
    let ns = error as NSError
    answer("ERR \(ns.domain) \(ns.code) 0")
}

func services(_ store: String, _ appID: String) -> SecureServices {
    do { return try SecureServices(appID: appID, storeDirectory: store, argonCost: .minimum) } catch { fail(error) }
}

func key(_ s: String) -> KeySelection { s == "app" ? .app : .group(String(s.dropFirst("group:".count))) }

func readAll(_ f: SecureFile) throws -> [UInt8] {
    var out: [UInt8] = []
    var buf = [UInt8](repeating: 0, count: 65536)
    var at: Int64 = 0
    while true {
        let n = try buf.withUnsafeMutableBytes { try f.pread(into: $0, at: at) }
        if n == 0 { return out }
        out += buf[0..<n]
        at += Int64(n)
    }
}

func maxRSSKiB() -> Int {
    var u = rusage()
    getrusage(RUSAGE_SELF.rawValue, &u)
    return u.ru_maxrss
}

let args = Array(CommandLine.arguments.dropFirst())
guard let command = args.first else { answer("ERR usage 0 0") }

do {
    switch command {
    case "write":  // write <store> <appID> <app|group:ID> <path> <hex>
        let s = services(args[1], args[2])
        let f = try SecureFile.open(args[4], flags: O_WRONLY | O_CREAT | O_TRUNC, mode: 0o600, key: key(args[3]), services: s)
        _ = try unhex(args[5]).withUnsafeBytes { try f.write($0) }
        try f.close()
        answer("OK")
    case "read":  // read <store> <appID> <app|group:ID> <path>
        let s = services(args[1], args[2])
        let f = try SecureFile.open(args[4], flags: O_RDONLY, key: key(args[3]), services: s)
        let bytes = try readAll(f)
        try f.close()
        answer("OK \(hex(bytes))")
    case "wrap":  // wrap <cryptoBlockFile> <src> <dst> <name|->: an extension, without secure services
        guard getenv("ACSECURE_HOME") == nil, getenv("ACSECURE_APP_ID") == nil, SecureServices.current == nil else {
            answer("ERR setup 0 0")  // the extension must not be able to reach a store
        }
        let block = try Data(contentsOf: URL(fileURLWithPath: args[1]))
        try ACWrappedFile.wrapFile(atPath: args[2], toPath: args[3], cryptoBlock: block, actualFileName: args[4] == "-" ? nil : args[4])
        // Still no services: wrapping used the crypto block alone.
        answer(SecureServices.current == nil ? "OK" : "ERR services-started 0 0")
    case "plain-on-error":  // plain-on-error <store> <appID> <path> <method>: a plain method meets an error
        // Must stop with a message naming ACWrappedFileReadHandle, the error and the throwing method.
        let s = services(args[1], args[2])
        let h = try ACUnwrappedFile.readWrappedFile(atPath: args[3], sharedGroupID: nil, services: s)
        guard h.readData(ofLength: 1).count == 1 else { answer("ERR first-read 0 0") }
        switch args[4] {
        case "readData": s.lock(); _ = h.readData(ofLength: 1)
        case "readDataToEndOfFile": s.lock(); _ = h.readDataToEndOfFile()
        case "availableData": s.lock(); _ = h.availableData
        case "seekToEndOfFile": s.lock(); h.seekToEndOfFile()
        case "seekTooFar": h.seek(toFileOffset: UInt64.max)
        case "offsetInFile": try h.close(); _ = h.offsetInFile
        default: answer("ERR usage 0 0")
        }
        answer("OK survived")
    case "unwrap":  // unwrap <store> <appID> <groupID|-> <path>
        let s = services(args[1], args[2])
        let h = try ACUnwrappedFile.readWrappedFile(atPath: args[4], sharedGroupID: args[3] == "-" ? nil : args[3], services: s)
        var bytes: [UInt8] = []
        while true {
            guard let d = try h.read(upToCount: 1000) else { break }
            bytes += d
        }
        try h.close()
        answer("OK \(hex(Array(h.actualFileName.utf8))) \(hex(bytes))")
    case "rotate-rss":  // rotate-rss <store> <appID> <app|group:ID> <path>: peak RSS before and after
        let s = services(args[1], args[2])
        _ = try s.keyEncryptionKey(for: .app)
        let before = maxRSSKiB()
        try SecureSharing.rotateDataKey(args[4], key: key(args[3]), services: s)
        answer("OK \(before) \(maxRSSKiB())")
    #if ACSECURE_SYSCALL_MOCKING  // counts calls through the test hook: debug (test) builds only
    case "reshare-pwrites":  // reshare-pwrites <store> <appID> <from> <to> <path>: engine pwrite calls made
        let s = services(args[1], args[2])
        let counter = Counter()
        SecureFileTesting.faultInjector = { call in
            if call == .pwrite { counter.add() }
            return nil
        }
        try SecureSharing.reshare(args[5], from: key(args[3]), to: key(args[4]), services: s)
        SecureFileTesting.faultInjector = nil
        answer("OK \(counter.value)")
    #endif
    case "lifetime":  // lifetime <seconds>: keeps a sensitive object alive that long (AC_SENSITIVE_DATA_MAX_LIFETIME test)
        let secret = ACSensitiveData(data: Data([0xc0, 0xff, 0xee]))
        usleep(useconds_t(Double(args[1])! * 1e6))
        withExtendedLifetime(secret) {}
        answer("OK")
    default:
        answer("ERR usage 0 0")
    }
} catch {
    fail(error)
}

final class Counter: @unchecked Sendable {
    private let lock = PThreadMutex()
    private var n = 0
    func add() { lock.withLock { n += 1 } }
    var value: Int { lock.withLock { n } }
}
