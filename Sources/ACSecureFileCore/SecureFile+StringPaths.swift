#if canImport(Glibc)
import Glibc
#endif
import ACSecureServices
import ACSystemCalls

// The calls that take a path, for a path held as a `String` (always UTF-8). Every one forwards to
// the `BytePath` form, which takes any name `open(2)` takes.

extension SecureFile {
    public static func open(_ path: String, flags: Int32, mode: mode_t = 0o666, key: KeySelection = .app,
                            services: (any KeyProvider)? = nil,
                            sharing: Sharing = .environmentDefault,
                            buffering: Buffering = .environmentDefault,
                            readCache: ReadCache = .off,
                            partialOverwrites: PartialOverwrites = .environmentDefault,
                            wholeChunkOverwrites: WholeChunkOverwrites = .chunkCopy) throws(SecureFileError) -> SecureFile {
        try open(BytePath(path), flags: flags, mode: mode, key: key, services: services, sharing: sharing,
                 buffering: buffering, readCache: readCache, partialOverwrites: partialOverwrites,
                 wholeChunkOverwrites: wholeChunkOverwrites)
    }
}

extension SecureFileSystem {
    public static func lstat(_ path: String) throws(SecureFileError) -> Glibc.stat { try lstat(BytePath(path)) }

    public static func openHandleCount(_ path: String) throws(SecureFileError) -> Int { try openHandleCount(BytePath(path)) }

    public static func truncate(_ path: String, to length: Int64, key: KeySelection = .app,
                                services: (any KeyProvider)? = nil) throws(SecureFileError) {
        try truncate(BytePath(path), to: length, key: key, services: services)
    }

    public static func rename(_ old: String, _ new: String) throws(SecureFileError) { try rename(BytePath(old), BytePath(new)) }

    public static func info(_ path: String) throws(SecureFileError) -> SecureFileInfo { try info(BytePath(path)) }

    public static func rewrap(_ path: String, from: KeySelection = .app, to: KeySelection,
                              services: (any KeyProvider)? = nil) throws(SecureFileError) {
        try rewrap(BytePath(path), from: from, to: to, services: services)
    }

    public static func rewrap(_ path: String, from: KeySelection = .app, toKey kek: KeyEncryptionKey,
                              recordAs selection: KeySelection? = nil, services: (any KeyProvider)? = nil) throws(SecureFileError) {
        try rewrap(BytePath(path), from: from, toKey: kek, recordAs: selection, services: services)
    }
}
