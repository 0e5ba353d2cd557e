#if canImport(Glibc)
import Glibc
#endif
import ACCrypto
import ACSecureServices

/// The AppConnect error codes (`ACE_*` in `ACError.h`, `ACErrorDomain` codes in Swift).
public enum ACErrorCode: Int32, Sendable, CaseIterable {
    case noError = 0
    case noKeys = 1
    case fileTooBig = 2
    case negativeFileLength = 3
    case lowMemory = 4
    case badKeyOrCorruptData = 5
    case invalidArgument = 6
    case regularFileOnly = 7
    case internalError = 8
    case readOnWriteOnly = 9
    case writeOnReadOnly = 10
    case truncOnReadOnly = 11

    public var name: String {
        switch self {
        case .noError: return "ACE_NO_ERROR"
        case .noKeys: return "ACE_NO_KEYS_ERROR"
        case .fileTooBig: return "ACE_FILE_TOO_BIG_ERROR"
        case .negativeFileLength: return "ACE_NEGATIVE_FILE_LEN_ERROR"
        case .lowMemory: return "ACE_LOW_MEMORY_ERROR"
        case .badKeyOrCorruptData: return "ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR"
        case .invalidArgument: return "ACE_INVALID_ARG"
        case .regularFileOnly: return "ACE_REGULAR_FILE_ONLY_ERROR"
        case .internalError: return "ACE_INTERNAL_ERROR"
        case .readOnWriteOnly: return "ACE_READ_ON_WRITEONLY_ERROR"
        case .writeOnReadOnly: return "ACE_WRITE_ON_READONLY_ERROR"
        case .truncOnReadOnly: return "ACE_TRUNC_ON_READONLY_ERROR"
        }
    }

    /// The errno a secure call sets with this code when no system call failed.
    var defaultErrno: Int32 {
        switch self {
        case .noError: return 0
        case .noKeys: return EACCES
        case .fileTooBig: return EFBIG
        case .negativeFileLength, .invalidArgument: return EINVAL
        case .lowMemory: return ENOMEM
        case .badKeyOrCorruptData, .internalError: return EIO
        case .regularFileOnly: return EINVAL
        case .readOnWriteOnly, .writeOnReadOnly: return EBADF
        case .truncOnReadOnly: return EINVAL
        }
    }
}

/// An error of a secure file operation: the POSIX `errno` a plain file would give, the `ACE_*`
/// detail, and a message that names the file. Never contains plaintext or key bytes.
public struct SecureFileError: Error, Sendable, CustomStringConvertible {
    public var code: ACErrorCode
    public var errno: Int32
    public var message: String

    public init(code: ACErrorCode, errno: Int32? = nil, message: String) {
        self.code = code
        self.errno = errno ?? code.defaultErrno
        self.message = message
    }

    /// A failed system call: only `errno` applies, except when the process ran out of memory or
    /// descriptors (`ENOMEM`, `EMFILE`, `ENFILE`), which is also `ACE_LOW_MEMORY_ERROR`.
    public static func posix(_ errno: Int32, _ what: @autoclosure () -> String) -> SecureFileError {
        let exhausted = errno == ENOMEM || errno == EMFILE || errno == ENFILE
        return SecureFileError(code: exhausted ? .lowMemory : .noError, errno: errno,
                               message: "\(what()): \(String(cString: strerror(errno)))")
    }

    /// A failed key operation: out of guarded memory is `ENOMEM` + `ACE_LOW_MEMORY_ERROR`, anything
    /// else (OpenSSL refusing a key) `ACE_INTERNAL_ERROR`.
    public static func crypto(_ error: CryptoError, _ what: @autoclosure () -> String) -> SecureFileError {
        if case .outOfMemory = error { return SecureFileError(code: .lowMemory, message: "\(what()): \(error): ACE_LOW_MEMORY_ERROR") }
        return .ace(.internalError, "\(what()) (\(error))")
    }

    /// A key provider's failure: no keys, out of memory, or a bad key selection.
    public static func services(_ error: SecureServicesError, _ what: @autoclosure () -> String) -> SecureFileError {
        switch error.code {
        case .noKeys: return .ace(.noKeys, "\(what()): \(error.message)")
        case .outOfMemory: return .ace(.lowMemory, "\(what()): \(error.message)")
        default: return .ace(.invalidArgument, "\(what()): \(error.message)")
        }
    }

    public static func ace(_ code: ACErrorCode, _ what: @autoclosure () -> String) -> SecureFileError {
        SecureFileError(code: code, message: "\(what()): \(code.name)")
    }

    public var description: String { message }
}
