#if canImport(Glibc)
import Glibc
#endif
import Foundation
import XCTest
import ACCrypto
import CACSecureFile
import ACSecureFileCore
import ACSecureServices
@testable import ACSecureFileCAPI

/// Calls the exported C functions exactly as a C program would (Swift cannot call the variadic
/// `ACSecureFileOpen`, so it uses the non-variadic entry point the C shim forwards to).
final class ACSecureFileCAPITests: CAPITestCase {
    override class var appID: String { "capi-tests" }

    private func path(_ name: String) -> String { directory + "/" + name }

    private func open(_ name: String, _ flags: Int32, _ mode: mode_t = 0o600) -> Int32 {
        ACSecureFile_openWithMode(path(name), flags, mode)
    }

    /// Runs `call`, then checks it failed with `expectedErrno` and (for a descriptor) `ace`.
    private func assertFails<R: BinaryInteger>(_ call: @autoclosure () -> R, errno expectedErrno: Int32, ace: ACError? = nil,
                                               fd: Int32? = nil, file: StaticString = #filePath, line: UInt = #line) {
        errno = 0
        let result = call()
        let e = errno
        XCTAssertEqual(result, -1, "return value", file: file, line: line)
        XCTAssertEqual(e, expectedErrno, "errno \(e) (\(String(cString: strerror(e))))", file: file, line: line)
        if let fd, let ace {
            XCTAssertEqual(ACSecureFileLastError(fd), Int32(ace.rawValue), "ACSecureFileLastError", file: file, line: line)
        }
    }

    // MARK: descriptors

    func testRoundTripAndLastErrorIsClearedBySuccess() {
        let fd = open("a", O_RDWR | O_CREAT | O_EXCL)
        XCTAssertGreaterThanOrEqual(fd, 0)
        let text = Array("hello, secure world".utf8)
        XCTAssertEqual(text.withUnsafeBytes { ACSecureFileWrite(fd, $0.baseAddress, $0.count) }, text.count)
        assertFails(ACSecureFileLseek(fd, 0, 99), errno: EINVAL, ace: ACE_INVALID_ARG, fd: fd)
        XCTAssertEqual(ACSecureFileLseek(fd, 7, SEEK_SET), 7)
        XCTAssertEqual(ACSecureFileLastError(fd), Int32(ACE_NO_ERROR.rawValue))
        var out = [UInt8](repeating: 0, count: 64)
        XCTAssertEqual(out.withUnsafeMutableBytes { ACSecureFileRead(fd, $0.baseAddress, $0.count) }, text.count - 7)
        XCTAssertEqual(Array(out[0..<(text.count - 7)]), Array(text[7...]))
        var st = stat()
        XCTAssertEqual(ACSecureFstat(fd, &st), 0)
        XCTAssertEqual(st.st_size, off_t(text.count))
        XCTAssertEqual(ACSecureFileClose(fd), 0)
        XCTAssertEqual(ACSecureLstat(path("a"), &st), 0)
        XCTAssertEqual(st.st_size, off_t(text.count))
    }

    func testDescriptorIsTheKernelDescriptorAndCloseForgetsIt() {
        let fd = open("k", O_RDWR | O_CREAT)
        XCTAssertGreaterThanOrEqual(fd, 0)
        XCTAssertGreaterThanOrEqual(fcntl(fd, F_GETFD), 0, "a real kernel descriptor")
        XCTAssertNotNil(DescriptorTable.shared.lookup(fd))
        XCTAssertEqual(ACSecureFileClose(fd), 0)
        XCTAssertNil(DescriptorTable.shared.lookup(fd))
        XCTAssertEqual(fcntl(fd, F_GETFD), -1, "the kernel descriptor is closed too")
        assertFails(ACSecureFileClose(fd), errno: EBADF)
        assertFails(ACSecureFileLastError(fd), errno: EBADF)
        assertFails(ACSecureFileWrite(fd, "x", 1), errno: EBADF)
        // The kernel hands out the lowest free number again; it names the new file only.
        let again = open("k", O_RDONLY)
        XCTAssertEqual(again, fd)
        XCTAssertEqual(ACSecureFileLastError(again), Int32(ACE_NO_ERROR.rawValue))
        XCTAssertEqual(ACSecureFileClose(again), 0)
    }

    /// Starts `body` on a thread of its own; the function returned waits until that thread has
    /// exited (its thread-specific data destroyed).
    private func startThread(_ body: @escaping () -> Void) -> () -> Void {
        final class Box { let body: () -> Void; init(_ body: @escaping () -> Void) { self.body = body } }
        var thread = pthread_t()
        let box = Unmanaged.passRetained(Box(body)).toOpaque()
        XCTAssertEqual(pthread_create(&thread, nil, { raw in
            Unmanaged<Box>.fromOpaque(raw!).takeRetainedValue().body()
            return nil
        }, box), 0)
        return { XCTAssertEqual(pthread_join(thread, nil), 0) }
    }

    /// How many of this process's descriptors are open on the file at `path` (/proc/self/fd, by
    /// device and inode: a file the engine created reads there as "#inode (deleted)").
    private func openDescriptors(of path: String) -> Int {
        var file = stat()
        guard stat(path, &file) == 0, let names = try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd") else { return -1 }
        return names.filter { name in
            var st = stat()
            return stat("/proc/self/fd/" + name, &st) == 0 && st.st_dev == file.st_dev && st.st_ino == file.st_ino
        }.count
    }

    /// Each thread remembers the descriptor of its last call (`LookupCache`): a close or an open on
    /// another thread makes it look again, so after a close its calls fail with EBADF and, once
    /// the kernel hands the number to another file, they reach that file, never the closed one.
    func testAThreadsCachedLookupFollowsClosesAndReuseOnOtherThreads() throws {
        let fd = open("first", O_RDWR | O_CREAT)
        let toWorker = DispatchSemaphore(value: 0), toMain = DispatchSemaphore(value: 0)
        let results = LockedValue<[(Int, Int32)]>([])
        Thread.detachNewThread {
            for _ in 0..<3 {
                toWorker.wait()
                errno = 0
                let n = ACSecureFileWrite(fd, "ab", 2)
                let e = errno
                results.withLock { $0.append((n, e)) }
                toMain.signal()
            }
        }
        toWorker.signal(); toMain.wait()  // cached by the worker
        XCTAssertEqual(ACSecureFileClose(fd), 0)
        toWorker.signal(); toMain.wait()  // after the close
        let second = open("second", O_RDWR | O_CREAT)
        XCTAssertEqual(second, fd, "the kernel reuses the lowest number")
        toWorker.signal(); toMain.wait()  // now the number names "second"
        let r = results.withLock { $0 }
        XCTAssertEqual(r.map(\.0), [2, -1, 2])
        XCTAssertEqual(r[1].1, EBADF)
        var st = stat()
        XCTAssertEqual(ACSecureFstat(second, &st), 0)
        XCTAssertEqual(st.st_size, 2, "the third write reached the file that has the number now")
        XCTAssertEqual(ACSecureFileClose(second), 0)
        XCTAssertEqual(ACSecureLstat(path("first"), &st), 0)
        XCTAssertEqual(st.st_size, 2, "nothing reached the closed file after its close")
    }

    /// The cache holds the entry of a closed descriptor until its thread looks up another one or
    /// exits (without its descriptor: the engine's own closes at the last close); the closing
    /// thread's own cache lets go at the close.
    func testCachedEntriesAreReleasedAtCloseAndAtThreadExit() throws {
        weak var entry: DescriptorTable.Entry?
        var fd = open("a", O_RDWR | O_CREAT)
        XCTAssertEqual(ACSecureFileWrite(fd, "x", 1), 1)
        entry = DescriptorTable.shared.lookup(fd)
        XCTAssertNotNil(entry)
        XCTAssertEqual(ACSecureFileClose(fd), 0)
        XCTAssertNil(entry, "the closing thread's cache let go")

        fd = open("b", O_RDWR | O_CREAT)
        entry = DescriptorTable.shared.lookup(fd)
        let opened = fd
        let used = DispatchSemaphore(value: 0), closed = DispatchSemaphore(value: 0)
        let join = startThread {
            XCTAssertEqual(ACSecureFileWrite(opened, "y", 1), 1)
            used.signal()
            closed.wait()
        }
        used.wait()
        XCTAssertEqual(openDescriptors(of: path("b")), 2, "the caller's and the engine's own")
        XCTAssertEqual(ACSecureFileClose(fd), 0)
        XCTAssertNotNil(entry, "the worker's cache still holds it")
        XCTAssertEqual(openDescriptors(of: path("b")), 0, "a closed file held by a cache holds no descriptor")
        closed.signal()
        join()
        XCTAssertNil(entry, "released when the worker exited")
    }

    /// The table indexes descriptors below `directSlots` and hashes the others: the same answers
    /// on both sides of the boundary, for growth, replacement (returns the old entry), removal and
    /// the count.
    func testDescriptorTableStateOnBothSidesOfItsDirectSlots() throws {
        let fds = [open("t1", O_RDWR | O_CREAT), open("t2", O_RDWR | O_CREAT)]
        defer { for fd in fds { XCTAssertEqual(ACSecureFileClose(fd), 0) } }
        let a = try XCTUnwrap(DescriptorTable.shared.lookup(fds[0]))
        let b = try XCTUnwrap(DescriptorTable.shared.lookup(fds[1]))
        let edge = DescriptorTable.directSlots
        var state = DescriptorTable.State()
        let numbers: [Int32] = [0, 3, 1000, edge - 1, edge, edge + 1, 1 << 20, .max]
        for fd in numbers {
            XCTAssertNil(state.entry(fd))
            XCTAssertNil(state.set(fd, a))
            XCTAssertTrue(state.entry(fd) === a, "fd \(fd)")
        }
        XCTAssertEqual(state.count, numbers.count)
        XCTAssertLessThanOrEqual(state.direct.count, Int(edge))
        for fd in numbers {
            XCTAssertTrue(state.set(fd, b) === a, "fd \(fd) replaced")
            XCTAssertTrue(state.entry(fd) === b)
        }
        XCTAssertEqual(state.count, numbers.count)
        for fd in numbers {
            XCTAssertTrue(state.set(fd, nil) === b, "fd \(fd) removed")
            XCTAssertNil(state.entry(fd))
            XCTAssertNil(state.set(fd, nil))
        }
        XCTAssertEqual(state.count, 0)
        XCTAssertNil(state.entry(-1))
        XCTAssertNil(state.entry(edge + 2))
    }

    /// The descriptor has the flags the caller asked for: not the O_NONBLOCK the engine opens with
    /// (so a FIFO cannot block the open), close-on-exec only with O_CLOEXEC. When setting them
    /// fails, the open fails with that errno and keeps no descriptor (it ignored the failure).
    func testDescriptorFlagsAreTheCallersAndAFailureToSetThemFailsTheOpen() {
        for (flags, cloexec) in [(O_RDWR | O_CREAT, false), (O_RDONLY, false), (O_RDWR | O_CLOEXEC, true)] {
            let fd = open("flags", flags)
            XCTAssertGreaterThanOrEqual(fd, 0, String(cString: strerror(errno)))
            XCTAssertEqual(fcntl(fd, F_GETFL) & O_NONBLOCK, 0, "O_NONBLOCK cleared (flags 0o\(String(flags, radix: 8)))")
            XCTAssertEqual(fcntl(fd, F_GETFD) & FD_CLOEXEC != 0, cloexec, "FD_CLOEXEC (flags 0o\(String(flags, radix: 8)))")
            XCTAssertEqual(ACSecureFileClose(fd), 0)
        }
        let entries = DescriptorTable.shared.count
        for failing in 0..<2 {  // the F_SETFL that clears O_NONBLOCK, then the F_SETFD that clears FD_CLOEXEC
            let probe = Glibc.open("/dev/null", O_RDONLY)  // the lowest free number: the one a leak would take
            XCTAssertEqual(Glibc.close(probe), 0)
            let calls = LockedValue(0)
            SecureFileTesting.faultInjector = { call in
                guard call == .fcntl else { return nil }
                return calls.withLock { n in defer { n += 1 }; return n == failing ? .fail(EINVAL) : nil }
            }
            assertFails(open("flags", O_RDWR), errno: EINVAL)
            SecureFileTesting.faultInjector = nil
            XCTAssertEqual(DescriptorTable.shared.count, entries, "no table entry for the failed open (fcntl #\(failing))")
            XCTAssertEqual(fcntl(probe, F_GETFD), -1, "the failed open released its kernel descriptor (fcntl #\(failing))")
        }
        let fd = open("flags", O_RDWR)
        XCTAssertGreaterThanOrEqual(fd, 0)
        XCTAssertEqual(ACSecureFileClose(fd), 0)
    }

    /// O_DSYNC / O_SYNC are accepted and sync each write before it returns (SynchronizedWriteTests
    /// counts the calls for every mode); a failed fdatasync fails the write with its errno.
    func testSynchronousOpenFlagsSyncEachWrite() {
        for (flag, call) in [(O_DSYNC, SecureFileTesting.Call.fdatasync), (O_SYNC, .fsync)] {
            let fd = open("synchronous", O_RDWR | O_CREAT | flag)
            XCTAssertGreaterThanOrEqual(fd, 0, String(cString: strerror(errno)))
            let syncs = LockedValue(0)
            SecureFileTesting.faultInjector = { c in
                if c == call { syncs.withLock { $0 += 1 } }
                return nil
            }
            XCTAssertEqual(ACSecureFileWrite(fd, "abc", 3), 3)
            XCTAssertEqual(ACSecureFilePwrite(fd, "de", 2, 3), 2)
            XCTAssertEqual(ACSecureFtruncate(fd, 4), 0)
            SecureFileTesting.faultInjector = nil
            // The shrink also puts its tail copy on the device before it rewrites the chunk, and the
            // shortened chunk before the cut (two ordering fdatasyncs, CutOrderTests).
            XCTAssertEqual(syncs.withLock { $0 }, flag == O_DSYNC ? 5 : 3, "one \(call) per write and truncate")
            SecureFileTesting.faultInjector = { c in c == call ? .fail(EIO) : nil }
            assertFails(ACSecureFileWrite(fd, "f", 1), errno: EIO)
            SecureFileTesting.faultInjector = nil
            XCTAssertEqual(ACSecureFileClose(fd), 0)
        }
    }

    /// Issue 15, finding 9: no guarded memory left fails the open with ENOMEM (it trapped), adds no
    /// descriptor to the table, keeps no kernel descriptor, and the same open works afterwards.
    /// (Real exhaustion under RLIMIT_AS/RLIMIT_NOFILE: ResourceExhaustionTests.)
    func testOpenWithoutGuardedMemoryFailsWithENOMEMAndLeavesNothingOpen() {
        let entries = DescriptorTable.shared.count
        let probe = Glibc.open("/dev/null", O_RDONLY)  // the lowest free number: the one a leak would take
        XCTAssertEqual(Glibc.close(probe), 0)
        SecureFileTesting.simulateGuardedMemoryExhaustion(true)
        assertFails(open("nomem", O_RDWR | O_CREAT), errno: ENOMEM)
        assertFails(ACSecureServicesUnlock("any"), errno: ENOMEM)
        SecureFileTesting.simulateGuardedMemoryExhaustion(false)
        XCTAssertEqual(DescriptorTable.shared.count, entries, "no table entry for the failed open")
        XCTAssertEqual(fcntl(probe, F_GETFD), -1, "the failed open released its kernel descriptor")
        let fd = open("nomem", O_RDWR | O_CREAT)
        XCTAssertGreaterThanOrEqual(fd, 0, String(cString: strerror(errno)))
        XCTAssertEqual(ACSecureFileWrite(fd, "ok", 2), 2)
        XCTAssertEqual(ACSecureFileClose(fd), 0)
    }

    func testUnknownDescriptorsAreEBADF() {
        var st = stat()
        var byte: UInt8 = 0
        for fd: Int32 in [-1, 0, 1, 2, 77_777] {
            assertFails(ACSecureFileRead(fd, &byte, 1), errno: EBADF)
            assertFails(ACSecureFstat(fd, &st), errno: EBADF)
            assertFails(ACSecureFileLseek(fd, 0, SEEK_SET), errno: EBADF)
            assertFails(ACSecureFtruncate(fd, 0), errno: EBADF)
            assertFails(ACSecureFileLastError(fd), errno: EBADF)
        }
        // As the kernel: a negative offset or length is EINVAL before the descriptor is looked at.
        assertFails(ACSecureFilePread(-1, &byte, 1, -1), errno: EINVAL)
        assertFails(ACSecureFtruncate(-1, -1), errno: EINVAL)
    }

    // MARK: arguments

    func testIovecValidation() {
        let fd = open("v", O_RDWR | O_CREAT)
        var a = [UInt8](repeating: 1, count: 10)
        a.withUnsafeMutableBytes { buf in
            var iov = iovec(iov_base: buf.baseAddress, iov_len: buf.count)
            assertFails(ACSecureFileWritev(fd, &iov, -1), errno: EINVAL, ace: ACE_INVALID_ARG, fd: fd)
            assertFails(ACSecureFileWritev(fd, &iov, 1025), errno: EINVAL, ace: ACE_INVALID_ARG, fd: fd)
            assertFails(ACSecureFileReadv(fd, nil, 1), errno: EFAULT, ace: ACE_INVALID_ARG, fd: fd)
            XCTAssertEqual(ACSecureFileWritev(fd, nil, 0), 0)
            var nullBase = iovec(iov_base: nil, iov_len: 5)
            assertFails(ACSecureFileWritev(fd, &nullBase, 1), errno: EFAULT, ace: ACE_INVALID_ARG, fd: fd)
            var overflow = [iovec(iov_base: buf.baseAddress, iov_len: Int.max), iovec(iov_base: buf.baseAddress, iov_len: 1)]
            assertFails(ACSecureFileWritev(fd, &overflow, 2), errno: EINVAL, ace: ACE_INVALID_ARG, fd: fd)
            // 1024 one-byte iovecs are one write.
            var many = (0..<1024).map { _ in iovec(iov_base: buf.baseAddress, iov_len: 1) }
            XCTAssertEqual(ACSecureFileWritev(fd, &many, 1024), 1024)
        }
        XCTAssertEqual(ACSecureFileClose(fd), 0)
        // Mode before arguments: readv with a bad count on a write-only descriptor is EBADF.
        let wo = open("v", O_WRONLY)
        assertFails(ACSecureFileReadv(wo, nil, -1), errno: EBADF, ace: ACE_READ_ON_WRITEONLY_ERROR, fd: wo)
        assertFails(ACSecureFileRead(wo, nil, 5), errno: EBADF, ace: ACE_READ_ON_WRITEONLY_ERROR, fd: wo)
        XCTAssertEqual(ACSecureFileClose(wo), 0)
    }

    func testNullPointersAreEFAULT() {
        let fd = open("n", O_RDWR | O_CREAT)
        assertFails(ACSecureFileRead(fd, nil, 5), errno: EFAULT, ace: ACE_INVALID_ARG, fd: fd)
        assertFails(ACSecureFileWrite(fd, nil, 5), errno: EFAULT, ace: ACE_INVALID_ARG, fd: fd)
        assertFails(ACSecureFstat(fd, nil), errno: EFAULT, ace: ACE_INVALID_ARG, fd: fd)
        XCTAssertEqual(ACSecureFileRead(fd, nil, 0), 0)
        XCTAssertEqual(ACSecureFileLastError(fd), Int32(ACE_NO_ERROR.rawValue))
        assertFails(ACSecureFile_openWithMode(nil, O_RDONLY, 0), errno: EFAULT)
        assertFails(ACSecureLstat(nil, nil), errno: EFAULT)
        assertFails(ACSecureFileRename(path("n"), nil), errno: EFAULT)
        XCTAssertEqual(ACSecureFileClose(fd), 0)
    }

    /// A count above SSIZE_MAX is EFAULT, as Linux's read(2)/write(2) give it (no buffer is that
    /// large); it was EINVAL (found by FuzzCAPIArguments, fuzz/FailCases/FuzzCAPIArguments/count-above-ssize-max-is-efault).
    /// The descriptor's mode is still checked first.
    func testCountAboveSSizeMaxIsEFAULTAsLinux() {
        let fd = open("huge", O_RDWR | O_CREAT)
        var b = [UInt8](repeating: 0, count: 16)
        let huge = Int(bitPattern: UInt.max), over = Int(bitPattern: UInt(1) << 63)
        assertFails(b.withUnsafeMutableBytes { ACSecureFileRead(fd, $0.baseAddress, huge) }, errno: EFAULT, ace: ACE_INVALID_ARG, fd: fd)
        assertFails(b.withUnsafeMutableBytes { ACSecureFilePread(fd, $0.baseAddress, over, 0) }, errno: EFAULT, ace: ACE_INVALID_ARG, fd: fd)
        assertFails(b.withUnsafeBytes { ACSecureFileWrite(fd, $0.baseAddress, huge) }, errno: EFAULT, ace: ACE_INVALID_ARG, fd: fd)
        assertFails(b.withUnsafeBytes { ACSecureFilePwrite(fd, $0.baseAddress, over, 0) }, errno: EFAULT, ace: ACE_INVALID_ARG, fd: fd)
        XCTAssertEqual(ACSecureFileClose(fd), 0)
        let ro = open("huge", O_RDONLY)
        assertFails(b.withUnsafeBytes { ACSecureFileWrite(ro, $0.baseAddress, huge) }, errno: EBADF, ace: ACE_WRITE_ON_READONLY_ERROR, fd: ro)
        XCTAssertEqual(ACSecureFileClose(ro), 0)
    }


    /// ACSecureFileLastErrorMessage: the calling thread's last failure in words, naming the file;
    /// kept per thread (another thread's failure does not replace it), and as snprintf for sizes.
    func testLastErrorMessageSaysWhyPerThread() {
        /// The calling thread's message.
        func lastMessage() -> (text: String, length: Int) {
            var buffer = [CChar](repeating: 0, count: 512)
            let length = ACSecureFileLastErrorMessage(&buffer, buffer.count)
            return (String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self), length)
        }
        assertFails(open("missing-file", O_RDONLY), errno: ENOENT)
        let (message, length) = lastMessage()
        XCTAssertEqual(length, message.utf8.count)
        XCTAssertTrue(message.contains(path("missing-file")) && message.contains("No such file"), message)
        let done = DispatchSemaphore(value: 0)
        let thread = Thread {
            _ = ACSecureFile_openWithMode("/nonexistent-dir/x", O_RDONLY, 0)
            done.signal()
        }
        thread.start()
        done.wait()
        XCTAssertEqual(lastMessage().text, message, "another thread's failure left this thread's message")
        var small = [CChar](repeating: 0x7F, count: 5)
        XCTAssertEqual(ACSecureFileLastErrorMessage(&small, small.count), length, "the full length, as snprintf")
        XCTAssertEqual(small[4], 0)
        XCTAssertEqual(String(decoding: small.prefix(4).map { UInt8(bitPattern: $0) }, as: UTF8.self), String(message.prefix(4)))
        XCTAssertEqual(ACSecureFileLastErrorMessage(nil, 0), length)
    }

    // MARK: errno of the path calls

    func testOpenErrnoMatchesPOSIX() {
        assertFails(open("missing", O_RDONLY), errno: ENOENT)
        assertFails(ACSecureFile_openWithMode(directory, O_RDONLY, 0), errno: EISDIR)
        let fd = open("e", O_RDWR | O_CREAT)
        XCTAssertEqual(ACSecureFileClose(fd), 0)
        assertFails(open("e", O_RDWR | O_CREAT | O_EXCL), errno: EEXIST)
        assertFails(open("e/x", O_RDONLY), errno: ENOTDIR)
    }

    func testModeIsUsedOnlyWithOCreatAndUmaskApplies() {
        let old = umask(0o022)
        defer { umask(old) }
        let fd = open("m", O_RDWR | O_CREAT, 0o666)
        XCTAssertEqual(ACSecureFileClose(fd), 0)
        var st = stat()
        XCTAssertEqual(lstat(path("m"), &st), 0)
        XCTAssertEqual(st.st_mode & 0o777, 0o644)
    }

    // MARK: secure services

    func testLockGivesNoKeysAndUnlockRestores() {
        let fd = open("l", O_RDWR | O_CREAT)
        XCTAssertEqual(ACSecureFileWrite(fd, "abc", 3), 3)
        XCTAssertEqual(ACSecureServicesGetAvailability(), ACSECURESERVICESAVAILABILITY_AVAILABLE)
        XCTAssertEqual(ACSecureServicesLock(), 0)
        XCTAssertEqual(ACSecureServicesGetAvailability(), ACSECURESERVICESAVAILABILITY_UNAVAILABLE)
        var b = [UInt8](repeating: 0, count: 3)
        assertFails(b.withUnsafeMutableBytes { ACSecureFilePread(fd, $0.baseAddress, 3, 0) }, errno: EACCES,
                    ace: ACE_NO_KEYS_ERROR, fd: fd)
        assertFails(open("l2", O_RDWR | O_CREAT), errno: EACCES)
        XCTAssertEqual(ACSecureServicesUnlock(nil), 0)
        XCTAssertEqual(b.withUnsafeMutableBytes { ACSecureFilePread(fd, $0.baseAddress, 3, 0) }, 3)
        XCTAssertEqual(b, Array("abc".utf8))
        XCTAssertEqual(ACSecureFileClose(fd), 0)
    }

    func testPasscodeErrors() {
        XCTAssertEqual(ACSecureServicesSetPasscode(nil, "pw"), 0)
        XCTAssertEqual(ACSecureServicesLock(), 0)
        assertFails(ACSecureServicesUnlock("nope"), errno: EACCES)
        XCTAssertEqual(ACSecureServicesUnlock("pw"), 0)
        assertFails(ACSecureServicesSetPasscode("nope", nil), errno: EACCES)
        XCTAssertEqual(ACSecureServicesSetPasscode("pw", nil), 0)
        assertFails(ACSecureServicesStart("", directory + "/store"), errno: EINVAL)
        assertFails(ACSecureFileOpenWithGroupID(path("g"), O_RDWR | O_CREAT, 0o600, ""), errno: EINVAL)
    }

    func testGroupFileIsSharedBetweenApps() {
        let fd = ACSecureFileOpenWithGroupID(path("g"), O_RDWR | O_CREAT, 0o600, "team")
        XCTAssertEqual(ACSecureFileWrite(fd, "shared", 6), 6)
        XCTAssertEqual(ACSecureFileClose(fd), 0)
        XCTAssertEqual(ACSecureServicesStart("other-app", directory + "/store"), 0)
        let other = ACSecureFileOpenWithGroupID(path("g"), O_RDONLY, 0, "team")
        var b = [UInt8](repeating: 0, count: 16)
        XCTAssertEqual(b.withUnsafeMutableBytes { ACSecureFileRead(other, $0.baseAddress, $0.count) }, 6)
        XCTAssertEqual(ACSecureFileClose(other), 0)
    }

    // MARK: threads

    /// Each thread has its own descriptor, alternating failing and succeeding calls: the last
    /// error read right after a call is always that call's.
    func testLastErrorIsPerDescriptorAcrossThreads() {
        let threads = 8
        let fds = (0..<threads).map { open("t\($0)", O_RDONLY | O_CREAT) }
        let mismatches = LockedValue(0)
        DispatchQueue.concurrentPerform(iterations: threads) { t in
            let fd = fds[t]
            var byte: UInt8 = 0
            for i in 0..<2000 {
                if (i + t) % 2 == 0 {
                    let r = ACSecureFileWrite(fd, &byte, 1)
                    if r != -1 || ACSecureFileLastError(fd) != Int32(ACE_WRITE_ON_READONLY_ERROR.rawValue) {
                        mismatches.withLock { $0 += 1 }
                    }
                } else {
                    let r = ACSecureFileRead(fd, &byte, 1)
                    if r != 0 || ACSecureFileLastError(fd) != Int32(ACE_NO_ERROR.rawValue) {
                        mismatches.withLock { $0 += 1 }
                    }
                }
            }
        }
        XCTAssertEqual(mismatches.withLock { $0 }, 0)
        for fd in fds { XCTAssertEqual(ACSecureFileClose(fd), 0) }
        XCTAssertEqual(DescriptorTable.shared.count, 0)
    }

    func testConcurrentOpenCloseNeverSeesStaleState() {
        let fd = open("c", O_RDWR | O_CREAT)
        XCTAssertEqual(ACSecureFileClose(fd), 0)
        let failures = LockedValue(0)
        let shared = path("c")
        DispatchQueue.concurrentPerform(iterations: 4) { _ in
            for _ in 0..<300 {
                let fd = ACSecureFile_openWithMode(shared, O_RDWR, 0)
                var st = stat()
                if fd < 0 || ACSecureFstat(fd, &st) != 0 || ACSecureFileClose(fd) != 0 {
                    failures.withLock { $0 += 1 }
                }
            }
        }
        XCTAssertEqual(failures.withLock { $0 }, 0)
        XCTAssertEqual(DescriptorTable.shared.count, 0)
    }
}
