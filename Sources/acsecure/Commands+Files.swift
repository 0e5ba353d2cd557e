#if canImport(Glibc)
import Glibc
#endif
import ArgumentParser
import ACCrypto
import ACSecureFileCore
import ACSystemCalls
import ACSecureServices
import ACSecureSharing

/// The key that opens `path`, from its header: the app key, or the encryption group among
/// `groups` whose key fingerprint matches. `groupOption` is the option that names the groups, which
/// the error for a group file suggests (`share` takes the current group as --from-group).
func keySelection(for path: BytePath, info: SecureFileInfo, groups: [String], groupOption: String = "--group",
                  services: SecureServices) throws(CLIError) -> KeySelection {
    switch info.keyClass {
    case KeyEncryptionKey.KeyClass.app.rawValue:
        // The fingerprint tells another app's (or store's) file from a damaged one before the
        // engine's plain "does not unwrap", so the error can say what to try.
        if let kek = try? services.keyEncryptionKey(for: .app), kek.fingerprint != info.keyFingerprint {
            throw CLIError(.badKeyOrCorrupt, "\(path): the file key does not unwrap with the app key: \(appKeyMismatch(services)); if it is another app's, pass its --app-id ID or --store DIR (\(ACErrorCode.badKeyOrCorruptData.name))")
        }
        return .app
    case KeyEncryptionKey.KeyClass.group.rawValue:
        for id in groups {
            if let kek = try? services.keyEncryptionKey(for: .group(id)), kek.fingerprint == info.keyFingerprint {
                return .group(id)
            }
        }
        let why = groups.isEmpty ? "pass \(groupOption) ID" : "the key of group \(groups.joined(separator: ", ")) in \(services.storeDirectory) does not match (another group, pass \(groupOption) ID or --store DIR; or the header is damaged)"
        throw CLIError(.badKeyOrCorrupt, "\(path): encrypted with an encryption group key; \(why) (\(ACErrorCode.badKeyOrCorruptData.name))")
    default:
        throw CLIError(.badKeyOrCorrupt, "\(path): encrypted with a handed-over key (\(info.keyClassName)) that acsecure cannot derive (\(ACErrorCode.badKeyOrCorruptData.name))")
    }
}

/// Why a file whose header names the app key class does not open with this app's key: the header's
/// key fingerprint is another key's. Without the key that made it, a file of another app ID or
/// store cannot be told from one whose header was damaged, so both are named.
func appKeyMismatch(_ services: SecureServices) -> String {
    "the file belongs to another app ID or store (not app ID \(services.appID) in \(services.storeDirectory)), or its header is damaged"
}

/// Runs `body` for every path, reporting each failure as it happens and going on; at the end a
/// failure's exit status says something went wrong.
func forEachPath(_ paths: [BytePath], _ body: (BytePath) throws(CLIError) -> Void) throws(CLIError) {
    if paths.count == 1 { return try body(paths[0]) }
    var failures: [CLIError] = []
    for path in paths {
        do { try body(path) } catch {
            fflush(nil)
            error.report()
            failures.append(error)
        }
    }
    if let first = failures.first {
        throw CLIError(first.status, "\(failures.count) of \(paths.count) files failed")
    }
}

// MARK: encrypt / decrypt

struct Encrypt: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Encrypt a plain file into a new secure file.",
        discussion: """
            Streams through a fixed 256 KiB buffer (memory does not grow with the file). OUT is written \
            under a temporary name beside it, synced, then moved into place: it appears complete or \
            not at all. IN may be - for standard input.
            """)

    @OptionGroup var global: GlobalOptions
    @Argument(help: "The plain file (- for standard input).") var input: BytePath
    @Argument(help: "The secure file to create.") var output: BytePath
    @Option(help: ArgumentHelp("Encrypt for this encryption group instead of the app.", valueName: "id")) var group: String?
    @Flag(help: "Replace OUT if it exists (keeping its permission bits).") var force = false

    func validate() throws {
        if input == "-" && global.passcodeFromStdin { throw ValidationError("--passcode-stdin cannot be used when IN is standard input") }
        if output == "-" { throw ValidationError("OUT cannot be - (a secure file needs a seekable file; write ./- for a file named -)") }
    }

    func run() throws {
        let services = try global.openServices()
        try encryptFile(input, to: output, key: group.map { .group($0) } ?? .app, force: force, services: services)
    }
}

/// Encrypts a plain file (or - for stdin) into a new secure file that appears whole or not at all.
func encryptFile(_ input: BytePath, to output: BytePath, key: KeySelection, force: Bool, services: SecureServices) throws(CLIError) {
    let fd = input == "-" ? 0 : try PlainIO.open(input, O_RDONLY)
    defer { if fd != 0 { PlainIO.closeAfterReading(fd) } }
    let pending = try PendingOutput(destination: output, force: force)
    let file = try pending.namingDestination(creating: true) { () throws(CLIError) in
        try openSecure(pending.temporaryPath, flags: O_WRONLY | PendingOutput.creationFlags, key: key, services: services)
    }
    let progress = Progress.make("encrypt \(input)", total: PlainIO.size(fd))
    try pending.namingDestination { () throws(CLIError) in
        do throws(CLIError) {
            _ = try copyPlain(fd, name: input.description, into: file, progress: progress)
        } catch {
            throw closeAfterFailure(file, pending.temporaryPath, error)
        }
        progress?.finish()
        try closeSecure(file, sync: true)
    }
    if force { try pending.keepModeOfReplacedFile() }
    try pending.commit(force: force)
}

struct Decrypt: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Decrypt a secure file into a new plain file (mode 0600).",
        discussion: """
            Every chunk and the file's length are authenticated; OUT appears (temporary file, sync, \
            rename) only when the whole file was read successfully, so a damaged file never leaves a \
            partial plaintext behind. OUT may be - for standard output: then, as with `cat`, each \
            chunk is written once it authenticated, so a file damaged in the middle has every chunk \
            before the first bad one written, in order, then the error (and a non-zero exit).
            """)

    @OptionGroup var global: GlobalOptions
    @OptionGroup var keys: KeyOptions
    @Argument(help: "The secure file.") var input: BytePath
    @Argument(help: "The plain file to create (- for standard output).") var output: BytePath
    @Flag(help: "Replace OUT if it exists.") var force = false

    func run() throws {
        let services = try global.openServices()
        let info = try secureInfo(input)
        let key = try keys.selection(for: input, info: info, services: services)
        if output == "-" {
            try decryptToStandardOutput(input, info: info, key: key, services: services)
        } else {
            try decryptFile(input, info: info, to: output, key: key, force: force, services: services)
        }
    }
}

/// `decrypt IN -`: streams the plaintext to standard output as `cat` does (a file is never
/// created for -).
func decryptToStandardOutput(_ input: BytePath, info: SecureFileInfo, key: KeySelection, services: SecureServices) throws(CLIError) {
    let file = try openSecure(input, flags: O_RDONLY, key: key, services: services)
    defer { try? file.close() }
    let progress = Progress.make("decrypt \(input)", total: isatty(1) == 1 ? nil : info.plaintextSize)
    _ = try copySecure(file, chunkSize: info.chunkSize, to: 1, outputName: "standard output", progress: progress)
    progress?.finish()
}

/// Decrypts a secure file into a new plain file (0600) that appears only once all of it authenticated.
func decryptFile(_ input: BytePath, info: SecureFileInfo, to output: BytePath, key: KeySelection, force: Bool, services: SecureServices) throws(CLIError) {
    let file = try openSecure(input, flags: O_RDONLY, key: key, services: services)
    defer { try? file.close() }
    let pending = try PendingOutput(destination: output, force: force)
    let fd = try pending.namingDestination(creating: true) { () throws(CLIError) in
        try PlainIO.open(pending.temporaryPath, O_WRONLY | PendingOutput.creationFlags, 0o600)
    }
    var closed = false
    defer { if !closed { PlainIO.closeAfterReading(fd) } }  // only after a failure already thrown
    let progress = Progress.make("decrypt \(input)", total: try? file.size)
    _ = try copySecure(file, chunkSize: info.chunkSize, to: fd, outputName: output.description, progress: progress)
    progress?.finish()
    closed = true
    try PlainIO.close(fd, output.description)  // commit fsyncs the file before the rename
    try pending.commit(force: force)
}

// MARK: cat / write

struct Cat: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Write the plaintext of secure files to standard output.",
        discussion: """
            Streams: each chunk is authenticated before any of it is written. A file damaged in the \
            middle has every chunk before the first bad one written, in order (the plaintext up to that \
            chunk's start), then the error names the bad chunk and the exit status is 4. With several \
            files, each one's error is reported and the next file is still written. Use `decrypt` for \
            all-or-nothing output.
            """)

    @OptionGroup var global: GlobalOptions
    @OptionGroup var keys: KeyOptions
    @OptionGroup var secureFiles: SecureFileArguments
    var files: [BytePath] { secureFiles.files }

    func run() throws {
        let services = try global.openServices()
        try forEachPath(files) { (path) throws(CLIError) in
            let info = try secureInfo(path)
            let key = try keys.selection(for: path, info: info, services: services)
            let file = try openSecure(path, flags: O_RDONLY, key: key, services: services)
            defer { try? file.close() }
            let progress = Progress.make("cat \(path)", total: isatty(1) == 1 ? nil : info.plaintextSize)
            _ = try copySecure(file, chunkSize: info.chunkSize, to: 1, outputName: "standard output", progress: progress)
            progress?.finish()
        }
    }
}

struct Write: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Write standard input into a secure file.",
        discussion: """
            FILE must not exist yet: an existing file (plain or secure, of this app or another) is \
            replaced only with --force, and then keeps its permission bits. The new content goes to a \
            temporary secure file beside FILE, which is synced and renamed over it: FILE appears \
            whole or not at all. If FILE appears while standard input is read, it is not replaced and \
            the temporary file is kept (the error names it). With --append, the data is added to the \
            end of an existing secure file of this app (or of --group) in place; a FILE that does not \
            exist is an error (exit 2), not created.
            """)

    @OptionGroup var global: GlobalOptions
    @Argument(help: "The secure file.") var file: BytePath
    @Option(help: ArgumentHelp("Encrypt the new file for this encryption group instead of the app (with --append: the group whose key protects FILE).", valueName: "id")) var group: String?
    @Flag(help: "Append to an existing secure file (it must exist: --append never creates FILE).") var append = false
    @Flag(help: "Replace FILE if it exists (keeping its permission bits).") var force = false

    func validate() throws {
        if global.passcodeFromStdin { throw ValidationError("--passcode-stdin cannot be used with write (standard input is the data)") }
        if file == "-" { throw ValidationError("FILE cannot be - (a secure file needs a seekable file; write ./- for a file named -)") }
    }

    func run() throws {
        let services = try global.openServices()
        if append {
            // --append adds to an existing file; it never creates one (a mistyped name must not
            // start a new file beside the one meant).
            guard PlainIO.exists(file) else {
                throw CLIError(.io, "\(file): no such file (\(errnoName(ENOENT))): --append adds to an existing secure file; without --append, write creates FILE")
            }
            let info = try secureInfo(file)
            let key = try keySelection(for: file, info: info, groups: group.map { [$0] } ?? [], services: services)
            let f = try openSecure(file, flags: O_WRONLY | O_APPEND, key: key, services: services)
            do { _ = try copyPlain(0, name: "standard input", into: f, progress: nil) } catch {
                throw closeAfterFailure(f, file, error)
            }
            try closeSecure(f, sync: true)
            return
        }
        let key: KeySelection = group.map { .group($0) } ?? .app
        // Checked before reading a byte of standard input, and again (link) when the file appears.
        let pending = try PendingOutput(destination: file, force: force,
                                        replaceHint: "use --force to replace it, or --append to add to a secure file")
        let f = try pending.namingDestination(creating: true) { () throws(CLIError) in
            try openSecure(pending.temporaryPath, flags: O_WRONLY | PendingOutput.creationFlags, key: key, services: services)
        }
        try pending.namingDestination { () throws(CLIError) in
            do throws(CLIError) { _ = try copyPlain(0, name: "standard input", into: f, progress: nil) } catch {
                throw closeAfterFailure(f, pending.temporaryPath, error)
            }
            try closeSecure(f, sync: true)
        }
        if force { try pending.keepModeOfReplacedFile() }
        // Standard input cannot be read again: if FILE appeared meanwhile, keep what was read.
        try pending.commit(force: force, keepOnFailure: true)
    }
}

/// Closes `file` after `error` stopped a write into it. A close that fails too is reported with
/// the first error, not hidden.
func closeAfterFailure(_ file: SecureFile, _ path: BytePath, _ error: CLIError) -> CLIError {
    do { try file.close() } catch let closeError {
        return CLIError(error.status, "\(error.message); closing \(path) failed too: \(CLIError(closeError).message)")
    }
    return error
}

// MARK: share / rekey

struct Share: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Re-wrap a file's data key for an encryption group (or back to the app).",
        discussion: """
            Header only: the 128-byte header is rewritten and synced; no chunk is re-encrypted. Every \
            app of the store that names the group can then open the file. --to-app undoes it. The data \
            key itself does not change: use `rekey` afterwards to stop someone who already had it.
            """)

    @OptionGroup var global: GlobalOptions
    @Argument(help: "The secure file.") var file: BytePath
    @Option(help: ArgumentHelp("The encryption group to share the file with.", valueName: "id")) var group: String?
    @Flag(help: "Re-wrap under the app's own key again.") var toApp = false
    @Option(help: ArgumentHelp("The group whose key protects the file now (if not the app's).", valueName: "id")) var fromGroup: String?

    func validate() throws {
        guard (group != nil) != toApp else { throw ValidationError("give exactly one of --group ID or --to-app") }
        if let group, group.isEmpty { throw ValidationError("--group must not be empty") }
    }

    func run() throws {
        let services = try global.openServices()
        let info = try secureInfo(file)
        let from = try keySelection(for: file, info: info, groups: fromGroup.map { [$0] } ?? group.map { [$0] } ?? [],
                                    groupOption: "--from-group", services: services)
        let to: KeySelection = group.map { .group($0) } ?? .app
        if from == to {
            print("\(file): already encrypted with the key of \(to); nothing changed")
            return
        }
        do { try SecureFileSystem.rewrap(file, from: from, to: to, services: services) } catch { throw CLIError(error) }
        print("\(file): data key re-wrapped from \(from) to \(to) (header only; no chunk re-encrypted)")
    }
}

struct Rekey: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Re-encrypt files under a fresh data key and file ID.",
        discussion: """
            Each file is stream-copied into a new secure file beside it (same key-encryption key, \
            new random data key), synced, and renamed over the original: a crash leaves either the \
            old or the new file. The rename gives the file a new inode, so hard links to it keep the \
            old version; writes made by other processes during the copy are lost \
            (SecureSharing.rotateDataKey).
            """)

    @OptionGroup var global: GlobalOptions
    @OptionGroup var keys: KeyOptions
    @OptionGroup var secureFiles: SecureFileArguments
    var files: [BytePath] { secureFiles.files }

    func run() throws {
        let services = try global.openServices()
        try forEachPath(files) { (path) throws(CLIError) in
            let info = try secureInfo(path)
            let key = try keys.selection(for: path, info: info, services: services)
            do throws(SecureFileError) { try SecureSharing.rotateDataKey(path, key: key, services: services) } catch { throw CLIError(error) }
            let after = try secureInfo(path)
            print("\(path): new data key and file ID \(hex(after.fileID)) (\(counted(after.plaintextSize, "byte")) re-encrypted)")
        }
    }
}
