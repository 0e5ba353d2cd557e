#if canImport(Glibc)
import Glibc
#endif
import XCTest
import ACSecureServices
@testable import ACSecureFileCore

/// Every write shape (Tests/ACSecureCrashChild `CrashShape.all`), in a real child process that is
/// SIGKILLed right before each system call the engine makes, and with each `pwrite` torn after
/// every whole 512-byte sector. After each death the file must open at its old or its new length,
/// and every byte the interrupted call did not change must read back exactly; a chunk may fail
/// authentication only where the call changed bytes. No wrong byte is ever returned.
///
/// docs/FORMAT.md "What a crash can cost": the one exception is a *torn* (not killed-between-calls)
/// in-place rewrite of a partial chunk, which may cost that chunk's other bytes; the sweep checks
/// that such a loss stays inside the chunk the call wrote and is reported as an error, not as data.
final class WriteShapeCrashTests: XCTestCase {
    struct Shape { var name: String; var before: Int; var isWrite: Bool; var a: Int; var b: Int }

    static let chunk = 4096

    func runChild(_ args: [String]) throws -> (lines: [String], killed: Bool) {
        let (status, output) = try runCrashChild(args)
        return (output.split(separator: "\n").map(String.init), status.signal == SIGKILL)
    }

    func shapes() throws -> [Shape] {
        try runChild(["shapes"]).lines.map { line in
            let f = line.split(separator: " ")
            return Shape(name: String(f[0]), before: Int(f[1])!, isWrite: f[2] == "write", a: Int(f[3])!, b: Int(f[4])!)
        }
    }

    /// The file's content before and after the shape's operation, and which bytes it changes.
    func states(_ s: Shape) -> (old: [UInt8], new: [UInt8], changed: Range<Int>) {
        let old = (0..<s.before).map { crashPattern(0, $0) }
        var new = old
        if s.isWrite {
            if new.count < s.a + s.b { new += [UInt8](repeating: 0, count: s.a + s.b - new.count) }
            new.replaceSubrange(s.a..<s.a + s.b, with: (0..<s.b).map { crashPattern(1, $0) })
            // A hole between the old end and the write is new bytes too.
            return (old, new, min(s.a, s.before)..<s.a + s.b)
        }
        if s.a < new.count { new.removeLast(new.count - s.a) } else { new += [UInt8](repeating: 0, count: s.a - new.count) }
        return (old, new, min(s.a, s.before)..<max(s.a, s.before))
    }

    /// Checks the file after a crash. `strict`: a chunk may fail only if every byte of it was
    /// changed by the call; otherwise (a torn in-place rewrite) if any byte of it was.
    func verify(_ path: String, _ s: Shape, services: SecureServices, strict: Bool, label: String) -> [String] {
        let (old, new, changed) = states(s)
        let file: SecureFile
        do { file = try SecureFile.open(path, flags: O_RDONLY, services: services) } catch {
            return ["\(label): the file does not open: \(error.code.name) \(error.message)"]
        }
        defer { try? file.close() }
        let size: Int
        do { size = Int(try file.size) } catch { return ["\(label): no size: \(error.message)"] }
        // Old, new, or (a short write) the chunk boundary between them at which a growth past a short
        // last chunk, or a cut inside a chunk, does its first step.
        let lo = min(old.count, new.count), hi = max(old.count, new.count)
        let boundary = (lo + Self.chunk - 1) / Self.chunk * Self.chunk
        let intermediate = boundary > lo && boundary < hi ? boundary : -1
        guard size == old.count || size == new.count || size == intermediate else {
            return ["\(label): length \(size) is neither the old \(old.count) nor the new \(new.count) (nor \(intermediate))"]
        }
        let longer = new.count >= old.count ? new : old
        let expected = size == new.count && (size != old.count || !old.elementsEqual(new.prefix(size))) ? new : old
        let alternatives = [old, new, Array(longer.prefix(max(0, intermediate)))].filter { $0.count == size }
        var problems: [String] = []
        var c = 0
        while c * Self.chunk < size {
            let lo = c * Self.chunk, hi = min(size, lo + Self.chunk)
            do {
                let got = try file.pread(count: hi - lo, at: Int64(lo))
                if !alternatives.contains(where: { Array($0[lo..<hi]) == got }) {
                    problems.append("\(label): chunk \(c) reads bytes that are neither the old nor the new content (size \(size))")
                }
            } catch let e as SecureFileError {
                let allChanged = changed.lowerBound <= lo && hi <= changed.upperBound
                let anyChanged = changed.lowerBound < hi && lo < changed.upperBound
                if e.code != .badKeyOrCorruptData || !(strict ? allChanged : anyChanged) {
                    problems.append("\(label): chunk \(c) [\(lo)..<\(hi)) fails (\(e.code.name): \(e.message)) though the call changed \(changed) (size \(size), expected \(expected == new ? "new" : "old"))")
                }
            } catch { problems.append("\(label): \(error)") }
            c += 1
        }
        return problems
    }

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

    func testKillBeforeEverySystemCallOfEveryWriteShape() throws {
        let env = try TestEnvironment()
        var runs = 0
        for s in try shapes() {
            let path = env.path(s.name)
            // Uninterrupted, and left with _exit(0) without close: everything is in the file.
            guard let calls = try uninterruptedCalls(s, env) else { continue }
            let (_, new, _) = states(s)
            let after = try SecureFile.open(path, flags: O_RDONLY, services: env.services)
            XCTAssertEqual(try after.readAll(), new, "\(s.name): a write that returned is in the file after _exit without close")
            try after.close()
            for killAt in 0..<calls {
                let r = try runChild(["shape", env.directory + "/store", path, s.name, String(killAt), "0"])
                runs += 1
                XCTAssertTrue(r.killed, "\(s.name) kill at \(killAt): \(r.lines)")
                let problems = verify(path, s, services: env.services, strict: true, label: "\(s.name), killed before call \(killAt) (\(r.lines.last ?? ""))")
                XCTAssertTrue(problems.isEmpty, problems.joined(separator: "\n"))
            }
        }
        XCTAssertGreaterThan(runs, 30)
    }

    func testTornWriteAtEverySectorOfEveryWriteShape() throws {
        let env = try TestEnvironment()
        var tears = 0
        for s in try shapes() {
            let path = env.path(s.name)
            guard let calls = try uninterruptedCalls(s, env) else { continue }
            for killAt in 0..<calls {
                var sectors = 1
                while sectors < 64 {
                    let r = try runChild(["shape", env.directory + "/store", path, s.name, String(killAt), String(sectors)])
                    if r.lines.contains("WHOLE") { break }
                    tears += 1
                    let problems = verify(path, s, services: env.services, strict: false,
                                          label: "\(s.name), call \(killAt) torn after \(sectors) sector(s)")
                    XCTAssertTrue(problems.isEmpty, problems.joined(separator: "\n"))
                    sectors += 1
                }
            }
        }
        XCTAssertGreaterThan(tears, 20)
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
            XCTAssertEqual(try f.readAll(), (0..<count).map { crashPattern(1, $0) }, "\(count) bytes")
            try f.close()
        }
    }
}
