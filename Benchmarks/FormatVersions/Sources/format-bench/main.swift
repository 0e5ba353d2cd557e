// Throughput of the engine (Swift API): sequential 1 MiB write/read, random 4 KiB pread/pwrite,
// and random 4 KiB pread on a file written in many short sessions. Prints MB/s or ops/s.
import Glibc
import ACCrypto
import ACSecureServices
import ACSecureFileCore

let dir = CommandLine.arguments[1]
let sizeMiB = Int(CommandLine.arguments.count > 2 ? CommandLine.arguments[2] : "256")!
let kek = try KeyEncryptionKey(key: try SecureBytes(copying: (0..<32).map { UInt8($0) }), keyClass: .cryptoBlock)
let services = FixedKeyProvider(kek: kek)
func now() -> Double { var t = timespec(); clock_gettime(CLOCK_MONOTONIC, &t); return Double(t.tv_sec) + Double(t.tv_nsec) / 1e9 }
var rng = SystemRandomNumberGenerator()
let mib = 1 << 20
let buf = UnsafeMutableRawBufferPointer.allocate(byteCount: mib, alignment: 64)
for i in 0..<mib { buf[i] = UInt8(truncatingIfNeeded: i &* 31) }

let path = dir + "/seq.acsf"
unlink(path)
var t0 = now()
var f = try SecureFile.open(path, flags: O_RDWR | O_CREAT, services: services)
for _ in 0..<sizeMiB { _ = try f.write(UnsafeRawBufferPointer(buf)) }
try f.close()
let seqWrite = Double(sizeMiB) / (now() - t0)

f = try SecureFile.open(path, flags: O_RDONLY, services: services)
t0 = now()
for i in 0..<sizeMiB { _ = try f.pread(into: buf, at: Int64(i * mib)) }
let seqRead = Double(sizeMiB) / (now() - t0)

let ops = 20_000
let chunks = sizeMiB * 256
let small = UnsafeMutableRawBufferPointer(rebasing: buf[0..<4096])
t0 = now()
for _ in 0..<ops { _ = try f.pread(into: small, at: Int64(Int.random(in: 0..<chunks, using: &rng) * 4096)) }
let randRead = Double(ops) / (now() - t0)
try f.close()

f = try SecureFile.open(path, flags: O_RDWR, services: services)
t0 = now()
for _ in 0..<ops { _ = try f.pwrite(UnsafeRawBufferPointer(small), at: Int64(Int.random(in: 0..<chunks, using: &rng) * 4096)) }
let randWrite = Double(ops) / (now() - t0)
try f.close()

// A 64 MiB file whose chunks were written in 4096 short sessions (4 random chunk writes each):
// in version 2, thousands of key selectors, far more than a reader caches.
let many = dir + "/many.acsf"
unlink(many)
f = try SecureFile.open(many, flags: O_RDWR | O_CREAT, services: services)
for _ in 0..<64 { _ = try f.write(UnsafeRawBufferPointer(buf)) }
try f.close()
if CommandLine.arguments.count <= 3 || CommandLine.arguments[3] != "reuse" {
    for _ in 0..<4096 {
        let g = try SecureFile.open(many, flags: O_RDWR, services: services)
        for _ in 0..<4 { _ = try g.pwrite(UnsafeRawBufferPointer(small), at: Int64(Int.random(in: 0..<(64 * 256), using: &rng) * 4096)) }
        try g.close()
    }
}
f = try SecureFile.open(many, flags: O_RDONLY, services: services)
t0 = now()
for _ in 0..<ops { _ = try f.pread(into: small, at: Int64(Int.random(in: 0..<(64 * 256), using: &rng) * 4096)) }
let randReadMany = Double(ops) / (now() - t0)
try f.close()
unlink(path); unlink(many)
print("seqWriteMiBps \(Int(seqWrite)) seqReadMiBps \(Int(seqRead)) randReadOps \(Int(randRead)) randWriteOps \(Int(randWrite)) randReadManySessionsOps \(Int(randReadMany))")
