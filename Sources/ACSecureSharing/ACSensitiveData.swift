import Foundation
import ACCrypto

/// Sensitive bytes (keys, passwords) in guarded memory: the reference's `ACSensitiveData`.
///
/// The bytes live in libsodium guarded memory (`sodium_malloc` through `SecureBytes`): between guard
/// pages, `mlock`ed so they never reach swap, excluded from core dumps, and zeroed when freed. There is
/// no Secure Enclave on Linux; this is the `LOCAL` container type of the reference.
///
/// - Equality is constant time in the contents; `hash` depends on the length only.
/// - `description` never shows the contents.
/// - `copy()` and `mutableCopy()` give guarded copies (unlike the reference, they are safe to use).
/// - Converting to `Data` (`as Data`, `Data(referencing:)`) copies the secret into ordinary memory: avoid it;
///   use `withUnsafeBytes` instead.
/// - With `AC_SENSITIVE_DATA_MAX_LIFETIME` set, objects that live too long are reported
///   (see `ACSensitiveDataLifetimeCheck`).
/// - Its initializers are `NSData`'s, which cannot fail: when no guarded memory is left they stop the
///   program with a message naming the class (as `NSData` does when `malloc` fails). To fail instead,
///   make the `SecureBytes` first (`SecureBytes(copying:)` throws `CryptoError.outOfMemory`) and
///   pass it to `init(adopting:)`.
open class ACSensitiveData: NSData {
    /// Guarded storage; `storedLength` bytes of it are the contents (a mutable object keeps spare capacity).
    var storage: Storage

    /// Adopted key material (never written), or a buffer of this object's own, which
    /// `ACSensitiveMutableData` writes in place (a mutable object always owns its buffer).
    enum Storage {
        case adopted(SecureBytes)
        case owned(SecureBuffer)

        var count: Int {
            switch self {
            case .adopted(let b): return b.count
            case .owned(let b): return b.count
            }
        }

        func withUnsafeBytes<R, E: Error>(_ body: (UnsafeRawBufferPointer) throws(E) -> R) throws(E) -> R {
            switch self {
            case .adopted(let b): return try b.withUnsafeBytes(body)
            case .owned(let b): return try b.withUnsafeBytes(body)
            }
        }
    }
    var storedLength: Int

    /// An empty object.
    public override init() {
        storage = .owned(guardedBuffer(count: 0))
        storedLength = 0
        super.init()
        ACSensitiveDataLifetimeCheck.register(self)
    }

    /// A guarded copy of `length` bytes at `bytes`. The caller remains responsible for wiping its own copy.
    public override init(bytes: UnsafeRawPointer?, length: Int) {
        precondition(length >= 0, "negative length")
        precondition(bytes != nil || length == 0, "nil bytes with a non-zero length")
        storage = .owned(guardedCopy(UnsafeRawBufferPointer(start: bytes, count: length)))
        storedLength = length
        super.init()
        ACSensitiveDataLifetimeCheck.register(self)
    }

    /// The reference's Swift spelling: `ACSensitiveData(bytes: keyData.bytes, length: UInt(keyData.length))`.
    public convenience init(bytes: UnsafeRawPointer?, length: UInt) {
        self.init(bytes: bytes, length: Int(length))
    }

    /// A guarded copy of `bytes`.
    public convenience init(_ bytes: UnsafeRawBufferPointer) {
        self.init(bytes: bytes.baseAddress, length: bytes.count)
    }

    /// A guarded copy of `data` (the caller's `Data` is ordinary memory: prefer the pointer forms).
    public override convenience init(data: Data) {
        self.init(bytes: nil, length: 0)
        let copy = data.withUnsafeBytes { guardedCopy($0) }
        storage = .owned(copy)
        storedLength = copy.count
    }

    /// Keeps `secureBytes` as the contents (no copy: key material is never written, and this object
    /// does not write it either).
    public init(adopting secureBytes: SecureBytes) {
        storage = .adopted(secureBytes)
        storedLength = secureBytes.count
        super.init()
        ACSensitiveDataLifetimeCheck.register(self)
    }

    /// Takes ownership of `buffer` (no copy).
    init(owning buffer: SecureBuffer) {
        storage = .owned(buffer)
        storedLength = buffer.count
        super.init()
        ACSensitiveDataLifetimeCheck.register(self)
    }

    /// Sensitive data is never decoded from an archive.
    public required init?(coder: NSCoder) {
        return nil
    }

    deinit {
        ACSensitiveDataLifetimeCheck.unregister(self)
        // `storage` is zeroed and released by its own deinit (SecureBytes or SecureBuffer).
    }

    // MARK: NSData primitives

    open override var length: Int { storedLength }
    open override var bytes: UnsafeRawPointer { storage.withUnsafeBytes { UnsafeRawPointer($0.baseAddress!) } }

    /// Calls `body` with the contents (valid only during the call; do not copy them out).
    public func withUnsafeBytes<R, E: Error>(_ body: (UnsafeRawBufferPointer) throws(E) -> R) throws(E) -> R {
        try storage.withUnsafeBytes { (b: UnsafeRawBufferPointer) throws(E) -> R in
            try body(UnsafeRawBufferPointer(rebasing: b[0..<storedLength]))
        }
    }

    /// The contents as a new `SecureBytes` (guarded).
    /// - Throws: `CryptoError.outOfMemory` when no guarded memory is left.
    public func secureBytes() throws(CryptoError) -> SecureBytes {
        try withUnsafeBytes { (b: UnsafeRawBufferPointer) throws(CryptoError) in try SecureBytes(copying: b) }
    }

    // MARK: no leaks through NSObject

    open override var description: String { "<\(type(of: self)): \(storedLength) bytes>" }
    open override var debugDescription: String { description }

    /// Constant time in the contents when lengths match; lengths are not secret.
    open override func isEqual(_ object: Any?) -> Bool {
        if let other = object as? NSData { return constantTimeEquals(other) }
        if let other = object as? Data { return other.withUnsafeBytes { o in withUnsafeBytes { constantTimeEqual($0, o) } } }
        return false
    }

    open override func isEqual(to other: Data) -> Bool { isEqual(other) }

    private func constantTimeEquals(_ other: NSData) -> Bool {
        guard other.length == storedLength else { return false }
        if storedLength == 0 { return true }
        return withUnsafeBytes { constantTimeEqual($0, UnsafeRawBufferPointer(start: other.bytes, count: other.length)) }
    }

    open override var hash: Int { storedLength }

    open override func copy(with zone: NSZone? = nil) -> Any {
        ACSensitiveData(bytes: bytes, length: storedLength)
    }

    open override func mutableCopy(with zone: NSZone? = nil) -> Any {
        ACSensitiveMutableData(bytes: bytes, length: storedLength)
    }

    /// Archiving would write the secret in the clear: a programming error.
    open override func encode(with aCoder: NSCoder) {
        preconditionFailure("\(type(of: self)) must not be archived (it would write the secret in the clear)")
    }

    public static func == (lhs: ACSensitiveData, rhs: ACSensitiveData) -> Bool { lhs.isEqual(rhs) }
}

/// Mutable sensitive bytes: the reference's `ACSensitiveMutableData`. Growing moves the contents into
/// a larger guarded buffer and frees (zeroes) the old one; no copy is ever left in ordinary memory.
open class ACSensitiveMutableData: ACSensitiveData {
    /// An empty object with room for `capacity` bytes.
    public init(capacity: Int) {
        precondition(capacity >= 0, "negative capacity")
        super.init(owning: guardedBuffer(count: capacity))
        storedLength = 0
    }

    /// `length` zero bytes.
    public convenience init(length: Int) {
        self.init(capacity: length)
        storedLength = length
    }

    public override init(bytes: UnsafeRawPointer?, length: Int) { super.init(bytes: bytes, length: length) }
    public override init() { super.init() }
    public required init?(coder: NSCoder) { return nil }

    /// The contents, writable; valid until the length next grows.
    public var mutableBytes: UnsafeMutableRawPointer { buffer.withUnsafeMutableBytes { $0.baseAddress! } }

    /// The buffer this object owns and writes in place.
    private var buffer: SecureBuffer {
        guard case .owned(let b) = storage else { preconditionFailure("ACSensitiveMutableData: storage not owned") }
        return b
    }

    open override var length: Int {
        get { storedLength }
        set { setLength(newValue) }
    }

    /// Sets the length; new bytes are zero, bytes cut off are wiped.
    public func setLength(_ newLength: Int) {
        precondition(newLength >= 0, "negative length")
        if newLength > storage.count {
            grow(to: newLength)
        } else if newLength < storedLength {
            buffer.withUnsafeMutableBytes { secureZero(UnsafeMutableRawBufferPointer(rebasing: $0[newLength..<storedLength])) }
        }
        storedLength = newLength
    }

    public func increaseLength(by extra: Int) { setLength(storedLength + extra) }

    /// Appends a guarded copy of `bytes`.
    public func append(_ bytes: UnsafeRawBufferPointer) {
        guard bytes.count > 0, let src = bytes.baseAddress else { return }
        let at = storedLength
        setLength(at + bytes.count)
        (mutableBytes + at).copyMemory(from: src, byteCount: bytes.count)
    }

    public func append(_ other: NSData) {
        append(UnsafeRawBufferPointer(start: other.length == 0 ? nil : other.bytes, count: other.length))
    }

    /// Replaces the bytes in `range` (within the contents) with `replacement`, growing or shrinking as needed.
    public func replaceBytes(in range: NSRange, with replacement: UnsafeRawBufferPointer) {
        precondition(range.location >= 0 && range.length >= 0 && range.location + range.length <= storedLength, "range out of bounds")
        let tail = storedLength - (range.location + range.length)
        let newLength = range.location + replacement.count + tail
        if newLength > storedLength { setLength(newLength) }
        let base = mutableBytes
        // memmove: the tail may overlap its new place.
        memmove(base + range.location + replacement.count, base + range.location + range.length, tail)
        if let src = replacement.baseAddress, replacement.count > 0 {
            (base + range.location).copyMemory(from: src, byteCount: replacement.count)
        }
        if newLength < storedLength { setLength(newLength) }
    }

    /// Zeroes the bytes in `range`.
    public func resetBytes(in range: NSRange) {
        precondition(range.location >= 0 && range.length >= 0 && range.location + range.length <= storedLength, "range out of bounds")
        secureZero(UnsafeMutableRawBufferPointer(start: mutableBytes + range.location, count: range.length))
    }

    private func grow(to needed: Int) {
        let capacity = Swift.max(needed, storage.count * 2, 32)
        let bigger = guardedBuffer(count: capacity)
        storage.withUnsafeBytes { old in
            bigger.withUnsafeMutableBytes { new in
                if storedLength > 0 { new.baseAddress!.copyMemory(from: old.baseAddress!, byteCount: storedLength) }
            }
        }
        storage = .owned(bigger)  // the old buffer is zeroed and freed
    }
}

/// Guarded memory for `NSData`-shaped initializers and mutators, which cannot fail.
private func guardedBuffer(count: Int) -> SecureBuffer {
    do { return try SecureBuffer(count: count) } catch {
        fatalError("ACSensitiveData: \(error); make the SecureBytes yourself (it throws) and use ACSensitiveData(adopting:)")
    }
}

private func guardedCopy(_ bytes: UnsafeRawBufferPointer) -> SecureBuffer {
    let b = guardedBuffer(count: bytes.count)
    b.withUnsafeMutableBytes { if let src = bytes.baseAddress, bytes.count > 0 { $0.baseAddress!.copyMemory(from: src, byteCount: bytes.count) } }
    return b
}
