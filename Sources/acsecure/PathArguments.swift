#if canImport(Glibc)
import Glibc
#endif
import ArgumentParser
import ACSystemCalls

/// File names on the command line are bytes: argument-parser receives `CommandLine.arguments`,
/// where an argument that is not UTF-8 has each bad byte replaced by U+FFFD. A path argument is
/// therefore taken back from `argv` itself: the argument whose repaired text is the value parsed.
/// Two arguments (or `--option=value` values) that repair to the same text but differ in their bytes
/// cannot be told apart; such a path is refused with a clear error rather than guessed.
extension BytePath: ExpressibleByArgument {
    public init?(argument: String) {
        switch RawArguments.table[argument] {
        case .exact(let bytes)?: self.init(bytes: bytes)  // argv holds no NUL
        case .ambiguous?: return nil
        case nil: self.init(argument)
        }
    }

    public var defaultValueDescription: String { description }
}

enum RawArguments {
    enum Entry: Equatable { case exact([UInt8]), ambiguous }

    /// Repaired text → the bytes of the argument (or `--name=` value) it came from.
    static let table: [String: Entry] = {
        var table: [String: Entry] = [:]
        func add(_ raw: [UInt8]) {
            let text = String(decoding: raw, as: UTF8.self)
            switch table[text] {
            case nil: table[text] = .exact(raw)
            case .exact(let other)? where other != raw: table[text] = .ambiguous
            default: break
            }
        }
        for i in 1 ..< Int(CommandLine.argc) {
            guard let p = CommandLine.unsafeArgv[i] else { continue }
            let raw = BytePath(platformString: p).bytes
            add(raw)
            if raw.starts(with: [UInt8(ascii: "-"), UInt8(ascii: "-")]), let equals = raw.firstIndex(of: UInt8(ascii: "=")) {
                add(Array(raw[(equals + 1)...]))
            }
        }
        return table
    }()
}
