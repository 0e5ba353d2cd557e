#if canImport(Glibc)
import Glibc
#endif
import XCTest
import CACSecureFile
@testable import ACSecureFileCAPI
import ACSecureFileCore

/// ACErrorTable against ACError.h: every `ACE_*` constant has the row of the same name and value,
/// and the C boundaries report the table's values.
final class ErrorTableCAPITests: XCTestCase {
    func testTableMatchesTheHeader() {
        let header: [(String, UInt32)] = [
            ("ACE_NO_ERROR", ACE_NO_ERROR.rawValue), ("ACE_NO_KEYS_ERROR", ACE_NO_KEYS_ERROR.rawValue),
            ("ACE_FILE_TOO_BIG_ERROR", ACE_FILE_TOO_BIG_ERROR.rawValue),
            ("ACE_NEGATIVE_FILE_LEN_ERROR", ACE_NEGATIVE_FILE_LEN_ERROR.rawValue),
            ("ACE_LOW_MEMORY_ERROR", ACE_LOW_MEMORY_ERROR.rawValue),
            ("ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR", ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR.rawValue),
            ("ACE_INVALID_ARG", ACE_INVALID_ARG.rawValue), ("ACE_REGULAR_FILE_ONLY_ERROR", ACE_REGULAR_FILE_ONLY_ERROR.rawValue),
            ("ACE_INTERNAL_ERROR", ACE_INTERNAL_ERROR.rawValue),
            ("ACE_READ_ON_WRITEONLY_ERROR", ACE_READ_ON_WRITEONLY_ERROR.rawValue),
            ("ACE_WRITE_ON_READONLY_ERROR", ACE_WRITE_ON_READONLY_ERROR.rawValue),
            ("ACE_TRUNC_ON_READONLY_ERROR", ACE_TRUNC_ON_READONLY_ERROR.rawValue),
        ]
        XCTAssertEqual(header.count, ACErrorTable.rows.count, "one row per ACE_* constant")
        for (name, value) in header {
            let row = ACErrorTable.rows.first { $0.name == name }
            XCTAssertEqual(row?.aceValue, Int32(value), name)
        }
    }

    /// The wrapped-file calls' detail and errno come from the same table.
    func testWrappedCErrorUsesTheTable() {
        for code in ACErrorCode.allCases {
            let c = WrappedCError(SecureFileError(code: code, message: "m"))
            XCTAssertEqual(c.code, code.mapping.aceValue, code.name)
            XCTAssertEqual(c.errno, code.mapping.errno, code.name)
        }
    }
}
