import Foundation
import ACSecureFileCore

// NSDictionary / NSMutableDictionary / NSArray / NSMutableArray categories, reference tables 28–31.
// The contents are an XML property list, as `write(toFile:atomically:)` writes; reading accepts any
// property-list format. A file whose top level is of the wrong kind fails with
// NSCocoaErrorDomain `propertyListReadCorrupt`; contents that are not property-list objects fail
// to write with NSCocoaErrorDomain `propertyListWriteInvalid`. The mutable classes inherit these
// initializers and get a mutable top level, as their plain counterparts do.

enum SecurePropertyList {
    static func read(_ path: String) throws -> Any {
        let data = try Data(contentsOfSecureFile: path)
        do {
            return try PropertyListSerialization.propertyList(from: data, options: [], format: nil)
        } catch {
            throw wrongContents(path, "is not a property list")
        }
    }

    static func write(_ object: Any, to path: String, options: Data.WritingOptions) throws {
        let data: Data
        do {
            data = try PropertyListSerialization.data(fromPropertyList: object, format: .xml, options: 0)
        } catch {
            throw NSError(domain: NSCocoaErrorDomain, code: CocoaError.propertyListWriteInvalid.rawValue,
                          userInfo: [NSFilePathErrorKey: path,
                                     NSLocalizedDescriptionKey: "\(path): the object is not a property list (\((error as NSError).code))"])
        }
        try data.write(toSecureFile: path, options: options)
    }

    static func wrongContents(_ path: String, _ why: String) -> NSError {
        NSError(domain: NSCocoaErrorDomain, code: CocoaError.propertyListReadCorrupt.rawValue,
                userInfo: [NSFilePathErrorKey: path, NSLocalizedDescriptionKey: "\(path): \(why)"])
    }
}

// Spellings, as Foundation's NSDictionary/NSArray: `init?(contentsOfSecureFile:)` and
// `write(toSecureFile:atomically:) -> Bool` give nil/false on any failure. The reference's `…error:`
// methods would import with the same names, so they take `options:` here (as NSData's
// `…options:error:` methods do) and throw: `init(contentsOfSecureFile:options:)`,
// `write(toSecureFile:options:)` (`.atomic`, `.withoutOverwriting`).

extension NSDictionary {
    /// `initWithContentsOfSecureFile:` (and `dictionaryWithContentsOfSecureFile:`) — nil on any failure.
    public convenience init?(contentsOfSecureFile path: String) {
        guard let dictionary = succeeds({ try NSDictionary.secureDictionary(path) }) else { return nil }
        self.init(dictionary: dictionary)
    }

    /// `initWithContentsOfSecureURL:` — nil on any failure (including a URL that is not a file URL).
    public convenience init?(contentsOfSecureURL url: URL) {
        guard let dictionary = succeeds({ try NSDictionary.secureDictionary(SecureFileIO.path(of: url)) }) else { return nil }
        self.init(dictionary: dictionary)
    }

    /// `initWithContentsOfSecureFile:error:` (and `dictionaryWithContentsOfSecureFile:error:`).
    /// The reading options are accepted for symmetry with NSData and ignored.
    /// - Throws: the secure file's errors (ACErrorDomain, NSPOSIXErrorDomain); NSCocoaErrorDomain
    ///   `propertyListReadCorrupt` when the contents are not a dictionary property list.
    public convenience init(contentsOfSecureFile path: String, options: Data.ReadingOptions) throws {
        self.init(dictionary: try NSDictionary.secureDictionary(path))
    }

    /// `initWithContentsOfSecureURL:error:` — `url` must be a file URL (else `ACE_REGULAR_FILE_ONLY_ERROR`).
    public convenience init(contentsOfSecureURL url: URL, options: Data.ReadingOptions) throws {
        self.init(dictionary: try NSDictionary.secureDictionary(SecureFileIO.path(of: url)))
    }

    /// `writeToSecureFile:atomically:` — false on any failure (prefer `write(toSecureFile:options:)`).
    @discardableResult
    public func write(toSecureFile path: String, atomically: Bool) -> Bool {
        succeeds { try SecurePropertyList.write(self, to: path, options: atomically ? .atomic : []) }
    }

    /// `writeToSecureURL:atomically:`.
    @discardableResult
    public func write(toSecureURL url: URL, atomically: Bool) -> Bool {
        succeeds { try SecurePropertyList.write(self, to: SecureFileIO.path(of: url), options: atomically ? .atomic : []) }
    }

    /// `writeToSecureFile:atomically:error:` — `.atomic` for `atomically: YES`.
    /// - Throws: the secure file's errors; NSCocoaErrorDomain `propertyListWriteInvalid` when the
    ///   contents are not property-list objects.
    public func write(toSecureFile path: String, options: Data.WritingOptions) throws {
        try SecurePropertyList.write(self, to: path, options: options)
    }

    /// `writeToSecureURL:atomically:error:`.
    public func write(toSecureURL url: URL, options: Data.WritingOptions) throws {
        try SecurePropertyList.write(self, to: SecureFileIO.path(of: url), options: options)
    }

    private static func secureDictionary(_ path: String) throws -> [AnyHashable: Any] {
        guard let dictionary = try SecurePropertyList.read(path) as? [AnyHashable: Any] else {
            throw SecurePropertyList.wrongContents(path, "the property list is not a dictionary")
        }
        return dictionary
    }
}

extension NSArray {
    /// `initWithContentsOfSecureFile:` (and `arrayWithContentsOfSecureFile:`) — nil on any failure.
    public convenience init?(contentsOfSecureFile path: String) {
        guard let array = succeeds({ try NSArray.secureArray(path) }) else { return nil }
        self.init(array: array)
    }

    /// `initWithContentsOfSecureURL:` — nil on any failure.
    public convenience init?(contentsOfSecureURL url: URL) {
        guard let array = succeeds({ try NSArray.secureArray(SecureFileIO.path(of: url)) }) else { return nil }
        self.init(array: array)
    }

    /// `initWithContentsOfSecureFile:error:` (and `arrayWithContentsOfSecureFile:error:`).
    public convenience init(contentsOfSecureFile path: String, options: Data.ReadingOptions) throws {
        self.init(array: try NSArray.secureArray(path))
    }

    /// `initWithContentsOfSecureURL:error:`.
    public convenience init(contentsOfSecureURL url: URL, options: Data.ReadingOptions) throws {
        self.init(array: try NSArray.secureArray(SecureFileIO.path(of: url)))
    }

    /// `writeToSecureFile:atomically:` — false on any failure (prefer `write(toSecureFile:options:)`).
    @discardableResult
    public func write(toSecureFile path: String, atomically: Bool) -> Bool {
        succeeds { try SecurePropertyList.write(self, to: path, options: atomically ? .atomic : []) }
    }

    /// `writeToSecureURL:atomically:`.
    @discardableResult
    public func write(toSecureURL url: URL, atomically: Bool) -> Bool {
        succeeds { try SecurePropertyList.write(self, to: SecureFileIO.path(of: url), options: atomically ? .atomic : []) }
    }

    /// `writeToSecureFile:atomically:error:`.
    public func write(toSecureFile path: String, options: Data.WritingOptions) throws {
        try SecurePropertyList.write(self, to: path, options: options)
    }

    /// `writeToSecureURL:atomically:error:`.
    public func write(toSecureURL url: URL, options: Data.WritingOptions) throws {
        try SecurePropertyList.write(self, to: SecureFileIO.path(of: url), options: options)
    }

    private static func secureArray(_ path: String) throws -> [Any] {
        guard let array = try SecurePropertyList.read(path) as? [Any] else {
            throw SecurePropertyList.wrongContents(path, "the property list is not an array")
        }
        return array
    }
}
