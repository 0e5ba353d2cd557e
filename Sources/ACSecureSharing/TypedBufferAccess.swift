import Foundation
import ACSecureFileCore

// Data's `withUnsafeMutableBytes` is `rethrows`, which erases `SecureFileError` to `any Error`;
// this keeps the engine's typed errors.

extension Data {
    mutating func withMutableBytes<R>(_ body: (UnsafeMutableRawBufferPointer) throws(SecureFileError) -> R) throws(SecureFileError) -> R {
        try withUnsafeMutableBytes { b in Result { () throws(SecureFileError) in try body(b) } }.get()
    }
}
