import CACSecureLibCrypto

/// A failure of a cryptographic primitive. Messages name the operation and OpenSSL's reason; they
/// never contain key or plaintext bytes.
public enum CryptoError: Error, Equatable, Sendable, CustomStringConvertible {
    case invalidKeySize
    /// An OpenSSL call failed. `detail` is OpenSSL's error queue as it stood when the error was
    /// made: use `CryptoError.openSSL(_:)`, which captures it on the failing thread.
    case openSSL(call: String, detail: String)
    case sodium(String)
    case invalidArgument(String)
    /// No guarded memory left for a buffer of this many bytes (`sodium_malloc` failed: out of
    /// mappings or address space), or not enough memory for Argon2id.
    case outOfMemory(Int)

    /// A failed OpenSSL `call`. OpenSSL's error queue is per thread and keeps growing until read,
    /// so it is read and cleared here, right after the failure, on the thread that failed; printing
    /// the error later (anywhere) only formats what was kept.
    public static func openSSL(_ call: String) -> CryptoError {
        .openSSL(call: call, detail: takeOpenSSLErrors())
    }

    public var description: String {
        switch self {
        case .outOfMemory(let n): return "out of guarded memory (\(n) bytes)"
        case .invalidKeySize: return "invalid key size"
        case .openSSL(let call, let detail): return "OpenSSL \(call) failed: \(detail)"
        case .sodium(let call): return "libsodium \(call) failed"
        case .invalidArgument(let what): return "invalid argument: \(what)"
        }
    }

    /// At most this many queue entries are kept (the oldest: the root cause comes first).
    static let maxQueueEntries = 4

    /// Reads this thread's OpenSSL error queue (the first `maxQueueEntries` entries, each at most
    /// 255 characters) and clears it. OpenSSL's texts name the library, function and reason only.
    static func takeOpenSSLErrors() -> String {
        defer { ERR_clear_error() }
        var texts: [String] = []
        var buffer = [CChar](repeating: 0, count: 256)
        while texts.count < maxQueueEntries {
            let code = ERR_get_error()
            guard code != 0 else { break }
            ERR_error_string_n(code, &buffer, buffer.count)
            texts.append(String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
        }
        return texts.isEmpty ? "no detail" : texts.joined(separator: "; ")
    }
}

/// `Array.withUnsafeBytes` with a typed error (the standard library's only rethrows).
func withBytes<R>(_ bytes: [UInt8], _ body: (UnsafeRawBufferPointer) throws(CryptoError) -> R) throws(CryptoError) -> R {
    let result: Result<R, CryptoError> = bytes.withUnsafeBytes { b in
        do throws(CryptoError) { return .success(try body(b)) } catch { return .failure(error) }
    }
    return try result.get()
}
