// A writer process for MultiProcessWriterTests: several of these write one secure file at once.
//
//     ACSecureMultiWriter <store> <file> <writer index> <writers> <block size> <rounds> <mode>
//
// mode "blocks": writer i pwrites every block b with b % writers == i, each round, with bytes
//   MultiWriterPattern.byte(writer: i, round: r, block: b, j); blocks straddle chunk boundaries, so
//   writers read-modify-write the same chunks.
// mode "append": writer i appends `rounds` records of `block size` bytes (O_APPEND), each record
//   filled with one byte identifying (writer, round).
// Exits 0 on success; prints "E <message>" and exits 1 on any error.
#if canImport(Glibc)
import Glibc
#endif
import ACSecureServices
import ACSecureFileCore

let args = CommandLine.arguments
guard args.count == 8, let index = Int(args[3]), let writers = Int(args[4]), let block = Int(args[5]), let rounds = Int(args[6]) else {
    print("E usage: ACSecureMultiWriter <store> <file> <index> <writers> <block> <rounds> blocks|append")
    exit(2)
}

func byte(writer: Int, round: Int, block: Int, _ j: Int) -> UInt8 {
    UInt8(truncatingIfNeeded: writer &* 73 &+ round &* 31 &+ block &* 7 &+ j)
}

do {
    let services = try SecureServices(appID: "com.example.multiwriter", storeDirectory: args[1], argonCost: .minimum)
    if args[7] == "append" {
        let f = try SecureFile.open(args[2], flags: O_WRONLY | O_APPEND, services: services, sharing: .processes)
        for r in 0..<rounds {
            let record = [UInt8](repeating: UInt8(truncatingIfNeeded: index * 16 + r % 16 + 1), count: block)
            let n = try record.withUnsafeBytes { try f.write($0) }
            if n != block { print("E short append \(n)"); exit(1) }
        }
        try f.close()
    } else {
        let f = try SecureFile.open(args[2], flags: O_RDWR, services: services, sharing: .processes)
        let blocks = 64
        for r in 0..<rounds {
            for b in stride(from: index, to: blocks, by: writers) {
                let data = (0..<block).map { byte(writer: index, round: r, block: b, $0) }
                let n = try data.withUnsafeBytes { try f.pwrite($0, at: Int64(b * block)) }
                if n != block { print("E short write \(n)"); exit(1) }
            }
        }
        try f.close()
    }
} catch {
    print("E \(error)")
    exit(1)
}
exit(0)
