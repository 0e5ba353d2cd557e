#if canImport(Glibc)
import Glibc
#endif

/// A path as the kernel takes it: bytes, not text. POSIX names are byte strings (anything but NUL
/// and `/` in a component); a name in Latin-1 or Shift-JIS, or plain binary, is as valid as a UTF-8
/// one, and a `String` cannot hold it without repairing it into a different name.
///
/// Why not swift-system's `FilePath`: it normalises (drops a trailing `/`, collapses `//`), so
/// `"file/"` would open `file` where `open(2)` fails with `ENOTDIR`; this type keeps every byte the
/// caller gave, which is what a POSIX layer must pass on. A `FilePath` converts without loss:
/// `filePath.withPlatformString(BytePath.init(platformString:))`.
///
/// A path built from a `String` holding NUL is kept as it is, and every call refuses it with
/// `EINVAL` (a C caller cannot pass such a name; truncating it would name a different file).
public struct BytePath: Hashable, Sendable, ExpressibleByStringLiteral, CustomStringConvertible {
    /// The path's bytes, without a terminating NUL.
    public let bytes: [UInt8]

    public init(_ string: String) { bytes = Array(string.utf8) }

    public init(stringLiteral value: String) { self.init(value) }

    /// The bytes of a NUL-terminated C string, as they are.
    public init(platformString: UnsafePointer<CChar>) {
        bytes = Array(UnsafeBufferPointer(start: UnsafeRawPointer(platformString).assumingMemoryBound(to: UInt8.self),
                                          count: strlen(platformString)))
    }

    /// These bytes as a path; nil if they hold a NUL (no file has such a name).
    public init?(bytes: some Sequence<UInt8>) {
        let bytes = Array(bytes)
        guard !bytes.contains(0) else { return nil }
        self.bytes = bytes
    }

    private init(unchecked bytes: [UInt8]) { self.bytes = bytes }

    /// The path as text when it is valid UTF-8 (nil for any other name: a `String` would repair it).
    public var string: String? { String(validating: bytes, as: UTF8.self) }

    /// The path for messages, never lossy: each byte that is not part of a UTF-8 character is `\xNN`
    /// and a backslash is `\\` (so two names never print alike); the rest as it is.
    public var description: String {
        if let string, !string.utf8.contains(UInt8(ascii: "\\")) { return string }
        var out = ""
        var i = 0
        while i < bytes.count {
            let lead = bytes[i]
            let length = lead < 0x80 ? 1 : lead >> 5 == 0b110 ? 2 : lead >> 4 == 0b1110 ? 3 : lead >> 3 == 0b11110 ? 4 : 0
            if length > 0, i + length <= bytes.count,
               let character = String(validating: bytes[i ..< i + length], as: UTF8.self) {
                out += character == "\\" ? "\\\\" : character
                i += length
            } else {
                let hex = String(lead, radix: 16, uppercase: true)
                out += "\\x" + (hex.count == 1 ? "0" + hex : hex)
                i += 1
            }
        }
        return out
    }

    /// The path handed to a C call: the bytes and a NUL. Nil (the call fails with `EINVAL`) when the
    /// bytes hold a NUL.
    public func withPlatformString<R>(_ body: (UnsafePointer<CChar>) throws -> R) rethrows -> R? {
        guard !bytes.contains(0) else { return nil }
        return try (bytes + [0]).withUnsafeBufferPointer { buffer in
            try buffer.withMemoryRebound(to: CChar.self) { try body($0.baseAddress!) }
        }
    }

    /// This path with `suffix` appended to its last component (`db` + `-journal`).
    public func appending(_ suffix: some Sequence<UInt8>) -> BytePath { BytePath(unchecked: bytes + Array(suffix)) }

    /// The path of `name` inside this directory (a `/` between them unless this path ends in one).
    public func appending(component name: BytePath) -> BytePath {
        bytes.last == UInt8(ascii: "/") || bytes.isEmpty ? appending(name.bytes) : appending([UInt8(ascii: "/")] + name.bytes)
    }

    /// The directory whose entry this path is (what an fsync makes a new or renamed name durable
    /// in): "." for a bare name, "/" for a name in the root.
    public var directory: BytePath {
        guard let slash = bytes.lastIndex(of: UInt8(ascii: "/")) else { return "." }
        return slash == 0 ? "/" : BytePath(unchecked: Array(bytes[..<slash]))
    }

    /// The part before the last component, its `/` included ("" for a bare name), and the last component.
    public var split: (directoryPrefix: BytePath, name: BytePath) {
        guard let slash = bytes.lastIndex(of: UInt8(ascii: "/")) else { return ("", self) }
        return (BytePath(unchecked: Array(bytes[...slash])), BytePath(unchecked: Array(bytes[(slash + 1)...])))
    }

    public var isEmpty: Bool { bytes.isEmpty }
}
