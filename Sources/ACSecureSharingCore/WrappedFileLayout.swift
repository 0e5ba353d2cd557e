#if canImport(Glibc)
import Glibc
#endif
import ACCrypto
import ACSecureFileCore

/// The layout of an extension wrapped file.
///
/// A wrapped file is an ordinary secure file (docs/FORMAT.md: 128-byte header, 4 KiB AES-256-GCM
/// chunks, authenticated length trailer) whose header has key class 3 ("crypto block") and whose data
/// key is wrapped under the crypto block's key-encryption key. Its *plaintext* begins with a name
/// record, so the actual file name is encrypted and authenticated like the contents:
///
///     0   "ACWF"              4
///     4   version = 1         u8
///     5   reserved, zero      u8
///     6   name length n       u16 big-endian, 1…1024
///     8   name                n bytes of UTF-8 (no "/", no NUL, not "." or "..")
///     8+n the original file's bytes
///
/// A reader recognises a wrapped file by the secure file magic and key class 3 in the (clear) header;
/// anything else is `WrappedFileOpenError.unknownWrapperFormat`.
package enum WrappedFileLayout {
    package static let magic: [UInt8] = Array("ACWF".utf8)
    package static let version: UInt8 = 1
    package static let recordHeaderSize = 8
    package static let maximumNameLength = 1024

    package static func validateName(_ name: String) throws(SecureFileError) -> [UInt8] {
        let bytes = Array(name.utf8)
        guard !bytes.isEmpty, bytes.count <= maximumNameLength else {
            throw SecureFileError(code: .invalidArgument,
                                  message: "the actual file name must have 1 to \(maximumNameLength) UTF-8 bytes (it has \(bytes.count))")
        }
        guard !bytes.contains(0), !bytes.contains(UInt8(ascii: "/")), name != ".", name != ".." else {
            throw SecureFileError(code: .invalidArgument,
                                  message: "the actual file name must be a plain file name (no '/', no NUL, not '.' or '..')")
        }
        return bytes
    }

    package static func record(name: [UInt8]) -> [UInt8] {
        magic + [version, 0, UInt8(name.count >> 8), UInt8(name.count & 0xff)] + name
    }
}
