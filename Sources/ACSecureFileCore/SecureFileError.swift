#if canImport(Glibc)
import Glibc
#endif
import ACCrypto
import ACSecureServices
import ACSystemCalls

/// An error of a secure file operation: the POSIX `errno` a plain file would give, the `ACE_*`
/// detail, a message that names the file, the error it came from and where it was made.
/// Never contains plaintext or key bytes.
///
/// Every boundary converts it through `ACErrorTable` (C: `CResult`/`WrappedCError`, Foundation:
/// `nsError(path:)`, acsecure: `CLIError`).
public struct SecureFileError: Error, Sendable, CustomStringConvertible {
    /// The `ACE_*` detail; `.noError` for a plain POSIX failure (only `errno` applies).
    public var code: ACErrorCode
    public var errno: Int32
    /// What failed, naming the file: the text users see.
    public var message: String
    /// The lower-level error this one reports (a `CryptoError`, a `SecureServicesError`), if any.
    public var cause: (any Error & Sendable)?
    /// Where in this library the error was made.
    public var location: SourceLocation

    /// A place in the source, as `#fileID` and `#line` give it.
    public typealias SourceLocation = ErrorSourceLocation

    /// `errno` defaults to the code's (`ACErrorTable`); the location to the caller's.
    public init(code: ACErrorCode, errno: Int32? = nil, message: String, cause: (any Error & Sendable)? = nil,
                fileID: String = #fileID, line: Int = #line) {
        self.code = code
        self.errno = errno ?? code.defaultErrno
        self.message = message
        self.cause = cause
        self.location = SourceLocation(fileID: fileID, line: line)
    }

    /// A failed system call: only `errno` applies, except when the process ran out of memory or
    /// descriptors (`ENOMEM`, `EMFILE`, `ENFILE`), which is also `ACE_LOW_MEMORY_ERROR`.
    public static func posix<What: CustomStringConvertible>(_ errno: Int32, _ what: @autoclosure () -> What,
                             fileID: String = #fileID, line: Int = #line) -> SecureFileError {
        let exhausted = errno == ENOMEM || errno == EMFILE || errno == ENFILE
        return SecureFileError(code: exhausted ? .lowMemory : .noError, errno: errno,
                               message: "\(what()): \(String(cString: strerror(errno)))", fileID: fileID, line: line)
    }

    /// A failed cryptographic operation, kept as the cause: out of guarded memory is `ENOMEM` +
    /// `ACE_LOW_MEMORY_ERROR`, anything else (OpenSSL refusing a key or a seal) `ACE_INTERNAL_ERROR`.
    public static func crypto<What: CustomStringConvertible>(_ error: CryptoError, _ what: @autoclosure () -> What,
                              fileID: String = #fileID, line: Int = #line) -> SecureFileError {
        let code: ACErrorCode
        if case .outOfMemory = error { code = .lowMemory } else { code = .internalError }
        return SecureFileError(code: code, message: "\(what()): \(error): \(code.name)", cause: error, fileID: fileID, line: line)
    }

    /// A key provider's failure, kept as the cause, with the code and errno of
    /// `SecureServicesError.aceCode` and `.boundaryErrno`.
    public static func services<What: CustomStringConvertible>(_ error: SecureServicesError, _ what: @autoclosure () -> What,
                                fileID: String = #fileID, line: Int = #line) -> SecureFileError {
        SecureFileError(code: error.aceCode, errno: error.boundaryErrno,
                        message: "\(what()): \(error.message): \(error.aceCode.name)", cause: error, fileID: fileID, line: line)
    }

    /// `services(error, context)`.
    public init(_ error: SecureServicesError, _ context: String, fileID: String = #fileID, line: Int = #line) {
        self = .services(error, context, fileID: fileID, line: line)
    }

    /// The error of an open or a call on a file while services are locked (a file state makes it
    /// once: `SharedFile.noKeysError`).
    static func servicesUnavailable(_ path: BytePath, fileID: String = #fileID, line: Int = #line) -> SecureFileError {
        .ace(.noKeys, "\(path): secure services are unavailable", fileID: fileID, line: line)
    }

    public static func ace<What: CustomStringConvertible>(_ code: ACErrorCode, _ what: @autoclosure () -> What,
                           fileID: String = #fileID, line: Int = #line) -> SecureFileError {
        SecureFileError(code: code, message: "\(what()): \(code.name)", fileID: fileID, line: line)
    }

    /// The same error with another message (e.g. a temporary file's name replaced by the final
    /// one); code, errno, cause and location are kept.
    public func withMessage(_ message: String) -> SecureFileError {
        var copy = self
        copy.message = message
        return copy
    }

    /// The same error naming `destination` where its message names `temporary`: an atomic
    /// replacement's errors name the file the caller asked for, not the temporary beside it.
    public func naming(_ destination: some CustomStringConvertible, insteadOf temporary: some CustomStringConvertible) -> SecureFileError {
        withMessage(message.replacing(temporary.description, with: destination.description))
    }

    public var description: String { message }

    /// The message with the code, errno, location and the chain of causes: for logs and bug reports.
    public var detailedDescription: String {
        var text = "\(message) [\(code.name), errno \(errno)] at \(location)"
        var next = cause
        while let error = next {
            switch error {
            case let e as SecureFileError: text += "; cause: \(e) at \(e.location)"; next = e.cause
            case let e as SecureServicesError: text += "; cause: \(e) at \(e.location)"; next = e.cause
            default: text += "; cause: \(error)"; next = nil
            }
        }
        return text
    }
}

extension SecureServicesError {
    /// The `ACE_*` code this failure reports at every boundary: the store unusable (locked, wrong
    /// passcode, unreadable) is no keys; a damaged seed file is corrupt data.
    public var aceCode: ACErrorCode {
        switch code {
        case .noKeys, .wrongPasscode, .storeIO: return .noKeys
        case .invalidArgument: return .invalidArgument
        case .corruptStore: return .badKeyOrCorruptData
        case .outOfMemory: return .lowMemory
        }
    }

    /// The errno this failure reports (as ACSecureServices.h documents): for a store that could
    /// not be read or written the system call's errno (EIO without one), for the rest the ACE
    /// code's (`ACErrorTable`): a missing or retired store is EACCES, not ENOENT.
    public var boundaryErrno: Int32 {
        guard code == .storeIO else { return aceCode.defaultErrno }
        return errno != 0 ? errno : EIO
    }
}
