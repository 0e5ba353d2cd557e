// Writes the current-version test vectors (docs/test-vectors/README.md) into a directory:
//
//     ACSecureVectorWriter <directory>
//
// Each file holds `byte i = i mod 251` under the published key-encryption key 00 01 02 … 1f.
// `multi-chunk` is written one chunk per open, so its chunks name different key selectors.
// Nonces and selectors are random: a second run writes different bytes with the same meaning.
// FormatVectorTests runs it into a temporary directory and checks what it wrote.
#if canImport(Glibc)
import Glibc
#endif
import ACCrypto
import ACSecureServices
import ACSecureFileCore

let sizes: [(name: String, size: Int)] = [("empty", 0), ("one-byte", 1), ("one-chunk", 4096), ("chunk-plus-one", 4097), ("multi-chunk", 10_000)]

func fail(_ message: String) -> Never {
    let line = Array("ACSecureVectorWriter: \(message)\n".utf8)
    _ = line.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
    exit(1)
}

let args = CommandLine.arguments
guard args.count == 2 else { fail("usage: ACSecureVectorWriter <directory>") }
let directory = args[1]
guard mkdir(directory, 0o755) == 0 || errno == EEXIST else { fail("\(directory): \(String(cString: strerror(errno)))") }

do {
    let kek = try KeyEncryptionKey(key: SecureBytes(copying: (0..<32).map { UInt8($0) }), keyClass: .cryptoBlock)
    for v in sizes {
        let path = directory + "/\(v.name).acsf"
        guard unlink(path) == 0 || errno == ENOENT else { fail("\(path): \(String(cString: strerror(errno)))") }
        let plaintext = (0..<v.size).map { UInt8($0 % 251) }
        let step = v.name == "multi-chunk" ? 4096 : max(v.size, 1)
        for from in stride(from: 0, to: max(v.size, 1), by: step) {
            let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT, mode: 0o644, services: FixedKeyProvider(kek: kek))
            let part = plaintext[from..<min(v.size, from + step)]
            if !part.isEmpty { _ = try part.withUnsafeBytes { try f.pwrite($0, at: Int64(from)) } }
            try f.close()
        }
    }
} catch {
    fail("\(error)")
}
