#if canImport(Glibc)
import Glibc
#endif
import ACCrypto
import ACSecureFileCore
import ACSecureServices

/// acsecure's exit codes (also listed in `acsecure --help` and the README).
enum ExitStatus: Int32 {
    /// Success.
    case ok = 0
    /// Bad usage, or an operation refused (output exists without --force, no confirmation, ...).
    case usage = 1
    /// An I/O or file-system error (the message names the file and errno).
    case io = 2
    /// No keys: no store, store locked (passcode missing or wrong), or retired.
    case noKeys = 3
    /// Wrong key or corrupt data (ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR), or not a secure file.
    case badKeyOrCorrupt = 4
    /// `verify` found a file that does not authenticate.
    case verifyFailed = 5

    static let helpText = """
        EXIT CODES:
          0  success
          1  usage error, or refused (output exists without --force, not confirmed)
          2  I/O error (the message names the file and the errno)
          3  no keys: no store, store locked (passcode missing or wrong), or retired
          4  wrong key, corrupt data, not a secure file: ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR
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

    /// An engine error: the message already names the file; the ACE_* reason (or errno) is added
    /// when the message does not carry it, and the exit status follows the code.
    init(_ error: SecureFileError) {
        var text = error.message
        if error.code != .noError {
            if !text.contains(error.code.name) { text += " (\(error.code.name))" }
        } else if error.errno != 0 {
            text += " (\(errnoName(error.errno)))"
        }
        self.init(Self.status(for: error), text)
    }

    /// A secure services error, about the store at `store`.
    init(_ error: SecureServicesError, store: String) {
        let status: ExitStatus
        let reason: String
        switch error.code {
        case .noKeys, .wrongPasscode: status = .noKeys; reason = ACErrorCode.noKeys.name
        case .corruptStore: status = .badKeyOrCorrupt; reason = ACErrorCode.badKeyOrCorruptData.name
        case .invalidArgument: status = .usage; reason = ACErrorCode.invalidArgument.name
        case .storeIO: status = .io; reason = error.errno != 0 ? errnoName(error.errno) : ACErrorCode.internalError.name
        case .outOfMemory: status = .io; reason = "\(errnoName(ENOMEM)), \(ACErrorCode.lowMemory.name)"
        }
        let text = error.message.contains(store) ? error.message : "store \(store): \(error.message)"
        self.init(status, "\(text) (\(reason))")
    }

    static func status(for error: SecureFileError) -> ExitStatus {
        switch error.code {
        case .noKeys: return .noKeys
        case .badKeyOrCorruptData: return .badKeyOrCorrupt
        case .invalidArgument, .negativeFileLength: return .usage
        case .noError, .fileTooBig, .lowMemory, .regularFileOnly, .internalError,
             .readOnWriteOnly, .writeOnReadOnly, .truncOnReadOnly:
            return .io
        }
    }

    /// No guarded memory left for a passcode, key or buffer.
    init(_ error: CryptoError, _ what: String) {
        self.init(.io, "\(what): \(error) (\(errnoName(ENOMEM)), \(ACErrorCode.lowMemory.name))")
    }

    static func posix(_ err: Int32, _ what: String) -> CLIError {
        CLIError(.io, "\(what): \(String(cString: strerror(err))) (\(errnoName(err)))")
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
