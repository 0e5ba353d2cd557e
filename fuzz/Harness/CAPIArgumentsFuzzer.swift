// The harness runs on the in-memory file system, which exists only in builds with system-call
// mocking (debug, and the fuzzers' release build): elsewhere (a release build of the main package)
// this file compiles to nothing.
#if ACSECURE_SYSCALL_MOCKING
#if canImport(Glibc)
import Glibc
#endif
@_spi(Testing) import ACSecureFileCore
@_spi(Testing) import ACSystemCallsTesting
import CACSecureFile
import ACSecureFileCAPI

/// Fuzz target 6: the C API's argument handling. The input decodes to calls of ACSecureFileOpen /
/// Close / Read / Write / Pread / Pwrite / Readv / Writev / Lseek / Ftruncate / Fstat / Fsync with
/// hostile arguments (unknown, closed and negative descriptors, NULL buffers, NULL and odd iovec
/// arrays, counts above SSIZE_MAX, negative and huge offsets and lengths, bad whence values), made
/// on a secure file (the C API over the engine, on the in-memory file system) and the same calls
/// on a plain file through the kernel. ACSecureFile.h promises the POSIX result and errno, so they
/// must match, except where the header documents otherwise: a NULL buffer with a non-zero count is
/// always EFAULT (the kernel reports it only when it copies: a read at end of file returns 0), and
/// SEEK_DATA/SEEK_HOLE (the whole secure file is data) are not compared, nor is the secure file's
/// own size limit (2^44: EFBIG/EINVAL where the plain file system goes on), so huge offsets are
/// used only to read. The plain file lives in /dev/shm (a tmpfs: fsync costs nothing there) when
/// it is writable, else in the scratch directory. At the end the secure file, read back, must equal the
/// plain file.
public enum CAPIArgumentsFuzzer {
    struct Pair { var secure: Int32; var plain: Int32 }

    static let securePath = "/fuzz/capi-secure"
    /// The paths as C strings, made once: a Swift string passed to a C function is copied into a new
    /// C string at each call (two heap allocations, which ASan makes costly).
    nonisolated(unsafe) static let securePathC = UnsafePointer(strdup(securePath)!)
    nonisolated(unsafe) private static var plainPath: UnsafePointer<CChar>?

    /// Starts the C API's services once (a store in the scratch directory) and names the plain file.
    static func setUp() -> UnsafePointer<CChar> {
        if let plainPath { return plainPath }
        let store = FuzzScratch.path("capi-store")
        guard ACSecureServicesStart("com.example.fuzz-capi", store) == 0 else {
            fatalError("ACSecureServicesStart failed: errno \(errno)")
        }
        let tmpfs = access("/dev/shm", W_OK) == 0  // a tmpfs on Linux
        let p = tmpfs ? "/dev/shm/acsecure-fuzz-capi-\(getpid())" : FuzzScratch.path("capi-plain")
        if tmpfs { atexit { CAPIArgumentsFuzzer.removePlainFile() } }
        let c = UnsafePointer(strdup(p)!)
        plainPath = c
        return c
    }

    /// The arrays of one input (its open and closed pairs, its log), kept from one input to the
    /// next: new ones were heap allocations at every input. Each input takes them (`swap`) and
    /// gives them back empty.
    nonisolated(unsafe) private static var sparePairs: [Pair] = []
    nonisolated(unsafe) private static var spareClosed: [Pair] = []
    nonisolated(unsafe) private static var spareLog = CallLog()

    static func removePlainFile() {
        if let plainPath { unlink(plainPath) }
    }

    static let maximumOperations = 48
    static let bufferSize = 256 << 10  // larger than any file the calls can make
    static let sizeMax = Int(bitPattern: UInt.max)  // SIZE_MAX as Swift's Int
    static let overSSizeMax = Int(bitPattern: UInt(1) << 63)

    /// Read buffers and write data, made once: fresh 256 KiB buffers per input cost more (page
    /// faults under ASan) than the calls they check.
    nonisolated(unsafe) static var secureBuffer = [UInt8](repeating: 0, count: bufferSize)
    nonisolated(unsafe) static var plainBuffer = [UInt8](repeating: 0, count: bufferSize)
    static let pattern: [UInt8] = (0..<(16 << 10)).map { UInt8(truncatingIfNeeded: $0 &* 151 ^ $0 >> 9) }

    enum Result2: Equatable, CustomStringConvertible {
        case value(Int), failure(Int32)
        var description: String {
            switch self {
            case .value(let v): return "\(v)"
            case .failure(let e): return "errno \(e)"
            }
        }
    }

    @inline(__always) static func result(_ r: Int) -> Result2 { r >= 0 ? .value(r) : .failure(errno) }

    /// Runs one input. Returns a finding, or nil when the C API behaved as POSIX.
    public static func run(_ input: [UInt8]) -> FuzzFinding? {
        let plainPath = setUp()
        return FuzzFileSystem.run { fs in
            unlink(plainPath)
            var pairs: [Pair] = []
            var closed: [Pair] = []
            var log = CallLog()
            swap(&pairs, &sparePairs)
            swap(&closed, &spareClosed)
            swap(&log, &spareLog)
            defer {
                pairs.removeAll(keepingCapacity: true)
                closed.removeAll(keepingCapacity: true)
                log.removeAll()
                swap(&pairs, &sparePairs)
                swap(&closed, &spareClosed)
                swap(&log, &spareLog)
            }
            // The plain file stays until the next input's unlink (or the exit's): one unlink per input.
            defer { for p in pairs { _ = ACSecureFileClose(p.secure); close(p.plain) } }
            var c = ByteCursor(input)

            func fds() -> (Int32, Int32) {
                let b = c.u8()
                switch b % 8 {
                case 5: return (-1, -1)
                case 6:
                    // A closed descriptor, if neither side has reused its number.
                    if let p = closed.last, !pairs.contains(where: { $0.secure == p.secure || $0.plain == p.plain }) { return (p.secure, p.plain) }
                    return (1 << 29, 1 << 29)  // never a descriptor on either side (the in-memory ones start at 2^20)
                case 7: return b & 0x80 != 0 ? (Int32.max, Int32.max) : (Int32.min, Int32.min)
                default:
                    guard !pairs.isEmpty else { return (-1, -1) }
                    let p = pairs[Int(b) % pairs.count]
                    return (p.secure, p.plain)
                }
            }
            func count(forWrite: Bool) -> Int {
                let b = c.u8()
                switch b % 8 {
                case 0, 1: return Int(c.u8())
                case 2: return 4096 + Int(c.u8() % 5) - 2
                case 3, 4: return c.u16() % 12_000
                case 5: return b & 0x80 != 0 ? sizeMax : overSSizeMax
                // The whole buffer, larger than any file (a count past the buffer's end is EFAULT from
                // the kernel depending on where the buffer lies, which the C API cannot know).
                case 6: return forWrite ? 0 : bufferSize
                default: return 0
                }
            }
            func offset(forRead: Bool = false) -> Int64 {
                let b = c.u8()
                switch b % 8 {
                case 0: return -1 - Int64(c.u8())
                case 1: return b & 0x80 != 0 ? Int64.min : -4096
                case 2: return !forRead ? 40_000 : b & 0x80 != 0 ? 1 << 62 : 1 << 45
                case 3: return Int64(c.u8() % 16) * 4096 + Int64(c.u8() % 5) - 2
                default: return Int64(c.u16() % 40_000)
                }
            }
            func compare(_ what: Call, _ s: Result2, _ p: Result2, nullBuffer: Bool = false) -> FuzzFinding? {
                log.append(what, s, p)
                if s == p { return nil }
                // Documented: a NULL buffer with a non-zero count is EFAULT once the descriptor is good,
                // even where the kernel copies nothing (a read at the end) or checks the offset first.
                if nullBuffer, s == .failure(EFAULT), p != .failure(EBADF) { return nil }
                return FuzzFinding("\(what): secure \(s), plain \(p)\n" + log.lines)
            }
            // Linux (ext4) may leave a plain file extended to the offset of a write that failed with
            // EFAULT; the secure file stays as it was. The model undoes that side effect.
            func plainSize() -> Int64 {
                var st = stat()
                return lstat(plainPath, &st) == 0 ? Int64(st.st_size) : -1
            }
            func undoFailedWrite(_ r: Result2, sizeBefore: Int64) {
                if r == .failure(EFAULT), sizeBefore >= 0, plainSize() != sizeBefore { _ = Glibc.truncate(plainPath, off_t(sizeBefore)) }
            }
            func sameContents(_ n: Int, _ what: Call) -> FuzzFinding? {
                guard n > 0 else { return nil }
                return sameBytes(secureBuffer, plainBuffer, count: n) ? nil : FuzzFinding("\(what): the bytes read differ\n" + log.lines)
            }

            let openFlags: [Int32] = [O_RDWR | O_CREAT, O_RDONLY, O_WRONLY, O_RDWR | O_APPEND, O_WRONLY | O_CREAT | O_TRUNC,
                                      O_RDWR | O_CREAT | O_EXCL, O_WRONLY | O_APPEND | O_CREAT, O_RDWR]
            var steps = 0
            var first = true
            while first || (!c.isAtEnd && steps < maximumOperations) {
                steps += 1
                let op = first ? 0 : c.u8() % 13
                first = false
                var finding: FuzzFinding?
                switch op {
                case 0, 12:  // open (NULL path when op is 12 and the flag byte is odd)
                    let fb = steps == 1 ? 0 : c.u8()
                    // The low bits pick the flags; bit 6 adds O_DSYNC (inputs from before keep theirs).
                    let flags = openFlags[Int(fb) % openFlags.count] | (fb & 0x40 != 0 ? O_DSYNC : 0)
                    let nullPath = op == 12 && fb & 1 != 0
                    guard pairs.count < 4 || nullPath else { continue }
                    let s = nullPath ? ACSecureFile_openWithMode(nil, flags, 0o600) : ACSecureFile_openWithMode(securePathC, flags, 0o600)
                    let sr = result(Int(s))
                    // open(NULL, ...) is EFAULT from the kernel (Swift cannot pass NULL to Glibc.open).
                    let p = nullPath ? -1 : Glibc.open(plainPath, flags, 0o600)
                    let pr = nullPath ? Result2.failure(EFAULT) : result(Int(p))
                    if s >= 0 && p >= 0 { pairs.append(Pair(secure: s, plain: p)) } else {
                        if s >= 0 { _ = ACSecureFileClose(s) }
                        if p >= 0 { close(p) }
                    }
                    finding = compare(.open(nullPath: nullPath, flags: flags), sr.map0, pr.map0)
                case 1:  // close
                    let (s, p) = fds()
                    let sr = result(Int(ACSecureFileClose(s)))
                    let pr = result(Int(Glibc.close(p)))
                    if let i = pairs.firstIndex(where: { $0.secure == s && $0.plain == p }) { closed.append(pairs.remove(at: i)) }
                    finding = compare(.close, sr, pr)
                case 2, 4:  // read / pread
                    let (s, p) = fds()
                    let n = count(forWrite: false)
                    let null = c.u8() % 6 == 0
                    let at: Int64? = op == 4 ? offset(forRead: true) : nil
                    let sr = secureBuffer.withUnsafeMutableBytes { b in
                        let buf = null ? nil : b.baseAddress
                        return result(at.map { ACSecureFilePread(s, buf, n, off_t($0)) } ?? ACSecureFileRead(s, buf, n))
                    }
                    let pr = plainBuffer.withUnsafeMutableBytes { b in
                        let buf = null ? nil : b.baseAddress
                        return result(at.map { Glibc.pread(p, buf, n, off_t($0)) } ?? Glibc.read(p, buf, n))
                    }
                    let what = Call.read(at: at, nullBuffer: null, count: n)
                    finding = compare(what, sr, pr, nullBuffer: null && n != 0)
                    if finding == nil, case .value(let k) = sr { finding = sameContents(k, what) }
                case 3, 5:  // write / pwrite
                    let (s, p) = fds()
                    let n = count(forWrite: true)
                    let null = c.u8() % 6 == 0
                    let at: Int64? = op == 5 ? offset() : nil
                    let start = Int(c.u8())
                    // Counts above SSIZE_MAX are refused before any byte is read: safe with a small buffer.
                    let safe = n < 0 || n <= pattern.count - start
                    guard safe else { continue }
                    let sizeBefore = null ? plainSize() : -1  // only a NULL buffer can give EFAULT
                    let (sr, pr) = pattern.withUnsafeBytes { b -> (Result2, Result2) in
                        let buf = null ? nil : b.baseAddress! + start
                        let sr = result(at.map { ACSecureFilePwrite(s, buf, n, off_t($0)) } ?? ACSecureFileWrite(s, buf, n))
                        let pr = result(at.map { Glibc.pwrite(p, buf, n, off_t($0)) } ?? Glibc.write(p, buf, n))
                        return (sr, pr)
                    }
                    undoFailedWrite(pr, sizeBefore: sizeBefore)
                    finding = compare(.write(at: at, nullBuffer: null, count: n), sr, pr, nullBuffer: null && n > 0)
                case 6, 7:  // readv / writev
                    let (s, p) = fds()
                    let shape = c.u8()
                    var count = Int32(shape % 5)
                    if shape & 0x80 != 0 { count = [-1, 1025, Int32.min, 1024][Int(shape >> 5) & 3] }
                    let nullArray = shape & 0x40 != 0 && count > 0
                    var lengths = SmallIntList()
                    for _ in 0..<max(0, min(Int(count), SmallIntList.capacity)) {
                        let b = c.u8()
                        switch b % 8 {
                        case 0: lengths.append(0)
                        case 1: lengths.append(op == 6 ? bufferSize / 8 : Int(b))  // reads: room for the whole file
                        case 2: lengths.append(overSSizeMax)
                        default: lengths.append(Int(c.u8()) * 16 + Int(b % 7))
                        }
                    }
                    let nullBase = c.u8() % 8 == 0
                    // Writes read from the pattern: at most 8 × 4 KiB, inside it.
                    if op == 7, lengths.contains(where: { $0 > 4096 && $0 != overSSizeMax }) { continue }
                    if Int(count) > lengths.count && !nullArray && count <= 1024 { continue }  // the array must hold iovcnt entries
                    /// The iovec array for `base` (on the stack: an array per call was a heap allocation).
                    func withVectors<R>(_ base: UnsafeMutableRawPointer, _ body: (UnsafePointer<iovec>?) -> R) -> R {
                        withUnsafeTemporaryAllocation(of: iovec.self, capacity: SmallIntList.capacity) { v in
                            var o = 0
                            for (i, len) in lengths.enumerated() {
                                let b: UnsafeMutableRawPointer? = nullBase && i == 0 ? nil : base + (op == 6 ? o : 0)
                                v.initializeElement(at: i, to: iovec(iov_base: b, iov_len: len))
                                o += op == 6 ? bufferSize / 8 : 0
                            }
                            return body(nullArray ? nil : UnsafePointer(v.baseAddress!))
                        }
                    }
                    let sr: Result2, pr: Result2
                    if op == 6 {
                        sr = secureBuffer.withUnsafeMutableBytes { b in withVectors(b.baseAddress!) { result(ACSecureFileReadv(s, $0, count)) } }
                        pr = plainBuffer.withUnsafeMutableBytes { b in withVectors(b.baseAddress!) { result(Glibc.readv(p, $0, count)) } }
                    } else {
                        let sizeBefore = nullArray || nullBase ? plainSize() : -1  // only a NULL array or base can give EFAULT
                        defer { undoFailedWrite(pr, sizeBefore: sizeBefore) }
                        (sr, pr) = pattern.withUnsafeBytes { b in
                            withVectors(UnsafeMutableRawPointer(mutating: b.baseAddress!)) { a in
                                (result(ACSecureFileWritev(s, a, count)), result(Glibc.writev(p, a, count)))
                            }
                        }
                    }
                    let what = Call.vector(read: op == 6, lengths: nullArray ? nil : lengths, nullBase: nullBase, count: count)
                    let nullVector = (nullBase && (lengths.first ?? 0) > 0) || nullArray
                    finding = compare(what, sr, pr, nullBuffer: nullVector && count > 0 && count <= 1024)
                    if finding == nil, op == 6, case .value(let k) = sr, k > 0 {
                        // Compare what landed in the buffers, vector by vector.
                        var left = k, o = 0
                        for len in lengths where left > 0 {
                            let m = min(len, left)
                            let same = secureBuffer.withUnsafeBytes { x in plainBuffer.withUnsafeBytes { memcmp(x.baseAddress! + o, $0.baseAddress! + o, m) == 0 } }
                            if m > 0, !same {
                                finding = FuzzFinding("\(what): the bytes read differ\n" + log.lines); break
                            }
                            left -= m
                            o += bufferSize / 8
                        }
                    }
                case 8:  // lseek
                    let (s, p) = fds()
                    let w = c.u8()
                    let whence: Int32 = [SEEK_SET, SEEK_CUR, SEEK_END, 77, -1][Int(w) % 5]
                    let off = w & 0x80 != 0 ? offset() : Int64(c.u16()) - 32_768
                    let sr = result(Int(ACSecureFileLseek(s, off_t(off), whence)))
                    let pr = result(Int(Glibc.lseek(p, off_t(off), whence)))
                    finding = compare(.lseek(off, whence: whence), sr, pr)
                case 9:  // ftruncate
                    let (s, p) = fds()
                    let len = offset()
                    let sr = result(Int(ACSecureFtruncate(s, off_t(len))))
                    let pr = result(Int(Glibc.ftruncate(p, off_t(len))))
                    finding = compare(.ftruncate(len), sr, pr)
                case 10:  // fstat (NULL buffer when the byte is odd)
                    let (s, p) = fds()
                    let null = c.u8() & 1 != 0
                    var a = stat(), b = stat()
                    let sr = null ? result(Int(ACSecureFstat(s, nil))) : result(Int(ACSecureFstat(s, &a)))
                    // fstat(fd, NULL) is EBADF for a bad descriptor, else EFAULT (Swift cannot pass NULL to Glibc.fstat).
                    let pr = null ? (fcntl(p, F_GETFD) < 0 ? Result2.failure(EBADF) : .failure(EFAULT)) : result(Int(Glibc.fstat(p, &b)))
                    finding = compare(.fstat(nullBuffer: null), sr, pr)
                    if finding == nil, !null, sr == .value(0), a.st_size != b.st_size {
                        finding = FuzzFinding("fstat: secure size \(a.st_size), plain \(b.st_size)\n" + log.lines)
                    }
                default:  // fsync
                    let (s, p) = fds()
                    finding = compare(.fsync, result(Int(ACSecureFileFsync(s))), result(Int(Glibc.fsync(p))))
                }
                if let finding { return finding }
            }
            for p in pairs {
                if ACSecureFileClose(p.secure) != 0 { return FuzzFinding("final close failed: errno \(errno)") }
                close(p.plain)
            }
            pairs.removeAll(keepingCapacity: true)
            // The secure file, read back through the C API, equals the plain file.
            let plainFD = Glibc.open(plainPath, O_RDONLY)
            guard plainFD >= 0 else { return fs.contents(securePath) == nil ? nil : FuzzFinding("a secure file exists without its plain twin") }
            defer { close(plainFD) }
            let secureFD = ACSecureFile_openWithMode(securePathC, O_RDONLY, 0)
            guard secureFD >= 0 else { return FuzzFinding("final open failed: errno \(errno)") }
            defer { _ = ACSecureFileClose(secureFD) }
            let sn = secureBuffer.withUnsafeMutableBytes { ACSecureFilePread(secureFD, $0.baseAddress, $0.count, 0) }
            let pn = plainBuffer.withUnsafeMutableBytes { Glibc.pread(plainFD, $0.baseAddress, $0.count, 0) }
            guard sn == pn, sn >= 0 else { return FuzzFinding("final contents: secure \(sn) bytes, plain \(pn)\n" + log.lines) }
            return sameContents(sn, .finalContents)
        }
    }
}

extension CAPIArgumentsFuzzer {
    /// A call as the log and a finding name it. Kept as values and formatted only for a finding:
    /// building a string per call cost more than a tenth of an input's time under ASan.
    enum Call: CustomStringConvertible {
        case open(nullPath: Bool, flags: Int32)
        case close
        case read(at: Int64?, nullBuffer: Bool, count: Int)
        case write(at: Int64?, nullBuffer: Bool, count: Int)
        case vector(read: Bool, lengths: SmallIntList?, nullBase: Bool, count: Int32)  // lengths nil: a NULL array
        case lseek(Int64, whence: Int32)
        case ftruncate(Int64)
        case fstat(nullBuffer: Bool)
        case fsync
        case finalContents

        var description: String {
            switch self {
            case .open(let nullPath, let flags): return "open(\(nullPath ? "NULL" : "path"), 0o\(String(flags, radix: 8)))"
            case .close: return "close"
            case .read(let at, let null, let n): return "\(at.map { "pread @\($0)" } ?? "read")(\(null ? "NULL" : "buf"), \(UInt(bitPattern: n)))"
            case .write(let at, let null, let n): return "\(at.map { "pwrite @\($0)" } ?? "write")(\(null ? "NULL" : "buf"), \(UInt(bitPattern: n)))"
            case .vector(let read, let lengths, let nullBase, let count):
                let array = lengths.map { "\($0.map { UInt(bitPattern: $0) })" } ?? "NULL"
                return "\(read ? "readv" : "writev")(\(array)\(nullBase ? " NULL base" : ""), \(count))"
            case .lseek(let off, let whence): return "lseek(\(off), \(whence))"
            case .ftruncate(let len): return "ftruncate(\(len))"
            case .fstat(let null): return "fstat(\(null ? "NULL" : "buf"))"
            case .fsync: return "fsync"
            case .finalContents: return "final contents"
            }
        }
    }

    /// The last 16 calls with both results, for a finding's report.
    struct CallLog {
        private var recent = RecentValues<(Call, Result2, Result2)>(capacity: 16)

        mutating func append(_ call: Call, _ secure: Result2, _ plain: Result2) { recent.append((call, secure, plain)) }

        /// Forgets the calls, keeping the memory for the next input.
        mutating func removeAll() { recent.removeAll() }

        /// Oldest first, one call a line.
        var lines: String { recent.ordered.map { "\($0.0) -> secure \($0.1), plain \($0.2)" }.joined(separator: "\n") }
    }
}

extension CAPIArgumentsFuzzer.Result2 {
    /// Descriptors differ between the two sides: an open compares as success or errno.
    var map0: Self {
        if case .value = self { return .value(0) }
        return self
    }
}
#endif
