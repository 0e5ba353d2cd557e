import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A child process whose standard output the test reads line by line (to kill it at a chosen
/// moment); its standard error goes to a file, shown when something fails.
final class ChildProcess {
    let pid: pid_t
    private let output: Int32
    private var buffer: [UInt8] = []
    private(set) var lines: [String] = []
    let stderrPath: String

    /// The crash child, built next to this test bundle (GRDB_CRASH_CHILD overrides).
    static var crashChildPath: String {
        if let path = ProcessInfo.processInfo.environment["GRDB_CRASH_CHILD"], !path.isEmpty { return path }
        let bundle = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath().deletingLastPathComponent()
        return bundle.appendingPathComponent("grdb-crash-child").path
    }

    init(_ arguments: [String], extraEnvironment: [String: String], stderrPath: String) throws {
        var pipeFDs: [Int32] = [0, 0]
        guard pipe(&pipeFDs) == 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, pipeFDs[1], 1)
        posix_spawn_file_actions_addclose(&actions, pipeFDs[0])
        posix_spawn_file_actions_addclose(&actions, pipeFDs[1])
        posix_spawn_file_actions_addopen(&actions, 2, stderrPath, O_WRONLY | O_CREAT | O_APPEND, 0o600)
        var environment = ProcessInfo.processInfo.environment
        environment.merge(extraEnvironment) { $1 }
        let argv = arguments.map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { (argv + envp).forEach { free($0) } }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, arguments[0], &actions, nil, argv, envp)
        close(pipeFDs[1])
        guard rc == 0 else {
            close(pipeFDs[0])
            throw POSIXError(POSIXErrorCode(rawValue: rc) ?? .EIO)
        }
        self.pid = pid
        self.output = pipeFDs[0]
        self.stderrPath = stderrPath
    }

    deinit {
        if exitStatus == nil { kill(pid, SIGKILL) }
        _ = waitForExit()
        close(output)
    }

    /// Reads lines until `predicate` accepts one (returns it), the child closes its output, or
    /// the timeout passes (nil).
    func waitForLine(timeout: TimeInterval, _ predicate: (String) -> Bool) -> String? {
        let deadline = Date(timeIntervalSinceNow: timeout)
        var seen = lines.count
        while true {
            while seen < lines.count {
                if predicate(lines[seen]) { return lines[seen] }
                seen += 1
            }
            let left = deadline.timeIntervalSinceNow
            guard left > 0 else { return nil }
            var descriptor = pollfd(fd: output, events: Int16(POLLIN), revents: 0)
            guard poll(&descriptor, 1, Int32(min(left, 1) * 1000)) >= 0 || errno == EINTR else { return nil }
            if descriptor.revents == 0 { continue }
            var chunk = [UInt8](repeating: 0, count: 4096)
            let n = read(output, &chunk, chunk.count)
            if n <= 0 { return nil }
            buffer += chunk[0..<n]
            while let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) {
                lines.append(String(decoding: buffer[..<newline], as: UTF8.self))
                buffer.removeSubrange(...newline)
            }
        }
    }

    /// Reads whatever the child printed so far without waiting.
    func drain() { _ = waitForLine(timeout: 0.001) { _ in false } }

    private var exitStatus: Int32?
    /// waitpid's status (once; later calls return the same).
    func waitForExit() -> Int32 {
        if let exitStatus { return exitStatus }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        exitStatus = status
        return status
    }

    var stderrText: String { (try? String(contentsOfFile: stderrPath, encoding: .utf8)) ?? "" }
}
