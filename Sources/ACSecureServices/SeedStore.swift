#if canImport(Glibc)
import Glibc
#endif
import ACCrypto

/// The on-disk store: a directory holding the secure services seed.
///
/// Seed file format (`seed`, big-endian, 0600 in a 0700 directory):
/// - `"ACSS"`, version 1, protection (0 = none, 1 = passcode)
/// - protection 0: the 32-byte seed, protected by file permissions only
/// - protection 1: Argon2id ops limit (u64), mem limit (u64), salt (16), then the seed sealed with
///   AES-256-GCM under the Argon2id key: nonce (12) ‖ ciphertext (32) ‖ tag (16); AAD = every byte before.
struct SeedStore {
    static let seedSize = 32
    static let magic: [UInt8] = Array("ACSS".utf8)

    let directory: String
    var seedPath: String { directory + "/seed" }

    enum Protection: UInt8 { case none = 0, passcode = 1 }

    struct Sealed {
        var protection: Protection
        var cost: Argon2id.Cost
        var salt: [UInt8]
        var payload: [UInt8]  // the raw seed (protection none) or the sealed seed
        var aad: [UInt8]
    }

    func exists() -> Bool {
        var st = stat()
        return lstat(seedPath, &st) == 0
    }

    // MARK: reading

    func load() throws(SecureServicesError) -> Sealed {
        let bytes = try readFile(seedPath)
        guard bytes.count >= 6, Array(bytes[0..<4]) == Self.magic else {
            throw SecureServicesError(.corruptStore, "\(seedPath): not a secure services seed file")
        }
        guard bytes[4] == 1 else { throw SecureServicesError(.corruptStore, "\(seedPath): unknown seed file version \(bytes[4])") }
        switch Protection(rawValue: bytes[5]) {
        case .none?:
            guard bytes.count == 6 + Self.seedSize else { throw SecureServicesError(.corruptStore, "\(seedPath): bad length") }
            return Sealed(protection: .none, cost: .minimum, salt: [], payload: Array(bytes[6...]), aad: [])
        case .passcode?:
            let fixed = 6 + 8 + 8 + Argon2id.saltSize
            guard bytes.count == fixed + 12 + Self.seedSize + 16 else { throw SecureServicesError(.corruptStore, "\(seedPath): bad length") }
            let ops = bytes[6..<14].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
            let mem = bytes[14..<22].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
            // Bound the cost read from disk: a tampered file must not make us allocate without limit.
            guard ops >= Argon2id.Cost.minimum.opsLimit, ops <= 16, mem >= UInt64(Argon2id.Cost.minimum.memLimit), mem <= 1 << 30 else {
                throw SecureServicesError(.corruptStore, "\(seedPath): Argon2id parameters out of range")
            }
            return Sealed(protection: .passcode, cost: .init(opsLimit: ops, memLimit: Int(mem)),
                          salt: Array(bytes[22..<fixed]), payload: Array(bytes[fixed...]), aad: Array(bytes[0..<fixed]))
        case nil:
            throw SecureServicesError(.corruptStore, "\(seedPath): unknown protection \(bytes[5])")
        }
    }

    /// Recovers the seed. `passcode` is ignored when the store has none.
    func openSeed(passcode: SecureBytes?) throws(SecureServicesError) -> SecureBytes {
        let sealed = try load()
        switch sealed.protection {
        case .none:
            return sealed.payload.withUnsafeBytes { SecureBytes(copying: $0) }
        case .passcode:
            guard let passcode else { throw SecureServicesError(.wrongPasscode, "a passcode is required to unlock secure services") }
            do {
                let kek = try Argon2id.deriveKey(passcode: passcode, salt: sealed.salt, cost: sealed.cost)
                let ctx = try AESGCMContext(key: kek)
                guard let seed = sealed.payload.withUnsafeBytes({ ctx.openSealed($0, aad: sealed.aad) }), seed.count == Self.seedSize else {
                    throw SecureServicesError(.wrongPasscode, "wrong passcode")
                }
                return seed
            } catch let e as SecureServicesError {
                throw e
            } catch {
                throw SecureServicesError(.storeIO, "cannot derive the passcode key: \(error)")
            }
        }
    }

    // MARK: writing

    /// Writes the seed, sealed under `passcode` (or unprotected), atomically: temp file, fsync, rename.
    func save(seed: SecureBytes, passcode: SecureBytes?, cost: Argon2id.Cost) throws(SecureServicesError) {
        var out = Self.magic + [1]
        if let passcode, passcode.count > 0 {
            out.append(Protection.passcode.rawValue)
            out += bigEndian(cost.opsLimit) + bigEndian(UInt64(cost.memLimit))
            let salt = SecureRandom.bytes(Argon2id.saltSize)
            out += salt
            do {
                let kek = try Argon2id.deriveKey(passcode: passcode, salt: salt, cost: cost)
                out += try AESGCMContext(key: kek).sealWithRandomNonce(seed, aad: out)
            } catch {
                throw SecureServicesError(.storeIO, "cannot seal the seed: \(error)")
            }
        } else {
            out.append(Protection.none.rawValue)
            seed.withUnsafeBytes { out += $0 }
        }
        defer { out.withUnsafeMutableBytes { secureZero($0) } }
        try makeDirectory()
        try writeFileAtomically(seedPath, out)
    }

    func makeDirectory() throws(SecureServicesError) {
        // Create parents as needed; the store itself is private to the user.
        var path = ""
        for part in directory.split(separator: "/", omittingEmptySubsequences: true) {
            path += "/" + part
            if mkdir(path, path == normalizedDirectory ? 0o700 : 0o755) != 0 && errno != EEXIST {
                throw SecureServicesError(.storeIO, "cannot create \(path): \(String(cString: strerror(errno)))", errno: errno)
            }
        }
    }

    private var normalizedDirectory: String {
        "/" + directory.split(separator: "/", omittingEmptySubsequences: true).joined(separator: "/")
    }

    /// Overwrites and removes the seed file, then removes the store directory if it is empty.
    func destroy() throws(SecureServicesError) {
        if exists() {
            let fd = open(seedPath, O_WRONLY)
            if fd >= 0 {
                var st = stat()
                if fstat(fd, &st) == 0, st.st_size > 0 {
                    let zeros = [UInt8](repeating: 0, count: Int(st.st_size))
                    _ = zeros.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
                    _ = fsync(fd)
                }
                close(fd)
            }
            guard unlink(seedPath) == 0 else {
                throw SecureServicesError(.storeIO, "cannot remove \(seedPath): \(String(cString: strerror(errno)))", errno: errno)
            }
        }
        _ = rmdir(directory)
    }
}

func bigEndian(_ v: UInt64) -> [UInt8] { (0..<8).reversed().map { UInt8(truncatingIfNeeded: v >> (8 * UInt64($0))) } }

func readFile(_ path: String) throws(SecureServicesError) -> [UInt8] {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else {
        let e = errno
        throw SecureServicesError(e == ENOENT ? .noKeys : .storeIO, "cannot open \(path): \(String(cString: strerror(e)))", errno: e)
    }
    defer { close(fd) }
    var out: [UInt8] = []
    var buf = [UInt8](repeating: 0, count: 4096)
    while out.count <= 1 << 16 {  // a seed file is tiny; refuse to read a huge one
        let n = buf.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        if n < 0 {
            if errno == EINTR { continue }
            throw SecureServicesError(.storeIO, "cannot read \(path): \(String(cString: strerror(errno)))", errno: errno)
        }
        if n == 0 { return out }
        out += buf[0..<n]
    }
    throw SecureServicesError(.corruptStore, "\(path): too large for a seed file")
}

func writeFileAtomically(_ path: String, _ bytes: [UInt8]) throws(SecureServicesError) {
    let tmp = path + ".tmp.\(getpid())"
    let fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
    guard fd >= 0 else {
        throw SecureServicesError(.storeIO, "cannot create \(tmp): \(String(cString: strerror(errno)))", errno: errno)
    }
    var written = 0
    while written < bytes.count {
        let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + written, $0.count - written) }
        if n < 0 {
            if errno == EINTR { continue }
            let e = errno
            close(fd); unlink(tmp)
            throw SecureServicesError(.storeIO, "cannot write \(tmp): \(String(cString: strerror(e)))", errno: e)
        }
        written += n
    }
    guard fsync(fd) == 0 else {
        let e = errno
        close(fd); unlink(tmp)
        throw SecureServicesError(.storeIO, "cannot fsync \(tmp): \(String(cString: strerror(e)))", errno: e)
    }
    close(fd)
    guard rename(tmp, path) == 0 else {
        let e = errno
        unlink(tmp)
        throw SecureServicesError(.storeIO, "cannot rename \(tmp): \(String(cString: strerror(e)))", errno: e)
    }
    // Make the rename itself durable.
    let dir = String(path[..<(path.lastIndex(of: "/") ?? path.startIndex)])
    let dfd = open(dir.isEmpty ? "." : dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
    if dfd >= 0 { _ = fsync(dfd); close(dfd) }
}
