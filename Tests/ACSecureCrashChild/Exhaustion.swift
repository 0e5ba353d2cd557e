// `ACSecureCrashChild exhaust <store> <directory> memory|descriptors`, for ResourceExhaustionTests
// (issue 15, finding 9): lowers a real limit of this process and opens secure files until an open
// fails, then checks that the failure is an error (never a trap) and that the process recovers.
//
//   memory       RLIMIT_AS a few MiB above what the process uses: guarded memory (one mapping per
//                buffer) runs out, as it did at ~5,250 open files under vm.max_map_count.
//   descriptors  RLIMIT_NOFILE a few descriptors above what the process holds: the kernel open fails
//                (EMFILE); then, with exactly one descriptor free, the engine's own dup fails after
//                the kernel open succeeded, the half-open case.
//
// Prints one line per fact, "E <what>" for a broken expectation, and "OK <files opened>" at the end
// (exit 0). A trap kills the process with a signal, which the parent reports.
#if canImport(Glibc)
import Glibc
#endif
import ACSecureServices
import ACSecureFileCore
import ACSecureTestSupport

func runExhaustion(store: String, directory: String, mode: String) -> Never {
    var problems = 0
    func expect(_ ok: Bool, _ what: @autoclosure () -> String) {
        if !ok { problems += 1; emit("E \(what())") }
    }
    func content(_ i: Int) -> [UInt8] { crashPatternBytes(i, 100) }
    func path(_ i: Int) -> String { "\(directory)/f\(i)" }

    do {
        let services = try SecureServices(appID: "com.example.tests", storeDirectory: store, argonCost: .minimum)
        // Files written before the limit, checked at the end.
        for i in 0..<4 {
            let f = try SecureFile.open(path(i), flags: O_RDWR | O_CREAT | O_TRUNC, mode: 0o600, services: services)
            _ = try content(i).withUnsafeBytes { (b) throws(SecureFileError) in try f.write(b) }
            try f.close()
        }
        var limit = rlimit()
        getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit)
        if mode == "memory" {
            // Descriptors must not be the limit here: two per file.
            limit.rlim_cur = min(limit.rlim_max, 1 << 16)
            setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit)
            reserveHeap(64 << 20)
            var asLimit = rlimit()
            getrlimit(__rlimit_resource_t(RLIMIT_AS.rawValue), &asLimit)
            asLimit.rlim_cur = rlim_t(addressSpaceInUse() + (12 << 20))
            expect(setrlimit(__rlimit_resource_t(RLIMIT_AS.rawValue), &asLimit) == 0, "setrlimit(RLIMIT_AS): \(errno)")
        } else {
            limit.rlim_cur = rlim_t(highestDescriptor() + 1 + 20)
            expect(setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit) == 0, "setrlimit(RLIMIT_NOFILE): \(errno)")
            // Fill the gaps below the highest descriptor: exactly 20 free, so the 11th file's kernel open fails.
            while freeDescriptors() > 20 { _ = Glibc.open("/dev/null", O_RDONLY) }
        }

        var open: [Int: SecureFile] = [:]
        var failed: (index: Int, error: SecureFileError)?
        for i in 4..<200_000 {
            do {
                let f = try SecureFile.open(path(i), flags: O_RDWR | O_CREAT | O_TRUNC, mode: 0o600, services: services)
                _ = try content(i).withUnsafeBytes { (b) throws(SecureFileError) in try f.write(b) }
                open[i] = f
            } catch {
                failed = (i, error as! SecureFileError)
                break
            }
        }
        guard let failed else { emit("E no open failed"); exit(1) }
        let expectedErrno = mode == "memory" ? ENOMEM : EMFILE
        emit("FAIL \(failed.index) \(failed.error.errno) \(failed.error.code.name) \(failed.error.message)")
        expect(failed.error.errno == expectedErrno, "errno \(failed.error.errno), expected \(expectedErrno)")
        expect(failed.error.code == .lowMemory, "code \(failed.error.code.name), expected ACE_LOW_MEMORY_ERROR")
        expect(failed.error.message.contains(path(failed.index)), "the message names the file: \(failed.error.message)")
        // No half-open state: nothing in the open-files table, no descriptor kept.
        let descriptorsAfterFailure = openDescriptorCount()
        expect(handles(path(failed.index)) == 0, "the failed file is not in the open-files table")
        do {
            _ = try SecureFile.open(path(failed.index), flags: O_RDWR | O_CREAT, mode: 0o600, services: services)
            expect(false, "a second open succeeded while still exhausted")
        } catch {
            expect(error.code == .lowMemory, "second failure: \(error.message)")
        }
        expect(openDescriptorCount() == descriptorsAfterFailure, "a failed open kept a descriptor")

        if mode == "descriptors" {
            // One descriptor free: the kernel open succeeds and the engine's dup of it fails.
            let victim = open.keys.max()!
            try open.removeValue(forKey: victim)!.close()
            var fillers: [Int32] = []
            while freeDescriptors() > 1 { fillers.append(Glibc.open("/dev/null", O_RDONLY)) }
            expect(freeDescriptors() == 1 && !fillers.contains(-1), "exactly one descriptor free")
            let halfOpen = path(failed.index + 1)
            do {
                _ = try SecureFile.open(halfOpen, flags: O_RDWR | O_CREAT | O_TRUNC, mode: 0o600, services: services)
                expect(false, "the open with one descriptor free succeeded")
            } catch {
                emit("HALF \(error.errno) \(error.code.name) \(error.message)")
                expect(error.errno == EMFILE && error.code == .lowMemory, "dup failure: \(error.errno) \(error.code.name)")
                expect(error.message.contains(halfOpen), "the message names the file: \(error.message)")
            }
            expect(handles(halfOpen) == 0, "the half-open file is not in the open-files table")
            let probe = Glibc.open("/dev/null", O_RDONLY)
            expect(probe >= 0, "the kernel descriptor of the failed open was released")
            if probe >= 0 { Glibc.close(probe) }
            fillers.forEach { Glibc.close($0) }
            open[victim] = try SecureFile.open(path(victim), flags: O_RDWR, services: services)
        }

        // Recovery: close half, then the failed file opens (O_CREAT completes its creation).
        let opened = open.count
        for i in open.keys.sorted() where i % 2 == 0 { try open.removeValue(forKey: i)!.close() }
        let again = try SecureFile.open(path(failed.index), flags: O_RDWR | O_CREAT, mode: 0o600, services: services)
        _ = try content(failed.index).withUnsafeBytes { (b) throws(SecureFileError) in try again.write(b) }
        try again.close()
        emit("REOPENED \(failed.index)")

        // Every byte written before and during the exhaustion is intact.
        func check(_ f: SecureFile, _ i: Int) throws(SecureFileError) {
            var got = [UInt8](repeating: 0, count: 101)
            let n = try got.withUnsafeMutableBufferPointer { (b) throws(SecureFileError) in try f.pread(into: UnsafeMutableRawBufferPointer(b), at: 0) }
            expect(n == 100 && Array(got[0..<100]) == content(i), "\(path(i)): content changed")
        }
        for (i, f) in open { try check(f, i) }
        for i in Array(0..<4) + Array(stride(from: 4, to: failed.index + 1, by: 2)).suffix(50) + [failed.index] {
            let f = try SecureFile.open(path(i), flags: O_RDONLY, services: services)
            try check(f, i)
            try f.close()
        }
        for f in open.values { try f.close() }
        emit(problems == 0 ? "OK \(opened)" : "E \(problems) problems")
        exit(problems == 0 ? 0 : 1)
    } catch {
        emit("E \(error)")
        exit(1)
    }
}

/// The process's mapped address space in bytes (/proc/self/statm, first field in pages).
private func addressSpaceInUse() -> Int {
    let fd = Glibc.open("/proc/self/statm", O_RDONLY)
    guard fd >= 0 else { return 0 }
    defer { Glibc.close(fd) }
    var buffer = [UInt8](repeating: 0, count: 128)
    let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
    guard n > 0 else { return 0 }
    let pages = Int(String(decoding: buffer[0..<n].prefix { $0 != UInt8(ascii: " ") }, as: UTF8.self)) ?? 0
    return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
}

/// Grows the malloc heap by `bytes` and keeps it (no trimming, no separate mappings for large
/// blocks), so ordinary allocations still succeed once the address space is limited: only the
/// guarded buffers, each its own mapping, run out.
private func reserveHeap(_ bytes: Int) {
    // mallopt (<malloc.h>, not in the Glibc module): M_TRIM_THRESHOLD is -1, M_MMAP_THRESHOLD -3.
    typealias Mallopt = @convention(c) (Int32, Int32) -> Int32
    guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "mallopt") else { return }
    let mallopt = unsafeBitCast(symbol, to: Mallopt.self)
    _ = mallopt(-1, Int32.max)
    _ = mallopt(-3, 32 << 20)
    let blocks = (0..<(bytes >> 20)).map { _ in malloc(1 << 20) }
    blocks.forEach { free($0) }
}

private func highestDescriptor() -> Int32 {
    var highest: Int32 = 2
    for fd in 0..<Int32(4096) where fcntl(fd, F_GETFD) >= 0 { highest = fd }
    return highest
}

private func openDescriptorCount() -> Int {
    var limit = rlimit()
    getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit)
    return (0..<Int32(min(limit.rlim_cur, 1 << 16))).reduce(0) { $0 + (fcntl($1, F_GETFD) >= 0 ? 1 : 0) }
}

private func freeDescriptors() -> Int {
    var limit = rlimit()
    getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit)
    return Int(limit.rlim_cur) - openDescriptorCount()
}

/// Handles this process has open on `path` (0 when the failed open did not even create it).
private func handles(_ path: String) -> Int {
    do { return try SecureFileSystem.openHandleCount(path) } catch { return error.errno == ENOENT ? 0 : -1 }
}
