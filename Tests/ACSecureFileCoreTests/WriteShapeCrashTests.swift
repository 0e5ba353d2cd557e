#if canImport(Glibc)
import Glibc
#endif
import XCTest
import ACSecureServices
import ACSystemCalls
import ACSecureTestSupport
@testable import ACSecureFileCore

/// Every write shape (Tests/ACSecureCrashChild `CrashShape.all`: writes, appends, holes, overwrites,
/// shrinks and growths, O_TRUNC, O_APPEND, writev, O_DSYNC, coordinated mode, write-back flushes),
/// in a real child process that is SIGKILLed right before each system call the engine makes from
/// the operation's open on, and with each `pwrite` torn after every whole 512-byte sector.
///
/// After each kill the file must open at its old length, its new one, or a short write between;
/// every chunk inside that length must authenticate and read as that state (no chunk is left
/// unreadable, no byte acknowledged before is lost); bytes after the end must be reported at open;
/// and the file must accept a change. No wrong byte is ever returned.
///
/// docs/FORMAT.md "What a crash can cost": a *torn* `pwrite` (a power loss, not a kill between
/// calls) of an in-place rewrite may cost that chunk's other bytes; the torn sweep checks that such
/// a loss stays inside a chunk the call wrote and is reported as an error, not as data.
final class WriteShapeCrashTests: XCTestCase {
    struct Shape { var name: String; var before: Int; var kind: String; var offset: Int; var count: Int }

    static let chunk = 4096

    func runChild(_ args: [String]) throws -> (lines: [String], killed: Bool) {
        let (status, output) = try runCrashChild(args)
        return (output.split(separator: "\n").map(String.init), status.signal == SIGKILL)
    }

    func shapes() throws -> [Shape] {
        try runChild(["shapes"]).lines.map { line in
            let f = line.split(separator: " ")
            return Shape(name: String(f[0]), before: Int(f[1])!, kind: String(f[2]), offset: Int(f[3])!, count: Int(f[4])!)
        }
    }

    /// The contents a crash may leave: the file before the operation, after it, and the states in
    /// between that are a short write of it — an emptied file (an O_TRUNC open that completed), the
    /// file grown to a chunk boundary with the new bytes below it (a growth's first run or batch),
    /// cut to a chunk boundary (a cut inside a chunk's first step), the call's bytes up to a chunk
    /// boundary inside the old length (a kill that tore the rewrite of that boundary's next chunk,
    /// whose chunk copy, or old bytes, the next chunk reads). `changed` is what the operation writes.
    /// A state between is the first `count` bytes of `of`.
    func states(_ s: Shape) -> ShapeStates {
        if let known = knownStates[s.name] { return known }
        let computed = computeStates(s)
        knownStates[s.name] = computed
        return computed
    }

    typealias ShapeStates = (old: [UInt8], new: [UInt8], between: [(count: Int, of: [UInt8])], changed: Range<Int>)
    /// `states` of each shape, computed once per test: every kill and tear of a shape checks against
    /// them, and a shape of a megabyte has hundreds of states between.
    private var knownStates: [String: ShapeStates] = [:]

    private func computeStates(_ s: Shape) -> ShapeStates {
        var s = s
        if s.kind == "records-write" && s.count == 0 { s.kind = "truncate" }  // a truncation of a file with records
        let old = crashPatternBytes(0, s.before)
        let data = crashPatternBytes(1, s.count)
        var new: [UInt8]
        var between: [(count: Int, of: [UInt8])] = []
        switch s.kind {
        case "truncate", "shared-truncate":
            new = Array(old.prefix(s.offset)) + [UInt8](repeating: 0, count: max(0, s.offset - old.count))
        case "trunc-write":
            new = [UInt8](repeating: 0, count: s.offset) + data
            between.append((0, []))
        default:
            new = old
            if new.count < s.offset + s.count { new += [UInt8](repeating: 0, count: s.offset + s.count - new.count) }
            new.replaceSubrange(s.offset..<s.offset + s.count, with: data)
            var b = (s.offset / Self.chunk + 1) * Self.chunk
            while b < s.offset + s.count && b <= old.count {
                var prefix = old
                prefix.replaceSubrange(s.offset..<b, with: data[0..<b - s.offset])
                between.append((old.count, prefix))
                b += Self.chunk
            }
        }
        let base = s.kind == "trunc-write" ? [] : old
        if new.count > base.count {
            // Growth: any chunk boundary between the old and the new length, with the new bytes below it.
            var b = (base.count / Self.chunk + 1) * Self.chunk
            while b < new.count { between.append((b, new)); b += Self.chunk }
            // writev is one write per buffer (three here): a crash between them is a short write.
            if s.kind == "writev" { for k in 1...2 { between.append((s.offset + k * (s.count / 3), new)) } }
        } else if new.count < old.count, new.count % Self.chunk != 0 {
            let boundary = (new.count / Self.chunk + 1) * Self.chunk
            if boundary < old.count { between.append((boundary, old)) }
        }
        let changed: Range<Int>
        switch s.kind {
        case "truncate", "shared-truncate": changed = min(s.offset, s.before)..<max(s.offset, s.before)
        case "trunc-write": changed = 0..<max(s.before, new.count)
        default: changed = min(s.offset, s.before)..<s.offset + s.count  // a hole is new bytes too
        }
        return (old, new, between, changed)
    }

    /// Checks the file after a crash. `strict` (a kill between system calls): the file opens at one of
    /// the states above, every chunk of it authenticates and reads as that state, bytes after its
    /// end are reported, and it accepts a change. Otherwise (a torn `pwrite`, as a power loss may
    /// leave) a chunk may fail if the call changed any byte of it (docs/FORMAT.md "What a crash can cost").
    /// `wholeChunksMayFail` (a kill's tear of a write no copy covers whole: `wholeChunksUncovered`):
    /// strict, except that a chunk the call rewrites whole may fail (all its bytes are the call's).
    /// `tornAcrossOldEnd`: the torn `pwrite` rewrote the last chunk and wrote the new trailer in one
    /// call (a version 4 file does when they lie in one page, which a kill never cuts:
    /// `SharedFile.withinOnePage`). A power loss tears that chunk's pages as they are written
    /// back whichever calls wrote them, so the file may also be back at its last sync, visibly: the
    /// empty file its creation synced.
    func verify(_ path: BytePath, _ s: Shape, services: SecureServices, strict: Bool, tornAcrossOldEnd: Bool = false,
                wholeChunksMayFail: Bool = false, label: String) -> [String] {
        let (old, new, statesBetween, changed) = states(s)
        var between = statesBetween
        // A creation killed before the file got its name leaves no file, as before the call; never a 0-byte one.
        if s.kind == "create-write", case .failure = Sys.lstat(path) { return [] }
        let file: SecureFile
        do { file = try SecureFile.open(path, flags: O_RDONLY, services: services) } catch {
            return ["\(label): the file does not open: \(error.code.name) \(error.message)"]
        }
        defer { try? file.close() }
        let size: Int
        do { size = Int(try file.size) } catch { return ["\(label): no size: \(error.message)"] }
        if tornAcrossOldEnd, (try? file.endRestoredFromTailCopy) == true {
            between.append((0, []))
        }
        let alternatives = ([(old.count, old), (new.count, new)] + between).filter { $0.count == size }.map(\.of)
        guard !alternatives.isEmpty else {
            return ["\(label): length \(size) is neither the old \(old.count) nor the new \(new.count) nor a state between (\(between.map(\.count)))"]
        }
        var problems: [String] = []
        if strict {
            let physical: Int64
            switch Sys.lstat(path) {
            case .success(let st): physical = Int64(st.st_size)
            case .failure(let e): return ["\(label): lstat: \(e.text)"]
            }
            let reported = (try? file.bytesAfterAuthenticatedEnd) ?? -1
            // Where an end of `size` bytes lies: its last chunk sealed whole, or in records (version 5),
            // as the footer of the end found says.
            var expected = FileLayout().physicalSize(forPlaintextSize: Int64(size))
            if reported >= 0, let records = endWithRecords(path, physical - reported), records.size == Int64(size) { expected = physical - reported }
            // An end restored from a tail copy may lie beyond the physical end (the copy holds its
            // last chunk and trailer; the next change writes them back).
            let restoredBeyond = physical < expected && (try? file.endRestoredFromTailCopy) == true && reported == 0
            if physical != expected + reported && !restoredBeyond {
                problems.append("\(label): \(physical - expected) bytes after the end at \(size), \(reported) reported")
            }
        }
        var c = 0
        while c * Self.chunk < size {
            let lo = c * Self.chunk, hi = min(size, lo + Self.chunk)
            do {
                let got = try file.pread(count: hi - lo, at: Int64(lo))
                if !alternatives.contains(where: { sameBytes($0, lo, got, 0, count: hi - lo) }) {
                    problems.append("\(label): chunk \(c) reads bytes that are neither the old nor the new content (size \(size))")
                }
            } catch let e as SecureFileError {
                // The chunk as a whole: its rewrite may be torn before the end moved.
                let anyChanged = changed.lowerBound < lo + Self.chunk && lo < changed.upperBound
                let allChanged = changed.lowerBound <= lo && lo + Self.chunk <= changed.upperBound
                if (strict && !(wholeChunksMayFail && allChanged)) || e.code != .badKeyOrCorruptData || !anyChanged {
                    problems.append("\(label): chunk \(c) [\(lo)..<\(hi)) fails (\(e.code.name): \(e.message)) inside the length \(size) (the call changed \(changed))")
                }
            } catch { problems.append("\(label): \(error)") }
            c += 1
        }
        if strict && problems.isEmpty {
            // The file accepts changes after the crash: one more byte at its end reads back.
            if let problem = appendedByteProblem(path, size: size, services: services) { problems.append("\(label): after the crash, \(problem)") }
        }
        return problems
    }

    /// Whether a chunk the shape's write rewrites whole may be left torn by a kill: only when its
    /// handle rewrites whole chunks in place (`.inPlace`); otherwise every chunk a write rewrites in
    /// place is copied first, however many (docs/FORMAT.md "Whole chunks").
    /// The size the footer of a version 5 file ending at `end` gives, when it names records.
    func endWithRecords(_ path: BytePath, _ end: Int64) -> (size: Int64, shape: TailShape)? {
        guard end >= TailShape.footerSize, case .success(let fd) = Sys.open(path, O_RDONLY, 0) else { return nil }
        defer { _ = Sys.close(fd) }
        var footer = [UInt8](repeating: 0, count: TailShape.footerSize)
        guard case .success(footer.count) = footer.withUnsafeMutableBytes({ Sys.preadFull(fd, $0.baseAddress!, $0.count, end - Int64(TailShape.footerSize)) }),
              let found = footer.withUnsafeBytes({ FileLayout().plaintextSize(forPhysicalSize: end, footer: $0.baseAddress!) }),
              found.shape.records > 0 else { return nil }
        return found
    }

    func wholeChunksUncovered(_ s: Shape) -> Bool { s.kind == "whole-in-place" }

    /// Runs the shape uninterrupted (it leaves with _exit(0), without close); returns how many
    /// system calls the operation made, or nil (with a failure recorded).
    func uninterruptedCalls(_ s: Shape, _ env: TestEnvironment) throws -> Int? {
        let full = try runChild(["shape", env.directory + "/store", env.path(s.name), s.name, "-1", "0"])
        guard let done = full.lines.first(where: { $0.hasPrefix("C ") }), let calls = Int(done.dropFirst(2)) else {
            XCTFail("\(s.name): the uninterrupted run did not complete: \(full.lines)")
            return nil
        }
        return calls
    }

    /// The file the child writes for `s`: its name is not UTF-8 (names are bytes).
    func shapeFile(_ s: Shape, _ env: TestEnvironment) -> BytePath {
        BytePath(bytes: Array(env.path(s.name).utf8) + undecodableNameSuffix)!
    }

    func testKillBeforeEverySystemCallOfEveryWriteShape() throws {
        let env = try TestEnvironment()
        var runs = 0
        for s in try shapes() {
            let path = env.path(s.name), file = shapeFile(s, env)
            // Uninterrupted, and left with _exit(0) without close: everything is in the file.
            guard let calls = try uninterruptedCalls(s, env) else { continue }
            let (_, new, _, _) = states(s)
            let after = try SecureFile.open(file, flags: O_RDONLY, services: env.services)
            XCTAssertEqual(try after.readAll(), new, "\(s.name): a write that returned is in the file after _exit without close")
            try after.close()
            for killAt in 0..<calls {
                let r = try runChild(["shape", env.directory + "/store", path, s.name, String(killAt), "0"])
                runs += 1
                XCTAssertTrue(r.killed, "\(s.name) kill at \(killAt): \(r.lines)")
                let problems = verify(file, s, services: env.services, strict: true, label: "\(s.name), killed before call \(killAt) (\(r.lines.last ?? ""))")
                XCTAssertTrue(problems.isEmpty, problems.joined(separator: "\n"))
            }
        }
        XCTAssertGreaterThan(runs, 30)
    }

    func testTornWriteAtEverySectorOfEveryWriteShape() throws {
        let env = try TestEnvironment()
        var tears = 0, tearsAcrossOldEnd = 0, killTears = 0
        // The large shapes (a megabyte or more) are torn in the kill sweep's calls only: tearing each
        // of their long writes at every sector would take minutes and adds nothing the small ones miss.
        for s in try shapes() where s.before + s.count <= 100_000 {
            let path = env.path(s.name), file = shapeFile(s, env)
            guard let calls = try uninterruptedCalls(s, env) else { continue }
            // (A file with records before: its last 300 bytes are three records, after the last chunk's
            // first bytes sealed as a chunk.)
            let oldEnd = FileLayout().physicalSize(forPlaintextSize: Int64(s.before),
                                                   shape: s.kind == "records-write" ? TailShape(records: 3, recordBytes: 300) : .none)
            for killAt in 0..<calls {
                var sectors = 1
                while sectors < 64 {
                    let r = try runChild(["shape", env.directory + "/store", path, s.name, String(killAt), String(sectors)])
                    if r.lines.contains("WHOLE") { break }
                    tears += 1
                    let torn = r.lines.first { $0.hasPrefix("T ") }.map { $0.split(separator: " ").compactMap { Int64($0) } }
                    let acrossOldEnd = torn.map { $0.count == 2 && $0[0] < oldEnd && $0[0] + $0[1] > oldEnd } ?? false
                    if acrossOldEnd { tearsAcrossOldEnd += 1 }
                    // Cut at a page boundary: what a kill does (Linux stops a write between pages).
                    let atPage = torn.map { $0.count == 2 && ($0[0] / 512 + Int64(sectors)) * 512 % 4096 == 0 } ?? false
                    let killTear = atPage
                    if killTear { killTears += 1 }
                    let label = "\(s.name), call \(killAt) torn after \(sectors) sector(s)\(killTear ? " (a page boundary: a kill's tear)" : "")"
                    let problems = verify(file, s, services: env.services, strict: killTear, tornAcrossOldEnd: acrossOldEnd && !killTear,
                                          wholeChunksMayFail: killTear && wholeChunksUncovered(s), label: label)
                    XCTAssertTrue(problems.isEmpty, problems.joined(separator: "\n"))
                    sectors += 1
                }
            }
        }
        XCTAssertGreaterThan(tears, 20)
        XCTAssertGreaterThan(tearsAcrossOldEnd, 0, "no append wrote its chunk and trailer in one call")
        XCTAssertGreaterThan(killTears, 5, "no write torn at a page boundary")
    }

    /// Write-back buffering keeps data in memory until flush; a normal exit() writes it: a run of
    /// a few chunks (10,000 bytes), and runs written along the way then a last partial one (150,000).
    func testWriteBackDataIsWrittenAtExit() throws {
        let env = try TestEnvironment()
        for count in [10_000, 150_000] {
            let path = env.path("writeback-\(count)")
            let r = try runChild(["writeback-exit", env.directory + "/store", path, "\(count)"])
            XCTAssertEqual(r.lines, ["W"])
            let f = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
            XCTAssertEqual(try f.readAll(), crashPatternBytes(1, count), "\(count) bytes")
            try f.close()
        }
    }
}
