#if canImport(Glibc)
import Glibc
#endif

/// A POSIX-shaped file API as plain C function pointers, so every backend (plain POSIX, the engine's
/// C API, the engine's Swift API) is called the same way: one indirect call per operation.
public struct IOBackend: @unchecked Sendable {
    public typealias Open = @convention(c) (UnsafePointer<CChar>?, Int32, mode_t) -> Int32
    public typealias Close = @convention(c) (Int32) -> Int32
    public typealias Read = @convention(c) (Int32, UnsafeMutableRawPointer?, Int) -> Int
    public typealias Write = @convention(c) (Int32, UnsafeRawPointer?, Int) -> Int
    public typealias PRead = @convention(c) (Int32, UnsafeMutableRawPointer?, Int, off_t) -> Int
    public typealias PWrite = @convention(c) (Int32, UnsafeRawPointer?, Int, off_t) -> Int
    public typealias Fsync = @convention(c) (Int32) -> Int32

    public var open: Open
    public var close: Close
    public var read: Read
    public var write: Write
    public var pread: PRead
    public var pwrite: PWrite
    /// Makes written data durable (fsync(2), ACSecureFileFsync); nil where the API has none.
    public var fsync: Fsync?

    public init(open: Open, close: Close, read: Read, write: Write, pread: PRead, pwrite: PWrite, fsync: Fsync? = nil) {
        self.open = open
        self.close = close
        self.read = read
        self.write = write
        self.pread = pread
        self.pwrite = pwrite
        self.fsync = fsync
    }

    /// Plain POSIX I/O (also used on the gocryptfs mount).
    public static let posix = IOBackend(
        open: { path, flags, mode in Glibc.open(path!, flags, mode) },
        close: { Glibc.close($0) },
        read: { Glibc.read($0, $1, $2) },
        write: { Glibc.write($0, $1, $2) },
        pread: { Glibc.pread($0, $1, $2, $3) },
        pwrite: { Glibc.pwrite($0, $1, $2, $3) },
        fsync: { Glibc.fsync($0) })
}

/// Where one contender keeps its files, and how it is reached.
public struct Contender: @unchecked Sendable {
    public var name: String
    public var backend: IOBackend
    public var directory: String

    public init(name: String, backend: IOBackend, directory: String) {
        self.name = name
        self.backend = backend
        self.directory = directory
    }

    public func path(_ file: String) -> String { directory + "/" + file }
}
