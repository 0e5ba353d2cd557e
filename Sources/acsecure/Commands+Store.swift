#if canImport(Glibc)
import Glibc
#endif
import ArgumentParser
import ACCrypto
import ACSecureFileCore
import ACSecureServices

struct Init: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Create a store (a random seed), optionally protected by a passcode.",
        discussion: """
            The passcode comes from --passcode-stdin, else $ACSECURE_PASSCODE, else a prompt on the \
            terminal (asked twice, without echo; empty for none). Without a terminal and without \
            either source, the store gets no passcode: its seed is then protected by file permissions \
            (0600 in a 0700 directory) only.
            """)

    @OptionGroup var global: GlobalOptions
    @Flag(help: "Create the store without a passcode, without asking.") var noPasscode = false

    func run() throws {
        let dir = global.storeDirectory
        guard try !global.storeExists() else {
            throw CLIError(.usage, "a store already exists at \(dir) (use `acsecure passwd` to change its passcode)")
        }
        var passcode: SecureBytes?
        if global.passcodeFromStdin {
            passcode = try Passcode.readLine(fd: 0, what: "passcode")
        } else if let p = try Passcode.fromEnvironment("ACSECURE_PASSCODE"), p.count > 0 {
            passcode = p
        } else if !noPasscode && Passcode.terminalAvailable && isatty(0) == 1 {
            passcode = try Passcode.promptNew(allowEmpty: true)
        }
        if let p = passcode, p.count == 0 {
            throw CLIError(.usage, "the passcode must not be empty (use --no-passcode for a store without one)")
        }
        let services: SecureServices
        do {
            services = try SecureServices.createStore(appID: global.appID, storePath: dir, passcode: passcode,
                                                    argonCost: global.argonCostForNewPasscodes)
        } catch where error.code == .storeIO && error.errno == EEXIST {
            throw CLIError(.usage, "\(error.message) (use `acsecure passwd` to change its passcode)")
        } catch {
            throw CLIError(error, store: dir)
        }
        print("created store \(dir)")
        print("app ID:   \(services.appID)")
        if passcode != nil {
            print("passcode: set (Argon2id); every command will need it")
        } else {
            print("passcode: none (the seed is protected by file permissions only; `acsecure passwd` adds one)")
        }
    }
}

struct Status: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show the store, the app ID and whether keys are available.",
        discussion: "Exits with 3 when there is no store.")

    @OptionGroup var global: GlobalOptions

    func run() throws {
        print("store:    \(global.storeDirectory)")
        print("app ID:   \(global.appID)")
        guard try global.storeExists() else {
            print("state:    no store (run `acsecure init`)")
            throw CLIError(.noKeys, "no store at \(global.storeDirectory) (\(ACErrorCode.noKeys.name))")
        }
        let services = try global.openServicesLocked()
        if services.isPasscodeSet {
            print("passcode: set")
            if global.openServicesIfQuietlyPossible() != nil {
                print("keys:     available ($ACSECURE_PASSCODE unlocks the store)")
            } else {
                print("keys:     locked; each acsecure command asks for the passcode (or reads $ACSECURE_PASSCODE)")
            }
        } else {
            print("passcode: none")
            print("keys:     available to every acsecure run by this user")
        }
    }
}

struct Unlock: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Check the passcode (acsecure keeps no keys between runs).",
        discussion: """
            Each acsecure command is its own process: it unlocks the store, uses the keys and wipes \
            them when it exits. There is no session agent, so `unlock` cannot leave the store unlocked \
            for later commands; it verifies the passcode (exit 0 if right, 3 if wrong). To avoid \
            typing it for every command in a script, set ACSECURE_PASSCODE (visible to your own \
            processes) or pipe it with --passcode-stdin.
            """)

    @OptionGroup var global: GlobalOptions

    func run() throws {
        let services = try global.openServicesLocked()
        if !services.isPasscodeSet {
            print("\(global.storeDirectory) has no passcode: there is nothing to unlock; every acsecure run by this user can use its keys")
            return
        }
        _ = try global.openServices()
        print("passcode OK for \(global.storeDirectory)")
        print("note: acsecure keeps no keys between runs; each command asks for the passcode again (or reads $ACSECURE_PASSCODE)")
    }
}

struct Lock: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Explain locking: acsecure never leaves keys behind.",
        discussion: """
            acsecure holds keys only while one command runs, in guarded memory that is wiped when it \
            exits, so there is nothing to lock afterwards. `lock` checks that the store exists and says \
            so. To make the store unusable without its passcode, set one with `acsecure passwd`; to \
            destroy it, `acsecure retire`.
            """)

    @OptionGroup var global: GlobalOptions

    func run() throws {
        let services = try global.openServicesLocked()
        print("nothing to lock: no acsecure process holds keys for \(global.storeDirectory) after it exits")
        if !services.isPasscodeSet {
            print("note: this store has no passcode, so any acsecure run by this user can unlock it; `acsecure passwd` adds one")
        }
    }
}

struct Passwd: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Change, add or remove the store's passcode (no file is re-encrypted).",
        discussion: """
            The old passcode (when the store has one) comes from --passcode-stdin (first line), \
            $ACSECURE_PASSCODE, or a prompt; the new one from --passcode-stdin (next line), \
            $ACSECURE_NEW_PASSCODE, or a prompt asked twice. Only the sealed seed is rewritten.
            """)

    @OptionGroup var global: GlobalOptions
    @Flag(help: "Remove the passcode (the seed is then protected by file permissions only).") var remove = false

    func run() throws {
        let services = try global.openServicesLocked(passcodeChange: true)
        let old: SecureBytes? = services.isPasscodeSet ? try global.currentPasscode() : nil
        var new: SecureBytes?
        if !remove {
            if global.passcodeFromStdin {
                new = try Passcode.readLine(fd: 0, what: "new passcode")
            } else if let p = try Passcode.fromEnvironment("ACSECURE_NEW_PASSCODE") {
                new = p
            } else {
                new = try Passcode.promptNew(allowEmpty: false)
            }
            if new?.count == 0 { throw CLIError(.usage, "the new passcode must not be empty (use --remove to remove it)") }
        }
        do {
            try services.setPasscode(old: old, new: new)
        } catch {
            throw CLIError(error, store: global.storeDirectory)
        }
        print(remove ? "passcode removed from \(global.storeDirectory)" : "passcode changed for \(global.storeDirectory)")
        print("no file was re-encrypted (the passcode seals only the store's seed)")
    }
}

struct Retire: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Destroy the store: every secure file made with it becomes unreadable for ever.",
        discussion: "Asks for confirmation on the terminal unless --yes is given; refuses without either.")

    @OptionGroup var global: GlobalOptions
    @Flag(help: "Do not ask for confirmation.") var yes = false

    func run() throws {
        let services = try global.openServicesLocked()
        if !yes {
            let fd = Glibc.open("/dev/tty", O_RDWR | O_CLOEXEC | O_NOCTTY)
            guard fd >= 0 else {
                throw CLIError(.usage, "refusing to retire \(global.storeDirectory) without confirmation: no terminal to ask on (pass --yes)")
            }
            defer { Glibc.close(fd) }
            let question = "This destroys the store \(global.storeDirectory): every file encrypted with it becomes unreadable for ever.\nType 'retire' to confirm: "
            _ = Array(question.utf8).withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
            let answer = try Passcode.readLine(fd: fd, what: "confirmation")
            let expected = try guardedBytes("confirmation") { () throws(CryptoError) in try SecureBytes(copying: Array("retire".utf8)) }
            guard answer == expected else {
                throw CLIError(.usage, "not confirmed; \(global.storeDirectory) was left as it was")
            }
        }
        do {
            try services.retire()
        } catch {
            throw CLIError(error, store: global.storeDirectory)
        }
        print("retired \(global.storeDirectory): the seed was overwritten and removed; its secure files can no longer be decrypted")
    }
}
