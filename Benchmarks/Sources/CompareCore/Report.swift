#if canImport(Glibc)
import Glibc
#endif

/// Turns samples into ratios against same-round baselines, checked against the issue's targets.
struct Report {
    let results: Results
    let options: Comparison.Options
    let engineLabel: String
    let hasGocryptfs: Bool
    /// Engine modes measured besides the default ("engine-wb", "engine-mp").
    let variants: [String]

    /// One target: the engine's `metric` against `baseline` (a contender's same metric, or another metric).
    struct Check {
        var label: String
        var metric: String
        var baselineMetric: String
        var baseline: String
        var baselineLabel: String
        var target: Double
        /// Whose figure is divided: the default engine, or one of its other modes.
        var contender = "engine"
    }

    var checks: [Check] {
        // The durability issue's targets: the default (write-through) mode first, then the
        // opt-in write-back mode, the durability call and the coordinated mode.
        var c: [Check] = [
            Check(label: "seq write, 1 MiB calls", metric: "seqwrite 1 MiB", baselineMetric: "seqwrite 1 MiB", baseline: "plain", baselineLabel: "plain write", target: 0.6),
            Check(label: "seq read, 1 MiB calls", metric: "seqread 1 MiB", baselineMetric: "openssl 4096", baseline: "openssl", baselineLabel: "OpenSSL AES-256-GCM @4 KiB", target: 0.85),
            Check(label: "random 4 KiB pread", metric: "randread 4 KiB", baselineMetric: "randread 4 KiB", baseline: "plain", baselineLabel: "plain pread", target: 0.3),
            Check(label: "random 4 KiB pwrite", metric: "randwrite 4 KiB", baselineMetric: "randwrite 4 KiB", baseline: "plain", baselineLabel: "plain pwrite", target: 0.5),
            Check(label: "100 B appends", metric: "append 100 B", baselineMetric: "append 100 B", baseline: "plain", baselineLabel: "plain write()", target: 0.3),
            Check(label: "512 B appends", metric: "append 512 B", baselineMetric: "append 512 B", baseline: "plain", baselineLabel: "plain write()", target: 0.3),
        ]
        if variants.contains("engine-wb") {
            c.append(Check(label: "100 B appends, write-back", metric: "append 100 B", baselineMetric: "append 100 B", baseline: "plain", baselineLabel: "plain write()", target: 1.5, contender: "engine-wb"))
            c.append(Check(label: "512 B appends, write-back", metric: "append 512 B", baselineMetric: "append 512 B", baseline: "plain", baselineLabel: "plain write()", target: 1.5, contender: "engine-wb"))
        }
        // Rates (calls/s): ≥ 1/1.1 is "takes at most 1.1× as long".
        c.append(Check(label: "fsync after 8 MiB written", metric: "fsync 8 MiB", baselineMetric: "fsync 8 MiB", baseline: "plain", baselineLabel: "plain fsync(2)", target: 1 / 1.1))
        if variants.contains("engine-mp") {
            c.append(Check(label: "random 4 KiB pread, coordinated", metric: "randread 4 KiB", baselineMetric: "randread 4 KiB", baseline: "engine", baselineLabel: "engine, default mode", target: 0.5, contender: "engine-mp"))
            c.append(Check(label: "random 4 KiB pwrite, coordinated", metric: "randwrite 4 KiB", baselineMetric: "randwrite 4 KiB", baseline: "engine", baselineLabel: "engine, default mode", target: 0.5, contender: "engine-mp"))
        }
        if hasGocryptfs {
            c.insert(Check(label: "seq write, 1 MiB calls", metric: "seqwrite 1 MiB", baselineMetric: "seqwrite 1 MiB", baseline: "gocryptfs", baselineLabel: "gocryptfs", target: 3), at: 1)
            c.insert(Check(label: "seq read, 1 MiB calls", metric: "seqread 1 MiB", baselineMetric: "seqread 1 MiB", baseline: "gocryptfs", baselineLabel: "gocryptfs", target: 3), at: 3)
            c.insert(Check(label: "random 4 KiB pread", metric: "randread 4 KiB", baselineMetric: "randread 4 KiB", baseline: "gocryptfs", baselineLabel: "gocryptfs", target: 8), at: 5)
        }
        return c
    }

    /// The median over rounds of engine(round) / baseline(round): each ratio pairs figures taken
    /// seconds apart, so slow drifts in machine load cancel.
    func ratio(_ c: Check) -> (median: Double, min: Double, max: Double)? {
        guard let e = results.samples[c.metric]?[c.contender], let b = results.samples[c.baselineMetric]?[c.baseline],
              e.count == b.count, !e.isEmpty else { return nil }
        let r = zip(e, b).map { $0 / $1 }.sorted()
        let m = r.count % 2 == 1 ? r[r.count / 2] : (r[r.count / 2 - 1] + r[r.count / 2]) / 2
        return (m, r.first!, r.last!)
    }

    func rate(_ metric: String, _ v: Double) -> String {
        if metric.hasPrefix("rand") { return fmt("%.0fk ops/s", v / 1e3) }
        if metric.hasPrefix("fsync") { return fmt("%.2f ms", 1e3 / v) }
        return v >= 1e9 ? fmt("%.2f GB/s", v / 1e9) : fmt("%.0f MB/s", v / 1e6)
    }

    func markdown() -> String {
        var s = "### Targets (engine ÷ baseline, median of per-round ratios, \(options.repetitions) rounds)\n\n"
        s += "| Workload | Baseline | Ratio (min–max) | Target | Met |\n|---|---|---|---|---|\n"
        for c in checks {
            guard let r = ratio(c) else { continue }
            s += "| \(c.label) | \(c.baselineLabel) | " + fmt("**%.2f×** (%.2f–%.2f) | ≥ %.2f×", r.median, r.min, r.max, c.target)
            s += " | \(r.median >= c.target ? "yes" : "**no**") |\n"
        }
        if let rss = results.peakRSS["engine"] {
            let plain = results.peakRSS["plain"] ?? 0
            let streamed = options.streamPasses * options.fileSize
            s += fmt("| peak RSS of a process streaming %d MiB written + %d MiB read | same process, plain I/O: %.1f MiB | **%.1f MiB** (+%.1f MiB) | < 32 MiB",
                     streamed >> 20, streamed >> 20, Double(plain) / 1048576, Double(rss) / 1048576, Double(rss - plain) / 1048576)
            s += " | \(rss < 32 << 20 ? "yes" : "**no**") |\n"
        }
        s += fmt("| storage overhead, %d MiB file | plaintext size | **%.3f %%** | ≤ 0.8 %%", options.fileSize >> 20, results.overhead * 100)
        s += " | \(results.overhead <= 0.008 ? "yes" : "**no**") |\n"

        let names = ["plain", "engine"] + variants + (hasGocryptfs ? ["gocryptfs"] : [])
        s += "\n### All workloads (median; spread = (max−min)/median over rounds)\n\n"
        s += "| Workload | " + names.joined(separator: " | ") + " | engine ÷ plain" + (hasGocryptfs ? " | engine ÷ gocryptfs" : "") + " |\n"
        s += "|---" + String(repeating: "|---", count: names.count + (hasGocryptfs ? 2 : 1)) + "|\n"
        for metric in results.order where !metric.hasPrefix("openssl") {
            s += "| \(metric) |"
            for n in names {
                if let m = results.median(metric, n) {
                    s += " \(rate(metric, m))" + (results.spread(metric, n).map { fmt(" (±%.0f %%)", $0 * 50) } ?? "") + " |"
                } else { s += " – |" }
            }
            for base in ["plain"] + (hasGocryptfs ? ["gocryptfs"] : []) {
                let c = Check(label: "", metric: metric, baselineMetric: metric, baseline: base, baselineLabel: "", target: 0)
                s += ratio(c).map { fmt(" %.2f×", $0.median) } ?? " –"
                s += " |"
            }
            s += "\n"
        }
        for bytes in [4096, 65536] {
            let metric = "openssl \(bytes)"
            if let m = results.median(metric, "openssl") {
                let c = Check(label: "", metric: "seqread 1 MiB", baselineMetric: metric, baseline: "openssl", baselineLabel: "", target: 0)
                s += "| `openssl speed -evp aes-256-gcm -bytes \(bytes)` | \(rate(metric, m))"
                s += results.spread(metric, "openssl").map { fmt(" (±%.0f %%)", $0 * 50) } ?? ""
                s += fmt(" | engine seq read 1 MiB ÷ this: %.2f× |", ratio(c)?.median ?? 0)
                s += String(repeating: " |", count: names.count + (hasGocryptfs ? 0 : -1)) + "\n"
            }
        }
        s += "\nEngine driven through \(engineLabel). File \(options.fileSize >> 20) MiB, page cache warm, "
        s += "\(options.repetitions) interleaved rounds; random I/O runs ≥ \(options.minSeconds) s per sample, appends "
        s += "≥ \(options.minSeconds) s or \(Workloads.smallWritesBytes >> 20) MiB, whichever comes first, "
        s += "sequential writes in 4 KiB and 64 KiB calls stop after \(4 * options.minSeconds) s.\n"
        return s
    }

    /// label, measured ratio, target: one line per check, for gnuplot.
    func chartData() -> String {
        var s = "# label ratio target\n"
        for c in checks {
            guard let r = ratio(c) else { continue }
            s += "\"\(c.label)\\nvs \(c.baselineLabel)\" " + fmt("%.4f %.4f\n", r.median, c.target)
        }
        return s
    }
}
