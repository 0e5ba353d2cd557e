#if canImport(Glibc)
import Glibc
#endif
import ACCrypto
import ACSecureFileCore
import ACSecureServices

/// acsecure's exit codes (also listed in `acsecure --help` and the README). The statuses of
/// failed file and key operations are the error table's (`ACErrorTable.Exit`), not a copy.
struct ExitStatus: RawRepresentable, Equatable {
    let rawValue: Int32

    /// Success.
    static let ok = ExitStatus(rawValue: 0)
    /// Bad usage, or an operation refused (output exists without --force, no confirmation, ...).
    static let usage = ExitStatus(rawValue: ACErrorTable.Exit.usage)
    /// An I/O or file-system error (the message names the file and errno).
    static let io = ExitStatus(rawValue: ACErrorTable.Exit.io)
    /// No keys: no store, store locked (passcode missing or wrong), unreadable, or retired.
    static let noKeys = ExitStatus(rawValue: ACErrorTable.Exit.noKeys)
    /// Wrong key or corrupt data (ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR), or not a secure file.
    static let badKeyOrCorrupt = ExitStatus(rawValue: ACErrorTable.Exit.badKeyOrCorrupt)
    /// `verify` found a file that does not authenticate.
    static let verifyFailed = ExitStatus(rawValue: 5)

    static let helpText = """
        EXIT CODES:
          0  success
          1  usage error, or refused (output exists without --force, not confirmed)
          2  I/O error (the message names the file and the errno)
          3  no keys: no store, store locked (passcode missing or wrong),
             unreadable, or retired
          4  wrong key, corrupt data, or not a secure file
             (ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR)
          5  verify: at least one file failed authentication
        """
}

/// An error acsecure reports itself: one line on stderr, then the exit status.
struct CLIError: Error {
    var status: ExitStatus
    var message: String

    init(_ status: ExitStatus, _ message: String) {
        self.status = status
        self.message = message
    }

    /// An engine error: the message already names the file; the ACE_* name and the errno are
    /// added when they say more than the message, and the exit status is the code's in
    /// `ACErrorTable`.
    init(_ error: SecureFileError) {
        var reasons: [String] = []
        if error.code != .noError, !error.message.contains(error.code.name) { reasons.append(error.code.name) }
        if error.errno != 0, error.code == .noError || error.errno != error.code.defaultErrno {
            reasons.append(errnoName(error.errno))
        }
        let text = reasons.isEmpty ? error.message : "\(error.message) (\(reasons.joined(separator: ", ")))"
        self.init(Self.status(for: error), text)
    }

    /// A secure services error, about the store at `store`: the same mapping as every other
    /// boundary (`SecureFileError.services`).
    init(_ error: SecureServicesError, store: some CustomStringConvertible) {
        let store = store.description
        self.init(SecureFileError.services(error, error.message.contains(store) ? "store" : "store \(store)"))
    }

    static func status(for error: SecureFileError) -> ExitStatus {
        // 30-cli.sh checks the status of each kind of failure.
        ExitStatus(rawValue: error.code.mapping.exitStatus)
    }

    /// No guarded memory left for a passcode, key or buffer.
    init(_ error: CryptoError, _ what: String) {
        self.init(SecureFileError.crypto(error, what))
    }

    static func posix(_ err: Int32, _ what: some CustomStringConvertible) -> CLIError {
        CLIError(SecureFileError.posix(err, what))
    }

    func report() {
        writeStderr("acsecure: error: \(message)\n")
    }
}

/// The symbolic name of the errno values a file tool meets; the number for the rest.
func errnoName(_ e: Int32) -> String {
    let names: [Int32: String] = [
        EPERM: "EPERM", ENOENT: "ENOENT", EIO: "EIO", EBADF: "EBADF", ENOMEM: "ENOMEM", EACCES: "EACCES",
        EEXIST: "EEXIST", EXDEV: "EXDEV", ENOTDIR: "ENOTDIR", EISDIR: "EISDIR", EINVAL: "EINVAL",
        ENFILE: "ENFILE", EMFILE: "EMFILE", EFBIG: "EFBIG", ENOSPC: "ENOSPC", EROFS: "EROFS",
        EPIPE: "EPIPE", ENAMETOOLONG: "ENAMETOOLONG", ELOOP: "ELOOP", EDQUOT: "EDQUOT", EBUSY: "EBUSY",
    ]
    return names[e].map { "errno \($0)" } ?? "errno \(e)"
}

func writeStderr(_ text: String) {
    var bytes = Array(text.utf8)
    _ = bytes.withUnsafeMutableBytes { b in
        var done = 0
        while done < b.count {
            let n = Glibc.write(2, b.baseAddress! + done, b.count - done)
            if n < 0 { if errno == EINTR { continue }; break }
            done += n
        }
        return done
    }
}

/// Guarded memory for `what` (a buffer, a passcode), or a CLI error saying it ran out.
func guardedBytes<Bytes>(_ what: String, _ make: () throws(CryptoError) -> Bytes) throws(CLIError) -> Bytes {
    do { return try make() } catch { throw CLIError(error, what) }
}
