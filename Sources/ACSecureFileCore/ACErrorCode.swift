#if canImport(Glibc)
import Glibc
#endif

/// The AppConnect error codes (`ACE_*` in `ACError.h`, `ACErrorDomain` codes in Swift).
///
/// `.noError` on an error means "no ACE detail": a plain POSIX failure, where only the `errno`
/// applies (a missing file is ENOENT + `ACE_NO_ERROR`, as `ACSecureFileLastError` reports it).
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

    /// This code's row of `ACErrorTable`.
    public var mapping: ACErrorMapping { ACErrorTable.rows[Int(rawValue)] }

    /// The `ACE_*` value (`ACError.h`): the raw value, so the C API's hot path reads no table.
    @inline(__always) public var aceValue: Int32 { rawValue }

    /// The `ACE_*` name, e.g. `"ACE_NO_KEYS_ERROR"`.
    public var name: String { mapping.name }

    /// The errno a secure call sets with this code when no system call failed.
    public var defaultErrno: Int32 { mapping.errno }

    /// The code whose `ACE_*` value is `aceValue`.
    public init?(aceValue: Int32) {
        guard let row = ACErrorTable.rows.first(where: { $0.aceValue == aceValue }) else { return nil }
        self = row.code
    }

    /// The code of an `ACErrorDomain` NSError code.
    public init?(nsErrorCode: Int) {
        guard let row = ACErrorTable.rows.first(where: { $0.nsErrorCode == nsErrorCode }) else { return nil }
        self = row.code
    }
}

/// How one `ACErrorCode` appears at each boundary of the library.
public struct ACErrorMapping: Sendable {
    public let code: ACErrorCode
    /// The name of the `ACE_*` constant of `ACError.h`.
    public let name: String
    /// The `ACE_*` value: what `ACSecureFileLastError` and the wrapped-file calls' detail report.
    public var aceValue: Int32 { code.aceValue }
    /// The errno set with this code when no system call failed (a system call's own errno wins).
    public let errno: Int32
    /// The code of the `NSError` in `ACErrorDomain`; nil: no ACE detail, so the NSError is
    /// `NSPOSIXErrorDomain` with the errno.
    public let nsErrorCode: Int?
    /// acsecure's exit status for a failure with this code (`acsecure --help`, EXIT CODES).
    public let exitStatus: Int32
}

/// The one table from an error code to errno, `ACE_*` value, NSError code and CLI exit status.
/// The C API (`CResult`, `WrappedCError`), the Foundation NSError bridge and acsecure's `CLIError`
/// read it; none has its own mapping.
public enum ACErrorTable {
    /// acsecure's exit statuses for failures (the CLI's `ExitStatus` takes them from here).
    public enum Exit {
        public static let usage: Int32 = 1
        public static let io: Int32 = 2
        public static let noKeys: Int32 = 3
        public static let badKeyOrCorrupt: Int32 = 4
    }

    /// One row per code, in `rawValue` order (`ACErrorCode.mapping` indexes it).
    public static let rows: [ACErrorMapping] = [
        row(.noError, "ACE_NO_ERROR", errno: 0, posixOnly: true, exit: Exit.io),
        row(.noKeys, "ACE_NO_KEYS_ERROR", errno: EACCES, exit: Exit.noKeys),
        row(.fileTooBig, "ACE_FILE_TOO_BIG_ERROR", errno: EFBIG, exit: Exit.io),
        row(.negativeFileLength, "ACE_NEGATIVE_FILE_LEN_ERROR", errno: EINVAL, exit: Exit.usage),
        row(.lowMemory, "ACE_LOW_MEMORY_ERROR", errno: ENOMEM, exit: Exit.io),
        row(.badKeyOrCorruptData, "ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR", errno: EIO, exit: Exit.badKeyOrCorrupt),
        row(.invalidArgument, "ACE_INVALID_ARG", errno: EINVAL, exit: Exit.usage),
        row(.regularFileOnly, "ACE_REGULAR_FILE_ONLY_ERROR", errno: EINVAL, exit: Exit.io),
        row(.internalError, "ACE_INTERNAL_ERROR", errno: EIO, exit: Exit.io),
        row(.readOnWriteOnly, "ACE_READ_ON_WRITEONLY_ERROR", errno: EBADF, exit: Exit.io),
        row(.writeOnReadOnly, "ACE_WRITE_ON_READONLY_ERROR", errno: EBADF, exit: Exit.io),
        row(.truncOnReadOnly, "ACE_TRUNC_ON_READONLY_ERROR", errno: EINVAL, exit: Exit.io),
    ]

    /// A row whose NSError code is the ACE value (`ACError.h` and `ACErrorDomain` share the
    /// numbers); `posixOnly`: no `ACErrorDomain` code.
    private static func row(_ code: ACErrorCode, _ name: String, errno: Int32, posixOnly: Bool = false, exit: Int32) -> ACErrorMapping {
        ACErrorMapping(code: code, name: name, errno: errno,
                       nsErrorCode: posixOnly ? nil : Int(code.rawValue), exitStatus: exit)
    }
}
