#if canImport(Glibc)
import Glibc
#endif
import ArgumentParser
import ACCrypto
import ACSecureFileCore
import ACSystemCalls
import ACSecureServices

/// Options every subcommand takes: which app, which store, where the passcode comes from.
struct GlobalOptions: ParsableArguments {
    @Option(name: .customLong("app-id"), help: ArgumentHelp(
        "The app ID whose key protects the files (default: $ACSECURE_APP_ID, else \"default\").", valueName: "id"))
    var appIDOption: String?

    @Option(name: .customLong("store"), help: ArgumentHelp(
        "The store directory (default: $ACSECURE_HOME, else $XDG_DATA_HOME/acsecure, else ~/.local/share/acsecure).",
        valueName: "dir"))
    var storeOption: BytePath?

    @Flag(name: .customLong("passcode-stdin"), help:
        "Read the passcode from the first line of standard input (passwd: old, then new). Otherwise $ACSECURE_PASSCODE, else a prompt on the terminal.")
    var passcodeFromStdin = false

    /// The options above (`--app-id ID`, `--app-id=ID`, `--store DIR`, `--store=DIR`,
    /// `--passcode-stdin`) given before the command name, as users of git or docker type them
    /// (`acsecure --app-id ID cat FILE`), moved after it, where each command declares them. Arguments
    /// from the command name on are left as they are, and so are arguments that start with another
    /// option (`--help`, `--version`: argument-parser answers those).
    /// - Throws: a usage error when such an option has no value, or no command follows.
    static func movedAfterCommand(_ arguments: [String]) throws(CLIError) -> [String] {
        var global: [String] = []
        var i = 0
        while i < arguments.count {
            let a = arguments[i]
            if a == "--app-id" || a == "--store" {
                guard i + 1 < arguments.count else { throw CLIError(.usage, "\(a) needs a value (see acsecure --help)") }
                global += [a, arguments[i + 1]]
                i += 2
            } else if a.hasPrefix("--app-id=") || a.hasPrefix("--store=") || a == "--passcode-stdin" {
                global.append(a)
                i += 1
            } else {
                break
            }
        }
        if global.isEmpty { return arguments }
        guard i < arguments.count else {
            throw CLIError(.usage, "name a command after \(global.joined(separator: " ")), e.g. acsecure \(global.joined(separator: " ")) cat FILE (see acsecure --help)")
        }
        if arguments[i].hasPrefix("-") { return arguments }
        return [arguments[i]] + global + arguments[(i + 1)...]
    }

    var appID: String {
        if let appIDOption { return appIDOption }
        if let v = getenv("ACSECURE_APP_ID"), v[0] != 0 { return String(cString: v) }
        return "default"
    }

    var storeDirectory: BytePath { storeOption ?? SecureServices.defaultStorePath() }

    /// Whether the store has a seed; one that cannot be examined is an unreadable store (exit 3), not "no store".
    func storeExists() throws(CLIError) -> Bool {
        do {
            return try SecureServices.storeExists(in: storeDirectory)
        } catch {
            throw CLIError(error, store: storeDirectory)
        }
    }

    func validate() throws {
        if let appIDOption, appIDOption.isEmpty { throw ValidationError("--app-id must not be empty") }
        if let storeOption, storeOption.isEmpty { throw ValidationError("--store must not be empty") }
    }

    /// The passcode of an existing store: $ACSECURE_PASSCODE, the first line of stdin with
    /// --passcode-stdin, else a prompt without echo.
    func currentPasscode() throws(CLIError) -> SecureBytes {
        if passcodeFromStdin { return try Passcode.readLine(fd: 0, what: "passcode") }
        if let p = try Passcode.fromEnvironment("ACSECURE_PASSCODE") { return p }
        return try Passcode.prompt("Passcode for the store \(storeDirectory): ", what: "passcode")
    }

    /// The Argon2id cost of a new or changed passcode: libsodium's moderate limits. Debug builds (with
    /// the test hooks of TestFaults.swift) take `ACSECURE_TEST_ARGON2=minimum`, so the CLI suite
    /// (scripts/test.d/30-cli.sh) does not spend 0.4 s on each of its ~90 commands on a protected
    /// store; the moderate cost is tested by the Swift tests. A release build has no such variable.
    var argonCostForNewPasscodes: Argon2id.Cost {
        #if ACSECURE_SYSCALL_MOCKING
        if let v = getenv("ACSECURE_TEST_ARGON2"), String(cString: v) == "minimum" { return .minimum }
        #endif
        return .moderate
    }

    /// The store's services, without asking for anything: unavailable when a passcode is needed.
    /// - Parameter passcodeChange: `passwd` may remove the passcode, so it does not require the store
    ///   to stay protected; every other command does when `ACSECURE_PASSCODE` is set.
    func openServicesLocked(passcodeChange: Bool = false) throws(CLIError) -> SecureServices {
        guard try storeExists() else {
            throw CLIError(.noKeys, "no store at \(storeDirectory) (run `acsecure init`, or pass --store / set ACSECURE_HOME) (\(ACErrorCode.noKeys.name))")
        }
        do {
            // A passcode in the environment means this store must be protected by one: a planted
            // unprotected seed is refused instead of silently used.
            let passcodeConfigured = !passcodeChange && Passcode.isSet("ACSECURE_PASSCODE")
            return try SecureServices(appID: appID, storePath: storeDirectory, passcode: nil,
                                      requireProtectedStore: passcodeConfigured, argonCost: argonCostForNewPasscodes)
        } catch {
            throw CLIError(error, store: storeDirectory)
        }
    }

    /// The store's services, unlocked (asking for the passcode when the store has one).
    func openServices() throws(CLIError) -> SecureServices {
        let services = try openServicesLocked()
        if services.availability == .available { return services }
        let passcode = try currentPasscode()
        do {
            try services.unlock(passcode: passcode)
        } catch {
            throw CLIError(error, store: storeDirectory)
        }
        return services
    }

    /// Services unlocked only when that needs no question (no passcode, or $ACSECURE_PASSCODE set).
    func openServicesIfQuietlyPossible() -> SecureServices? {
        guard let services = try? openServicesLocked() else { return nil }
        if services.availability == .available { return services }
        // Out of memory here is reported by the command's own unlock later.
        guard !passcodeFromStdin, let p = try? Passcode.fromEnvironment("ACSECURE_PASSCODE") else { return nil }
        try? services.unlock(passcode: p)
        return services.availability == .available ? services : nil
    }
}

/// Which key opens a file: its header says app or group; for a group the caller names candidates.
struct KeyOptions: ParsableArguments {
    @Option(name: .customLong("group"), help: ArgumentHelp(
        "An encryption group ID whose key may open the file (repeatable).", valueName: "id"))
    var groups: [String] = []

    /// The key selection that opens `path`, from its header's key class and fingerprint.
    func selection(for path: BytePath, info: SecureFileInfo, services: SecureServices) throws(CLIError) -> KeySelection {
        try keySelection(for: path, info: info, groups: groups, services: services)
    }
}

func hex(_ bytes: [UInt8]) -> String {
    let digits = Array("0123456789abcdef".utf8)
    var out = [UInt8]()
    out.reserveCapacity(bytes.count * 2)
    for b in bytes { out.append(digits[Int(b >> 4)]); out.append(digits[Int(b & 15)]) }
    return String(decoding: out, as: UTF8.self)
}

/// `1.5 MiB` style sizes, plus the exact byte count where it matters.
func humanSize(_ n: Int64) -> String {
    if n < 1024 { return "\(n) B" }
    let units = ["KiB", "MiB", "GiB", "TiB"]
    var v = Double(n) / 1024
    var i = 0
    while v >= 1024 && i < units.count - 1 { v /= 1024; i += 1 }
    let tenths = Int((v * 10).rounded())
    return "\(tenths / 10).\(tenths % 10) \(units[i])"
}

/// The secure files a command works on (cat, verify, stat, rotate): at least one.
struct SecureFileArguments: ParsableArguments {
    @Argument(help: "Secure files.") var files: [BytePath]

    func validate() throws {
        if files.isEmpty { throw ValidationError("name at least one file") }
    }
}
