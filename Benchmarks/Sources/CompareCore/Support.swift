#if canImport(Glibc)
import Glibc
#endif

// Small libc helpers, so the comparison does not load Foundation: the peak RSS it reports must be
// the engine's, not that of a framework the engine does not use.

/// printf-style formatting of numbers.
func fmt(_ format: String, _ args: CVarArg...) -> String {
    withVaList(args) { va in
        var buf = [CChar](repeating: 0, count: 256)
        _ = vsnprintf(&buf, buf.count, format, va)
        return cString(buf)
    }
}

func log(_ s: String) {
    let line = Array("ac-compare: \(s)\n".utf8)
    _ = line.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
}

func cString(_ buf: [CChar]) -> String {
    String(decoding: buf.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}

func makeDirectories(_ path: String) {
    var prefix = path.hasPrefix("/") ? "" : "."
    for part in path.split(separator: "/") {
        prefix += "/" + part
        mkdir(prefix, 0o755)
    }
}

func writeFile(_ path: String, _ text: String) throws {
    guard let f = fopen(path, "w") else { throw WorkloadError("fopen", path) }
    defer { fclose(f) }
    guard fputs(text, f) >= 0 else { throw WorkloadError("write", path) }
}

/// Runs `argv` and returns its standard output and exit status.
func runProcess(_ argv: [String], quietStderr: Bool = false) throws -> (output: String, status: Int32) {
    var fds: [Int32] = [0, 0]
    guard pipe(&fds) == 0 else { throw WorkloadError("pipe", argv[0]) }
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_adddup2(&actions, fds[1], 1)
    posix_spawn_file_actions_addclose(&actions, fds[0])
    if quietStderr { posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0) }
    let cArgs = argv.map { strdup($0) } + [nil]
    defer { cArgs.forEach { free($0) } }
    var pid: pid_t = 0
    let rc = posix_spawn(&pid, argv[0], &actions, nil, cArgs, environ)
    close(fds[1])
    guard rc == 0 else { close(fds[0]); errno = rc; throw WorkloadError("posix_spawn", argv[0]) }
    var output = [UInt8]()
    var chunk = [UInt8](repeating: 0, count: 4096)
    while true {
        let n = read(fds[0], &chunk, chunk.count)
        if n < 0 && errno == EINTR { continue }
        if n <= 0 { break }
        output += chunk[0..<n]
    }
    close(fds[0])
    var status: Int32 = 0
    while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
    let exited = status & 0x7f == 0
    return (String(decoding: output, as: UTF8.self), exited ? (status >> 8) & 0xff : 128 + (status & 0x7f))
}

/// This executable's path.
func selfPath() -> String {
    var buf = [CChar](repeating: 0, count: 4096)
    let n = readlink("/proc/self/exe", &buf, buf.count - 1)
    return n > 0 ? cString(buf) : CommandLine.arguments[0]
}

/// This process's peak resident set size (VmHWM), in KiB.
func peakResidentKiB() -> Int {
    guard let f = fopen("/proc/self/status", "r") else { return -1 }
    defer { fclose(f) }
    var line = [CChar](repeating: 0, count: 256)
    while fgets(&line, Int32(line.count), f) != nil {
        let s = cString(line)
        if s.hasPrefix("VmHWM:") { return Int(s.dropFirst(6).filter { $0.isNumber }) ?? -1 }
    }
    return -1
}
