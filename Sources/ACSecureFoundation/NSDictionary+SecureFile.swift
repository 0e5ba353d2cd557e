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

    static func write(_ object: Any, to path: String, atomically: Bool) throws {
        let data: Data
        do {
            data = try PropertyListSerialization.data(fromPropertyList: object, format: .xml, options: 0)
        } catch {
            throw NSError(domain: NSCocoaErrorDomain, code: CocoaError.propertyListWriteInvalid.rawValue,
                          userInfo: [NSFilePathErrorKey: path,
                                     NSLocalizedDescriptionKey: "\(path): the object is not a property list (\((error as NSError).code))"])
        }
        try data.write(toSecureFile: path, options: atomically ? .atomic : [])
    }

    static func wrongContents(_ path: String, _ why: String) -> NSError {
        NSError(domain: NSCocoaErrorDomain, code: CocoaError.propertyListReadCorrupt.rawValue,
                userInfo: [NSFilePathErrorKey: path, NSLocalizedDescriptionKey: "\(path): \(why)"])
    }
}

extension NSDictionary {
    /// `initWithContentsOfSecureFile:error:` (and `dictionaryWithContentsOfSecureFile:error:`).
    public convenience init(contentsOfSecureFile path: String) throws {
        guard let dictionary = try SecurePropertyList.read(path) as? [AnyHashable: Any] else {
            throw SecurePropertyList.wrongContents(path, "the property list is not a dictionary")
        }
        self.init(dictionary: dictionary)
    }

    /// `initWithContentsOfSecureURL:error:` — `url` must be a file URL (else `ACE_REGULAR_FILE_ONLY_ERROR`).
    public convenience init(contentsOfSecureURL url: URL) throws {
        try self.init(contentsOfSecureFile: SecureFileIO.path(of: url))
    }

    /// `writeToSecureFile:atomically:error:`.
    public func write(toSecureFile path: String, atomically: Bool) throws {
        try SecurePropertyList.write(self, to: path, atomically: atomically)
    }

    /// `writeToSecureURL:atomically:error:`.
    public func write(toSecureURL url: URL, atomically: Bool) throws {
        try write(toSecureFile: SecureFileIO.path(of: url), atomically: atomically)
    }
}

extension NSArray {
    /// `initWithContentsOfSecureFile:error:` (and `arrayWithContentsOfSecureFile:error:`).
    public convenience init(contentsOfSecureFile path: String) throws {
        guard let array = try SecurePropertyList.read(path) as? [Any] else {
            throw SecurePropertyList.wrongContents(path, "the property list is not an array")
        }
        self.init(array: array)
    }

    /// `initWithContentsOfSecureURL:error:`.
    public convenience init(contentsOfSecureURL url: URL) throws {
        try self.init(contentsOfSecureFile: SecureFileIO.path(of: url))
    }

    /// `writeToSecureFile:atomically:error:`.
    public func write(toSecureFile path: String, atomically: Bool) throws {
        try SecurePropertyList.write(self, to: path, atomically: atomically)
    }

    /// `writeToSecureURL:atomically:error:`.
    public func write(toSecureURL url: URL, atomically: Bool) throws {
        try write(toSecureFile: SecureFileIO.path(of: url), atomically: atomically)
    }
}
