import ArgumentParser
import ACSecureFoundation

struct ACSecureCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "acsecure",
        abstract: "Encrypt, read and check AppConnect-style secure files (chunked AES-256-GCM).",
        discussion: """
            Keys come from a store (a directory holding one random seed, optionally sealed with a \
            passcode). Every file's data key is wrapped under a key derived from the seed and the app ID \
            (or an encryption group ID), so files are readable only with the same store and app ID.

            acsecure keeps no keys between runs: each command opens the store, derives what it needs and \
            wipes it when it exits. With a passcode, every command asks for it (or reads \
            $ACSECURE_PASSCODE / --passcode-stdin).

            OPTIONS OF EVERY COMMAND (before or after the command name):
              --app-id ID        the app whose key protects the files
              --store DIR        the store directory
              --passcode-stdin   read the passcode from standard input

            ENVIRONMENT:
              ACSECURE_APP_ID    app ID (default "default"), like --app-id
              ACSECURE_HOME      store directory, like --store
              ACSECURE_PASSCODE  passcode of a protected store (for scripts and CI;
                                 other processes of this user can read it)

            \(ExitStatus.helpText)

            Shell completion: acsecure --generate-completion-script bash|zsh|fish
            """,
        version: ACSecureFileKitVersion,  // Sources/ACSecureFoundation/Version.swift
        subcommands: [
            Demo.self,
            Init.self, Status.self, Unlock.self, Lock.self, Passwd.self, Retire.self,
            Encrypt.self, Decrypt.self, Cat.self, Write.self,
            Stat.self, Verify.self, List.self,
            Share.self, Rekey.self,
        ]
    )
}
