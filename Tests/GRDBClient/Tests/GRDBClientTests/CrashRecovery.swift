import ACSecureGRDBSupport
import Foundation
import GRDB
import XCTest
#if canImport(Glibc)
import Glibc
#endif

/// SplitMix64: a seeded generator, so a failing round can be replayed (GRDB_CLIENT_SEED).
struct SeededGenerator: RandomNumberGenerator {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

extension WriterTestCase {
    /// A child process (grdb-crash-child) writing through GRDB is SIGKILLed 10 times
    /// (GRDB_CLIENT_CRASH_ROUNDS) on the same database: even rounds in the middle of a big
    /// transaction that has overwritten every row and written over 1 MiB (pages in the database file
    /// and a hot journal, or frames in the WAL), odd rounds at a random moment among small commits.
    /// After each kill the files on disk are encrypted (the hot journal too), the database opens,
    /// passes `PRAGMA integrity_check`, holds every transaction the child said it committed, whole,
    /// with the right bytes, and no part of any other transaction but the one it may have committed
    /// just before the kill (whole as well).
    func checkCrashRecovery() throws {
        let rounds = ProcessInfo.processInfo.environment["GRDB_CLIENT_CRASH_ROUNDS"].flatMap { Int($0) } ?? 10
        let seed = ProcessInfo.processInfo.environment["GRDB_CLIENT_SEED"].flatMap { UInt64($0) } ?? UInt64.random(in: 1...999_999)
        var random = SeededGenerator(state: seed)
        let context = "\(kind), seed \(seed) (GRDB_CLIENT_SEED replays it)"
        let dbPath = path("crash.sqlite")
        try FileManager.default.createDirectory(atPath: path("logs"), withIntermediateDirectories: false)
        let child = ChildProcess.crashChildPath
        guard FileManager.default.isExecutableFile(atPath: child) else {
            XCTFail("the crash child is not at \(child) (build the package's executables, or set GRDB_CRASH_CHILD)")
            return
        }
        var committed = Set<Int>()  // every transaction a child saw commit, or that recovery showed committed
        var nextSeq = 1
        var hotJournals = 0
        for round in 0..<rounds {
            let big = round % 2 == 0
            let process = try ChildProcess([child, kind, dbPath, big ? "big" : "stream", String(nextSeq)],
                                           extraEnvironment: ["ACSECURE_WRITE_CACHE_MIB": "1"],
                                           stderrPath: path("logs/child-\(round).stderr"))
            var inFlight: Int?
            if big {
                guard let line = process.waitForLine(timeout: 60, { $0.hasPrefix("inside ") }) else {
                    process.drain()
                    XCTFail("round \(round): the child never said it was inside its big transaction (\(context)): \(process.lines) \(process.stderrText)")
                    return
                }
                inFlight = Int(line.dropFirst("inside ".count))
                usleep(UInt32.random(in: 0..<30_000, using: &random))
            } else {
                let target = Int.random(in: 1...12, using: &random)
                var said = 0
                guard process.waitForLine(timeout: 60, { line in
                    if line.hasPrefix("committed ") { said += 1 }
                    return said >= target
                }) != nil else {
                    process.drain()
                    XCTFail("round \(round): the child did not commit \(target) transactions (\(context)): \(process.lines) \(process.stderrText)")
                    return
                }
                usleep(UInt32.random(in: 0..<10_000, using: &random))
            }
            kill(process.pid, SIGKILL)
            let status = process.waitForExit()
            guard status & 0x7f == SIGKILL else {
                XCTFail("round \(round): the child ended by itself (status \(status)) before the kill (\(context)): \(process.stderrText)")
                return
            }
            process.drain()
            let said = process.lines.compactMap { $0.hasPrefix("committed ") ? Int($0.dropFirst("committed ".count)) : nil }
            committed.formUnion(said)
            if big && kind == "queue" {
                // Killed inside the transaction: the journal is there, hot (and encrypted, below).
                let journal = (try? FileManager.default.attributesOfItem(atPath: dbPath + "-journal")[.size] as? Int) ?? 0
                if journal > 0 { hotJournals += 1 }
            }
            if checksFilesOnDisk {
                let (checked, problems) = try OnDisk.plaintextProblems(in: directory)
                XCTAssertTrue(problems.isEmpty, "round \(round), after the kill: \(problems) (\(context))")
                XCTAssertTrue(checked.contains("crash.sqlite"), "round \(round): no database after the kill: \(checked)")
            }

            // Recovery: what a restarted app does.
            let writer = try open(dbPath)
            let (integrity, rows) = try writer.read { db in
                (try String.fetchAll(db, sql: "PRAGMA integrity_check"),
                 try Row.fetchAll(db, sql: "SELECT seq, n, payload FROM entry ORDER BY seq, n"))
            }
            try writer.close()
            XCTAssertEqual(integrity, ["ok"], "round \(round) (\(context))")
            var bySeq: [Int: [Row]] = [:]
            for row in rows { bySeq[row["seq"], default: []].append(row) }
            for seq in committed {
                XCTAssertNotNil(bySeq[seq], "round \(round): transaction \(seq) committed but lost (\(context))")
            }
            let lastSaid = said.max() ?? (nextSeq - 1)
            var changedRows: [String] = []
            for (seq, rows) in bySeq.sorted(by: { $0.key < $1.key }) {
                if !committed.contains(seq) {
                    // Only the transaction after the last one announced may have committed unannounced.
                    XCTAssertTrue(!big && seq == lastSaid + 1, "round \(round): transaction \(seq) is there but was never committed (\(context))")
                    committed.insert(seq)
                }
                XCTAssertEqual(rows.map { $0["n"] as Int }, Array(0..<CrashWorkload.smallRows), "round \(round): transaction \(seq) is not whole (\(context))")
                for row in rows where row["payload"] as Data != CrashWorkload.payload(seq: seq, n: row["n"], size: CrashWorkload.smallPayload) {
                    changedRows.append("\(seq).\(row["n"] as Int)")
                }
            }
            XCTAssertTrue(changedRows.isEmpty, "round \(round): \(changedRows.count) of \(rows.count) rows have other bytes (transaction.row: \(changedRows.prefix(10).joined(separator: ", "))) (\(context))")
            if let inFlight { XCTAssertNil(bySeq[inFlight], "round \(round): the big transaction \(inFlight) was never committed (\(context))") }
            nextSeq = max(bySeq.keys.max() ?? 0, lastSaid, inFlight ?? 0) + 1
        }
        if kind == "queue" {
            XCTAssertEqual(hotJournals, (rounds + 1) / 2, "each big round was killed with a hot journal (\(context))")
        }
        XCTAssertGreaterThan(committed.count, rounds, "the children committed something (\(context))")
    }
}
