#if canImport(Glibc)
import Glibc
#endif
import XCTest
import ACSecureTestSupport
import ACSecureServices
import ACSystemCalls
@testable import ACSecureFileCore

/// The same random sequence of operations on a plain file (POSIX calls) and on a secure file (the
/// engine) must give the same results, errors and bytes.
final class DifferentialTests: XCTestCase {
    /// One mirrored pair of descriptors.
    struct Pair { var plain: Int32; var secure: SecureFile; var flags: Int32 }

    enum Outcome: Equatable, CustomStringConvertible {
        case value(Int64)
        case bytes([UInt8])
        case failure(Int32)
        var description: String {
            switch self {
            case .value(let v): return "value(\(v))"
            case .bytes(let b): return "bytes(\(b.count): \(b.prefix(8))…)"
            case .failure(let e): return "errno \(e) (\(String(cString: strerror(e))))"
            }
        }
    }

    func plainResult(_ r: Int) -> Outcome { r < 0 ? .failure(errno) : .value(Int64(r)) }
    func secureResult(_ body: () throws -> Int64) -> Outcome {
        do { return .value(try body()) } catch let e as SecureFileError { return .failure(e.errno) } catch { return .failure(-1) }
    }

    /// Offsets that hit chunk boundaries, their neighbours, and holes.
    func offset(_ rng: inout SplitMix64, chunk: Int64 = 4096) -> Int64 {
        switch Int.random(in: 0..<10, using: &rng) {
        case 0..<4: return chunk * Int64.random(in: 0...12, using: &rng) + Int64.random(in: -2...2, using: &rng)
        case 4..<8: return Int64.random(in: 0...(chunk * 8), using: &rng)
        case 8: return Int64.random(in: 0...(chunk * 40), using: &rng)
        default: return Int64.random(in: -3...3, using: &rng)
        }
    }

    func length(_ rng: inout SplitMix64, chunk: Int = 4096) -> Int {
        switch Int.random(in: 0..<10, using: &rng) {
        case 0..<3: return Int.random(in: 0...200, using: &rng)
        case 3..<5: return chunk + Int.random(in: -2...2, using: &rng)
        case 5..<7: return Int.random(in: 0...(chunk * 3), using: &rng)
        case 7: return chunk * Int.random(in: 1...5, using: &rng)
        case 8: return Int.random(in: 0...(chunk * 20), using: &rng)
        default: return Int.random(in: 1...3, using: &rng)
        }
    }

    /// Paranoid mode: after every step, flush everything and read the disk through independent state.
    /// `writeBack`: three handles in four are opened with write-back buffering (the others write
    /// through), so buffered runs meet reads, writes and truncations of both kinds of handle.
    /// `readCache`: three handles in four ask for a read cache of that many bytes (the file gets it
    /// while any of them is open), and operation 13 locks and unlocks services (which drops it).
    func runSequence(seed: UInt64, operations: Int, env: TestEnvironment, paranoid: SecureServices? = nil,
                     writeBack: Bool = false, readCache: Int = 0) throws {
        var rng = SplitMix64(seed: seed)
        let plainPath = env.path("plain-\(seed)")
        // The secure file's name is not UTF-8 (Latin-1 "é", a stray 0xFF): names are bytes.
        let securePath = BytePath(bytes: Array(env.path("secure-\(seed)-").utf8) + [0xE9, 0xFF])!
        var pairs: [Pair] = []
        var log: [String] = []
        defer {
            for p in pairs { close(p.plain); try? p.secure.close() }
            unlink(plainPath); _ = Sys.unlink(securePath)
        }
        func check(_ a: Outcome, _ b: Outcome, _ what: String) {
            log.append("\(what) -> \(a)")
            if a != b {
                XCTFail("seed \(seed): \(what): plain \(a), secure \(b)\n" + log.suffix(25).joined(separator: "\n"))
            }
        }
        func openPair(_ flags: Int32) {
            let p = open(plainPath, flags, 0o644)
            let buffering: SecureFile.Buffering = writeBack && Int.random(in: 0..<4, using: &rng) != 0 ? .writeBack : .environmentDefault
            let cache: SecureFile.ReadCache = readCache > 0 && Int.random(in: 0..<4, using: &rng) != 0 ? .bytes(readCache) : .off
            let s = secureResult { () throws -> Int64 in
                let f = try SecureFile.open(securePath, flags: flags, mode: 0o644, services: env.services, buffering: buffering,
                                            readCache: cache)
                pairs.append(Pair(plain: p, secure: f, flags: flags))
                return 0
            }
            if p < 0 {
                check(.failure(errno), s, "open(\(String(flags, radix: 8)))")
            } else {
                check(.value(0), s, "open(\(String(flags, radix: 8)))")
                if case .failure = s { close(p) }
            }
        }
        openPair(O_RDWR | O_CREAT)

        for step in 0..<operations {
            if pairs.isEmpty || Int.random(in: 0..<40, using: &rng) == 0 {
                let modes: [Int32] = [O_RDWR, O_RDWR, O_RDONLY, O_WRONLY, O_RDWR | O_APPEND, O_WRONLY | O_APPEND, O_RDWR | O_TRUNC,
                                      O_RDONLY | O_TRUNC, O_RDWR | O_CREAT | O_EXCL]
                if pairs.count < 4 { openPair(modes.randomElement(using: &rng)!) }
                continue
            }
            let i = Int.random(in: 0..<pairs.count, using: &rng)
            let pair = pairs[i]
            let op = Int.random(in: 0..<15, using: &rng)
            switch op {
            case 0, 1: // write
                let data = randomBytes(length(&rng), &rng)
                let a = plainResult(data.withUnsafeBytes { write(pair.plain, $0.baseAddress, $0.count) })
                let b = secureResult { Int64(try pair.secure.write(data)) }
                check(a, b, "\(step) write[\(i)](\(data.count))")
            case 2, 3: // pwrite
                let data = randomBytes(length(&rng), &rng)
                let at = offset(&rng)
                let a = plainResult(data.withUnsafeBytes { Glibc.pwrite(pair.plain, $0.baseAddress, $0.count, off_t(at)) })
                let b = secureResult { Int64(try pair.secure.pwrite(data, at: at)) }
                check(a, b, "\(step) pwrite[\(i)](\(data.count) @ \(at))")
            case 4, 5: // read
                let n = length(&rng)
                var pb = [UInt8](repeating: 0, count: n), sb = [UInt8](repeating: 0, count: n)
                let a = plainResult(pb.withUnsafeMutableBytes { read(pair.plain, $0.baseAddress, $0.count) })
                let b = secureResult { Int64(try sb.withUnsafeMutableBytes { try pair.secure.read(into: $0) }) }
                check(a, b, "\(step) read[\(i)](\(n))")
                if case .value(let k) = a, a == b { check(.bytes(Array(pb[0..<Int(k)])), .bytes(Array(sb[0..<Int(k)])), "\(step) read bytes") }
            case 6, 7: // pread
                let n = length(&rng)
                let at = offset(&rng)
                var pb = [UInt8](repeating: 0, count: n), sb = [UInt8](repeating: 0, count: n)
                let a = plainResult(pb.withUnsafeMutableBytes { Glibc.pread(pair.plain, $0.baseAddress, $0.count, off_t(at)) })
                let b = secureResult { Int64(try sb.withUnsafeMutableBytes { try pair.secure.pread(into: $0, at: at) }) }
                check(a, b, "\(step) pread[\(i)](\(n) @ \(at))")
                if case .value(let k) = a, a == b { check(.bytes(Array(pb[0..<Int(k)])), .bytes(Array(sb[0..<Int(k)])), "\(step) pread bytes") }
            case 8: // lseek
                let whence = [SEEK_SET, SEEK_CUR, SEEK_END].randomElement(using: &rng)!
                let off = whence == SEEK_SET ? offset(&rng) : Int64.random(in: -9000...9000, using: &rng)
                let a = plainResult(Int(lseek(pair.plain, off_t(off), whence)))
                let b = secureResult { try pair.secure.seek(off, whence: whence) }
                check(a, b, "\(step) lseek[\(i)](\(off), \(whence))")
            case 9: // ftruncate
                let len = Int.random(in: 0..<12, using: &rng) == 0 ? -1 : offset(&rng)
                let a = plainResult(Int(ftruncate(pair.plain, off_t(len))))
                let b = secureResult { try pair.secure.truncate(to: len); return 0 }
                check(a, b, "\(step) ftruncate[\(i)](\(len))")
            case 10: // fstat
                var st = stat()
                let a: Outcome = fstat(pair.plain, &st) == 0 ? .value(Int64(st.st_size)) : .failure(errno)
                let b = secureResult { Int64(try pair.secure.stat().st_size) }
                check(a, b, "\(step) fstat[\(i)]")
            case 11: // readv / writev with several buffers
                let count = Int.random(in: 1...6, using: &rng)
                let sizes = (0..<count).map { _ in Int.random(in: 0...5000, using: &rng) }
                if Bool.random(using: &rng) {
                    let datas = sizes.map { randomBytes($0, &rng) }
                    let a: Outcome = {
                        var iov = datas.map { d in iovec(iov_base: UnsafeMutableRawPointer(mutating: d.withUnsafeBytes { $0.baseAddress }), iov_len: d.count) }
                        return plainResult(withExtendedLifetime(datas) { writev(pair.plain, &iov, Int32(iov.count)) })
                    }()
                    let b = secureResult {
                        let bufs = datas.map { d in d.withUnsafeBytes { $0 } }
                        return Int64(try withExtendedLifetime(datas) { try pair.secure.writev(bufs) })
                    }
                    check(a, b, "\(step) writev[\(i)](\(sizes))")
                } else {
                    let total = sizes.reduce(0, +)
                    let pb = UnsafeMutableRawBufferPointer.allocate(byteCount: max(total, 1), alignment: 1)
                    let sb = UnsafeMutableRawBufferPointer.allocate(byteCount: max(total, 1), alignment: 1)
                    defer { pb.deallocate(); sb.deallocate() }
                    var offs = 0
                    var iov: [iovec] = []
                    var sbufs: [UnsafeMutableRawBufferPointer] = []
                    for s in sizes {
                        iov.append(iovec(iov_base: pb.baseAddress! + offs, iov_len: s))
                        sbufs.append(UnsafeMutableRawBufferPointer(start: sb.baseAddress! + offs, count: s))
                        offs += s
                    }
                    let a = plainResult(readv(pair.plain, &iov, Int32(iov.count)))
                    let b = secureResult { Int64(try pair.secure.readv(sbufs)) }
                    check(a, b, "\(step) readv[\(i)](\(sizes))")
                    if case .value(let k) = a, a == b {
                        check(.bytes(Array(pb[0..<Int(k)])), .bytes(Array(sb[0..<Int(k)])), "\(step) readv bytes")
                    }
                }
            case 12: // close
                let a = plainResult(Int(close(pair.plain)))
                let b = secureResult { try pair.secure.close(); return 0 }
                check(a, b, "\(step) close[\(i)]")
                pairs.remove(at: i)
            case 14: // lstat by path sees what open handles have cached
                var st = stat()
                let a: Outcome = lstat(plainPath, &st) == 0 ? .value(Int64(st.st_size)) : .failure(errno)
                let b = secureResult { Int64(try SecureFileSystem.lstat(securePath).st_size) }
                check(a, b, "\(step) lstat")
            case 13 where readCache > 0: // services lock (write-back runs written, caches wiped) and unlock
                env.services.lock()
                try env.services.unlock(passcode: nil)
                log.append("\(step) lock+unlock")
            default: // fsync
                let a = plainResult(Int(fsync(pair.plain)))
                let b = secureResult { try pair.secure.sync(); return 0 }
                check(a, b, "\(step) fsync[\(i)]")
            }
            if let independent = paranoid, !pairs.isEmpty {
                for p in pairs { try? p.secure.sync() }
                let expected = readWholeFile(plainPath)
                let f = try SecureFile.open(securePath, flags: O_RDONLY, services: independent)
                let got = try f.readAll()
                try f.close()
                if got != expected {
                    XCTFail("seed \(seed) step \(step): disk has \(got.count) bytes, plain \(expected.count); first difference at \(zip(got, expected).enumerated().first { $0.element.0 != $0.element.1 }?.offset ?? -1)\n" + log.suffix(12).joined(separator: "\n"))
                    return
                }
            }
        }
        for p in pairs { close(p.plain); try p.secure.close() }
        pairs.removeAll()
        // What reached the disk, read back through a fresh state, equals the plain file.
        let expected = readWholeFile(plainPath)
        let f = try SecureFile.open(securePath, flags: O_RDONLY, services: env.services)
        let got = try f.readAll()
        try f.close()
        XCTAssertEqual(got.count, expected.count, "seed \(seed): final size")
        if got != expected {
            let firstDiff = zip(got, expected).enumerated().first { $0.element.0 != $0.element.1 }?.offset
            XCTFail("seed \(seed): final bytes differ at \(firstDiff ?? -1)\n" + log.suffix(25).joined(separator: "\n"))
        }
    }

    func testRandomSequencesMatchPOSIX() throws {
        let env = try TestEnvironment()
        let sequences = Int(ProcessInfoless.env("ACSECURE_DIFF_SEQUENCES") ?? "") ?? 1500
        let base = UInt64(ProcessInfoless.env("ACSECURE_DIFF_SEED") ?? "") ?? 1
        for s in 0..<UInt64(sequences) {
            try runSequence(seed: base + s, operations: 60, env: env)
            if testRun?.failureCount ?? 0 > 0 { break }
        }
    }

    /// Every step's disk state, read through a second, independent services instance on the same store.
    func testDiskStateAfterEveryStep() throws {
        let env = try TestEnvironment()
        let independent = try SecureServices(appID: "com.example.tests", storeDirectory: env.directory + "/store", argonCost: .minimum)
        for s in 0..<UInt64(60) {
            try runSequence(seed: 5_000 + s, operations: 80, env: env, paranoid: independent)
            if testRun?.failureCount ?? 0 > 0 { break }
        }
    }

    /// The same sequences with write-back handles: identical results and bytes, before and after
    /// close and reopen.
    func testRandomSequencesMatchPOSIXWithWriteBack() throws {
        let env = try TestEnvironment()
        let sequences = Int(ProcessInfoless.env("ACSECURE_DIFF_SEQUENCES") ?? "") ?? 800
        let base = UInt64(ProcessInfoless.env("ACSECURE_DIFF_SEED") ?? "") ?? 1
        for s in 0..<UInt64(sequences) {
            try runSequence(seed: 2_000_000 + base + s, operations: 80, env: env, writeBack: true)
            if testRun?.failureCount ?? 0 > 0 { break }
        }
        for s in 0..<UInt64(10) {
            try runSequence(seed: 3_000_000 + s, operations: 800, env: env, writeBack: true)
            if testRun?.failureCount ?? 0 > 0 { break }
        }
    }

    /// Write-back: after every step, sync every handle and read the disk through independent state.
    func testDiskStateAfterEveryStepWithWriteBack() throws {
        let env = try TestEnvironment()
        let independent = try SecureServices(appID: "com.example.tests", storeDirectory: env.directory + "/store", argonCost: .minimum)
        for s in 0..<UInt64(40) {
            try runSequence(seed: 4_000_000 + s, operations: 80, env: env, paranoid: independent, writeBack: true)
            if testRun?.failureCount ?? 0 > 0 { break }
        }
    }

    /// With read caches: 64 KiB (16 chunks, so chunks of one set keep evicting each other) and
    /// 1 MiB (everything fits), with and without write-back handles.
    func testRandomSequencesMatchPOSIXWithReadCache() throws {
        let env = try TestEnvironment()
        let sequences = Int(ProcessInfoless.env("ACSECURE_DIFF_SEQUENCES") ?? "") ?? 800
        let base = UInt64(ProcessInfoless.env("ACSECURE_DIFF_SEED") ?? "") ?? 1
        for s in 0..<UInt64(sequences) {
            try runSequence(seed: 6_000_000 + base + s, operations: 80, env: env, writeBack: s % 2 == 1,
                            readCache: s % 4 < 2 ? 64 << 10 : 1 << 20)
            if testRun?.failureCount ?? 0 > 0 { break }
        }
        for s in 0..<UInt64(10) {
            try runSequence(seed: 7_000_000 + s, operations: 800, env: env, writeBack: s % 2 == 1, readCache: 64 << 10)
            if testRun?.failureCount ?? 0 > 0 { break }
        }
    }

    /// Read caches: after every step, sync every handle and read the disk through independent state.
    func testDiskStateAfterEveryStepWithReadCache() throws {
        let env = try TestEnvironment()
        let independent = try SecureServices(appID: "com.example.tests", storeDirectory: env.directory + "/store", argonCost: .minimum)
        for s in 0..<UInt64(40) {
            try runSequence(seed: 8_000_000 + s, operations: 80, env: env, paranoid: independent, writeBack: s % 2 == 1,
                            readCache: 64 << 10)
            if testRun?.failureCount ?? 0 > 0 { break }
        }
    }

    func testLongSequencesMatchPOSIX() throws {
        let env = try TestEnvironment()
        for s in 0..<UInt64(20) {
            try runSequence(seed: 1_000_000 + s, operations: 800, env: env)
            if testRun?.failureCount ?? 0 > 0 { break }
        }
    }
}

enum ProcessInfoless {
    static func env(_ name: String) -> String? { getenv(name).map { String(cString: $0) } }
}
