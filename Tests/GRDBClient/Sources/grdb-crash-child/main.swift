// The writer the crash-recovery tests SIGKILL (GRDBClientTests/CrashRecoveryTests.swift):
//
//     grdb-crash-child queue|pool DATABASE stream|big FIRST_SEQ
//
// stream: commits small transactions FIRST_SEQ, FIRST_SEQ+1, ... for ever, printing "committed SEQ"
//         once each write returned;
// big:    commits three small ones, then opens one big transaction that overwrites every row's
//         payload, inserts, prints "inside SEQ" once it has written over 1 MiB (pages in the
//         database file and a hot journal, or frames in the WAL) and goes on inserting until it
//         is killed (it never commits).
// Every line is flushed as it is printed: the parent kills on what it reads.
import ACSecureGRDBSupport
import Foundation
import GRDB

/// One line on standard output, written at once (no stdio buffer for a SIGKILL to lose).
func say(_ line: String) {
    var line = line + "\n"
    line.withUTF8 { bytes in _ = write(1, bytes.baseAddress, bytes.count) }
}
func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("grdb-crash-child: \(message)\n".utf8))
    exit(1)
}
let arguments = CommandLine.arguments
guard arguments.count == 5, let firstSeq = Int(arguments[4]), ["stream", "big"].contains(arguments[3]) else {
    fail("usage: grdb-crash-child queue|pool DATABASE stream|big FIRST_SEQ")
}
do {
    // First, before GRDB opens anything: every connection of this process is encrypted
    // (GRDB_CLIENT_VFS=unix: the baseline run on plain SQLite).
    if !Baseline.isPlainSQLite { try ACSecureVFS.makeDefault() }
    var configuration = Configuration()
    configuration.busyMode = .timeout(10)
    // A small page cache: the big transaction spills its pages to the database file (or the WAL).
    configuration.prepareDatabase { db in try db.execute(sql: "PRAGMA cache_size = 16") }
    let writer = try CrashWorkload.openWriter(kind: arguments[1], path: arguments[2], configuration: configuration)
    try writer.write(CrashWorkload.createSchema)
    func commitSmall(_ seq: Int) throws {
        try writer.write { db in
            for n in 0..<CrashWorkload.smallRows {
                try db.execute(sql: "INSERT INTO entry(seq, n, payload) VALUES (?, ?, ?)",
                               arguments: [seq, n, CrashWorkload.payload(seq: seq, n: n, size: CrashWorkload.smallPayload)])
            }
        }
        say("committed \(seq)")
    }
    if arguments[3] == "stream" {
        for seq in firstSeq... { try commitSmall(seq) }
    }
    for seq in firstSeq..<(firstSeq + 3) { try commitSmall(seq) }
    let seq = firstSeq + 3
    try writer.write { db in
        // Every committed row changed first (their pages spill to the database file with the
        // rest): only the journal (or the WAL) can give them back after the kill.
        try db.execute(sql: "UPDATE entry SET payload = randomblob(length(payload))")
        for n in 0... {
            try db.execute(sql: "INSERT INTO entry(seq, n, payload) VALUES (?, ?, ?)",
                           arguments: [seq, n, CrashWorkload.payload(seq: seq, n: n, size: CrashWorkload.bigPayload)])
            if n == CrashWorkload.bigRowsBeforeAnnouncing { say("inside \(seq)") }
            if n >= 20 * CrashWorkload.bigRowsBeforeAnnouncing { while true { pause() } }  // waits for the kill
        }
    }
    fail("the big transaction committed")
} catch {
    fail("\(error)")
}
