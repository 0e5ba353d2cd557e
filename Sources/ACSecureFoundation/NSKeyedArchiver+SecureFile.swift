import Foundation
import ACSecureFileCore

// NSKeyedArchiver / NSKeyedUnarchiver categories, reference tables 26–27.
//
// Secure-coding stance: the reference's methods mirror the legacy `archiveRootObject:toFile:` and
// `unarchiveObjectWithFile:`, which do not require NSSecureCoding, and these do the same. What they
// read is authenticated (AES-GCM under this app's key), so only this app — not an attacker who can
// write to the disk — can have produced the archive; a tampered file fails with
// ACE_BAD_KEY_OR_CORRUPT_DATA_ERROR before any object is decoded. Code that reads archives another
// party could have written (a group file) should still use the NSSecureCoding path:
// `archiveRootObject(_:toSecureFile:atomically:requiringSecureCoding: true)` and
// `unarchivedObject(ofClasses:fromSecureFile:)`, which decode only the listed classes.

// Spellings: `archiveRootObject(_:toSecureFile:) -> Bool` and `unarchiveObject(withSecureFile:) -> Any?`
// as Foundation's `archiveRootObject(_:toFile:)`/`unarchiveObject(withFile:)`; the reference's
// `…error:` forms would import with the same names, so they take `options:` and throw.

extension NSKeyedArchiver {
    /// `archiveRootObject:toFile:`'s secure form — archives `rootObject` into a secure file,
    /// atomically; false on any failure (prefer a throwing form).
    @discardableResult
    public static func archiveRootObject(_ rootObject: Any, toSecureFile path: String) -> Bool {
        succeeds { try archiveRootObject(rootObject, toSecureFile: path, atomically: true) }
    }

    /// `archiveRootObject:toSecureFile:error:` — `.atomic` as `archiveRootObject:toFile:` writes.
    public static func archiveRootObject(_ rootObject: Any, toSecureFile path: String, options: Data.WritingOptions) throws {
        let data = try NSKeyedArchiver.archivedData(withRootObject: rootObject, requiringSecureCoding: false)
        try data.write(toSecureFile: path, options: options)
    }

    /// `archiveRootObject:toSecureFile:atomically:error:`.
    public static func archiveRootObject(_ rootObject: Any, toSecureFile path: String, atomically: Bool) throws {
        try archiveRootObject(rootObject, toSecureFile: path, atomically: atomically, requiringSecureCoding: false)
    }

    /// Beyond the reference: with `requiringSecureCoding: true` every archived object must adopt NSSecureCoding.
    public static func archiveRootObject(_ rootObject: Any, toSecureFile path: String, atomically: Bool,
                                         requiringSecureCoding: Bool) throws {
        let data = try NSKeyedArchiver.archivedData(withRootObject: rootObject, requiringSecureCoding: requiringSecureCoding)
        try data.write(toSecureFile: path, options: atomically ? .atomic : [])
    }
}

extension NSKeyedUnarchiver {
    /// `unarchiveObjectWithFile:`'s secure form — nil on any failure (prefer `unarchiveObject(withSecureFile:options:)`).
    public static func unarchiveObject(withSecureFile path: String) -> Any? {
        succeeds { try unarchiveObject(withSecureFile: path, options: []) } ?? nil
    }

    /// `unarchiveObjectWithSecureFile:error:` — the archived root object (nil for an archive of nil).
    /// Does not require NSSecureCoding (see the stance above). The reading options are ignored.
    public static func unarchiveObject(withSecureFile path: String, options: Data.ReadingOptions) throws -> Any? {
        let data = try Data(contentsOfSecureFile: path)
        let unarchiver = try NSKeyedUnarchiver(forReadingFrom: data)
        unarchiver.requiresSecureCoding = false
        unarchiver.decodingFailurePolicy = .setErrorAndReturn
        defer { unarchiver.finishDecoding() }
        let object = unarchiver.decodeObject(forKey: NSKeyedArchiveRootObjectKey)
        if let error = unarchiver.error { throw error }
        return object
    }

    /// The NSSecureCoding path: decodes only objects of `classes` (or their subclasses); an archive
    /// naming any other class fails with NSCocoaErrorDomain `coderReadCorrupt`.
    public static func unarchivedObject(ofClasses classes: [AnyClass], fromSecureFile path: String) throws -> Any? {
        let data = try Data(contentsOfSecureFile: path)
        try checkClasses(in: data, allowed: classes, path: path)
        return try NSKeyedUnarchiver.unarchivedObject(ofClasses: classes, from: data)
    }

    /// The NSSecureCoding path for one class.
    public static func unarchivedObject<T: NSObject & NSSecureCoding>(ofClass cls: T.Type, fromSecureFile path: String) throws -> T? {
        let data = try Data(contentsOfSecureFile: path)
        try checkClasses(in: data, allowed: [cls], path: path)
        return try NSKeyedUnarchiver.unarchivedObject(ofClass: cls, from: data)
    }

    /// Linux's Foundation traps (instead of throwing) when an archive holds a class that is not
    /// allowed, so the class table is checked first: every class record's hierarchy (`$classes`)
    /// must contain an allowed class name.
    private static func checkClasses(in archive: Data, allowed: [AnyClass], path: String) throws {
        let allowedNames = Set(allowed.map { NSStringFromClass($0) })
        func corrupt(_ why: String) -> NSError {
            NSError(domain: NSCocoaErrorDomain, code: CocoaError.coderReadCorrupt.rawValue,
                    userInfo: [NSFilePathErrorKey: path, NSLocalizedDescriptionKey: "\(path): \(why)"])
        }
        guard let root = try? PropertyListSerialization.propertyList(from: archive, format: nil) as? [String: Any],
              let objects = root["$objects"] as? [Any] else {
            throw corrupt("not a keyed archive")
        }
        for case let record as [String: Any] in objects {
            guard let hierarchy = record["$classes"] else { continue }
            let names = (hierarchy as? [Any])?.compactMap { $0 as? String } ?? []
            guard names.contains(where: allowedNames.contains) else {
                throw corrupt("the archive holds an object of class \(names.first ?? "?"), which is not among the allowed classes")
            }
        }
    }
}
