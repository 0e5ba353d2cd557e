// Writes the current-version test vectors (docs/test-vectors/README.md) into a directory:
//
//     ACSecureVectorWriter <directory>
//
// Each file holds `byte i = i mod 251` under the published key-encryption key 00 01 02 … 1f.
// `multi-chunk` is written one chunk per open, so its chunks name different key selectors.
// `records` and `multi-chunk-records` (version 5) are written in one open: a first write that
// leaves a short last chunk, then appends inside that chunk, each of which the engine seals alone
// as a tail record (the file ends with one record per append: checked from its footer).
// Nonces and selectors are random: a second run writes different bytes with the same meaning.
// FormatVectorTests runs it into a temporary directory and checks what it wrote.
#if canImport(Glibc)
import Glibc
#endif
import ACCrypto
import ACSecureServices
import ACSecureFileCore

let sizes: [(name: String, size: Int)] = [("empty", 0), ("one-byte", 1), ("one-chunk", 4096), ("chunk-plus-one", 4097), ("multi-chunk", 10_000)]
/// The record vectors: a first write, then appends (separate write calls, no sync in between).
let recordVectors: [(name: String, writes: [Int])] = [("records", [1000, 100, 200, 300]), ("multi-chunk-records", [10_000, 50, 60])]

func fail(_ message: String) -> Never {
    let line = Array("ACSecureVectorWriter: \(message)\n".utf8)
    _ = line.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
    exit(1)
}

let args = CommandLine.arguments
guard args.count == 2 else { fail("usage: ACSecureVectorWriter <directory>") }
let directory = args[1]
guard mkdir(directory, 0o755) == 0 || errno == EEXIST else { fail("\(directory): \(String(cString: strerror(errno)))") }
// The vectors are current-version files, whatever the environment asks new files to be.
unsetenv("ACSECURE_FORMAT_VERSION")

func removeOld(_ path: String) {
    guard unlink(path) == 0 || errno == ENOENT else { fail("\(path): \(String(cString: strerror(errno)))") }
}

/// The last 8 bytes of the file at `path`: a version 5 trailer's footer (u16 records, u16 base
/// bytes, u16 record bytes, u16 zero).
func footer(_ path: String) -> [Int] {
    let fd = open(path, O_RDONLY)
    guard fd >= 0 else { fail("\(path): \(String(cString: strerror(errno)))") }
    defer { close(fd) }
    var st = stat()
    guard fstat(fd, &st) == 0, st.st_size >= 8 else { fail("\(path): too short") }
    var bytes = [UInt8](repeating: 0, count: 8)
    guard bytes.withUnsafeMutableBytes({ pread(fd, $0.baseAddress, 8, st.st_size - 8) }) == 8 else { fail("\(path): read") }
    return (0..<4).map { Int(bytes[2 * $0]) << 8 | Int(bytes[2 * $0 + 1]) }
}

do {
    let kek = try KeyEncryptionKey(key: SecureBytes(copying: (0..<32).map { UInt8($0) }), keyClass: .cryptoBlock)
    for v in sizes {
        let path = directory + "/\(v.name).acsf"
        removeOld(path)
        let plaintext = (0..<v.size).map { UInt8($0 % 251) }
        let step = v.name == "multi-chunk" ? 4096 : max(v.size, 1)
        for from in stride(from: 0, to: max(v.size, 1), by: step) {
            let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT, mode: 0o644, services: FixedKeyProvider(kek: kek))
            let part = plaintext[from..<min(v.size, from + step)]
            if !part.isEmpty { _ = try part.withUnsafeBytes { try f.pwrite($0, at: Int64(from)) } }
            try f.close()
        }
    }
    for v in recordVectors {
        let path = directory + "/\(v.name).acsf"
        removeOld(path)
        let size = v.writes.reduce(0, +)
        let plaintext = (0..<size).map { UInt8($0 % 251) }
        let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT | O_APPEND, mode: 0o644, services: FixedKeyProvider(kek: kek))
        var from = 0
        for count in v.writes {
            let n = try plaintext[from..<from + count].withUnsafeBytes { try f.write($0) }
            guard n == count else { fail("\(path): short write (\(n) of \(count) bytes)") }
            from += count
        }
        try f.close()
        // Every append after the first write is a record: n = appends, record bytes = their sum.
        let appended = v.writes.dropFirst()
        let expected = [appended.count, size % 4096 - appended.reduce(0, +), appended.reduce(0, +), 0]
        guard footer(path) == expected else { fail("\(path): footer \(footer(path)), expected \(expected)") }
    }
} catch {
    fail("\(error)")
}
