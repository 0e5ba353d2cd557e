#if canImport(Glibc)
import Glibc
#endif
import ArgumentParser
import ACCrypto
import ACSecureFileCore
import ACSystemCalls
import ACSecureServices

// MARK: verify

enum VerifyOutcome {
    case ok(size: Int64, chunks: Int64)
    /// `chunk` is the first chunk that failed, nil when the header, key or length failed.
    case failed(reason: String, chunk: Int64?)
}

/// Authenticates the length (trailer) and then every chunk of `path`, in order, through guarded
/// memory; stops at the first failure. Throws only when it cannot tell (no keys, I/O errors).
func verifySecureFile(_ path: BytePath, groups: [String], services: SecureServices) throws(CLIError) -> VerifyOutcome {
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

    let size: Int64
    switch try authenticateLength(file, path: path) {
    case .authenticated(let n): size = n
    case .failed(let reason): return .failed(reason: reason, chunk: nil)
    }
    let layout = info.layout
    let chunks = layout.chunkCount(forSize: size)
    let chunkSize = info.chunkSize
    let block = max(chunkSize, streamBufferSize / chunkSize * chunkSize)
    let buffer = try guardedBytes("\(path): read buffer") { () throws(CryptoError) in try SecureBuffer(count: block) }

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

enum LengthCheck {
    case authenticated(Int64)
    /// Why the length does not authenticate (names the file and the ACE_* reason).
    case failed(String)
}

/// Authenticates the length of an open secure file (the trailer) and checks that nothing follows
/// the authenticated end: what a cut at a chunk boundary, appended bytes or a torn write change.
/// Throws only when it cannot tell (I/O errors).
func authenticateLength(_ file: SecureFile, path: BytePath) throws(CLIError) -> LengthCheck {
    let byte = try guardedBytes("\(path): read buffer") { () throws(CryptoError) in try SecureBuffer(count: 1) }
    do {
        // The engine authenticates the length at open and reports anything after the authenticated
        // end (a torn write or appended bytes), which reads never return.
        let extra = try file.bytesAfterAuthenticatedEnd
        if try file.endRestoredFromTailCopy {
            let after = extra > 0 ? "; \(counted(extra, "byte")) after it" : ""
            return .failed("\(path): the length does not authenticate in place: the end was restored from the last sync's tail copy\(after) (a power loss or tampering; \(ACErrorCode.badKeyOrCorruptData.name))")
        }
        if extra > 0 {
            return .failed("\(path): \(counted(extra, "byte")) follow\(extra == 1 ? "s" : "") the authenticated end of the file (a torn write or tampering; \(ACErrorCode.badKeyOrCorruptData.name))")
        }
        let size = try file.size
        // A read at the end of the file checks only the trailer.
        _ = try byte.withUnsafeMutableBytes { (b) throws(SecureFileError) -> Int in try file.pread(into: b, at: size) }
        return .authenticated(size)
    } catch {
        if error.code != .badKeyOrCorruptData { throw CLIError(error) }
        return .failed("\(path): length check failed: the file was truncated, extended or torn (\(ACErrorCode.badKeyOrCorruptData.name))")
    }
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
    @OptionGroup var secureFiles: SecureFileArguments
    var files: [BytePath] { secureFiles.files }

    func run() throws {
        let services = try global.openServices()
        var failed = 0
        var other: CLIError?
        for path in files {
            do {
                switch try verifySecureFile(path, groups: keys.groups, services: services) {
                case .ok(let size, let chunks):
                    print("OK      \(path): \(counted(size, "byte")), \(counted(chunks, "chunk")) and the length authenticated")
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
            Reads the header: no key is needed and nothing is decrypted. When the store can be \
            opened without asking (no passcode, or $ACSECURE_PASSCODE), also says whether this app's \
            key (or a --group key) opens the file and, if it does, whether the file's length \
            authenticates; a file cut or extended since it was written gets a warning on stderr \
            (`verify` checks every chunk as well). The header's key fingerprint names the key that \
            wrapped the file's key, but nothing authenticates it without that key: a file of another \
            app ID or store and one whose header was damaged look alike ("not this app's key"). \
            Exits 0 whenever the header reads as a secure file header, whoever's key it names.
            """)

    @OptionGroup var global: GlobalOptions
    @OptionGroup var keys: KeyOptions
    @OptionGroup var secureFiles: SecureFileArguments
    var files: [BytePath] { secureFiles.files }

    func run() throws {
        let services = global.openServicesIfQuietlyPossible()
        try forEachPath(files) { (path) throws(CLIError) in
            let info = try secureInfo(path)
            let layout = info.layout
            print(path)
            print("  plaintext size:  \(counted(info.plaintextSize, "byte")) (\(humanSize(info.plaintextSize)))")
            print("  size on disk:    \(info.physicalSize) bytes")
            print("  chunk size:      \(info.chunkSize) bytes (\(counted(layout.chunkCount(forSize: info.plaintextSize), "chunk")))")
            print("  format version:  \(info.formatVersion)")
            print("  key class:       \(info.keyClassName)")
            let (owner, key) = owner(info, services)
            print("  opens with:      \(owner)")
            let length = try lengthLine(path, key: key, services: services)
            print("  length:          \(length.text)")
            print("  file ID:         \(hex(info.fileID))")
            print("  key fingerprint: \(hex(info.keyFingerprint))")
            if let warning = length.warning {
                fflush(nil)
                writeStderr("acsecure: warning: \(warning); run `acsecure verify` to check every chunk\n")
            }
        }
    }

    /// Who can open the file, and the key that does when it is at hand.
    private func owner(_ info: SecureFileInfo, _ services: SecureServices?) -> (String, KeySelection?) {
        guard let services else { return ("unknown (store locked or missing)", nil) }
        if info.keyClass == KeyEncryptionKey.KeyClass.app.rawValue {
            if let kek = try? services.keyEncryptionKey(for: .app), kek.fingerprint == info.keyFingerprint {
                return ("this app's key (app ID \(services.appID))", .app)
            }
            return ("not this app's key: \(appKeyMismatch(services))", nil)
        }
        if info.keyClass == KeyEncryptionKey.KeyClass.group.rawValue {
            for id in keys.groups {
                if let kek = try? services.keyEncryptionKey(for: .group(id)), kek.fingerprint == info.keyFingerprint {
                    return ("the key of encryption group \(id)", .group(id))
                }
            }
            return (keys.groups.isEmpty ? "an encryption group's key (name candidates with --group ID)" : "the key of another group or store, or the header is damaged", nil)
        }
        return ("a handed-over key (crypto block)", nil)
    }

    /// The header's length is only what the file's size implies: a cut at a chunk boundary still
    /// gives a valid-looking size. With the key, the trailer says whether it is the written length.
    private func lengthLine(_ path: BytePath, key: KeySelection?, services: SecureServices?) throws(CLIError) -> (text: String, warning: String?) {
        guard let key, let services else { return ("not checked (needs the file's key)", nil) }
        let file: SecureFile
        do { file = try SecureFile.open(path, flags: O_RDONLY, key: key, services: services) } catch {
            if error.code != .badKeyOrCorruptData { throw CLIError(error) }
            let reason = CLIError(error).message
            return ("FAILED: \(reason)", reason)
        }
        defer { try? file.close() }
        switch try authenticateLength(file, path: path) {
        case .authenticated: return ("authenticated (the trailer matches the size)", nil)
        case .failed(let reason): return ("FAILED: \(reason)", reason)
        }
    }
}

// MARK: ls

struct List: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ls",
        abstract: "List a directory and say which files are secure files.",
        discussion: """
            From the headers only (no key needed). KIND is secure, damaged (a secure file header with an \
            impossible length), plain, unreadable (cannot be opened or read: the reason and errno go \
            to stderr), dir, link or other; SIZE is the plaintext size for secure files.
            """)

    @OptionGroup var global: GlobalOptions
    @Argument(help: "Directories (default: the current directory).") var directories: [BytePath] = []
    @Flag(name: .shortAndLong, help: "Include names starting with a dot.") var all = false
    @Flag(help: "List secure files only.") var secureOnly = false

    func run() throws {
        let dirs: [BytePath] = directories.isEmpty ? ["."] : directories
        try forEachPath(dirs) { (dir) throws(CLIError) in
            let names: [BytePath]
            switch Sys.directoryEntryNames(dir) {
            case .success(let found): names = found.filter { self.all || $0.bytes.first != UInt8(ascii: ".") }
            case .failure(let e): throw CLIError.posix(e.rawValue, dir)
            }
            if dirs.count > 1 { print("\(dir):") }
            print("KIND       " + pad("SIZE", 14) + "  KEY    NAME")
            for name in names.sorted(by: { $0.bytes.lexicographicallyPrecedes($1.bytes) }) {
                let path = (dir.bytes.last == UInt8(ascii: "/") ? dir : dir.appending("/".utf8)).appending(name.bytes)
                let (kind, size, key) = classify(path)
                if secureOnly && kind != "secure" { continue }
                print(kind.padding(10) + " " + pad(size, 14) + "  " + key.padding(6) + " " + name.description)
            }
        }
    }

    private func classify(_ path: BytePath) -> (String, String, String) {
        guard case .success(let st) = Sys.lstat(path) else { return ("?", "-", "-") }
        switch st.st_mode & S_IFMT {
        case S_IFDIR: return ("dir", "-", "-")
        case S_IFLNK: return ("link", "-", "-")
        case S_IFREG: break
        default: return ("other", "-", "-")
        }
        // Read the start first: a file that cannot be opened or read is not known to be plain.
        let magic: Bool
        switch readSecureMagic(path) {
        case .success(let m): magic = m
        case .failure(let e):
            fflush(nil)
            writeStderr("acsecure: warning: \(path): cannot read: \(e.text) (\(errnoName(e.rawValue)))\n")
            return ("unreadable", "\(st.st_size)", "-")
        }
        if magic, let info = try? SecureFileSystem.info(path) {
            return ("secure", "\(info.plaintextSize)", info.keyClass == 3 ? "block" : info.keyClassName)
        }
        return (magic ? "damaged" : "plain", "\(st.st_size)", "-")
    }

    /// Whether the file starts with the secure file magic, or the errno of the open or read that failed.
    private func readSecureMagic(_ path: BytePath) -> Result<Bool, Errno> {
        Sys.open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW).flatMap { fd in
            defer { _ = Sys.close(fd) }  // read only
            var magic = [UInt8](repeating: 0, count: 4)
            return magic.withUnsafeMutableBytes { Sys.preadFull(fd, $0.baseAddress!, $0.count, 0) }
                .map { got in got == magic.count && magic == FileHeader.magic }
        }
    }

    private func pad(_ s: String, _ width: Int) -> String {
        s.count >= width ? s : String(repeating: " ", count: width - s.count) + s
    }
}

/// "1 chunk", "2 chunks".
func counted(_ n: Int64, _ noun: String) -> String { "\(n) \(noun)\(n == 1 ? "" : "s")" }

extension String {
    func padding(_ width: Int) -> String { count >= width ? self : self + String(repeating: " ", count: width - count) }
}
