#if canImport(Glibc)
import Glibc
#endif
import ArgumentParser
import ACCrypto
import ACSecureFileCore
import ACSecureServices

// MARK: verify

enum VerifyOutcome {
    case ok(size: Int64, chunks: Int64)
    /// `chunk` is the first chunk that failed, nil when the header, key or length failed.
    case failed(reason: String, chunk: Int64?)
}

/// Authenticates the length (trailer) and then every chunk of `path`, in order, through guarded
/// memory; stops at the first failure. Throws only when it cannot tell (no keys, I/O errors).
func verifySecureFile(_ path: String, groups: [String], services: SecureServices) throws(CLIError) -> VerifyOutcome {
    let info: SecureFileInfo
    do { info = try SecureFileSystem.info(path) } catch {
        if error.code == .badKeyOrCorruptData { return .failed(reason: CLIError(error).message, chunk: nil) }
        throw CLIError(error)
    }
    let key: KeySelection
    do { key = try keySelection(for: path, info: info, groups: groups, services: services) } catch {
        return .failed(reason: error.message, chunk: nil)
    }
    let file: SecureFile
    do { file = try SecureFile.open(path, flags: O_RDONLY, key: key, services: services) } catch {
        if error.code == .badKeyOrCorruptData { return .failed(reason: CLIError(error).message, chunk: nil) }
        throw CLIError(error)
    }
    defer { try? file.close() }

    // The length first: the engine authenticates it at open and reports anything after the
    // authenticated end (a torn write or appended bytes), which reads never return.
    let size: Int64
    do {
        let extra = try file.bytesAfterAuthenticatedEnd
        if extra > 0 {
            return .failed(reason: "\(path): \(extra) bytes follow the authenticated end of the file (a torn write or tampering; \(ACErrorCode.badKeyOrCorruptData.name))", chunk: nil)
        }
        size = try file.size
    } catch {
        if error.code != .badKeyOrCorruptData { throw CLIError(error) }
        return .failed(reason: "\(path): length check failed: the file was truncated, extended or torn (\(ACErrorCode.badKeyOrCorruptData.name))", chunk: nil)
    }
    let layout = FileLayout(chunkShift: UInt8(info.chunkSize.trailingZeroBitCount))
    let chunks = layout.chunkCount(forSize: size)
    let chunkSize = info.chunkSize
    let block = max(chunkSize, streamBufferSize / chunkSize * chunkSize)
    let buffer = SecureBytes(count: block)

    /// Reads `count` bytes at `offset`; the engine authenticates every chunk it decrypts.
    func readAll(at offset: Int64, count: Int) throws(SecureFileError) {
        try buffer.withUnsafeMutableBytes { (b) throws(SecureFileError) in
            var done = 0
            while done < count {
                let n = try file.pread(into: UnsafeMutableRawBufferPointer(rebasing: b[done..<count]), at: offset + Int64(done))
                if n == 0 { throw .ace(.badKeyOrCorruptData, "\(path): ended early at offset \(offset + Int64(done))") }
                done += n
            }
        }
    }

    // The length first: a read at the end of the file checks only the trailer.
    do {
        _ = try buffer.withUnsafeMutableBytes { (b) throws(SecureFileError) -> Int in
            try file.pread(into: UnsafeMutableRawBufferPointer(rebasing: b[0..<1]), at: size)
        }
    } catch {
        if error.code != .badKeyOrCorruptData { throw CLIError(error) }
        return .failed(reason: "\(path): length check failed: the file was truncated, extended or torn (\(ACErrorCode.badKeyOrCorruptData.name))", chunk: nil)
    }

    let progress = Progress.make("verify \(path)", total: size)
    var offset: Int64 = 0
    while offset < size {
        let count = Int(min(Int64(block), size - offset))
        do { try readAll(at: offset, count: count) } catch {
            if error.code != .badKeyOrCorruptData { throw CLIError(error) }
            // Narrow the failing block down to its first bad chunk.
            var chunkStart = offset
            while chunkStart < offset + Int64(count) {
                let n = Int(min(Int64(chunkSize), size - chunkStart))
                do { try readAll(at: chunkStart, count: n) } catch {
                    let index = chunkStart / Int64(chunkSize)
                    progress?.finish()
                    return .failed(reason: "\(path): chunk \(index) of \(chunks) (plaintext offset \(chunkStart), file offset \(layout.chunkOffset(index))) failed authentication (\(ACErrorCode.badKeyOrCorruptData.name))", chunk: index)
                }
                chunkStart += Int64(n)
            }
            progress?.finish()
            return .failed(reason: CLIError(error).message, chunk: nil)
        }
        offset += Int64(count)
        progress?.update(offset)
    }
    progress?.finish()
    return .ok(size: size, chunks: chunks)
}

struct Verify: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Authenticate every chunk and the length of secure files.",
        discussion: """
            Prints one line per file: OK, or FAILED with the first bad chunk's index and offsets (or \
            why the header, key or length failed). Nothing of the plaintext is printed. Exits with 5 \
            if any file failed, 3 without keys, 2 on I/O errors.
            """)

    @OptionGroup var global: GlobalOptions
    @OptionGroup var keys: KeyOptions
    @Argument(help: "Secure files.") var files: [String]

    func validate() throws {
        if files.isEmpty { throw ValidationError("name at least one file") }
    }

    func run() throws {
        let services = try global.openServices()
        var failed = 0
        var other: CLIError?
        for path in files {
            do {
                switch try verifySecureFile(path, groups: keys.groups, services: services) {
                case .ok(let size, let chunks):
                    print("OK      \(path): \(size) bytes, \(chunks) chunks and the length authenticated")
                case .failed(let reason, _):
                    failed += 1
                    print("FAILED  \(reason)")
                }
            } catch {
                print("ERROR   \(error.message)")
                if other == nil { other = error }
            }
        }
        fflush(nil)
        if failed > 0 {
            throw CLIError(.verifyFailed, "\(failed) of \(files.count) file\(files.count == 1 ? "" : "s") failed verification")
        }
        if let other { throw CLIError(other.status, "could not verify every file") }
    }
}

// MARK: stat

struct Stat: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show a secure file's header: sizes, chunk size, key class, file ID.",
        discussion: """
            Reads the header only: no key is needed and nothing is decrypted. When the store can be \
            opened without asking (no passcode, or $ACSECURE_PASSCODE), also says whether this app's \
            key (or a --group key) opens the file.
            """)

    @OptionGroup var global: GlobalOptions
    @OptionGroup var keys: KeyOptions
    @Argument(help: "Secure files.") var files: [String]

    func validate() throws {
        if files.isEmpty { throw ValidationError("name at least one file") }
    }

    func run() throws {
        let services = global.openServicesIfQuietlyPossible()
        try forEachPath(files) { (path) throws(CLIError) in
            let info = try secureInfo(path)
            let layout = FileLayout(chunkShift: UInt8(info.chunkSize.trailingZeroBitCount))
            print(path)
            print("  plaintext size:  \(info.plaintextSize) bytes (\(humanSize(info.plaintextSize)))")
            print("  size on disk:    \(info.physicalSize) bytes")
            print("  chunk size:      \(info.chunkSize) bytes (\(layout.chunkCount(forSize: info.plaintextSize)) chunks)")
            print("  key class:       \(info.keyClassName)")
            print("  opens with:      \(owner(info, services))")
            print("  file ID:         \(hex(info.fileID))")
            print("  key fingerprint: \(hex(info.keyFingerprint))")
        }
    }

    private func owner(_ info: SecureFileInfo, _ services: SecureServices?) -> String {
        guard let services else { return "unknown (store locked or missing)" }
        if info.keyClass == KeyEncryptionKey.KeyClass.app.rawValue {
            if let kek = try? services.keyEncryptionKey(for: .app), kek.fingerprint == info.keyFingerprint {
                return "this app's key (app ID \(services.appID))"
            }
            return "another app's or another store's key (not app ID \(services.appID) in \(services.storeDirectory))"
        }
        if info.keyClass == KeyEncryptionKey.KeyClass.group.rawValue {
            for id in keys.groups {
                if let kek = try? services.keyEncryptionKey(for: .group(id)), kek.fingerprint == info.keyFingerprint {
                    return "the key of encryption group \(id)"
                }
            }
            return keys.groups.isEmpty ? "an encryption group's key (name candidates with --group ID)" : "the key of another group or store"
        }
        return "a handed-over key (crypto block)"
    }
}

// MARK: ls

struct List: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ls",
        abstract: "List a directory and say which files are secure files.",
        discussion: """
            From the headers only (no key needed). KIND is secure, damaged (a secure file header with an \
            impossible length), plain, dir, link or other; SIZE is the plaintext size for secure files.
            """)

    @OptionGroup var global: GlobalOptions
    @Argument(help: "Directories (default: the current directory).") var directories: [String] = []
    @Flag(name: .shortAndLong, help: "Include names starting with a dot.") var all = false
    @Flag(help: "List secure files only.") var secureOnly = false

    func run() throws {
        let dirs = directories.isEmpty ? ["."] : directories
        try forEachPath(dirs) { (dir) throws(CLIError) in
            guard let d = opendir(dir) else { throw CLIError.posix(errno, dir) }
            var names: [String] = []
            while let entry = readdir(d) {
                let name = withUnsafeBytes(of: entry.pointee.d_name) { String(cString: $0.bindMemory(to: CChar.self).baseAddress!) }
                if name == "." || name == ".." || (!all && name.hasPrefix(".")) { continue }
                names.append(name)
            }
            closedir(d)
            if dirs.count > 1 { print("\(dir):") }
            print("KIND     " + pad("SIZE", 14) + "  KEY    NAME")
            for name in names.sorted() {
                let path = dir.hasSuffix("/") ? dir + name : dir + "/" + name
                let (kind, size, key) = classify(path)
                if secureOnly && kind != "secure" { continue }
                print(kind.padding(8) + " " + pad(size, 14) + "  " + key.padding(6) + " " + name)
            }
        }
    }

    private func classify(_ path: String) -> (String, String, String) {
        var st = stat()
        guard lstat(path, &st) == 0 else { return ("?", "-", "-") }
        switch st.st_mode & S_IFMT {
        case S_IFDIR: return ("dir", "-", "-")
        case S_IFLNK: return ("link", "-", "-")
        case S_IFREG: break
        default: return ("other", "-", "-")
        }
        if let info = try? SecureFileSystem.info(path) {
            return ("secure", "\(info.plaintextSize)", info.keyClass == 3 ? "block" : info.keyClassName)
        }
        return (hasSecureMagic(path) ? "damaged" : "plain", "\(st.st_size)", "-")
    }

    private func hasSecureMagic(_ path: String) -> Bool {
        let fd = Glibc.open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW)
        guard fd >= 0 else { return false }
        defer { Glibc.close(fd) }
        var magic = [UInt8](repeating: 0, count: 4)
        return Glibc.read(fd, &magic, 4) == 4 && magic == FileHeader.magic
    }

    private func pad(_ s: String, _ width: Int) -> String {
        s.count >= width ? s : String(repeating: " ", count: width - s.count) + s
    }
}

extension String {
    func padding(_ width: Int) -> String { count >= width ? self : self + String(repeating: " ", count: width - count) }
}
