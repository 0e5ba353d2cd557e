import Foundation
import ACSecureFileCore
import ACSecureServices
import ACSecureFoundation
import ACSecureSharingCore

// The NSError face of the sharing APIs.
//
// The AppConnect-named APIs of this module (`ACWrappedAppKey`, `ACWrappedFile`, `ACUnwrappedFile`,
// `derivedAppKey(withIdentifier:)`, ...) throw `NSError`s, as their Objective-C originals report
// through `NSError **`: domain `ACErrorDomain` with an `ACE_*` code, `NSPOSIXErrorDomain` with an
// errno when only a system call failed, and `ACWrappedFileReadErrorDomain` for a file that is not a
// wrapped file. The Swift-named APIs (`SecureSharing`) throw the engine's `SecureFileError`.
//
// `ACErrorDomain`, the `ACError*` codes and the SecureFileError → NSError mapping are ACSecureFoundation's
// (NSError+ACErrorDomain.swift); this file adds only the wrapped-file domain.

/// The domain of `ACUnwrappedFile.readWrappedFile(atPath:sharedGroupID:)`'s own errors.
public let ACWrappedFileReadErrorDomain = "ACWrappedFileReadErrorDomain"
/// The file is not an extension wrapped file (a plain file, or a secure file of another kind): the
/// caller can use it as it is. The value differs from every `ACE_*` code, so a check of the code
/// alone (as in the reference's sample) cannot mistake another error for it.
public let ACWrappedFileReadErrorUnknownWrapperFormat = 1001

/// Builds the NSErrors the AppConnect-named APIs throw. Messages name the path; they never contain
/// key bytes or plaintext.
enum ACSharingErrors {
    static func make(_ e: SecureFileError) -> NSError { e.nsError() }

    static func make(_ e: SecureServicesError, _ context: String) -> NSError { make(SecureFileError(e, context)) }

    static func invalidArgument(_ message: String) -> NSError {
        make(SecureFileError(code: .invalidArgument, message: message))
    }

    /// `message` names the path and says why (WrappedFiles' `unknownWrapperFormat`).
    static func unknownWrapperFormat(_ path: String, _ message: String) -> NSError {
        NSError(domain: ACWrappedFileReadErrorDomain, code: ACWrappedFileReadErrorUnknownWrapperFormat,
                userInfo: [NSLocalizedDescriptionKey: message, NSFilePathErrorKey: path])
    }

    /// Runs an engine call, converting its error.
    static func bridging<R>(_ body: () throws(SecureFileError) -> R) throws -> R {
        do { return try body() } catch { throw make(error) }
    }
}
