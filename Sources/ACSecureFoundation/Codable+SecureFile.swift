import Foundation

// Beyond the reference: Codable values to and from secure files in one call. Writes are atomic
// unless `options` says otherwise. Errors: the secure file's (ACErrorDomain / NSPOSIXErrorDomain),
// or the coder's own (`EncodingError` / `DecodingError`).

extension JSONEncoder {
    /// Encodes `value` as JSON into the secure file at `path`.
    public func encode<T: Encodable>(_ value: T, toSecureFile path: String, encryptionGroupId: String? = nil,
                                     options: Data.WritingOptions = .atomic) throws {
        try encode(value).writeSecure(path, encryptionGroupId, options)
    }
}

extension JSONDecoder {
    /// Decodes a `T` from the JSON in the secure file at `path`.
    public func decode<T: Decodable>(_ type: T.Type, fromSecureFile path: String, encryptionGroupId: String? = nil) throws -> T {
        try decode(type, from: Data.readSecure(path, encryptionGroupId))
    }
}

extension PropertyListEncoder {
    /// Encodes `value` as a property list (this encoder's `outputFormat`) into the secure file at `path`.
    public func encode<T: Encodable>(_ value: T, toSecureFile path: String, encryptionGroupId: String? = nil,
                                     options: Data.WritingOptions = .atomic) throws {
        try encode(value).writeSecure(path, encryptionGroupId, options)
    }
}

extension PropertyListDecoder {
    /// Decodes a `T` from the property list in the secure file at `path`.
    public func decode<T: Decodable>(_ type: T.Type, fromSecureFile path: String, encryptionGroupId: String? = nil) throws -> T {
        try decode(type, from: Data.readSecure(path, encryptionGroupId))
    }
}

extension Data {
    fileprivate func writeSecure(_ path: String, _ group: String?, _ options: Data.WritingOptions) throws {
        try secureWrite(path, group: group, options: options)
    }

    fileprivate static func readSecure(_ path: String, _ group: String?) throws -> Data {
        if let group { return try Data(contentsOfSecureFile: path, encryptionGroupId: group) }
        return try Data(contentsOfSecureFile: path)
    }
}
