#if canImport(Glibc)
import Glibc
#endif
import ACCrypto

/// Errors of the secure services (store, seed, passcode).
public struct SecureServicesError: Error, Equatable, CustomStringConvertible, Sendable {
    public enum Code: Sendable, Equatable {
        /// Secure services are unavailable (locked, retired, never unlocked).
        case noKeys
        /// An argument was empty or malformed.
        case invalidArgument
        /// The passcode was wrong.
        case wrongPasscode
        /// The store's seed file is damaged or of an unknown version.
        case corruptStore
        /// The store could not be read or written (`errno` says why).
        case storeIO
        /// No memory (guarded memory for a key, or Argon2id's memory) was left: `errno` is `ENOMEM`.
        case outOfMemory
    }

    public var code: Code
    public var message: String
    public var errno: Int32
    /// The lower-level error this one reports (a `CryptoError`), if any.
    public var cause: (any Error & Sendable)?
    /// Where the error was made (as `SecureFileError.location`).
    public var location: ErrorSourceLocation

    public init(_ code: Code, _ message: String, errno: Int32 = 0, cause: (any Error & Sendable)? = nil,
                fileID: String = #fileID, line: Int = #line) {
        self.code = code
        self.message = message
        self.errno = errno
        self.cause = cause
        self.location = ErrorSourceLocation(fileID: fileID, line: line)
    }

    public var description: String { message }

    /// Equal when code, message and errno are (the cause and location only explain them).
    public static func == (lhs: Self, rhs: Self) -> Bool {
        lhs.code == rhs.code && lhs.message == rhs.message && lhs.errno == rhs.errno
    }

    static func noKeys(_ why: String = "secure services are unavailable", fileID: String = #fileID, line: Int = #line) -> Self {
        .init(.noKeys, why, fileID: fileID, line: line)
    }

    /// A failed key operation: `.outOfMemory` (ENOMEM) when memory ran out, else `fallback`.
    static func crypto(_ error: CryptoError, _ what: String, fallback: Code = .storeIO,
                       fileID: String = #fileID, line: Int = #line) -> Self {
        if case .outOfMemory = error {
            return .init(.outOfMemory, "\(what): \(error)", errno: ENOMEM, cause: error, fileID: fileID, line: line)
        }
        return .init(fallback, "\(what): \(error)", cause: error, fileID: fileID, line: line)
    }
}
