#if canImport(Glibc)
import Glibc
#endif
import ArgumentParser
import ACSecureServices

// Parse and run by hand rather than with `@main`: argument-parser's own `main()` exits with 64 for
// usage errors, and acsecure documents its own exit codes (see `ExitStatus`).
// No core dumps and not ptrace-attachable by other processes of the user: keys and plaintext
// pass through this process's memory (docs/FORMAT.md "Keys in memory").
do { try ProcessHardening.apply() } catch {
    writeStderr("acsecure: warning: cannot harden the process (\(error)); continuing\n")
}

#if ACSECURE_SYSCALL_MOCKING
TestFaults.installFromEnvironment()
#endif

do {
    var command = try ACSecureCommand.parseAsRoot(try GlobalOptions.movedAfterCommand(Array(CommandLine.arguments.dropFirst())))
    try command.run()
    fflush(nil)
    exit(ExitStatus.ok.rawValue)
} catch let error as CLIError {
    fflush(nil)
    error.report()
    exit(error.status.rawValue)
} catch {
    fflush(nil)
    // Help, --version, completion scripts and usage errors from argument-parser.
    let code = ACSecureCommand.exitCode(for: error)
    let message = ACSecureCommand.fullMessage(for: error)
    if code == .success {
        if !message.isEmpty { print(message) }
        fflush(nil)
        exit(ExitStatus.ok.rawValue)
    }
    if !message.isEmpty { writeStderr(message + "\n") }
    exit(ExitStatus.usage.rawValue)
}
