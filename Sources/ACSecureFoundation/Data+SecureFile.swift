import Foundation
import ACSecureFileCore

// NSData (ACSecureFile) and NSData (ACSharedSecureFile), reference tables 24 and 25.
//
// Every method that takes an error pointer in the reference throws here (`NSError`: ACErrorDomain
// with the ACE_* code, NSPOSIXErrorDomain with the errno). The reference's NO-returning writes are
// `write(toSecureFile:atomically:) -> Bool`, as in NSData; `Data`'s reading initializers throw (as
// `Data(contentsOf:)`), `NSData`'s plain ones are failable (as `NSData(contentsOfFile:)`).
//
// Options: `.atomic` writes a temporary secure file in the same directory, fsyncs it, renames it
// over the target and fsyncs the directory (a crash leaves the old or the new contents);
// `.withoutOverwriting` fails with EEXIST when the file exists. The file-protection options have
// no meaning on Linux and are ignored, as Foundation on Linux ignores them. Reading options
// (`.mappedIfSafe`, `.alwaysMapped`, `.uncached`) are ignored: a secure file is always decrypted
// into memory.

extension Data {
    /// `initWithContentsOfSecureFile:options:error:` — the decrypted contents of a secure file.
    /// - Throws: `NSPOSIXErrorDomain` `ENOENT` for a missing file; `ACErrorDomain`
    ///   `ACE_REGULAR_FILE_ONLY_ERROR` for a directory, `ACE_NO_KEYS_ERROR` while secure services are
    ///   unavailable, `ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR` for a corrupt file or one of another key.
    public init(contentsOfSecureFile path: String, options: Data.ReadingOptions = []) throws {
        self = try bridgingErrors(path) { try SecureFileIO.readAll(path, key: .app) }
    }

    /// `initWithContentsOfSecureFile:encryptionGroupId:options:error:` — a file shared through an encryption group.
    public init(contentsOfSecureFile path: String, encryptionGroupId groupId: String, options: Data.ReadingOptions = []) throws {
        let key = try SecureFileIO.key(group: groupId, path: path)
        self = try bridgingErrors(path) { try SecureFileIO.readAll(path, key: key) }
    }

    /// `initWithContentsOfSecureURL:options:error:` — `url` must be a file URL (else `ACE_REGULAR_FILE_ONLY_ERROR`).
    public init(contentsOfSecureURL url: URL, options: Data.ReadingOptions = []) throws {
        try self.init(contentsOfSecureFile: SecureFileIO.path(of: url), options: options)
    }

    /// `initWithContentsOfSecureURL:encryptionGroupId:options:error:`.
    public init(contentsOfSecureURL url: URL, encryptionGroupId groupId: String, options: Data.ReadingOptions = []) throws {
        try self.init(contentsOfSecureFile: SecureFileIO.path(of: url), encryptionGroupId: groupId, options: options)
    }

    /// `writeToSecureFile:options:error:` — encrypts this data into the secure file at `path`.
    public func write(toSecureFile path: String, options: Data.WritingOptions = []) throws {
        try secureWrite(path, group: nil, options: options)
    }

    /// `writeToSecureFile:encryptionGroupId:options:error:`.
    public func write(toSecureFile path: String, encryptionGroupId groupId: String, options: Data.WritingOptions = []) throws {
        try secureWrite(path, group: groupId, options: options)
    }

    /// `writeToSecureURL:options:error:`.
    public func write(toSecureURL url: URL, options: Data.WritingOptions = []) throws {
        try secureWrite(SecureFileIO.path(of: url), group: nil, options: options)
    }

    /// `writeToSecureURL:encryptionGroupId:options:error:`.
    public func write(toSecureURL url: URL, encryptionGroupId groupId: String, options: Data.WritingOptions = []) throws {
        try secureWrite(SecureFileIO.path(of: url), group: groupId, options: options)
    }

    /// `writeToSecureFile:atomically:` — false on any failure (prefer the throwing
    /// `write(toSecureFile:options:)`, which says why).
    @discardableResult
    public func write(toSecureFile path: String, atomically: Bool) -> Bool {
        succeeds { try secureWrite(path, group: nil, options: atomically ? .atomic : []) }
    }

    /// `writeToSecureFile:encryptionGroupId:atomically:`.
    @discardableResult
    public func write(toSecureFile path: String, encryptionGroupId groupId: String, atomically: Bool) -> Bool {
        succeeds { try secureWrite(path, group: groupId, options: atomically ? .atomic : []) }
    }

    /// `writeToSecureURL:atomically:`.
    @discardableResult
    public func write(toSecureURL url: URL, atomically: Bool) -> Bool {
        succeeds { try secureWrite(SecureFileIO.path(of: url), group: nil, options: atomically ? .atomic : []) }
    }

    /// `writeToSecureURL:encryptionGroupId:atomically:`.
    @discardableResult
    public func write(toSecureURL url: URL, encryptionGroupId groupId: String, atomically: Bool) -> Bool {
        succeeds { try secureWrite(SecureFileIO.path(of: url), group: groupId, options: atomically ? .atomic : []) }
    }

    func secureWrite(_ path: String, group: String?, options: Data.WritingOptions) throws {
        let key = try SecureFileIO.key(group: group, path: path)
        try bridgingErrors(path) {
            try SecureFileIO.write(self, to: path, key: key, atomic: options.contains(.atomic),
                                   withoutOverwriting: options.contains(.withoutOverwriting))
        }
    }
}

// NSData: the reference's Swift example writes through `NSData` (`data as NSData`). As Foundation's
// NSData: the plain initializers are failable (`NSData(contentsOfSecureFile:)`), the ones with
// `options:` throw; `write(toSecureFile:atomically:)` returns Bool, `write(toSecureFile:options:)` throws.
extension NSData {
    /// `writeToSecureFile:options:error:`.
    public func write(toSecureFile path: String, options: NSData.WritingOptions = []) throws {
        try Data(referencing: self).write(toSecureFile: path, options: options)
    }

    /// `writeToSecureFile:encryptionGroupId:options:error:`.
    public func write(toSecureFile path: String, encryptionGroupId groupId: String, options: NSData.WritingOptions = []) throws {
        try Data(referencing: self).write(toSecureFile: path, encryptionGroupId: groupId, options: options)
    }

    /// `writeToSecureURL:options:error:`.
    public func write(toSecureURL url: URL, options: NSData.WritingOptions = []) throws {
        try Data(referencing: self).write(toSecureURL: url, options: options)
    }

    /// `writeToSecureURL:encryptionGroupId:options:error:`.
    public func write(toSecureURL url: URL, encryptionGroupId groupId: String, options: NSData.WritingOptions = []) throws {
        try Data(referencing: self).write(toSecureURL: url, encryptionGroupId: groupId, options: options)
    }

    /// `writeToSecureFile:atomically:`.
    @discardableResult
    public func write(toSecureFile path: String, atomically: Bool) -> Bool {
        Data(referencing: self).write(toSecureFile: path, atomically: atomically)
    }

    /// `writeToSecureFile:encryptionGroupId:atomically:`.
    @discardableResult
    public func write(toSecureFile path: String, encryptionGroupId groupId: String, atomically: Bool) -> Bool {
        Data(referencing: self).write(toSecureFile: path, encryptionGroupId: groupId, atomically: atomically)
    }

    /// `writeToSecureURL:atomically:`.
    @discardableResult
    public func write(toSecureURL url: URL, atomically: Bool) -> Bool {
        Data(referencing: self).write(toSecureURL: url, atomically: atomically)
    }

    /// `writeToSecureURL:encryptionGroupId:atomically:`.
    @discardableResult
    public func write(toSecureURL url: URL, encryptionGroupId groupId: String, atomically: Bool) -> Bool {
        Data(referencing: self).write(toSecureURL: url, encryptionGroupId: groupId, atomically: atomically)
    }

    /// `initWithContentsOfSecureFile:` (and `dataWithContentsOfSecureFile:`) — nil on any failure.
    public convenience init?(contentsOfSecureFile path: String) {
        guard let data = succeeds({ try Data(contentsOfSecureFile: path) }) else { return nil }
        self.init(data: data)
    }

    /// `initWithContentsOfSecureFile:encryptionGroupId:`.
    public convenience init?(contentsOfSecureFile path: String, encryptionGroupId groupId: String) {
        guard let data = succeeds({ try Data(contentsOfSecureFile: path, encryptionGroupId: groupId) }) else { return nil }
        self.init(data: data)
    }

    /// `initWithContentsOfSecureURL:`.
    public convenience init?(contentsOfSecureURL url: URL) {
        guard let data = succeeds({ try Data(contentsOfSecureURL: url) }) else { return nil }
        self.init(data: data)
    }

    /// `initWithContentsOfSecureURL:encryptionGroupId:`.
    public convenience init?(contentsOfSecureURL url: URL, encryptionGroupId groupId: String) {
        guard let data = succeeds({ try Data(contentsOfSecureURL: url, encryptionGroupId: groupId) }) else { return nil }
        self.init(data: data)
    }

    /// `initWithContentsOfSecureFile:options:error:` (and `dataWithContentsOfSecureFile:options:error:`).
    public convenience init(contentsOfSecureFile path: String, options: NSData.ReadingOptions) throws {
        self.init(data: try Data(contentsOfSecureFile: path, options: options))
    }

    /// `initWithContentsOfSecureFile:encryptionGroupId:options:error:`.
    public convenience init(contentsOfSecureFile path: String, encryptionGroupId groupId: String, options: NSData.ReadingOptions) throws {
        self.init(data: try Data(contentsOfSecureFile: path, encryptionGroupId: groupId, options: options))
    }

    /// `initWithContentsOfSecureURL:options:error:`.
    public convenience init(contentsOfSecureURL url: URL, options: NSData.ReadingOptions) throws {
        self.init(data: try Data(contentsOfSecureURL: url, options: options))
    }

    /// `initWithContentsOfSecureURL:encryptionGroupId:options:error:`.
    public convenience init(contentsOfSecureURL url: URL, encryptionGroupId groupId: String, options: NSData.ReadingOptions) throws {
        self.init(data: try Data(contentsOfSecureURL: url, encryptionGroupId: groupId, options: options))
    }
}

/// The Foundation-style (Bool / optional) forms: the error becomes `false` / nil, as in Foundation.
/// The throwing forms report it; these exist for ported code that ignores errors anyway.
func succeeds(_ body: () throws -> Void) -> Bool {
    do { try body(); return true } catch { return false }
}

func succeeds<R>(_ body: () throws -> R) -> R? {
    do { return try body() } catch { return nil }
}
