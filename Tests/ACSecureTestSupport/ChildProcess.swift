#if canImport(Glibc)
import Glibc
#endif

/// A child process started with posix_spawn, with the standard streams the test asks for.
/// Every pipe is close-on-exec in the parent, so concurrently spawned children never inherit each
/// other's pipes (a child holding another's pipe would keep its reader from seeing end-of-file).
package struct ChildProcess: Sendable {
    /// Where one of the child's standard streams goes.
    package enum Stream: Sendable {
        /// A pipe to or from this process (`standardInput`, `standardOutput`, `standardError`).
        case pipe
        /// This process's own stream.
        case inherit
        /// /dev/null.
        case discard
        /// A file, created or truncated.
        case file(String)
        /// For standard error only: wherever standard output goes.
        case standardOutput
    }

    package let pid: pid_t
    /// The write end of the child's standard input, or -1 when it is not `.pipe`.
    package let standardInput: Int32
    /// The read ends of the child's standard output and error, or -1 when not `.pipe`.
    package let standardOutput: Int32
    package let standardError: Int32

    /// The environment of this process, to extend for a child.
    package static var inheritedEnvironment: [String: String] {
        var out: [String: String] = [:]
        var entry = environ
        while let p = entry.pointee {
            let pair = String(cString: p)
            if let eq = pair.firstIndex(of: "=") { out[String(pair[..<eq])] = String(pair[pair.index(after: eq)...]) }
            entry += 1
        }
        return out
    }

    /// An executable SwiftPM built next to the running test binary (`swift build --build-tests`), or nil.
    package static func builtExecutable(_ name: String) -> String? {
        var buf = [CChar](repeating: 0, count: 4096)
        let n = readlink("/proc/self/exe", &buf, buf.count - 1)
        guard n > 0 else { return nil }
        var dir = String(decoding: buf[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        while let slash = dir.lastIndex(of: "/"), slash != dir.startIndex {
            dir = String(dir[..<slash])
            if access(dir + "/" + name, X_OK) == 0 { return dir + "/" + name }
        }
        return nil
    }

    /// Starts `executable` with `arguments` and exactly `environment`.
    package static func spawn(_ executable: String, _ arguments: [String], environment: [String: String],
                              standardInput input: Stream = .discard, standardOutput output: Stream = .pipe,
                              standardError error: Stream = .pipe) throws(TestSupportError) -> ChildProcess {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        // The child's ends of the pipes, closed here once the child has them.
        var childEnds: [Int32] = []
        defer { childEnds.forEach { close($0) } }
        var parentEnds: [Int32] = []

        func connect(_ stream: Stream, to target: Int32, writing: Bool) throws(TestSupportError) -> Int32 {
            switch stream {
            case .inherit:
                return -1
            case .discard:
                posix_spawn_file_actions_addopen(&actions, target, "/dev/null", writing ? O_WRONLY : O_RDONLY, 0)
                return -1
            case .file(let path):
                posix_spawn_file_actions_addopen(&actions, target, path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
                return -1
            case .standardOutput:
                precondition(target == 2, ".standardOutput is for standard error only")
                posix_spawn_file_actions_adddup2(&actions, 1, 2)
                return -1
            case .pipe:
                var fds: [Int32] = [-1, -1]
                // (Glibc does not export pipe2 to Swift: pipe, then close-on-exec on both ends.)
                guard pipe(&fds) == 0 else { throw TestSupportError("pipe", errno: errno) }
                for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
                let (parent, child) = writing ? (fds[0], fds[1]) : (fds[1], fds[0])
                posix_spawn_file_actions_adddup2(&actions, child, target)
                childEnds.append(child)
                parentEnds.append(parent)
                return parent
            }
        }

        let stdinFD: Int32, stdoutFD: Int32, stderrFD: Int32
        do {
            stdinFD = try connect(input, to: 0, writing: false)
            stdoutFD = try connect(output, to: 1, writing: true)
            stderrFD = try connect(error, to: 2, writing: true)
        } catch {
            parentEnds.forEach { close($0) }
            throw error
        }
        // A child that exits before reading its input must not kill the test with SIGPIPE.
        if stdinFD >= 0 { signal(SIGPIPE, SIG_IGN) }

        let argv: [UnsafeMutablePointer<CChar>?] = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        let envp: [UnsafeMutablePointer<CChar>?] = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { envp.forEach { free($0) } }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, executable, &actions, nil, argv, envp)
        guard rc == 0 else {
            parentEnds.forEach { close($0) }
            throw TestSupportError("posix_spawn \(executable)", errno: rc)
        }
        return ChildProcess(pid: pid, standardInput: stdinFD, standardOutput: stdoutFD, standardError: stderrFD)
    }

    /// Starts the child, reads its output to the end and waits for it.
    package static func run(_ executable: String, _ arguments: [String], environment: [String: String],
                            standardOutput: Stream = .pipe,
                            standardError: Stream = .pipe) throws(TestSupportError) -> Output {
        try spawn(executable, arguments, environment: environment,
                  standardOutput: standardOutput, standardError: standardError).finish()
    }

    /// What a finished child said and how it ended.
    package struct Output: Sendable {
        package var status: ExitStatus
        package var standardOutput: String
        package var standardError: String
    }

    /// Closes standard input, reads standard output and error (those that are pipes) to their end
    /// at the same time (so neither can fill up and stall the child), closes them, and reaps the child.
    package func finish() -> Output {
        if standardInput >= 0 { close(standardInput) }
        var open = [standardOutput, standardError].filter { $0 >= 0 }
        var collected: [Int32: [UInt8]] = [:]
        var buf = [UInt8](repeating: 0, count: 65536)
        while !open.isEmpty {
            var polled = open.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
            if poll(&polled, nfds_t(polled.count), -1) < 0 {
                if errno == EINTR { continue }
                break
            }
            for p in polled where p.revents != 0 {
                let n = buf.withUnsafeMutableBytes { read(p.fd, $0.baseAddress, $0.count) }
                if n < 0 && errno == EINTR { continue }
                if n <= 0 {
                    close(p.fd)
                    open.removeAll { $0 == p.fd }
                } else {
                    collected[p.fd, default: []] += buf[0..<n]
                }
            }
        }
        let status = wait()
        return Output(status: status,
                      standardOutput: String(decoding: collected[standardOutput] ?? [], as: UTF8.self),
                      standardError: String(decoding: collected[standardError] ?? [], as: UTF8.self))
    }

    /// Reads standard output until `line` is a whole line of it, or to its end; returns what was read.
    /// The pipe stays open (the child must not get SIGPIPE for writing more).
    package func readStandardOutput(untilLine line: String) -> String {
        var got: [UInt8] = []
        var byte: UInt8 = 0
        while true {
            let n = read(standardOutput, &byte, 1)
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            got.append(byte)
            if byte == UInt8(ascii: "\n") {
                let text = String(decoding: got, as: UTF8.self)
                if text.hasSuffix("\n" + line + "\n") || text == line + "\n" { break }
            }
        }
        return String(decoding: got, as: UTF8.self)
    }

    /// Waits for the child to end (and reaps it).
    @discardableResult
    package func wait() -> ExitStatus {
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        return ExitStatus(raw: status)
    }
}

/// A wait status, decoded (WIFEXITED and friends are macros Swift does not import).
package struct ExitStatus: Equatable, Sendable, CustomStringConvertible {
    package let raw: Int32

    package init(raw: Int32) { self.raw = raw }

    /// The exit code, if the child exited.
    package var exitCode: Int32? { raw & 0x7f == 0 ? (raw >> 8) & 0xff : nil }
    /// The signal that ended the child, if one did.
    package var signal: Int32? { raw & 0x7f != 0 && raw & 0x7f != 0x7f ? raw & 0x7f : nil }
    /// Exited with code 0.
    package var succeeded: Bool { exitCode == 0 }

    package var description: String {
        if let exitCode { return "exit \(exitCode)" }
        if let signal { return "signal \(signal) (\(String(cString: strsignal(signal))))" }
        return "wait status \(raw)"
    }
}
