// The harness runs on the in-memory file system, which exists only in builds with system-call
// mocking (debug, and the fuzzers' release build): elsewhere (a release build of the main package)
// this file compiles to nothing.
#if ACSECURE_SYSCALL_MOCKING
#if canImport(Glibc)
import Glibc
#endif
import ACSecureServices
@_spi(Testing) import ACSecureFileCore
@_spi(Testing) import ACSystemCallsTesting
@_spi(Fuzzing) import ACSecureSharing

/// Fuzz target 5: extension wrapped files (`ACUnwrappedFile`, "ACWF" files: a secure file of key class 3
/// whose plaintext starts with the name record "ACWF" ‖ version 1 ‖ 0 ‖ u16 n ‖ n bytes of name).
/// Two kinds of attacker: a provider holding the key, who can seal any plaintext (so the name record
/// parser sees arbitrary bytes), and anyone who can change the file (header, chunks, length).
/// Checked against an independent reading of the record's rules: an accepted record gives back its
/// own name and exactly the bytes after it; a refused one is `ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR`; a
/// file without the secure file magic or key class 3 is "unknown wrapper format"; an edited file
/// either reads as the original or fails cleanly.
///
/// Input: byte 0 % 3 = 0: the rest is the plaintext, sealed as a wrapped file; 1: the valid record
/// and contents with the rest as (offset < 64, XOR) edits of the plaintext; 2: the valid wrapped
/// file's bytes with the rest as (u16 offset, XOR) edits, byte 1 cutting its end. The last byte
/// chooses the read size.
public enum WrappedFileParseFuzzer {
    struct State {
        let services: SecureServices
        let provider: any KeyProvider
        let plaintext: [UInt8]  // record ‖ contents
        let file: [UInt8]  // the sealed wrapped file
    }

    static let path = "/fuzz/wrapped"
    static let name = Array("report.txt".utf8)
    static let contents: [UInt8] = (0..<5000).map { UInt8(truncatingIfNeeded: $0 &* 7 ^ $0 >> 7) }

    nonisolated(unsafe) private static var cached: State?

    static var state: State {
        if let cached { return cached }
        let services: SecureServices
        do {
            services = try SecureServices(appID: "com.example.fuzz-wrapped", storeDirectory: FuzzScratch.path("wrapped-store"), argonCost: .minimum)
        } catch { fatalError("cannot create the fuzzing store: \(error)") }
        let provider = services.wrappedFileKeyProvider(groupID: nil)
        let plaintext = Array("ACWF".utf8) + [1, 0, 0, UInt8(name.count)] + name + contents
        let file = FuzzFileSystem.run { fs -> [UInt8] in
            if let f = seal(plaintext, provider) { fatalError("cannot write the template wrapped file: \(f)") }
            return fs.contents(path) ?? []
        }
        let s = State(services: services, provider: provider, plaintext: plaintext, file: file)
        cached = s
        return s
    }

    /// Writes `plaintext` as the wrapped file at `path` (what a provider holding the key can do).
    static func seal(_ plaintext: [UInt8], _ provider: any KeyProvider) -> FuzzFinding? {
        do {
            let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT | O_TRUNC, mode: 0o600, services: provider)
            if !plaintext.isEmpty { _ = try plaintext.withUnsafeBytes { try f.pwrite($0, at: 0) } }
            try f.close()
            return nil
        } catch {
            return FuzzFinding("sealing a wrapped file failed: \(error)")
        }
    }

    /// The record's rules, read from the layout comment (WrappedFileLayout.swift): the name and the
    /// offset of the contents, or nil when the record must be refused.
    static func expectedRecord(_ p: [UInt8]) -> (name: [UInt8], start: Int)? {
        guard p.count >= 8, p[0..<4].elementsEqual("ACWF".utf8), p[4] == 1, p[5] == 0 else { return nil }
        let n = Int(p[6]) << 8 | Int(p[7])
        guard (1...1024).contains(n), p.count >= 8 + n else { return nil }
        let name = Array(p[8..<8 + n])
        let validUTF8 = Array(String(decoding: name, as: UTF8.self).utf8) == name
        guard validUTF8, !name.contains(0), !name.contains(UInt8(ascii: "/")), name != [46], name != [46, 46] else { return nil }
        return (name, 8 + n)
    }

    /// Runs one input. Returns a finding, or nil when the reader behaved.
    public static func run(_ input: [UInt8]) -> FuzzFinding? {
        let st = state
        guard let mode = input.first else { return nil }
        let readStep = 1 + Int(input.last ?? 0) * 53
        return FuzzFileSystem.run { fs in
            switch mode % 3 {
            case 0, 1:
                var plaintext = mode % 3 == 0 ? Array(input.dropFirst()) : st.plaintext
                if mode % 3 == 1 {
                    var i = 1
                    while i + 1 < input.count {
                        plaintext[Int(input[i]) % 64] ^= input[i + 1]
                        i += 2
                    }
                }
                if let f = seal(plaintext, st.provider) { return f }
                return checkSealed(plaintext, st, readStep)
            default:
                var file = st.file
                var i = 2
                while i + 2 < input.count {
                    let at = (Int(input[i]) << 8 | Int(input[i + 1])) % file.count
                    file[at] ^= input[i + 2] == 0 ? 1 : input[i + 2]
                    i += 3
                }
                if input.count > 1, input[1] != 0 { file.removeLast(min(file.count, Int(input[1]))) }
                fs.setContents(path, file)
                return checkEdited(file, st, readStep)
            }
        }
    }

    static func checkSealed(_ plaintext: [UInt8], _ st: State, _ readStep: Int) -> FuzzFinding? {
        let expected = expectedRecord(plaintext)
        switch WrappedFileParser.read(path: path, services: st.services, readStep: readStep) {
        case .unknownFormat(let m):
            return FuzzFinding("a sealed wrapped file was called unknown: \(m)")
        case .failed(let e):
            if expected != nil { return FuzzFinding("a valid record was refused: \(e.code.name) \(e.message)") }
            return e.code == .badKeyOrCorruptData ? nil : FuzzFinding("a bad record was refused with \(e.code.name): \(e.message)")
        case .opened(let name, let length, let contents):
            guard let expected else { return FuzzFinding("a malformed record was accepted (name \(name.utf8.count) bytes)") }
            guard Array(name.utf8) == expected.name else { return FuzzFinding("the record's name was misread") }
            guard length == Int64(plaintext.count - expected.start) else { return FuzzFinding("length \(length), expected \(plaintext.count - expected.start)") }
            switch contents {
            case .failure(let e): return FuzzFinding("reading an intact wrapped file failed: \(e.code.name) \(e.message)")
            case .success(let bytes):
                let same = bytes.count == plaintext.count - expected.start
                    && (bytes.isEmpty || bytes.withUnsafeBytes { b in plaintext.withUnsafeBytes { memcmp(b.baseAddress!, $0.baseAddress! + expected.start, b.count) == 0 } })
                return same ? nil : FuzzFinding("the contents read differ (\(bytes.count) bytes)")
            }
        }
    }

    static func checkEdited(_ file: [UInt8], _ st: State, _ readStep: Int) -> FuzzFinding? {
        let looksWrapped = file.count >= 16 && file[0..<4].elementsEqual("ACSF".utf8) && file[9] == 3
        switch WrappedFileParser.read(path: path, services: st.services, readStep: readStep) {
        case .unknownFormat(let m):
            return looksWrapped ? FuzzFinding("a file with the wrapped header was called unknown: \(m)") : nil
        case .failed(let e):
            if !looksWrapped { return FuzzFinding("a file without the wrapped header was not called unknown: \(e.code.name)") }
            return e.code == .badKeyOrCorruptData ? nil : FuzzFinding("an edited wrapped file failed with \(e.code.name): \(e.message)")
        case .opened(let name, _, let contents):
            guard looksWrapped, Array(name.utf8) == Self.name else { return FuzzFinding("an edited wrapped file opened with another name or header") }
            switch contents {
            case .failure(let e):
                return e.code == .badKeyOrCorruptData ? nil : FuzzFinding("reading an edited wrapped file failed with \(e.code.name): \(e.message)")
            case .success(let bytes):
                let same = bytes.count == Self.contents.count && sameBytes(bytes, Self.contents, count: bytes.count)
                return same ? nil : FuzzFinding("an edited wrapped file read \(bytes.count) bytes that are not the original")
            }
        }
    }
}
#endif
