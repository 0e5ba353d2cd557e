#if canImport(Glibc)
import Glibc
#endif
import ACCrypto

/// Reading passcodes: from the environment, from stdin, or from the terminal without echo.
/// Passcodes go straight into guarded memory; the temporary line buffer is zeroed.
enum Passcode {
    /// A line from `fd`, without its newline, into guarded memory. Reads byte by byte so nothing
    /// after the line is consumed (the next line may be another passcode).
    static func readLine(fd: Int32, what: String) throws(CLIError) -> SecureBytes {
        var line = [UInt8](repeating: 0, count: 1024)
        defer { line.withUnsafeMutableBytes { secureZero($0) } }
        var count = 0
        var byte: UInt8 = 0
        var sawAnything = false
        while true {
            let n = Glibc.read(fd, &byte, 1)
            if n < 0 {
                if errno == EINTR { continue }
                throw CLIError.posix(errno, "reading the \(what)")
            }
            if n == 0 { break }
            sawAnything = true
            if byte == UInt8(ascii: "\n") { break }
            guard count < line.count else { throw CLIError(.usage, "the \(what) is longer than \(line.count) bytes") }
            line[count] = byte
            count += 1
        }
        byte = 0
        guard sawAnything else { throw CLIError(.usage, "no \(what) given (end of input)") }
        if count > 0 && line[count - 1] == UInt8(ascii: "\r") { count -= 1 }
        let copy: Result<SecureBytes, CryptoError> = line.withUnsafeBytes { l in
            Result { () throws(CryptoError) in try SecureBytes(copying: UnsafeRawBufferPointer(rebasing: l[0..<count])) }
        }
        return try guardedBytes("the \(what)") { () throws(CryptoError) in try copy.get() }
    }

    /// Whether a controlling terminal is there to prompt on.
    static var terminalAvailable: Bool {
        let fd = open("/dev/tty", O_RDWR | O_CLOEXEC | O_NOCTTY)
        guard fd >= 0 else { return false }
        close(fd)
        return true
    }

    /// Prompts on /dev/tty and reads a line with echo off.
    static func prompt(_ text: String, what: String) throws(CLIError) -> SecureBytes {
        let fd = open("/dev/tty", O_RDWR | O_CLOEXEC | O_NOCTTY)
        guard fd >= 0 else {
            throw CLIError(.noKeys, "a \(what) is needed and there is no terminal to ask on: set ACSECURE_PASSCODE or use --passcode-stdin")
        }
        defer { close(fd) }
        var saved = termios()
        let isTerminal = tcgetattr(fd, &saved) == 0
        if isTerminal {
            var quiet = saved
            quiet.c_lflag &= ~tcflag_t(ECHO)
            quiet.c_lflag |= tcflag_t(ECHONL)
            TerminalRestore.install(fd: fd, saved: saved)
            _ = tcsetattr(fd, TCSAFLUSH, &quiet)
        }
        defer {
            if isTerminal {
                _ = tcsetattr(fd, TCSAFLUSH, &saved)
                TerminalRestore.remove()
            }
        }
        _ = Array(text.utf8).withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
        return try readLine(fd: fd, what: what)
    }

    /// A new passcode, asked twice on the terminal.
    static func promptNew(what: String = "new passcode", allowEmpty: Bool) throws(CLIError) -> SecureBytes? {
        let first = try prompt(allowEmpty ? "New passcode (empty for none): " : "New passcode: ", what: what)
        if first.count == 0 {
            if allowEmpty { return nil }
            throw CLIError(.usage, "the \(what) must not be empty")
        }
        let second = try prompt("Repeat the new passcode: ", what: what)
        guard first == second else { throw CLIError(.usage, "the two passcodes differ; nothing was changed") }
        return first
    }

    /// The variable's value; nil when unset or empty (an empty passcode is never valid).
    static func fromEnvironment(_ name: String) throws(CLIError) -> SecureBytes? {
        guard let v = getenv(name), v[0] != 0 else { return nil }
        return try guardedBytes("$\(name)") { () throws(CryptoError) in try SecureBytes(copying: UnsafeRawBufferPointer(start: v, count: strlen(v))) }
    }

    /// Whether the variable is set to a non-empty value.
    static func isSet(_ name: String) -> Bool {
        guard let v = getenv(name) else { return false }
        return v[0] != 0
    }
}

/// Puts the terminal back (echo on) when acsecure is interrupted at a passcode prompt.
enum TerminalRestore {
    nonisolated(unsafe) static var fd: Int32 = -1
    nonisolated(unsafe) static var saved = termios()

    static func install(fd: Int32, saved: termios) {
        self.saved = saved
        self.fd = fd
        for sig in [SIGINT, SIGTERM, SIGHUP, SIGQUIT] {
            signal(sig) { sig in
                if TerminalRestore.fd >= 0 { _ = tcsetattr(TerminalRestore.fd, TCSANOW, &TerminalRestore.saved) }
                signal(sig, SIG_DFL)
                raise(sig)
            }
        }
    }

    static func remove() {
        fd = -1
        for sig in [SIGINT, SIGTERM, SIGHUP, SIGQUIT] { signal(sig, SIG_DFL) }
    }
}
