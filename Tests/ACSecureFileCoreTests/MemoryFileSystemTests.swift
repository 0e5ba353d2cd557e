#if canImport(Glibc)
import Glibc
#endif
import XCTest
import ACSecureTestSupport
import ACCrypto
@testable @_spi(Testing) import ACSecureFileCore
@_spi(Testing) import ACSystemCallsTesting

/// The in-memory file system the fuzzers run on must behave as the kernel does for what they do:
/// the same random sequences of open / read / write / pread / pwrite / readv / writev / lseek /
/// ftruncate / fstat / fsync / dup / close / rename on real files and on memory files must give the
/// same results, errno values and bytes. Then the engine on it: files round-trip, fault injection
/// still applies, and switching it off returns to the kernel.
final class MemoryFileSystemTests: XCTestCase {
    enum Outcome: Equatable { case value(Int64), failure(Int32) }

    func kernel(_ r: Int) -> Outcome { r < 0 ? .failure(errno) : .value(Int64(r)) }
    func memory<T: BinaryInteger>(_ r: Result<T, Errno>) -> Outcome {
        switch r {
        case .success(let v): return .value(Int64(v))
        case .failure(let e): return .failure(e.rawValue)
        }
    }

    func testRandomSequencesMatchTheKernel() throws {
        let env = try TestEnvironment()
        let names = ["a", "b"]
        let modes: [Int32] = [O_RDWR | O_CREAT, O_RDONLY, O_WRONLY, O_RDWR, O_RDWR | O_APPEND, O_WRONLY | O_APPEND | O_CREAT,
                              O_RDWR | O_TRUNC, O_RDONLY | O_TRUNC, O_RDWR | O_CREAT | O_EXCL, O_WRONLY | O_CREAT | O_TRUNC]
        var compared = 0
        for seed in UInt64(1)...60 {
            var rng = SplitMix64(seed: seed)
            let fs = MemoryFileSystem()
            for n in names { unlink(env.path(n)) }
            var fds: [(kernel: Int32, memory: Int32)] = []
            var log: [String] = []
            defer { for p in fds { close(p.kernel) } }
            func check(_ what: String, _ k: Outcome, _ m: Outcome, _ line: UInt = #line) -> Bool {
                compared += 1
                log.append("\(what) -> \(k)")
                if k != m {
                    XCTFail("seed \(seed) \(what): kernel \(k), memory \(m)\n" + log.suffix(12).joined(separator: "\n"), line: line)
                    return false
                }
                return true
            }
            for _ in 0..<120 {
                let op = Int.random(in: 0..<14, using: &rng)
                if fds.isEmpty || op == 0 {
                    let name = names.randomElement(using: &rng)!
                    let flags = modes.randomElement(using: &rng)! | O_CLOEXEC
                    let k = open(env.path(name), flags, 0o600)
                    let ke = errno
                    let m = fs.open(name, flags, 0o600)
                    guard check("open(\(name), \(String(flags, radix: 8)))", k < 0 ? .failure(ke) : .value(0), memory(m.map { _ in 0 })) else { return }
                    if k >= 0, case .success(let mfd) = m { fds.append((k, mfd)) }
                    continue
                }
                let i = Int.random(in: 0..<fds.count, using: &rng)
                let (kfd, mfd) = fds[i]
                log.append("[\(i)]")
                let count = [0, 1, 7, 100, 4096, 5000].randomElement(using: &rng)!
                let offset = [-1, 0, 3, 4095, 9000, Int64.random(in: 0..<20_000, using: &rng)].randomElement(using: &rng)!
                let data = (0..<count).map { _ in UInt8.random(in: 0...255, using: &rng) }
                var kb = [UInt8](repeating: 0, count: count), mb = kb
                var ok = true
                switch op {
                case 1:
                    ok = check("write(\(count))", kernel(data.withUnsafeBytes { write(kfd, $0.baseAddress, $0.count) }),
                               memory(data.withUnsafeBytes { fs.writev(mfd, [$0]) }))
                case 2:
                    ok = check("pwrite(\(count) @ \(offset))", kernel(data.withUnsafeBytes { pwrite(kfd, $0.baseAddress, $0.count, off_t(offset)) }),
                               memory(data.withUnsafeBytes { fs.pwrite(mfd, $0, offset) }))
                case 3:
                    ok = check("read(\(count))", kernel(kb.withUnsafeMutableBytes { read(kfd, $0.baseAddress, $0.count) }),
                               memory(mb.withUnsafeMutableBytes { fs.readv(mfd, [$0]) })) && kb == mb
                case 4:
                    ok = check("pread(\(count) @ \(offset))", kernel(kb.withUnsafeMutableBytes { pread(kfd, $0.baseAddress, $0.count, off_t(offset)) }),
                               memory(mb.withUnsafeMutableBytes { fs.pread(mfd, $0, offset) })) && kb == mb
                case 5:
                    let split = count / 3
                    let k = kernel(kb.withUnsafeMutableBytes { x in
                        var iov = [iovec(iov_base: x.baseAddress, iov_len: split), iovec(iov_base: x.baseAddress.map { $0 + split }, iov_len: count - split)]
                        return readv(kfd, &iov, 2)
                    })
                    let m = memory(mb.withUnsafeMutableBytes { x in
                        fs.readv(mfd, [UnsafeMutableRawBufferPointer(rebasing: x[..<split]), UnsafeMutableRawBufferPointer(rebasing: x[split...])])
                    })
                    ok = check("readv(\(count))", k, m) && kb == mb
                case 6:
                    let split = count / 2
                    let k = kernel(data.withUnsafeBytes { x in
                        var iov = [iovec(iov_base: UnsafeMutableRawPointer(mutating: x.baseAddress), iov_len: split),
                                   iovec(iov_base: UnsafeMutableRawPointer(mutating: x.baseAddress.map { $0 + split }), iov_len: count - split)]
                        return writev(kfd, &iov, 2)
                    })
                    let m = memory(data.withUnsafeBytes { x in fs.writev(mfd, [UnsafeRawBufferPointer(rebasing: x[..<split]), UnsafeRawBufferPointer(rebasing: x[split...])]) })
                    ok = check("writev(\(count))", k, m)
                case 7:
                    let whence = [SEEK_SET, SEEK_CUR, SEEK_END, 7].randomElement(using: &rng)!
                    let by = offset - (whence == SEEK_SET ? 0 : 5000)
                    ok = check("lseek(\(by), \(whence))", kernel(Int(lseek(kfd, off_t(by), whence))), memory(fs.lseek(mfd, by, whence)))
                case 8:
                    ok = check("ftruncate(\(offset))", kernel(Int(ftruncate(kfd, off_t(offset)))), memory(fs.ftruncate(mfd, offset).map { 0 }))
                case 9:
                    var st = stat()
                    let k: Outcome = fstat(kfd, &st) == 0 ? .value(Int64(st.st_size)) : .failure(errno)
                    ok = check("fstat", k, memory(fs.fstat(mfd).map { $0.st_size }))
                case 10:
                    ok = check("fsync", kernel(Int(fsync(kfd))), memory(fs.sync(mfd).map { 0 }))
                case 11:
                    let k = fcntl(kfd, F_DUPFD_CLOEXEC, 0)
                    let m = fs.dup(mfd)
                    ok = check("dup", k < 0 ? .failure(errno) : .value(0), memory(m.map { _ in 0 }))
                    if k >= 0, case .success(let d) = m { fds.append((k, d)) }
                case 12:
                    let (from, to) = Bool.random(using: &rng) ? ("a", "b") : ("b", "a")
                    ok = check("rename(\(from), \(to))", kernel(Int(rename(env.path(from), env.path(to)))), memory(fs.rename(from, to).map { 0 }))
                default:
                    ok = check("close", kernel(Int(close(kfd))), memory(fs.close(mfd).map { 0 }))
                    fds.remove(at: i)
                    // A descriptor closed twice fails the same way.
                    ok = ok && check("close again", kernel(Int(close(kfd))), memory(fs.close(mfd).map { 0 }))
                }
                if !ok { return }
            }
            for n in names {
                var st = stat()
                let onDisk: [UInt8]? = lstat(env.path(n), &st) == 0 ? readWholeFile(env.path(n)) : nil
                XCTAssertEqual(onDisk, fs.contents(n), "seed \(seed): file \(n)")
            }
        }
        XCTAssertGreaterThan(compared, 5000)
    }

    func testOpenErrors() {
        let fs = MemoryFileSystem()
        XCTAssertEqual(fs.open("x", O_RDONLY, 0), .failure(Errno(ENOENT)))
        guard case .success(let fd) = fs.open("x", O_RDWR | O_CREAT | O_EXCL, 0o600) else { return XCTFail("create") }
        XCTAssertGreaterThanOrEqual(fd, MemoryFileSystem.firstDescriptor)
        XCTAssertEqual(fs.open("x", O_RDWR | O_CREAT | O_EXCL, 0o600), .failure(Errno(EEXIST)))
        XCTAssertEqual(fs.open("x", O_ACCMODE, 0), .failure(Errno(EINVAL)))
        XCTAssertEqual(fs.open("", O_RDONLY, 0), .failure(Errno(ENOENT)))
        XCTAssertEqual(fs.pread(fd + 1, UnsafeMutableRawBufferPointer(start: nil, count: 0), 0), .failure(Errno(EBADF)))
        XCTAssertEqual(fs.close(fd).map { 0 }, .success(0))
        XCTAssertEqual(fs.close(fd).map { 0 }, .failure(Errno(EBADF)))
        XCTAssertEqual(fs.openDescriptorCount, 0)
    }

    /// Inodes and open file descriptions are reused (after `removeAll`, after `close`): a reused one
    /// starts as a new one would, and a description a `dup`ed descriptor still shares is not reused.
    func testReusedFilesAndDescriptionsStartFresh() throws {
        let fs = MemoryFileSystem()
        let a = try fs.open("/a", O_RDWR | O_CREAT, 0o600).get()
        XCTAssertEqual(try [UInt8](repeating: 7, count: 5).withUnsafeBytes { try fs.write(a, $0).get() }, 5)
        let inodeA = try fs.fstat(a).get().st_ino
        let twin = try fs.dup(a).get()
        try fs.close(a).get()
        let b = try fs.open("/a", O_RDONLY, 0).get()
        XCTAssertEqual(try fs.lseek(b, 0, SEEK_CUR).get(), 0)
        XCTAssertEqual(try fs.lseek(twin, 0, SEEK_CUR).get(), 5, "the shared description was given to another open")
        XCTAssertEqual(try [UInt8](repeating: 8, count: 1).withUnsafeBytes { try fs.write(twin, $0).get() }, 1)
        XCTAssertEqual(fs.write(b, UnsafeRawBufferPointer(start: nil, count: 0)), .failure(Errno(EBADF)))

        fs.removeAll()
        XCTAssertEqual(fs.openDescriptorCount, 0)
        XCTAssertNil(fs.contents("/a"))
        let c = try fs.open("/c", O_WRONLY | O_CREAT, 0o644).get()
        let st = try fs.fstat(c).get()
        XCTAssertEqual(st.st_size, 0)
        XCTAssertEqual(st.st_mode & 0o7777, 0o644)
        XCTAssertNotEqual(st.st_ino, inodeA)
        XCTAssertEqual(fs.contents("/c"), [])
        XCTAssertEqual(try fs.lseek(c, 0, SEEK_CUR).get(), 0)
        XCTAssertEqual(fs.pread(c, UnsafeMutableRawBufferPointer(start: nil, count: 0), 0), .failure(Errno(EBADF)))
        XCTAssertEqual(try fs.lseek(c, 0, SEEK_END).get(), 0)
    }

    /// The engine on memory files: a file written and read back, nothing of it on disk, no
    /// descriptor leaked, fault injection applied before the memory call, the kernel back after.
    func testTheEngineRunsOnMemoryFiles() throws {
        let env = try TestEnvironment()
        let fs = MemoryFileSystem()
        MemoryFileSystem.use(fs)
        defer { MemoryFileSystem.use(nil); SecureFileTesting.faultInjector = nil }
        let path = env.path("memory-file")
        let data = (0..<10_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        var f = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services)
        XCTAssertGreaterThanOrEqual(f.fileDescriptor, MemoryFileSystem.firstDescriptor)
        try f.write(data)
        try f.close()
        XCTAssertEqual(access(path, F_OK), -1, "a memory file reached the disk")
        XCTAssertGreaterThan(fs.contents(path)?.count ?? 0, data.count)
        f = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
        XCTAssertEqual(try f.readAll(), data)
        try f.close()

        XCTAssertThrowsError(try SecureFile.open(env.path("missing"), flags: O_RDONLY, services: env.services)) {
            XCTAssertEqual(($0 as? SecureFileError)?.errno, ENOENT)
        }
        XCTAssertThrowsError(try SecureFile.open(path, flags: O_RDWR | O_CREAT | O_EXCL, services: env.services)) {
            XCTAssertEqual(($0 as? SecureFileError)?.errno, EEXIST)
        }

        SecureFileTesting.faultInjector = { $0 == .pwrite ? .fail(ENOSPC) : nil }
        f = try SecureFile.open(path, flags: O_RDWR, services: env.services, buffering: .writeThrough)
        XCTAssertThrowsError(try f.pwrite([1, 2, 3], at: 0)) { XCTAssertEqual(($0 as? SecureFileError)?.errno, ENOSPC) }
        SecureFileTesting.faultInjector = nil
        try f.close()
        f = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
        XCTAssertEqual(try f.readAll(), data)
        try f.close()

        f = try SecureFile.open(env.path("other"), flags: O_RDWR | O_CREAT, services: env.services)
        try f.close()
        // The engine closes a file's own descriptor at the last close, though the closed handle `f`
        // is still referenced (until stop 44 it did when the last handle was released: count 1).
        XCTAssertEqual(fs.openDescriptorCount, 0)
    }

    func testTheKernelIsBackWhenSwitchedOff() throws {
        let env = try TestEnvironment()
        let fs = MemoryFileSystem()
        MemoryFileSystem.use(fs)
        try { () throws in
            let f = try SecureFile.open(env.path("x"), flags: O_RDWR | O_CREAT, services: env.services)
            try f.write([1, 2, 3])
            try f.close()
        }()
        XCTAssertEqual(fs.openDescriptorCount, 0, "a memory descriptor outlived its files")
        MemoryFileSystem.use(nil)
        let path = env.path("memory-file")
        let f = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: env.services)
        XCTAssertLessThan(f.fileDescriptor, MemoryFileSystem.firstDescriptor)
        try f.close()
        XCTAssertEqual(access(path, F_OK), 0, "the kernel is not back")
    }
}
