#if canImport(Glibc)
import Glibc
#endif

/// A one-line progress bar on stderr, only when stderr is a terminal and the work is long
/// (≥ 64 MiB); never when piped, so scripts and logs see only results.
final class Progress {
    static let threshold: Int64 = 64 << 20

    private let label: String
    private let total: Int64
    private let start: UInt64
    private var lastDraw: UInt64 = 0
    private var drawn = false

    /// nil when no bar should be shown.
    static func make(_ label: String, total: Int64?) -> Progress? {
        guard let total, total >= threshold, isatty(2) == 1 else { return nil }
        if let term = getenv("TERM"), String(cString: term) == "dumb" { return nil }
        return Progress(label: label, total: total)
    }

    private init(label: String, total: Int64) {
        self.label = label
        self.total = total
        self.start = Self.now()
    }

    func update(_ done: Int64) {
        let t = Self.now()
        guard t - lastDraw >= 100_000_000 || done >= total else { return }
        lastDraw = t
        let fraction = total > 0 ? min(1, Double(done) / Double(total)) : 1
        let width = 30
        let filled = Int(fraction * Double(width))
        let seconds = Double(t - start) / 1e9
        let rate = seconds > 0 ? Double(done) / seconds / 1_048_576 : 0
        let bar = String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled)
        let name = label.count > 32 ? "…" + label.suffix(31) : label
        writeStderr("\r\(name) [\(bar)] \(Int(fraction * 100))% \(Int(rate)) MiB/s\u{1B}[K")
        drawn = true
    }

    /// Clears the bar's line.
    func finish() {
        if drawn { writeStderr("\r\u{1B}[K") }
        drawn = false
    }

    deinit { finish() }

    private static func now() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }
}
