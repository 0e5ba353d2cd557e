// The harness runs on the in-memory file system, which exists only in builds with system-call
// mocking (debug, and the fuzzers' release build): elsewhere (a release build of the main package)
// this file compiles to nothing.
#if ACSECURE_SYSCALL_MOCKING
#if canImport(Glibc)
import Glibc
#endif
import ACCrypto
import ACSecureServices
@_spi(Testing) import ACSecureFileCore
@_spi(Testing) import ACSystemCallsTesting

/// Fuzz target 1: untrusted bytes as a secure file (header, chunks, trailer), opened and read with
/// the right key. The only acceptable outcomes are the original plaintext (at the offsets read) or
/// `ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR`; anything else (other errors, wrong bytes, a wrong size that
/// reads without error) is a finding. Crashes and hangs are caught by libFuzzer and ASan.
///
/// A file whose end (or the chunk its tail copy holds) does not authenticate may instead be restored
/// from a tail copy (version 4): then it must read as the file was at one of its syncs (the template
/// was synced once at `syncedSize` bytes, and created empty), and say so (`endRestoredFromTailCopy`).
///
/// Input: byte 0 chooses the mode. Mode 0 takes the rest as the whole file. Other modes start from a
/// valid two-chunk file (header, tail-copy slots, 2 chunks, trailer) and apply the rest as 4-byte edits: XOR a
/// byte, cut the file, append bytes (random or copied from the file), copy 32 bytes elsewhere, or
/// move a whole physical chunk over another one.
public enum SecureFileParseFuzzer {
    struct Template {
        let provider: FixedKeyProvider
        let plaintext: [UInt8]
        let file: [UInt8]
        let other: [UInt8]  // another valid file of the same key, for foreign chunks
        let path: String
    }

    nonisolated(unsafe) private static var cached: Template?

    static let chunkSize = FileLayout().chunkSize
    static let physicalChunk = FileLayout().physicalChunkSize
    static let trailerSize = FileLayout().trailerSize
    static let chunkCount = 2
    static let dataOffset = Int(FileLayout().dataOffset)
    /// The template is synced once, at this size (inside chunk 0: its tail copy holds a short chunk).
    static let syncedSize = 2000

    static var template: Template {
        if let cached { return cached }
        let provider: FixedKeyProvider
        do {
            let kekBytes = try SecureBytes(copying: [UInt8](repeating: 0x5A, count: 32))
            provider = FixedKeyProvider(kek: try KeyEncryptionKey(key: kekBytes, keyClass: .cryptoBlock))
        } catch {
            fatalError("cannot make the fuzzing key: \(error)")
        }
        // A full chunk and a short last one; text-like, so wrong bytes would not look random.
        let plaintext = (0..<((chunkCount - 1) * chunkSize + 1234)).map { UInt8(truncatingIfNeeded: ($0 * 7) ^ ($0 >> 8)) }
        func make(_ name: String) -> [UInt8] {
            let path = "/fuzz/" + name
            do {
                let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT | O_TRUNC, mode: 0o600, key: .app, services: provider)
                _ = try plaintext.withUnsafeBytes { try f.pwrite(UnsafeRawBufferPointer(rebasing: $0[..<syncedSize]), at: 0) }
                try f.sync()
                _ = try plaintext.withUnsafeBytes { try f.pwrite(UnsafeRawBufferPointer(rebasing: $0[syncedSize...]), at: Int64(syncedSize)) }
                try f.close()
            } catch {
                fatalError("cannot write the template secure file: \(error)")
            }
            return FuzzFileSystem.shared.contents(path) ?? []
        }
        let (a, b) = FuzzFileSystem.run { _ in (make("template-a"), make("template-b")) }
        let t = Template(provider: provider, plaintext: plaintext, file: a, other: b, path: "/fuzz/parse-input")
        cached = t
        return t
    }

    /// Runs one input. Returns a finding, or nil when the engine behaved.
    public static func run(_ input: [UInt8]) -> FuzzFinding? {
        let t = template
        var cursor = ByteCursor(input)
        let file = cursor.isAtEnd ? [] : (cursor.u8() % 4 == 0 ? Array(input.dropFirst()) : mutate(t, &cursor))
        return FuzzFileSystem.run { fs in
            fs.setContents(t.path, file)
            return check(t, fileBytes: file, readStep: 61 + Int(input.last ?? 0) * 97)
        }
    }

    static func mutate(_ t: Template, _ c: inout ByteCursor) -> [UInt8] {
        var b = t.file
        var edits = 0
        while !c.isAtEnd && edits < 64 {
            edits += 1
            let kind = c.u8()
            let x = c.u16()
            let y = c.u8()
            switch kind % 6 {
            case 0, 1:  // XOR one byte (biased towards the header and the trailer)
                guard !b.isEmpty else { continue }
                let at = kind & 0x80 != 0 ? x % min(b.count, 128) : (kind & 0x40 != 0 ? b.count - 1 - x % min(b.count, trailerSize) : x % b.count)
                b[at] ^= y == 0 ? 1 : y
            case 2:  // cut
                b.removeLast(b.count - x % (b.count + 1))
            case 3:  // append: random-looking bytes, or a copy of a chunk of the other file
                if y & 1 == 0 {
                    b += (0..<Int(y)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ x) }
                } else {
                    let index = x % chunkCount
                    let start = dataOffset + index * physicalChunk
                    b += t.other[start..<min(t.other.count, start + physicalChunk)]
                }
            case 4:  // copy 32 bytes elsewhere in the file
                guard b.count > 32 else { continue }
                let from = x % (b.count - 32)
                let to = (Int(y) << 6) % (b.count - 32)
                let piece = Array(b[from..<from + 32])
                b.replaceSubrange(to..<to + 32, with: piece)
            default:  // a whole physical chunk from this or the other file over chunk y
                let src = x & 0x100 != 0 ? t.other : t.file
                let i = x % chunkCount, j = Int(y) % chunkCount
                let from = dataOffset + i * physicalChunk, to = dataOffset + j * physicalChunk
                let n = min(physicalChunk, src.count - from, b.count - to)
                guard n > 0 else { continue }
                b.replaceSubrange(to..<to + n, with: src[from..<from + n])
            }
        }
        return b
    }

    /// Opens and reads `fileBytes` (already in the in-memory file system at `t.path`); every successful read must match.
    static func check(_ t: Template, fileBytes: [UInt8], readStep: Int) -> FuzzFinding? {
        let f: SecureFile
        do {
            f = try SecureFile.open(t.path, flags: O_RDONLY, key: .app, services: t.provider)
        } catch {
            return error.code == .badKeyOrCorruptData ? nil : FuzzFinding("open failed with \(error.code.name) errno \(error.errno): \(error.message)")
        }
        defer { try? f.close() }
        let restored: Bool
        do { restored = try f.endRestoredFromTailCopy } catch {
            return error.code == .badKeyOrCorruptData ? nil : FuzzFinding("end check failed with \(error.code.name): \(error.message)")
        }
        if fileBytes.isEmpty {
            // An empty file is a new secure file with no content.
            do {
                let size = try f.size
                return size == 0 ? nil : FuzzFinding("empty file reports size \(size)")
            } catch { return FuzzFinding("empty file: \(error.code.name)") }
        }
        // Sequential reads of an odd step, then whole-file reads; then a pread right at the end.
        var offset = 0
        var buf = [UInt8](repeating: 0, count: readStep)
        while true {
            let at = Int64(offset)
            let r: Result<Int, SecureFileError> = buf.withUnsafeMutableBytes { b in
                Result { () throws(SecureFileError) -> Int in try f.pread(into: b, at: at) }
            }
            switch r {
            case .failure(let e):
                if e.code != .badKeyOrCorruptData {
                    return FuzzFinding("read at \(offset) failed with \(e.code.name) errno \(e.errno): \(e.message)")
                }
                // The rest of the file must not suddenly read past the failure with wrong bytes:
                // keep going chunk by chunk, each read must be right or fail cleanly.
                offset = (offset / chunkSize + 1) * chunkSize
                if offset > t.plaintext.count + chunkSize { return nil }
                continue
            case .success(let n):
                if n == 0 {
                    // End of file, authenticated by the trailer: it must be the real end.
                    let size: Int64
                    do { size = try f.size } catch { return FuzzFinding("size after end of file: \(error.code.name)") }
                    let end = restored ? [0, Int64(syncedSize)] : [Int64(t.plaintext.count)]
                    return end.contains(size) && offset >= size ? nil
                        : FuzzFinding("authenticated end of file at \(offset) (size \(size)\(restored ? ", restored from a tail copy" : "")), the plaintext has \(t.plaintext.count) bytes")
                }
                guard offset + n <= t.plaintext.count else {
                    return FuzzFinding("read \(n) bytes at \(offset), past the plaintext's \(t.plaintext.count) bytes")
                }
                let same = buf.withUnsafeBytes { b in t.plaintext.withUnsafeBytes { memcmp(b.baseAddress!, $0.baseAddress! + offset, n) == 0 } }
                if !same {
                    return FuzzFinding("read \(n) bytes at \(offset) that differ from the plaintext")
                }
                offset += n
            }
        }
    }
}
#endif
