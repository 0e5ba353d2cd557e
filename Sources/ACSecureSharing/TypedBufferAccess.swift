import Foundation
import ACSecureFileCore

// Array's and Data's `withUnsafe*Bytes` are `rethrows`, which erases `SecureFileError` to `any Error`;
// these keep the engine's typed errors.

extension Array where Element == UInt8 {
    func withBytes<R>(_ body: (UnsafeRawBufferPointer) throws(SecureFileError) -> R) throws(SecureFileError) -> R {
        try withUnsafeBytes { b in Result { () throws(SecureFileError) in try body(b) } }.get()
    }

    mutating func withMutableBytes<R>(_ body: (UnsafeMutableRawBufferPointer) throws(SecureFileError) -> R) throws(SecureFileError) -> R {
        try withUnsafeMutableBytes { b in Result { () throws(SecureFileError) in try body(b) } }.get()
    }
}

extension Data {
    mutating func withMutableBytes<R>(_ body: (UnsafeMutableRawBufferPointer) throws(SecureFileError) -> R) throws(SecureFileError) -> R {
        try withUnsafeMutableBytes { b in Result { () throws(SecureFileError) in try body(b) } }.get()
    }
}
