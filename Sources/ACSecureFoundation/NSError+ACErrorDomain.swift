#if canImport(Glibc)
import Glibc
#endif
import Foundation
import ACSecureFileCore

// The one place where engine errors become NSError (reference: "NSError objects that secure
// Objective-C methods return"), through ACErrorTable's NSError code:
// - an ACE_* detail     -> domain ACErrorDomain, code = the table's NSError code (the ACE_* value);
//                          the errno as NSUnderlyingErrorKey
// - only an errno       -> domain NSPOSIXErrorDomain, code = errno (ENOENT for a missing file, ...)
// - the SecureFileError itself (cause, location) -> userInfo[ACSecureFileErrorKey]
// - Foundation failures (property lists, archives) keep their own domain (NSCocoaErrorDomain).
// Messages name the path; they never contain file contents or key bytes.

/// The error domain of AppConnect secure file errors; codes are the `ACE_*` values of `ACError.h`.
public let ACErrorDomain = "ACErrorDomain"

/// `ACErrorDomain` codes, equal to the `ACE_*` values (`error.code == ACErrorNoKeys`).
public let ACErrorNoKeys = Int(ACErrorCode.noKeys.rawValue)
public let ACErrorFileTooBig = Int(ACErrorCode.fileTooBig.rawValue)
public let ACErrorNegativeFileLength = Int(ACErrorCode.negativeFileLength.rawValue)
public let ACErrorLowMemory = Int(ACErrorCode.lowMemory.rawValue)
public let ACErrorBadKeyOrCorruptData = Int(ACErrorCode.badKeyOrCorruptData.rawValue)
public let ACErrorInvalidArg = Int(ACErrorCode.invalidArgument.rawValue)
public let ACErrorRegularFileOnly = Int(ACErrorCode.regularFileOnly.rawValue)
public let ACErrorInternal = Int(ACErrorCode.internalError.rawValue)
public let ACErrorReadOnWriteOnly = Int(ACErrorCode.readOnWriteOnly.rawValue)
public let ACErrorWriteOnReadOnly = Int(ACErrorCode.writeOnReadOnly.rawValue)
public let ACErrorTruncOnReadOnly = Int(ACErrorCode.truncOnReadOnly.rawValue)

/// The `userInfo` key holding the `ACE_*` name (e.g. `"ACE_NO_KEYS_ERROR"`) of an `ACErrorDomain` error.
public let ACErrorNameKey = "ACErrorName"

/// The `userInfo` key holding the `SecureFileError` an NSError was made from (its cause and where
/// it was made).
public let ACSecureFileErrorKey = "ACSecureFileError"

extension SecureFileError {
    /// This error as an `NSError`: `ACErrorDomain` with the `ACE_*` code, or `NSPOSIXErrorDomain`
    /// with the errno when only the errno applies.
    public func nsError(path: String? = nil) -> NSError {
        var info: [String: Any] = [NSLocalizedDescriptionKey: message, ACSecureFileErrorKey: self]
        if let path { info[NSFilePathErrorKey] = path }
        guard let aceCode = code.mapping.nsErrorCode else {
            return NSError(domain: NSPOSIXErrorDomain, code: Int(errno), userInfo: info)
        }
        info[ACErrorNameKey] = code.name
        if errno != 0 {
            info[NSUnderlyingErrorKey] = NSError(domain: NSPOSIXErrorDomain, code: Int(errno),
                                                 userInfo: [NSLocalizedDescriptionKey: String(cString: strerror(errno))])
        }
        return NSError(domain: ACErrorDomain, code: aceCode, userInfo: info)
    }
}

/// Runs `body`, turning engine errors into `NSError`s for `path`; other errors pass through.
@inline(__always)
func bridgingErrors<R>(_ path: String?, _ body: () throws -> R) throws -> R {
    do { return try body() } catch let e as SecureFileError { throw e.nsError(path: path) }
}

/// An `ACErrorDomain` error raised by this layer itself.
func aceError(_ code: ACErrorCode, _ message: String, path: String? = nil) -> NSError {
    SecureFileError(code: code, message: "\(message): \(code.name)").nsError(path: path)
}
