// The harness runs on the in-memory file system, which exists only in builds with system-call
// mocking (debug, and the fuzzers' release build): elsewhere (a release build of the main package)
// this file compiles to nothing.
#if ACSECURE_SYSCALL_MOCKING
#if canImport(Glibc)
import Glibc
#endif
import ACCrypto
import ACSecureServices
@_spi(Testing) import ACSecureFileCore
@_spi(Testing) import ACSystemCallsTesting

/// Fuzz target 2: the input decodes to a sequence of open / read / write / pread / pwrite / readv /
/// writev / lseek / ftruncate / fsync / close / reopen / lock / unlock calls, applied to a plain file
/// (POSIX, modelled by `MemoryFileSystem`, itself checked against the kernel by MemoryFileSystemTests)
/// and to a secure file (the engine, on the same in-memory file system). Results, errno values and bytes must match; while
/// services are locked every secure call but close must fail (`ACE_NO_KEYS_ERROR`, or the access
/// error POSIX would give first) and change nothing. At the end the secure file, reopened, must hold
/// exactly the plain file's bytes.
public enum OperationSequenceFuzzer {
    struct State {
        let services: SecureServices
        let plainPath: String
        let securePath: String
    }

    nonisolated(unsafe) private static var cached: State?

    static var state: State {
        if let cached { return cached }
        let services: SecureServices
        do {
            services = try SecureServices(appID: "com.example.fuzz", storeDirectory: FuzzScratch.path("store"), argonCost: .minimum)
        } catch { fatalError("cannot create the fuzzing store: \(error)") }
        let s = State(services: services, plainPath: "/fuzz/ops-plain", securePath: "/fuzz/ops-secure")
        cached = s
        return s
    }

    struct Pair { var plain: Int32; var secure: SecureFile; var flags: Int32 }

    enum Outcome: Equatable, CustomStringConvertible {
        case value(Int64), failure(Int32)
        var description: String {
            switch self {
            case .value(let v): return "value \(v)"
            case .failure(let e): return "errno \(e)"
            }
        }
    }

    /// A call as the log names it: values, formatted only for a finding (a closure or a string per
    /// call was a heap allocation per step, which ASan makes costly).
    enum Call: CustomStringConvertible {
        case open(flags: Int32)
        case write(Int, count: Int), pwrite(Int, count: Int, at: Int64)
        case read(Int, count: Int, at: Int64?)
        case writev(Int, sizes: SmallIntList), readv(Int, sizes: SmallIntList)
        case lseek(Int, Int64, whence: Int32)
        case ftruncate(Int, Int64)
        case fstat(Int), fsync(Int), close(Int)
        case lock, unlock

        var description: String {
            switch self {
            case .open(let flags): return "open(\(String(flags, radix: 8)))"
            case .write(let i, let n): return "write[\(i)](\(n))"
            case .pwrite(let i, let n, let at): return "pwrite[\(i)](\(n) @ \(at))"
            case .read(let i, let n, let at): return "\(at.map { "pread @ \($0)" } ?? "read")[\(i)](\(n))"
            case .writev(let i, let sizes): return "writev[\(i)](\(sizes))"
            case .readv(let i, let sizes): return "readv[\(i)](\(sizes))"
            case .lseek(let i, let off, let whence): return "lseek[\(i)](\(off), \(whence))"
            case .ftruncate(let i, let len): return "ftruncate[\(i)](\(len))"
            case .fstat(let i): return "fstat[\(i)]"
            case .fsync(let i): return "fsync[\(i)]"
            case .close(let i): return "close[\(i)]"
            case .lock: return "lock"
            case .unlock: return "unlock"
            }
        }
    }

    /// The last 20 steps (step number, call, plain result), oldest first in `lines`.
    struct StepLog {
        private var recent = RecentValues<(Int, Call, Outcome?)>(capacity: 20)

        mutating func append(_ step: Int, _ call: Call, _ plain: Outcome?) { recent.append((step, call, plain)) }

        /// Forgets the steps, keeping the memory for the next input.
        mutating func removeAll() { recent.removeAll() }

        var lines: String { recent.ordered.map { "\($0.0) \($0.1)\($0.2.map { " -> \($0)" } ?? "")" }.joined(separator: "\n") }
    }

    static let openModes: [Int32] = [O_RDWR | O_CREAT, O_RDWR, O_RDONLY, O_WRONLY, O_RDWR | O_APPEND, O_WRONLY | O_APPEND,
                                     O_RDWR | O_TRUNC, O_RDWR | O_CREAT | O_EXCL]
    /// How a secure call may fail while services are locked.
    static let lockedFailures: [ACErrorCode] = [.noKeys, .readOnWriteOnly, .writeOnReadOnly, .truncOnReadOnly, .invalidArgument, .negativeFileLength]
    static let whences = [SEEK_SET, SEEK_CUR, SEEK_END]
    static let maxOperations = 64
    /// Written bytes are slices of this (longer than the longest `length()`, at an offset that depends
    /// on the step and the length), so misplaced bytes show; slicing is cheaper than generating them.
    nonisolated(unsafe) static let pattern: UnsafeRawBufferPointer = {
        let p = UnsafeMutableRawBufferPointer.allocate(byteCount: 16_400 + 256, alignment: 16)
        for i in 0..<p.count { p[i] = UInt8(truncatingIfNeeded: i &* 131 ^ i >> 8) }
        return UnsafeRawBufferPointer(p)
    }()
    /// Read buffers, made once (fresh ones per read cost more under ASan than the reads): the plain
    /// file's bytes and the secure file's, compared up to what the calls returned.
    nonisolated(unsafe) static let plainReadBuffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 << 10, alignment: 16)
    nonisolated(unsafe) static let secureReadBuffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 << 10, alignment: 16)
    /// The arrays of one input (its open pairs and its log) and the buffer lists of a readv or
    /// writev step, kept from one input and step to the next: new ones were heap allocations at every
    /// input and step, which ASan makes costly. Each input takes them (`swap`) and gives them back empty.
    nonisolated(unsafe) private static var sparePairs: [Pair] = []
    nonisolated(unsafe) private static var spareLog = StepLog()
    nonisolated(unsafe) private static var writeVectors: [UnsafeRawBufferPointer] = []
    nonisolated(unsafe) private static var readVectors: (secure: [UnsafeMutableRawBufferPointer], plain: [UnsafeMutableRawBufferPointer]) = ([], [])

    /// Runs one input. Returns a finding, or nil when both files behaved the same.
    public static func run(_ input: [UInt8]) -> FuzzFinding? {
        let st = state
        return FuzzFileSystem.run { fs in run(input, st, fs) }
    }

    static func run(_ input: [UInt8], _ st: State, _ fs: MemoryFileSystem) -> FuzzFinding? {
        let services = st.services
        if services.availability != .available {
            do { try FuzzFileSystem.onRealFiles { try services.unlock(passcode: nil) } } catch { return FuzzFinding("unlock failed: \(error)") }
        }
        var pairs: [Pair] = []
        var locked = false
        var log = StepLog()  // formatted only for a finding
        swap(&pairs, &sparePairs)
        swap(&log, &spareLog)
        defer {
            pairs.removeAll(keepingCapacity: true)
            log.removeAll()
            swap(&pairs, &sparePairs)
            swap(&log, &spareLog)
        }
        defer {
            for p in pairs { _ = fs.close(p.plain); try? p.secure.close() }
            if services.availability != .available { try? services.unlock(passcode: nil) }
        }
        var c = ByteCursor(input)
        var step = 0

        // Typed: an untyped throw boxes the error (a heap allocation per failing call).
        func secure(_ body: () throws(SecureFileError) -> Int64) -> (Outcome, SecureFileError?) {
            do throws(SecureFileError) { return (.value(try body()), nil) } catch { return (.failure(error.errno), error) }
        }
        func plain<T: BinaryInteger>(_ r: Result<T, Errno>) -> Outcome {
            switch r {
            case .success(let v): return .value(Int64(v))
            case .failure(let e): return .failure(e.rawValue)
            }
        }
        func mismatch(_ what: String, _ a: Outcome, _ b: Outcome) -> FuzzFinding {
            FuzzFinding("step \(step) \(what): plain \(a), secure \(b)\n" + log.lines)
        }
        /// While locked: the secure call must fail cleanly and the plain call is not made.
        func expectLockedFailure(_ what: String, _ r: (Outcome, SecureFileError?)) -> FuzzFinding? {
            guard let e = r.1 else { return FuzzFinding("step \(step) \(what) succeeded while services were locked") }
            return lockedFailures.contains(e.code) ? nil : FuzzFinding("step \(step) \(what) while locked failed with \(e.code.name): \(e.message)")
        }
        // Offsets and lengths stay within about six chunks: every shape (holes of several chunks,
        // writes and reads across two or three boundaries, chunk-aligned ones) at a few chunks per
        // call, which is what a call costs (each chunk is sealed or opened).
        func offset() -> Int64 {
            let b = c.u8()
            if b & 0x80 != 0 { return Int64(b & 0x07) * 4096 + Int64((b >> 4) & 0x7) - 3 }  // around a chunk boundary
            return Int64(c.u16() % 24_000) - (b & 0x40 != 0 ? 2 : 0)
        }
        func length() -> Int {
            let b = c.u8()
            switch b % 4 {
            case 0: return Int(c.u8())
            case 1: return 4096 * (1 + Int(b >> 7)) + Int(c.u8() % 5) - 2
            default: return c.u16() % 9_000
            }
        }
        func data(_ n: Int) -> UnsafeRawBufferPointer {
            let start = (step &* 37 &+ n) & 0xFF
            return UnsafeRawBufferPointer(rebasing: pattern[start..<start + max(n, 0)])
        }
        func same(_ count: Int) -> Bool {
            count == 0 || memcmp(plainReadBuffer.baseAddress!, secureReadBuffer.baseAddress!, count) == 0
        }
        func openPair(_ flags: Int32) -> FuzzFinding? {
            let r = secure { () throws(SecureFileError) -> Int64 in
                // Every third open asks for double writes (which then hold for the file's state
                // until its last handle closes), every fourth for whole chunks in place (no copy
                // once every handle of the file asked so), and every fifth buffers its writes
                // (write-back, with its fast path into the run): none may change a result.
                let f = try SecureFile.open(st.securePath, flags: flags, mode: 0o600, services: services,
                                            buffering: step % 5 == 3 ? .writeBack : .writeThrough,
                                            partialOverwrites: step % 3 == 2 ? .doubleWrite : .chunkCopy,
                                            wholeChunkOverwrites: step % 4 == 1 ? .inPlace : .chunkCopy)
                pairs.append(Pair(plain: -1, secure: f, flags: flags))
                return 0
            }
            if locked {
                if case .value = r.0 { return FuzzFinding("step \(step) open succeeded while services were locked") }
                return r.1?.code == .noKeys ? nil : FuzzFinding("step \(step) open while locked: \(r.1.map { $0.code.name } ?? "?")")
            }
            let opened = fs.open(st.plainPath, flags | O_CLOEXEC, 0o600)
            let p: Int32
            switch opened {
            case .success(let fd): p = fd
            case .failure: p = -1
            }
            let a: Outcome = plain(opened.map { _ in 0 })
            log.append(step, .open(flags: flags), a)
            if case .value = r.0 { pairs[pairs.count - 1].plain = p }
            if a != r.0 {
                if p >= 0 { _ = fs.close(p) }
                return mismatch("open(\(String(flags, radix: 8)))", a, r.0)
            }
            return nil
        }

        if let f = openPair(O_RDWR | O_CREAT) { return f }
        while !c.isAtEnd && step < maxOperations {
            step += 1
            let op = c.u8()
            if pairs.isEmpty || op % 16 == 0 {
                // The mode byte's low bits pick the mode; its top bit adds O_DSYNC (a sync per write),
                // so inputs and FailCases written before it keep their modes.
                let m = c.u8()
                if pairs.count < 4, let f = openPair(openModes[Int(m) % openModes.count] | (m & 0x80 != 0 ? O_DSYNC : 0)) { return f }
                continue
            }
            let i = Int(c.u8()) % pairs.count
            let pair = pairs[i]
            var finding: FuzzFinding?
            switch op % 16 {
            case 1, 2:  // write
                let bytes = data(length())
                let b = secure { () throws(SecureFileError) -> Int64 in Int64(try pair.secure.write(bytes)) }
                if locked { finding = expectLockedFailure("write", b); break }
                let a = plain(fs.write(pair.plain, bytes))
                log.append(step, .write(i, count: bytes.count), a)
                if a != b.0 { finding = mismatch("write(\(bytes.count))", a, b.0) }
            case 3, 4:  // pwrite
                let bytes = data(length())
                let at = offset()
                let b = secure { () throws(SecureFileError) -> Int64 in Int64(try pair.secure.pwrite(bytes, at: at)) }
                if locked { finding = expectLockedFailure("pwrite", b); break }
                let a = plain(fs.pwrite(pair.plain, bytes, at))
                log.append(step, .pwrite(i, count: bytes.count, at: at), a)
                if a != b.0 { finding = mismatch("pwrite(\(bytes.count) @ \(at))", a, b.0) }
            case 5, 6:  // read / pread
                let n = length()
                let at: Int64? = op % 16 == 6 ? offset() : nil
                let sb = UnsafeMutableRawBufferPointer(rebasing: secureReadBuffer[0..<n])
                let pb = UnsafeMutableRawBufferPointer(rebasing: plainReadBuffer[0..<n])
                let b = secure { () throws(SecureFileError) -> Int64 in
                    if let at { return Int64(try pair.secure.pread(into: sb, at: at)) }
                    return Int64(try pair.secure.read(into: sb))
                }
                if locked { finding = expectLockedFailure("read", b); break }
                let a = plain(at.map { fs.pread(pair.plain, pb, $0) } ?? fs.read(pair.plain, pb))
                log.append(step, .read(i, count: n, at: at), a)
                if a != b.0 { finding = mismatch("read(\(n))", a, b.0) }
                else if case .value(let k) = a, !same(Int(k)) { finding = FuzzFinding("step \(step) read(\(n)): bytes differ") }
            case 7, 8:  // readv / writev
                var sizes = SmallIntList()
                for _ in 0..<(1 + Int(c.u8() % 4)) { sizes.append(length() % 6000) }
                if op % 16 == 7 {
                    writeVectors.removeAll(keepingCapacity: true)
                    for size in sizes { writeVectors.append(data(size)) }
                    let bufs = writeVectors
                    let b = secure { () throws(SecureFileError) -> Int64 in Int64(try pair.secure.writev(bufs)) }
                    if locked { finding = expectLockedFailure("writev", b); break }
                    let a = plain(fs.writev(pair.plain, bufs))
                    log.append(step, .writev(i, sizes: sizes), a)
                    if a != b.0 { finding = mismatch("writev(\(sizes))", a, b.0) }
                } else {
                    readVectors.secure.removeAll(keepingCapacity: true)
                    readVectors.plain.removeAll(keepingCapacity: true)
                    var o = 0
                    for size in sizes {
                        readVectors.secure.append(UnsafeMutableRawBufferPointer(rebasing: secureReadBuffer[o..<o + size]))
                        readVectors.plain.append(UnsafeMutableRawBufferPointer(rebasing: plainReadBuffer[o..<o + size]))
                        o += size
                    }
                    let (secureVectors, plainVectors) = readVectors
                    let b = secure { () throws(SecureFileError) -> Int64 in Int64(try pair.secure.readv(secureVectors)) }
                    if locked { finding = expectLockedFailure("readv", b); break }
                    let a = plain(fs.readv(pair.plain, plainVectors))
                    log.append(step, .readv(i, sizes: sizes), a)
                    if a != b.0 { finding = mismatch("readv(\(sizes))", a, b.0) }
                    else if case .value(let k) = a, !same(Int(k)) { finding = FuzzFinding("step \(step) readv: bytes differ") }
                }
            case 9:  // lseek
                let whence = whences[Int(c.u8()) % 3]
                let off = whence == SEEK_SET ? offset() : Int64(c.u16()) - 32768
                let b = secure { () throws(SecureFileError) -> Int64 in try pair.secure.seek(off, whence: whence) }
                if locked { finding = expectLockedFailure("lseek", b); break }
                let a = plain(fs.lseek(pair.plain, off, whence))
                log.append(step, .lseek(i, off, whence: whence), a)
                if a != b.0 { finding = mismatch("lseek(\(off), \(whence))", a, b.0) }
            case 10:  // ftruncate
                let len = c.u8() == 0 ? -1 : offset()
                let b = secure { () throws(SecureFileError) -> Int64 in try pair.secure.truncate(to: len); return 0 }
                if locked { finding = expectLockedFailure("ftruncate", b); break }
                let a = plain(fs.ftruncate(pair.plain, len).map { 0 })
                log.append(step, .ftruncate(i, len), a)
                if a != b.0 { finding = mismatch("ftruncate(\(len))", a, b.0) }
            case 11:  // fsync / fstat
                let stat = c.u8() & 1 == 0
                let b = secure { () throws(SecureFileError) -> Int64 in
                    if stat { return Int64(try pair.secure.stat().st_size) }
                    try pair.secure.sync(); return 0
                }
                if locked { finding = expectLockedFailure(stat ? "fstat" : "fsync", b); break }
                let a: Outcome = stat ? plain(fs.fstat(pair.plain).map { $0.st_size }) : plain(fs.sync(pair.plain).map { 0 })
                log.append(step, stat ? .fstat(i) : .fsync(i), a)
                if a != b.0 { finding = mismatch(stat ? "fstat" : "fsync", a, b.0) }
            case 12, 13:  // close, or reopen with the same flags (without O_EXCL / O_TRUNC)
                let b = secure { () throws(SecureFileError) -> Int64 in try pair.secure.close(); return 0 }
                let a = plain(fs.close(pair.plain).map { 0 })
                pairs.remove(at: i)
                log.append(step, .close(i), a)
                if a != b.0 { finding = mismatch("close", a, b.0); break }
                if op % 16 == 13 { finding = openPair(pair.flags & ~(O_EXCL | O_TRUNC)) }
            case 14:  // lock: dirty chunks are flushed, keys and plaintext dropped
                services.lock()
                locked = true
                log.append(step, .lock, nil)
            default:  // unlock
                if locked {
                    do { try FuzzFileSystem.onRealFiles { try services.unlock(passcode: nil) } } catch { return FuzzFinding("unlock failed: \(error)") }
                    locked = false
                    log.append(step, .unlock, nil)
                }
            }
            if let finding { return finding }
        }
        if locked {
            do { try FuzzFileSystem.onRealFiles { try services.unlock(passcode: nil) } } catch { return FuzzFinding("unlock failed: \(error)") }
        }
        for p in pairs {
            _ = fs.close(p.plain)
            do { try p.secure.close() } catch { return FuzzFinding("final close failed: \(error.code.name) \(error.message)") }
        }
        pairs.removeAll(keepingCapacity: true)
        // What reached the disk, read back through a fresh open, equals the plain file.
        let expected = fs.contents(st.plainPath) ?? []
        if fs.contents(st.securePath) == nil {
            return expected.isEmpty && fs.contents(st.plainPath) == nil ? nil : FuzzFinding("secure file missing at the end")
        }
        do {
            let f = try SecureFile.open(st.securePath, flags: O_RDONLY, services: services)
            defer { try? f.close() }
            // Read in 10,000-byte preads (not a chunk multiple), each compared where it lands.
            var at = 0
            while true {
                let n = try f.pread(into: UnsafeMutableRawBufferPointer(rebasing: secureReadBuffer[0..<10_000]), at: Int64(at))
                if n == 0 { break }
                let same = at + n <= expected.count && expected.withUnsafeBytes { memcmp($0.baseAddress! + at, secureReadBuffer.baseAddress!, n) == 0 }
                if !same { return FuzzFinding("final contents differ at \(at)..<\(at + n): plain \(expected.count) bytes\n" + log.lines) }
                at += n
            }
            if at != expected.count {
                return FuzzFinding("final contents differ: secure \(at) bytes, plain \(expected.count)\n" + log.lines)
            }
        } catch {
            return FuzzFinding("final read failed: \(error)\n" + log.lines)
        }
        return nil
    }
}
#endif
