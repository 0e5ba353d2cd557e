#if canImport(Glibc)
import Glibc
#endif
import ACSecureFileCore
import ACSecureServices
import CompareCore

// The comparison with the engine behind its Swift API (used when the C library is unavailable).
// Descriptors index a table of open SecureFiles, as the C API's descriptor table does.
nonisolated(unsafe) var services: SecureServices?
nonisolated(unsafe) var files = [SecureFile?](repeating: nil, count: 1024)

@inline(__always) func fail(_ e: SecureFileError) -> Int {
    errno = e.errno
    return -1
}

let swiftAPI = IOBackend(
    open: { path, flags, mode in
        do throws(SecureFileError) {
            let f = try SecureFile.open(String(cString: path!), flags: flags, mode: mode, services: services)
            files[Int(f.fileDescriptor)] = f
            return f.fileDescriptor
        } catch { return Int32(fail(error)) }
    },
    close: { fd in
        guard let f = files[Int(fd)] else { errno = EBADF; return -1 }
        files[Int(fd)] = nil
        do throws(SecureFileError) { try f.close(); return 0 } catch { return Int32(fail(error)) }
    },
    read: { fd, buf, n in
        do throws(SecureFileError) { return try files[Int(fd)]!.read(into: UnsafeMutableRawBufferPointer(start: buf, count: n)) } catch { return fail(error) }
    },
    write: { fd, buf, n in
        do throws(SecureFileError) { return try files[Int(fd)]!.write(UnsafeRawBufferPointer(start: buf, count: n)) } catch { return fail(error) }
    },
    pread: { fd, buf, n, off in
        do throws(SecureFileError) { return try files[Int(fd)]!.pread(into: UnsafeMutableRawBufferPointer(start: buf, count: n), at: Int64(off)) } catch { return fail(error) }
    },
    pwrite: { fd, buf, n, off in
        do throws(SecureFileError) { return try files[Int(fd)]!.pwrite(UnsafeRawBufferPointer(start: buf, count: n), at: Int64(off)) } catch { return fail(error) }
    },
    fsync: { fd in
        do throws(SecureFileError) { try files[Int(fd)]!.sync(); return 0 } catch { return Int32(fail(error)) }
    })

Comparison.main(engine: swiftAPI, engineLabel: "the Swift API (SecureFile)") { store in
    services = try SecureServices(appID: "acbench", storeDirectory: store)
}
