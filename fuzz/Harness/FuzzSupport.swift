// The harness runs on the in-memory file system, which exists only in builds with system-call
// mocking (debug, and the fuzzers' release build): elsewhere (a release build of the main package)
// this file compiles to nothing.
#if ACSECURE_SYSCALL_MOCKING
#if canImport(Glibc)
import Glibc
#endif
@_spi(Testing) import ACSecureFileCore
@_spi(Testing) import ACSystemCallsTesting

/// A fuzz finding: what went wrong, never the plaintext or key bytes.
public struct FuzzFinding: Error, CustomStringConvertible {
    public var description: String
    init(_ description: String) { self.description = description }
}

/// The body of every libFuzzer entry point (`LLVMFuzzerTestOneInput`, one per target executable):
/// runs `fuzzer` on the input; a finding is written to stderr and aborts, so libFuzzer keeps the input.
public func runFuzzInput(_ target: String, _ data: UnsafePointer<UInt8>?, _ size: Int,
                         _ fuzzer: ([UInt8]) -> FuzzFinding?) -> CInt {
    let input = data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? []
    if let finding = fuzzer(input) {
        let message = Array("FINDING (\(target)): \(finding)\n".utf8)
        _ = message.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
        abort()
    }
    return 0
}

/// A scratch directory for the fuzzers' files, removed when the process exits.
enum FuzzScratch {
    nonisolated(unsafe) private static var made: String?

    static var directory: String {
        if let made { return made }
        var template = Array("/tmp/acsecure-fuzz-XXXXXX".utf8CString)
        guard let p = mkdtemp(&template) else { fatalError("mkdtemp failed: errno \(errno)") }
        let dir = String(cString: p)
        made = dir
        atexit { FuzzScratch.removeAll() }
        return dir
    }

    static func path(_ name: String) -> String { directory + "/" + name }

    /// rm -rf of the scratch directory (two levels: files and the store directory).
    static func removeAll() {
        guard let made else { return }
        removeTree(made)
    }

    private static func removeTree(_ path: String) {
        var st = stat()
        guard lstat(path, &st) == 0 else { return }
        if st.st_mode & S_IFMT == S_IFDIR, let dir = opendir(path) {
            var names: [String] = []
            while let e = readdir(dir) {
                let name = withUnsafePointer(to: e.pointee.d_name) { String(cString: UnsafeRawPointer($0).assumingMemoryBound(to: CChar.self)) }
                if name != "." && name != ".." { names.append(name) }
            }
            closedir(dir)
            for n in names { removeTree(path + "/" + n) }
            rmdir(path)
        } else {
            unlink(path)
        }
    }
}


/// The fuzzers' files live in memory (`MemoryFileSystem` behind the engine's `Sys` layer): no
/// system call per operation, so a target runs thousands of inputs per second. Each run installs the
/// file system for its own duration only (the unit tests replay inputs in a process that also runs
/// tests on real files) and starts from an empty one.
enum FuzzFileSystem {
    static let shared = MemoryFileSystem()

    static func run<R>(fresh: Bool = true, _ body: (MemoryFileSystem) -> R) -> R {
        let previous = MemoryFileSystem.current
        if fresh { shared.removeAll() }
        MemoryFileSystem.use(shared)
        defer { MemoryFileSystem.use(previous) }
        return body(shared)
    }

    /// Runs `body` on the kernel's file system: the store (a real directory, which the in-memory file
    /// system does not model) is read through the same system-call layer as the files.
    static func onRealFiles<R, E: Error>(_ body: () throws(E) -> R) throws(E) -> R {
        let memory = MemoryFileSystem.current
        MemoryFileSystem.use(nil)
        defer { MemoryFileSystem.use(memory) }
        return try body()
    }
}

/// Reads fuzz input bytes front to back; past the end every read is 0.
struct ByteCursor {
    let bytes: [UInt8]
    var position = 0
    init(_ bytes: [UInt8]) { self.bytes = bytes }
    var isAtEnd: Bool { position >= bytes.count }
    mutating func u8() -> UInt8 {
        defer { position += 1 }
        return position < bytes.count ? bytes[position] : 0
    }
    mutating func u16() -> Int { Int(u8()) << 8 | Int(u8()) }
}

/// Whether the first `count` bytes of `a` and `b` are equal (one `memcmp`: element-wise comparison
/// under coverage instrumentation costs more than the engine call it checks).
func sameBytes(_ a: [UInt8], _ b: [UInt8], count: Int) -> Bool {
    precondition(count <= a.count && count <= b.count)
    if count == 0 { return true }
    return a.withUnsafeBytes { x in b.withUnsafeBytes { memcmp(x.baseAddress!, $0.baseAddress!, count) == 0 } }
}

/// Up to 8 integers as a value (the buffer sizes of a readv or writev call): an array per call was a
/// heap allocation, which ASan makes costly.
struct SmallIntList: RandomAccessCollection, CustomStringConvertible {
    private typealias Storage = InlineArray<8, Int>
    static let capacity = Storage.count
    private var storage = Storage(repeating: 0)
    private(set) var count = 0

    var startIndex: Int { 0 }
    var endIndex: Int { count }

    mutating func append(_ value: Int) {
        precondition(count < Self.capacity)
        storage[count] = value
        count += 1
    }

    subscript(i: Int) -> Int {
        precondition(i >= 0 && i < count)
        return storage[i]
    }

    var description: String { "\(Array(self))" }
}

/// The last `capacity` values appended, kept as plain values (no closure or string per call) and
/// formatted only for a finding: the harnesses' logs of recent calls.
struct RecentValues<Element> {
    private var entries: [Element] = []
    private var next = 0
    let capacity: Int

    init(capacity: Int) { self.capacity = capacity }

    mutating func append(_ value: Element) {
        if entries.count < capacity {
            if entries.isEmpty { entries.reserveCapacity(capacity) }
            entries.append(value)
        } else {
            entries[next] = value
        }
        next = (next + 1) % capacity
    }

    /// Forgets the values, keeping the memory.
    mutating func removeAll() {
        entries.removeAll(keepingCapacity: true)
        next = 0
    }

    /// Oldest first.
    var ordered: [Element] { entries.count < capacity ? entries : Array(entries[next...] + entries[..<next]) }
}
#endif
