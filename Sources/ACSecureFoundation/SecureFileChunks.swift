#if canImport(Glibc)
import Glibc
#endif
import Foundation
import ACSecureFileCore
import ACSecureServices

/// The plaintext of a secure file as an `AsyncSequence` of `Data` chunks, for files too large to
/// read at once. Beyond the reference.
///
/// The file is opened on the first `next()` and closed at the end or on the first error; errors
/// are `NSError` (typed throws), as everywhere in this module. Each chunk is read with a
/// synchronous `pread` inside `next()`: iterate off latency-sensitive executors for huge files.
///
/// ```swift
/// for try await chunk in SecureFileChunks(path: "/data/video.sec") { consume(chunk) }
/// ```
public struct SecureFileChunks: AsyncSequence, Sendable {
    public typealias Element = Data
    public typealias Failure = NSError

    public let path: String
    public let encryptionGroupId: String?
    /// The size of each chunk but the last.
    public let chunkSize: Int

    /// - Parameters:
    ///   - encryptionGroupId: for a file shared through an encryption group; nil for the app's key.
    ///   - chunkSize: bytes per element (at least 1; default 64 KiB).
    public init(path: String, encryptionGroupId: String? = nil, chunkSize: Int = 64 * 1024) {
        precondition(chunkSize > 0, "SecureFileChunks: chunkSize must be positive")
        self.path = path
        self.encryptionGroupId = encryptionGroupId
        self.chunkSize = chunkSize
    }

    /// `url` must be a file URL (else `ACE_REGULAR_FILE_ONLY_ERROR`).
    public init(url: URL, encryptionGroupId: String? = nil, chunkSize: Int = 64 * 1024) throws {
        self.init(path: try SecureFileIO.path(of: url), encryptionGroupId: encryptionGroupId, chunkSize: chunkSize)
    }

    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(path: path, group: encryptionGroupId, chunkSize: chunkSize)
    }

    /// The same plaintext, byte by byte.
    public var bytes: SecureFileBytes { SecureFileBytes(chunks: self) }

    public struct AsyncIterator: AsyncIteratorProtocol {
        let path: String
        let group: String?
        let chunkSize: Int
        private var file: SecureFile?
        private var offset: Int64 = 0
        private var finished = false

        init(path: String, group: String?, chunkSize: Int) {
            self.path = path
            self.group = group
            self.chunkSize = chunkSize
        }

        public mutating func next() async throws(NSError) -> Data? {
            guard !finished else { return nil }
            do {
                if file == nil {
                    let key = try SecureFileIO.key(group: group, path: path)
                    file = try bridgingErrors(path) { try SecureFile.open(path, flags: O_RDONLY | O_CLOEXEC, key: key) }
                }
                let file = file!
                var chunk = Data(count: chunkSize)
                let start = offset
                let n = try bridgingErrors(path) {
                    try chunk.withUnsafeMutableBytes { try file.pread(into: $0, at: start) }
                }
                guard n > 0 else {
                    // The end: a failed close is this iteration's error.
                    finished = true
                    self.file = nil
                    try bridgingErrors(path) { try file.close() }
                    return nil
                }
                chunk.count = n
                offset += Int64(n)
                return chunk
            } catch {
                finished = true
                let failed = file
                file = nil
                if let failed { throw SecureFileIO.closing(failed, after: error) as NSError }
                throw error as NSError
            }
        }
    }
}

/// The plaintext of a secure file as an `AsyncSequence` of bytes (`SecureFileChunks.bytes`).
public struct SecureFileBytes: AsyncSequence, Sendable {
    public typealias Element = UInt8
    public typealias Failure = NSError

    public let chunks: SecureFileChunks

    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(chunks: chunks.makeAsyncIterator()) }

    public struct AsyncIterator: AsyncIteratorProtocol {
        var chunks: SecureFileChunks.AsyncIterator
        var current = Data()
        var index = 0

        public mutating func next() async throws(NSError) -> UInt8? {
            if index == current.count {
                guard let next = try await chunks.next() else { return nil }
                current = next
                index = 0
            }
            defer { index += 1 }
            return current[current.startIndex + index]
        }
    }
}
