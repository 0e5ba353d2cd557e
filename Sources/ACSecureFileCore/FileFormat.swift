#if canImport(Glibc)
import Glibc
#endif
import ACSystemCalls
import ACCrypto
import ACSecureServices

/// The on-disk layout of a secure file (see docs/FORMAT.md).
///
///     header (128) ‖ [tail-copy slot 0 ‖ slot 1] ‖ chunk 0 ‖ chunk 1 ‖ … ‖ chunk n-1 ‖ trailer
///     version 4 (new files) has the two tail-copy slots (TailCopyDescriptor; chunk 0 at `dataOffset`)
///     versions 2 to 4 (3 adds the header's pending-end record, see FileHeader):
///       chunk   = s (4) ‖ nonce (12) ‖ AES-256-GCM(K_s, nonce, plaintext ≤ chunkSize, AAD = fileID ‖ u64 index) ‖ tag (16)
///       trailer = s (4) ‖ nonce (12) ‖ GCM tag under K_s over no plaintext, AAD = "ACSF end" ‖ fileID ‖ u64 plaintext size
///     version 1: the same without s, under the data key itself (28 bytes per chunk and trailer).
///
/// Every chunk but the last holds exactly `chunkSize` plaintext bytes. The trailer authenticates the
/// length, so cutting the file anywhere, even at a chunk boundary, is detected.
public struct FileLayout: Sendable, Equatable {
    public static let headerSize = 128
    public static let nonceSize = 12
    public static let tagSize = 16
    public static let defaultChunkShift: UInt8 = 12  // 4 KiB: see docs/FORMAT.md for why
    public static let chunkShiftRange: ClosedRange<UInt8> = 9...20
    /// The version new files get (with chunks of at most 2^16 bytes; larger chunks get version 3,
    /// whose tail copies would cost two chunks more per file). Version 2 files become version 3 (a
    /// header rewrite: the chunks are the same) at their first change that needs a pending-end
    /// record; version 1, 3 and 4 files keep their version when modified (versions 4 and 5 move
    /// the chunks).
    public static let currentVersion: UInt16 = 5
    public static let supportedVersions: ClosedRange<UInt16> = 1...5
    /// Version 5: version 4 with tail records (appends sealed alone after the last chunk, and a
    /// trailer footer that says how the end is laid out: `TailShape`; docs/FORMAT.md "Version 5").
    public static let tailRecordsVersion: UInt16 = 5
    /// The version new files get: `currentVersion`, or 4 when `ACSECURE_FORMAT_VERSION=4` asks for
    /// it (to compare the two, or to write files an older build reads).
    public static let newFileVersion: UInt16 = {
        guard let v = getenv("ACSECURE_FORMAT_VERSION"), String(cString: v) == "4" else { return currentVersion }
        return 4
    }()
    /// The largest chunk shift a version 4 file has.
    public static let largestTailCopyChunkShift: UInt8 = 16

    /// The layout of a new file (or a new generation) with chunks of 2^`chunkShift` bytes.
    public static func forNewFile(chunkShift: UInt8 = defaultChunkShift) -> FileLayout {
        FileLayout(chunkShift: chunkShift, version: chunkShift <= largestTailCopyChunkShift ? newFileVersion : 3)
    }

    /// Whether the header can hold a pending-end record (bytes 108..<128).
    public var hasPendingEndRecord: Bool { version >= 3 }
    /// Whether two tail-copy slots follow the header (version 4; docs/FORMAT.md "Tail copies").
    public var hasTailCopies: Bool { version >= 4 }
    /// Whether appends may leave records after the last chunk, and trailers end in a footer (version 5).
    public var hasTailRecords: Bool { version >= 5 }

    /// Bytes of one tail-copy slot: its descriptor, a copy of a last chunk and of a trailer.
    public var tailCopySlotSize: Int { hasTailCopies ? TailCopyDescriptor.size + physicalChunkSize + trailerSize : 0 }
    /// Where tail-copy slot `slot` (0 or 1) starts.
    public func tailCopyOffset(_ slot: Int) -> Int64 { Int64(Self.headerSize + slot * tailCopySlotSize) }
    /// Where chunk 0 starts: after the header and, in version 4, the two tail-copy slots.
    public let dataOffset: Int64

    public let version: UInt16
    /// Bytes of the key selector before each chunk's and the trailer's nonce: 4 from version 2, else 0.
    public var selectorSize: Int { version >= 2 ? 4 : 0 }
    public var chunkOverhead: Int { selectorSize + Self.nonceSize + Self.tagSize }
    public var trailerSize: Int { selectorSize + Self.nonceSize + Self.tagSize + (hasTailRecords ? TailShape.footerSize : 0) }
    public let chunkShift: UInt8
    public var chunkSize: Int { 1 << Int(chunkShift) }
    public var physicalChunkSize: Int { chunkSize + chunkOverhead }

    public init(chunkShift: UInt8 = defaultChunkShift, version: UInt16 = newFileVersion) {
        precondition(Self.chunkShiftRange.contains(chunkShift) && Self.supportedVersions.contains(version))
        precondition(version < 4 || chunkShift <= Self.largestTailCopyChunkShift)
        self.chunkShift = chunkShift
        self.version = version
        let footer = version >= 5 ? TailShape.footerSize : 0
        let slot = version >= 4 ? TailCopyDescriptor.size + (1 << Int(chunkShift)) + 2 * (4 + Self.nonceSize + Self.tagSize) + footer : 0
        self.dataOffset = Int64(Self.headerSize + 2 * slot)
    }

    /// Number of chunks a file of `size` plaintext bytes has.
    @inline(__always) public func chunkCount(forSize size: Int64) -> Int64 {
        size == 0 ? 0 : (size - 1) >> Int64(chunkShift) + 1
    }

    /// Plaintext length of chunk `index` in a file of `size` bytes.
    @inline(__always) public func chunkLength(_ index: Int64, size: Int64) -> Int {
        Int(min(Int64(chunkSize), size - index << Int64(chunkShift)))
    }

    /// File offset of chunk `index`.
    @inline(__always) public func chunkOffset(_ index: Int64) -> Int64 {
        dataOffset + index * Int64(physicalChunkSize)
    }

    /// Physical file length for `size` plaintext bytes (header and trailer included).
    public func physicalSize(forPlaintextSize size: Int64) -> Int64 {
        let n = chunkCount(forSize: size)
        return dataOffset + size + n * Int64(chunkOverhead) + Int64(trailerSize)
    }

    /// Plaintext size of a physical file length, or nil when no valid file has that length
    /// (a torn write or tampering, or a size past `SecureFile.maximumFileSize`).
    public func plaintextSize(forPhysicalSize physical: Int64) -> Int64? {
        let body = physical - dataOffset - Int64(trailerSize)
        guard body >= 0 else { return nil }
        let p = Int64(physicalChunkSize)
        let full = body / p
        let rem = body % p
        guard rem == 0 || rem > Int64(chunkOverhead) else { return nil }
        // full·2^s ≤ body: no overflow. No writer goes past the limit, so a longer file is not valid.
        let size = full << Int64(chunkShift) + (rem == 0 ? 0 : rem - Int64(chunkOverhead))
        return size <= SecureFile.maximumFileSize ? size : nil
    }

    /// Physical file length for `size` plaintext bytes whose end is laid out as `shape` says.
    public func physicalSize(forPlaintextSize size: Int64, shape: TailShape) -> Int64 {
        guard shape.records > 0 else { return physicalSize(forPlaintextSize: size) }
        let base = Int(size & Int64(chunkSize - 1)) - shape.recordBytes
        return physicalSize(forPlaintextSize: size) + Int64(shape.records * TailShape.recordOverhead - (base == 0 ? chunkOverhead : 0))
    }

    /// Plaintext size and end shape of a version 5 file of `physical` bytes whose trailer ends in
    /// `footer` (its last `TailShape.footerSize` bytes), or nil when they do not fit together (a torn
    /// write or tampering). Bounded arithmetic only: every field is untrusted.
    public func plaintextSize(forPhysicalSize physical: Int64, footer: UnsafeRawPointer) -> (size: Int64, shape: TailShape)? {
        guard hasTailRecords, let f = TailShape.Footer(footer) else { return nil }
        if f.records == 0 {
            guard f.recordBytes == 0, let size = plaintextSize(forPhysicalSize: physical),
                  Int(size & Int64(chunkSize - 1)) == f.baseBytes else { return nil }
            return (size, .none)
        }
        let remainder = f.baseBytes + f.recordBytes
        guard f.recordBytes >= f.records, remainder < chunkSize else { return nil }
        let region = Int64((f.baseBytes > 0 ? f.baseBytes + chunkOverhead : 0) + f.recordBytes + f.records * TailShape.recordOverhead)
        let body = physical - Int64(trailerSize) - region - dataOffset
        guard body >= 0, body % Int64(physicalChunkSize) == 0 else { return nil }
        let size = (body / Int64(physicalChunkSize)) << Int64(chunkShift) + Int64(remainder)
        guard size <= SecureFile.maximumFileSize else { return nil }
        return (size, TailShape(records: f.records, recordBytes: f.recordBytes))
    }

    /// AAD of chunk `index`: it binds the chunk to its file and its position.
    @inline(__always) static func writeChunkAAD(_ out: UnsafeMutableRawPointer, fileID: UnsafeRawPointer, index: Int64) {
        out.copyMemory(from: fileID, byteCount: 16)
        out.storeBytes(of: UInt64(bitPattern: index).bigEndian, toByteOffset: 16, as: UInt64.self)
    }

    /// Seals chunk `index` in place at `c`: its selector (when the layout has one, `selectorSize`
    /// 4), then, after the nonce already at `c + selectorSize`, the ciphertext of `count` bytes of
    /// `plaintext` and the tag. `aad` is scratch for the chunk's AAD. The one sealing step of the
    /// writer (`sealChunk`) and of the sealing pool's pieces (`SealJob`).
    @inline(__always)
    static func sealChunk(_ c: UnsafeMutableRawPointer, selector: UInt32, selectorSize: Int, context: AESGCMContext,
                          aad: UnsafeMutableRawPointer, fileID: UnsafeRawPointer, index: Int64,
                          plaintext: UnsafeRawPointer, count: Int) throws(CryptoError) {
        writeChunkAAD(aad, fileID: fileID, index: index)
        if selectorSize > 0 { c.storeBytes(of: selector.bigEndian, as: UInt32.self) }
        let n = c + selectorSize
        try context.seal(nonce: n, aad: UnsafeRawBufferPointer(start: aad, count: chunkAADSize),
                         plaintext: UnsafeRawBufferPointer(start: plaintext, count: count),
                         ciphertext: n + nonceSize, tag: n + nonceSize + count)
    }
    static let chunkAADSize = 24

    /// AAD of the trailer: it binds the plaintext length to the file.
    static func trailerAAD(fileID: [UInt8], size: Int64) -> [UInt8] {
        Array("ACSF end".utf8) + fileID + bigEndianBytes(UInt64(size))
    }
}

/// The 128-byte header: format, chunk size, file ID and the wrapped data key.
///
///     0   "ACSF"                4
///     4   version = 1 to 4      u16  (4 for new files; from 2: key selectors, see FileLayout)
///     6   header size = 128     u16
///     8   chunk shift (9…20)    u8   (9…16 in version 4)
///     9   key class             u8   (1 app, 2 group, 3 crypto block)
///     10  flags = 0             u16  (reserved: a reader rejects any other value)
///     12  reserved, zero        u32
///     16  file ID               16   random
///     32  KEK fingerprint       16   HKDF(KEK, "key fingerprint"), tells which key is needed
///     48  wrap nonce            12
///     60  wrapped data key      32   AES-256-GCM(KEK, nonce, data key, AAD = bytes 0..<48)
///     92  wrap tag              16
///     108 versions 3 and 4: the pending-end record (20 bytes, outside the wrap's AAD, so it is rewritten
///         alone with one 20-byte pwrite inside the first sector); versions 1 and 2: reserved, zero
///           108 kind                u8   0 none (the rest written as zero, not read), 1 a pending end
///           109 reserved, zero      3
///           112 size                u64  the plaintext size the file ends at if a trailer for it is
///                                        found at its place (docs/FORMAT.md "Pending end")
///           120 reserved, zero      8
public struct FileHeader: Sendable, Equatable {
    public static let magic: [UInt8] = Array("ACSF".utf8)

    /// Where the pending-end record starts, and its size.
    static let pendingEndOffset = 108
    static let pendingEndRecordSize = 20

    /// The pending end this header records (version 3), nil for none. It is a hint, not trusted:
    /// a reader takes it only where a trailer for that size authenticates at its place.
    public var pendingEnd: Int64?

    public var layout: FileLayout
    public var keyClass: UInt8
    public var flags: UInt16
    /// Bytes 16..<108: file ID (16) ‖ KEK fingerprint (16) ‖ wrapped key (60; empty before `wrap`), in
    /// one array: every first open parses a header (one allocation instead of three).
    private var fields: [UInt8]

    public var fileID: [UInt8] {
        get { Array(fields[0..<16]) }
        set { precondition(newValue.count == 16); fields.replaceSubrange(0..<16, with: newValue) }
    }
    public var fingerprint: [UInt8] {
        get { Array(fields[16..<32]) }
        set { precondition(newValue.count == 16); fields.replaceSubrange(16..<32, with: newValue) }
    }
    /// nonce ‖ ciphertext ‖ tag (60 bytes).
    public var wrappedKey: [UInt8] {
        get { Array(fields[32...]) }
        set { fields.replaceSubrange(32..., with: newValue) }
    }

    public init(layout: FileLayout, keyClass: UInt8, flags: UInt16, fileID: [UInt8], fingerprint: [UInt8], wrappedKey: [UInt8]) {
        precondition(fileID.count == 16 && fingerprint.count == 16)
        self.layout = layout
        self.keyClass = keyClass
        self.flags = flags
        var fields: [UInt8] = []
        fields.reserveCapacity(92)
        fields += fileID
        fields += fingerprint
        fields += wrappedKey
        self.fields = fields
    }

    /// Parsed fields: `fields` is bytes 16..<108 of a header.
    private init(layout: FileLayout, keyClass: UInt8, flags: UInt16, fields: [UInt8]) {
        self.layout = layout
        self.keyClass = keyClass
        self.flags = flags
        self.fields = fields
    }

    /// The file ID's 16 bytes, without a copy.
    func withFileID<R>(_ body: (UnsafeRawBufferPointer) -> R) -> R {
        fields.withUnsafeBytes { body(UnsafeRawBufferPointer(rebasing: $0[0..<16])) }
    }

    /// A new header for a new file: fresh file ID, data key wrapped under `kek`. The file ID is public
    /// (it is in the header), so it comes from the nonce pool like nonces, not from a system call.
    static func create(layout: FileLayout, kek: KeyEncryptionKey, dataKey: SecureBytes) throws(SecureFileError) -> FileHeader {
        var fileID = [UInt8](repeating: 0, count: 16)
        fileID.withUnsafeMutableBytes { NonceGenerator.fill($0) }
        var h = FileHeader(layout: layout, keyClass: kek.keyClass.rawValue, flags: 0,
                           fileID: fileID, fingerprint: kek.fingerprint, wrappedKey: [])
        try h.wrap(dataKey: dataKey, under: kek)
        return h
    }

    /// Re-wraps the data key under another key-encryption key (re-sharing without re-encryption).
    mutating func wrap(dataKey: SecureBytes, under kek: KeyEncryptionKey) throws(SecureFileError) {
        keyClass = kek.keyClass.rawValue
        fingerprint = kek.fingerprint
        do {
            wrappedKey = try withAuthenticatedPrefix { (prefix) throws(CryptoError) in
                try AESGCMContext(key: kek.key).sealWithRandomNonce(dataKey, aad: prefix)
            }
        } catch {
            throw SecureFileError.crypto(error, "cannot wrap the file key")
        }
    }

    /// The data key, or nil when `kek` is not the key this file was wrapped under (or the header was
    /// altered). The key class must be `kek`'s: it tells readers which key a file needs.
    /// - Throws: `ENOMEM` + `ACE_LOW_MEMORY_ERROR` naming `path` when no guarded memory is left for the key.
    func unwrap(with kek: KeyEncryptionKey, path: BytePath = "") throws(SecureFileError) -> SecureBytes? {
        let sameKEK = kek.fingerprint.withUnsafeBytes { k in
            fields.withUnsafeBytes { f in constantTimeEqual(k, UnsafeRawBufferPointer(rebasing: f[16..<32])) }
        }
        guard keyClass == kek.keyClass.rawValue, sameKEK, let ctx = try? AESGCMContext(key: kek.key) else { return nil }
        let opened: Result<SecureBytes?, CryptoError> = withAuthenticatedPrefix { prefix in
            fields.withUnsafeBytes { f in
                do throws(CryptoError) { return .success(try ctx.openSealed(UnsafeRawBufferPointer(rebasing: f[32...]), aad: prefix)) } catch {
                    return .failure(error)
                }
            }
        }
        let key: SecureBytes?
        switch opened {
        case .success(let k): key = k
        case .failure(let error): throw .crypto(error, "\(path): file key")
        }
        return key?.count == 32 ? key : nil
    }

    /// Bytes 0..<48, authenticated as the wrap's AAD (tests; the engine uses `withAuthenticatedPrefix`).
    var authenticatedPrefix: [UInt8] { withAuthenticatedPrefix { Array($0) } }

    /// Calls `body` with bytes 0..<48, written on the stack: a header is unwrapped at every open.
    func withAuthenticatedPrefix<R, E: Error>(_ body: (UnsafeRawBufferPointer) throws(E) -> R) throws(E) -> R {
        var prefix: (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0, 0, 0)
        return try withUnsafeMutableBytes(of: &prefix) { (b: UnsafeMutableRawBufferPointer) throws(E) -> R in
            writeAuthenticatedPrefix(into: b.baseAddress!)
            return try body(UnsafeRawBufferPointer(b))
        }
    }

    /// Writes bytes 0..<48 to `out`.
    private func writeAuthenticatedPrefix(into out: UnsafeMutableRawPointer) {
        out.storeBytes(of: Self.magicValue.bigEndian, as: UInt32.self)
        out.storeBytes(of: layout.version.bigEndian, toByteOffset: 4, as: UInt16.self)
        out.storeBytes(of: UInt16(FileLayout.headerSize).bigEndian, toByteOffset: 6, as: UInt16.self)
        out.storeBytes(of: layout.chunkShift, toByteOffset: 8, as: UInt8.self)
        out.storeBytes(of: keyClass, toByteOffset: 9, as: UInt8.self)
        out.storeBytes(of: flags.bigEndian, toByteOffset: 10, as: UInt16.self)
        out.storeBytes(of: UInt32(0), toByteOffset: 12, as: UInt32.self)
        fields.withUnsafeBytes { (out + 16).copyMemory(from: $0.baseAddress!, byteCount: 32) }  // file ID ‖ fingerprint
    }

    /// "ACSF" as a big-endian integer, for the writers and the parser.
    static let magicValue: UInt32 = 0x4143_5346

    func encoded() -> [UInt8] {
        precondition(fields.count == 108 - 16, "a header is encoded once its data key is wrapped")
        return [UInt8](unsafeUninitializedCapacity: FileLayout.headerSize) { b, initialized in
            let out = UnsafeMutableRawPointer(b.baseAddress!)
            writeAuthenticatedPrefix(into: out)
            fields.withUnsafeBytes { (out + 16).copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
            let reserved = 16 + fields.count
            (out + reserved).initializeMemory(as: UInt8.self, repeating: 0, count: FileLayout.headerSize - reserved)
            if let pendingEnd {
                precondition(layout.hasPendingEndRecord, "only version 3 headers hold a pending end")
                Self.writePendingEndRecord(pendingEnd, into: out + Self.pendingEndOffset)
            }
            initialized = FileLayout.headerSize
        }
    }

    /// The 20 bytes of a pending-end record for `size` (nil: none, all zero) at `out`.
    static func writePendingEndRecord(_ size: Int64?, into out: UnsafeMutableRawPointer) {
        out.initializeMemory(as: UInt8.self, repeating: 0, count: pendingEndRecordSize)
        guard let size else { return }
        out.storeBytes(of: 1, as: UInt8.self)
        out.storeBytes(of: UInt64(size).bigEndian, toByteOffset: 4, as: UInt64.self)
    }

    /// Parses an untrusted pending-end record (20 bytes): nil for none. Kind 0 is no record, whatever
    /// the size bytes hold (the record is cleared by rewriting all 20 bytes, and a reader must not
    /// depend on more than the kind byte of a clear); a size past the limit can be no end, so it is
    /// no record either. Another kind, or non-zero reserved bytes in a record, are malformed: no
    /// writer leaves them.
    static func parsePendingEndRecord(_ r: UnsafeRawBufferPointer) -> Result<Int64?, HeaderParseError> {
        precondition(r.count == pendingEndRecordSize)
        switch r[0] {
        case 0:
            return .success(nil)
        case 1:
            guard r[1..<4].allSatisfy({ $0 == 0 }), r[12..<20].allSatisfy({ $0 == 0 }) else {
                return .failure(.malformed("reserved bytes of the pending-end record are not zero"))
            }
            let size = UInt64(bigEndian: r.loadUnaligned(fromByteOffset: 4, as: UInt64.self))
            guard size <= UInt64(SecureFile.maximumFileSize) else { return .success(nil) }
            return .success(Int64(size))
        case let kind:
            return .failure(.malformed("pending-end record kind \(kind)"))
        }
    }

    /// Parses untrusted bytes. Every field is checked; nothing here is trusted until `unwrap` succeeds.
    static func parse(_ b: [UInt8]) -> Result<FileHeader, HeaderParseError> {
        b.withUnsafeBytes { parse($0) }
    }

    /// Parses untrusted bytes in caller memory (the header read at an open: no copy of them is made).
    static func parse(_ b: UnsafeRawBufferPointer) -> Result<FileHeader, HeaderParseError> {
        guard b.count >= FileLayout.headerSize else { return .failure(.tooShort) }
        guard UInt32(bigEndian: b.loadUnaligned(as: UInt32.self)) == magicValue else { return .failure(.notASecureFile) }
        let version = UInt16(b[4]) << 8 | UInt16(b[5])
        guard FileLayout.supportedVersions.contains(version) else { return .failure(.unsupportedVersion(Int(version))) }
        let headerSize = Int(b[6]) << 8 | Int(b[7])
        guard headerSize == FileLayout.headerSize else { return .failure(.malformed("header size \(headerSize)")) }
        guard FileLayout.chunkShiftRange.contains(b[8]) else { return .failure(.malformed("chunk shift \(b[8])")) }
        guard version < 4 || b[8] <= FileLayout.largestTailCopyChunkShift else {
            return .failure(.malformed("chunk shift \(b[8]) in a version \(version) file"))
        }
        guard KeyEncryptionKey.KeyClass(rawValue: b[9]) != nil else { return .failure(.malformed("key class \(b[9])")) }
        // No flag is defined (versions 1 to 3): a reader that ignored one would misread a file written by
        // a later writer, and a forged value must not pass (the wrap authenticates whatever is there).
        let flags = UInt16(b[10]) << 8 | UInt16(b[11])
        guard flags == 0 else { return .failure(.malformed("flags 0x\(String(flags, radix: 16)) are reserved and must be zero")) }
        guard b[12..<16].allSatisfy({ $0 == 0 }) else { return .failure(.malformed("reserved bytes 12..<16 are not zero")) }
        var pendingEnd: Int64?
        let layout = FileLayout(chunkShift: b[8], version: version)
        if layout.hasPendingEndRecord {
            switch parsePendingEndRecord(UnsafeRawBufferPointer(rebasing: b[pendingEndOffset..<pendingEndOffset + pendingEndRecordSize])) {
            case .success(let end): pendingEnd = end
            case .failure(let why): return .failure(why)
            }
        } else {
            guard b[108..<128].allSatisfy({ $0 == 0 }) else { return .failure(.malformed("reserved bytes 108..<128 are not zero")) }
        }
        var header = FileHeader(layout: layout, keyClass: b[9], flags: flags, fields: Array(b[16..<108]))
        header.pendingEnd = pendingEnd
        return .success(header)
    }
}

extension FileHeader {
    /// Why `read(from:)` found no header: the read failed (`errno`), or the bytes are not one.
    package enum ReadFailure: Error, Equatable, CustomStringConvertible {
        case io(Int32)
        case invalid(HeaderParseError)

        package var description: String {
            switch self {
            case .io(let e): return String(cString: strerror(e))
            case .invalid(let why): return why.description
            }
        }
    }

    /// The key class the first bytes of `fd` claim (the magic, then byte 9), before any other check:
    /// how a reader tells a damaged file of one class from a file of another kind. Nil when the
    /// file does not start like a secure file (or cannot be read).
    package static func claimedKeyClass(of fd: Int32) -> UInt8? {
        var prefix = (UInt64(0), UInt64(0))
        return withUnsafeMutableBytes(of: &prefix) { p -> UInt8? in
            guard case .success(16) = Sys.preadFull(fd, p.baseAddress!, 16, 0), UInt32(bigEndian: p.load(as: UInt32.self)) == magicValue else { return nil }
            return p[9]
        }
    }

    /// Reads and parses the header at the start of `fd`: the one place every caller (open, stat,
    /// re-wrap, coordination, wrapped files) gets a header from disk.
    package static func read(from fd: Int32) -> Result<FileHeader, ReadFailure> {
        withUnsafeTemporaryAllocation(byteCount: FileLayout.headerSize, alignment: 8) { bytes in
            switch Sys.preadFull(fd, bytes.baseAddress!, bytes.count, 0) {
            case .failure(let e): return .failure(.io(e.rawValue))
            case .success(let n) where n < bytes.count: return .failure(.invalid(.tooShort))
            case .success: return parse(UnsafeRawBufferPointer(bytes)).mapError { .invalid($0) }
            }
        }
    }
}

package enum HeaderParseError: Error, Equatable, CustomStringConvertible {
    case tooShort, notASecureFile, unsupportedVersion(Int), malformed(String)

    package var description: String {
        switch self {
        case .tooShort: return "too short for a secure file header"
        case .notASecureFile: return "not a secure file (no ACSF header)"
        case .unsupportedVersion(let v): return "unsupported secure file version \(v)"
        case .malformed(let what): return "malformed secure file header (\(what))"
        }
    }
}

func bigEndianBytes<T: FixedWidthInteger>(_ v: T, _ count: Int = MemoryLayout<T>.size) -> [UInt8] {
    (0..<count).reversed().map { UInt8(truncatingIfNeeded: v >> (8 * $0)) }
}

func constantTimeEqualBytes(_ a: [UInt8], _ b: [UInt8]) -> Bool {
    a.withUnsafeBytes { x in b.withUnsafeBytes { y in constantTimeEqual(x, y) } }
}

/// The 64-byte descriptor at the start of a tail-copy slot (version 4; docs/FORMAT.md "Tail copies").
///
///     0   kind                  u8   0 empty (never written), 1 a tail copy
///     1   reserved, zero        3
///     4   sequence              u64  one more than the newest copy when written
///     12  size                  u64  the plaintext size the copy was taken at (an application's sync)
///     20  σ ‖ nonce ‖ tag       32   GCM tag under K_σ over no plaintext, AAD = `aad(...)`
///     52  reserved, zero        12
///
/// The slot goes on with a copy of the last chunk of a file of that size as it was on disk (its
/// `size mod 2^s` bytes sealed; nothing when the size ends a full chunk), then a copy of its trailer.
/// The tag binds the copy's sequence, size and slot, and the tags of the two copies after it: a
/// descriptor is only ever taken with the copies it was written with.
public struct TailCopyDescriptor: Sendable, Equatable {
    public static let size = 64
    static let sealOffset = 20
    static let aadSize = 9 + 16 + 8 + 8 + 1 + 16 + 16

    /// What wrote the copy: a sync (also a cut and a creation), or an in-place rewrite of the last
    /// chunk that a kill could tear, just before it (docs/FORMAT.md "Tail copies").
    public enum Kind: UInt8, Sendable {
        /// The end a sync makes durable: never written over until the next sync completes.
        case sync = 1
        /// Written just before an in-place rewrite of the last chunk that a kill could tear: the
        /// end that rewrite makes (or, when it makes none a copy can hold, the end before it). Not
        /// synced; written over by the next copy of any kind.
        case rewrite = 2
        /// Written just before an in-place rewrite of any chunk that keeps some of its bytes and
        /// that a kill could tear: that chunk as the rewrite seals it, and no trailer; `size` is
        /// where the chunk ends (its index and length follow). Read only for that chunk when it
        /// fails in place sharing a sector with the copy (sealed bytes are a write's own): then
        /// it is the write that was torn. Not synced; written over by the next copy of any kind,
        /// once its chunk is whole in place.
        case chunk = 3
    }

    public var sequence: UInt64
    public var size: Int64
    public var kind: Kind = .sync

    /// Parses untrusted bytes: nil for an empty slot or anything no writer leaves (a copy is a hint,
    /// never an error: a torn slot leaves such bytes).
    static func parse(_ d: UnsafeRawBufferPointer) -> TailCopyDescriptor? {
        precondition(d.count >= size)
        guard let kind = Kind(rawValue: d[0]), d[1..<4].allSatisfy({ $0 == 0 }), d[52..<64].allSatisfy({ $0 == 0 }) else { return nil }
        let sequence = UInt64(bigEndian: d.loadUnaligned(fromByteOffset: 4, as: UInt64.self))
        let size = UInt64(bigEndian: d.loadUnaligned(fromByteOffset: 12, as: UInt64.self))
        guard size <= UInt64(SecureFile.maximumFileSize), kind != .chunk || size > 0 else { return nil }
        return TailCopyDescriptor(sequence: sequence, size: Int64(size), kind: kind)
    }

    /// Writes kind, sequence and size, and zeros where the seal and the reserved bytes go.
    func write(into d: UnsafeMutableRawPointer) {
        d.initializeMemory(as: UInt8.self, repeating: 0, count: Self.size)
        d.storeBytes(of: kind.rawValue, as: UInt8.self)
        d.storeBytes(of: sequence.bigEndian, toByteOffset: 4, as: UInt64.self)
        d.storeBytes(of: UInt64(size).bigEndian, toByteOffset: 12, as: UInt64.self)
    }

    /// AAD = "ACSF tail" (kind 1), "ACSF tai2" (kind 2) or "ACSF chnk" (kind 3) ‖ file ID ‖
    /// u64 sequence ‖ u64 size ‖ u8 slot ‖ chunk copy's tag ‖ trailer copy's tag (zeros for a
    /// copy there is not).
    func writeAAD(_ out: UnsafeMutableRawPointer, fileID: UnsafeRawPointer, slot: Int,
                  chunkTag: UnsafeRawPointer?, trailerTag: UnsafeRawPointer?) {
        // A StaticString: its bytes are in the binary (an Array of them was a heap allocation per copy).
        let label: StaticString = kind == .sync ? "ACSF tail" : kind == .rewrite ? "ACSF tai2" : "ACSF chnk"
        label.withUTF8Buffer { out.copyMemory(from: UnsafeRawPointer($0.baseAddress!), byteCount: 9) }
        (out + 9).copyMemory(from: fileID, byteCount: 16)
        (out + 25).storeBytes(of: sequence.bigEndian, as: UInt64.self)
        (out + 33).storeBytes(of: UInt64(size).bigEndian, as: UInt64.self)
        (out + 41).storeBytes(of: UInt8(slot), as: UInt8.self)
        if let chunkTag { (out + 42).copyMemory(from: chunkTag, byteCount: FileLayout.tagSize) } else {
            (out + 42).initializeMemory(as: UInt8.self, repeating: 0, count: FileLayout.tagSize)
        }
        if let trailerTag { (out + 58).copyMemory(from: trailerTag, byteCount: FileLayout.tagSize) } else {
            (out + 58).initializeMemory(as: UInt8.self, repeating: 0, count: FileLayout.tagSize)
        }
    }
}

/// How the end of a version 5 file is laid out after its last full chunk (docs/FORMAT.md "Version 5"):
///
///     base chunk (the first `size mod 2^s − recordBytes` bytes of the last chunk, sealed as a chunk;
///                 absent when that is 0) ‖ record 1 ‖ … ‖ record n ‖ trailer (with the footer)
///     record  = s (4) ‖ nonce (12) ‖ u16 length ‖ AES-256-GCM(K_s, nonce, bytes, AAD) ‖ tag (16)
///     AAD     = "ACSF rec" ‖ file ID ‖ u64 chunk index ‖ u32 offset in the chunk ‖ u32 length
///     footer  = u16 n ‖ u16 base bytes ‖ u16 record bytes ‖ u16 zero   (after the trailer's tag,
///               and in its AAD)
///
/// A record holds the bytes of one append inside the last chunk, sealed alone, so an append never
/// rewrites sealed bytes. Every other change first seals the last chunk whole again (n = 0: the
/// version 4 layout, `SharedFile.compactTail`).
public struct TailShape: Sendable, Equatable {
    /// Records after the base chunk (0: the version 4 layout).
    public var records: Int
    /// Plaintext bytes the records hold.
    public var recordBytes: Int

    public static let none = TailShape(records: 0, recordBytes: 0)
    public static let footerSize = 8
    /// Selector, nonce, length and tag.
    public static let recordOverhead = 4 + FileLayout.nonceSize + 2 + FileLayout.tagSize
    static let recordAADSize = 8 + 16 + 8 + 4 + 4
    /// Records a tail holds at most: then the next change seals the last chunk whole again.
    public static let maximumRecords = 64

    public init(records: Int, recordBytes: Int) {
        self.records = records
        self.recordBytes = recordBytes
    }

    /// The footer's fields, parsed (nil when its reserved bytes are not zero).
    struct Footer {
        var records: Int
        var baseBytes: Int
        var recordBytes: Int

        init?(_ p: UnsafeRawPointer) {
            func u16(_ at: Int) -> Int { Int(UInt16(bigEndian: p.loadUnaligned(fromByteOffset: at, as: UInt16.self))) }
            guard u16(6) == 0 else { return nil }
            records = u16(0)
            baseBytes = u16(2)
            recordBytes = u16(4)
        }
    }

    /// Writes the footer of a file of `size` bytes with this shape (chunks of 2^`chunkShift`).
    func writeFooter(_ out: UnsafeMutableRawPointer, size: Int64, chunkShift: UInt8) {
        let remainder = Int(size & ((1 << Int64(chunkShift)) - 1))
        out.storeBytes(of: UInt16(records).bigEndian, toByteOffset: 0, as: UInt16.self)
        out.storeBytes(of: UInt16(remainder - recordBytes).bigEndian, toByteOffset: 2, as: UInt16.self)
        out.storeBytes(of: UInt16(recordBytes).bigEndian, toByteOffset: 4, as: UInt16.self)
        out.storeBytes(of: UInt16(0), toByteOffset: 6, as: UInt16.self)
    }

    /// The AAD of a record of `count` bytes at `offset` in chunk `index`.
    @inline(__always) static func writeRecordAAD(_ out: UnsafeMutableRawPointer, fileID: UnsafeRawPointer, index: Int64, offset: Int, count: Int) {
        out.storeBytes(of: UInt64(0x4143_5346_2072_6563).bigEndian, as: UInt64.self)  // "ACSF rec"
        (out + 8).copyMemory(from: fileID, byteCount: 16)
        out.storeBytes(of: UInt64(bitPattern: index).bigEndian, toByteOffset: 24, as: UInt64.self)
        out.storeBytes(of: UInt32(offset).bigEndian, toByteOffset: 32, as: UInt32.self)
        out.storeBytes(of: UInt32(count).bigEndian, toByteOffset: 36, as: UInt32.self)
    }
}
