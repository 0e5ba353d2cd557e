#if canImport(Glibc)
import Glibc
#endif
import ACSecureFileCore
import ACSecureServices
import ACSecureSharingCore
import ACSystemCalls

// The one place where Swift errors become C results: a return value, `errno`, and the
// descriptor's `ACE_*` last error (the value `ACErrorTable` gives the code). `errno` is written
// last, after everything that could change it.

enum CResult {
    /// Runs `body` on the secure file behind `fd`. Unknown descriptor: -1/EBADF. Success: the
    /// body's value and `ACE_NO_ERROR`. Failure: -1, the error's errno and its `ACE_*` code.
    ///
    /// `before` is an error the kernel reports before it even looks at the descriptor (a negative
    /// `pread`/`pwrite` offset is EINVAL, also for a bad descriptor).
    @inline(__always)
    static func onFile<R: SignedInteger>(_ fd: Int32, before: SecureFileError? = nil,
                                         _ body: (SecureFile) throws(SecureFileError) -> R) -> R {
        let table = DescriptorTable.shared
        let cache = LookupCache.current
        return cache._withUnsafeGuaranteedRef { cache -> R in
            if let cached = table.cachedEntry(fd, in: cache) {
                cache.depth = 1
                defer { cache.depth = 0 }
                return cached._withUnsafeGuaranteedRef { entry in
                    entry.unretainedFile._withUnsafeGuaranteedRef { file in run(entry, file, before: before, body) }
                }
            }
            guard let entry = table.lookup(fd, filling: cache) else {
                errno = before?.errno ?? EBADF
                return -1
            }
            return run(entry, entry.file, before: before, body)
        }
    }

    /// `onFile` once the entry is found.
    @inline(__always)
    private static func run<R: SignedInteger>(_ entry: DescriptorTable.Entry, _ file: SecureFile, before: SecureFileError?,
                                              _ body: (SecureFile) throws(SecureFileError) -> R) -> R {
        if let before {
            entry.lastError.store(before.code.aceValue, ordering: .relaxed)
            errno = before.errno
            return -1
        }
        do {
            let result = try body(file)
            entry.lastError.store(ACErrorCode.noError.aceValue, ordering: .relaxed)
            return result
        } catch {
            entry.lastError.store(error.code.aceValue, ordering: .relaxed)
            LastErrorMessage.set(error.message)
            errno = error.errno
            return -1
        }
    }

    /// Closes `fd`: it leaves the table first (see `DescriptorTable`), then the file is closed.
    /// As with `close(2)`, the descriptor is gone even when the final flush fails.
    static func closing(_ fd: Int32) -> Int32 {
        guard let entry = DescriptorTable.shared.remove(fd) else {
            errno = EBADF
            return -1
        }
        do {
            try entry.file.close()
            return 0
        } catch {
            LastErrorMessage.set(error.message)
            errno = error.errno
            return -1
        }
    }

    /// Runs a call that has no descriptor (open, path calls): only `errno` reports a failure.
    @inline(__always)
    static func withoutFile<R: SignedInteger>(_ body: () throws(SecureFileError) -> R) -> R {
        do {
            return try body()
        } catch {
            LastErrorMessage.set(error.message)
            errno = error.errno
            return -1
        }
    }

    /// Runs a secure services call: 0, or -1 with the errno of `SecureServicesError.boundaryErrno`
    /// (the one mapping of ACSecureFileCore, documented in ACSecureServices.h).
    static func services(_ body: () throws(SecureServicesError) -> Void) -> Int32 {
        do {
            try body()
            return 0
        } catch {
            LastErrorMessage.set(error.message)
            errno = error.boundaryErrno
            return -1
        }
    }
}

/// The message of the calling thread's last failed call (ACSecureFileLastErrorMessage): a copy in
/// C memory behind a pthread key, freed when the thread ends or the next failure replaces it.
enum LastErrorMessage {
    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        guard pthread_key_create(&key, { free($0) }) == 0 else { fatalError("ACSecureFile: no thread-specific key for error messages") }
        return key
    }()

    static func set(_ message: String) {
        let old = pthread_getspecific(key)
        // strdup failing (no memory) leaves no message: errno still says what failed.
        pthread_setspecific(key, strdup(message))
        free(old)
    }

    /// The words of any error this layer reports.
    static func set(_ error: any Error) {
        switch error {
        case let e as SecureFileError: set(e.message)
        case let e as SecureServicesError: set(e.message)
        case WrappedFileOpenError.unknownWrapperFormat(let message): set(message)
        case WrappedFileOpenError.secureFile(let e): set(e.message)
        default: set("\(error)")
        }
    }

    /// Copies the message as snprintf would; returns its full length.
    static func copy(into buffer: UnsafeMutablePointer<CChar>?, size: Int) -> Int {
        guard let message = pthread_getspecific(key)?.assumingMemoryBound(to: CChar.self) else {
            if let buffer, size > 0 { buffer[0] = 0 }
            return 0
        }
        let length = strlen(message)
        if let buffer, size > 0 {
            let n = min(length, size - 1)
            memcpy(buffer, message, n)
            buffer[n] = 0
        }
        return length
    }
}

extension SecureFileError {
    /// An error raised by the C layer itself (bad pointer, bad iovec count) before the engine runs.
    static func cArgument(_ errno: Int32, _ what: String) -> SecureFileError {
        SecureFileError(code: .invalidArgument, errno: errno, message: what)
    }
}

/// A path from C, byte for byte: POSIX names are bytes (any but NUL and `/` in a component), and
/// every one `open(2)` takes is passed on as it is, UTF-8 or not.
@inline(__always)
func cPath(_ p: UnsafePointer<CChar>?, _ what: String) throws(SecureFileError) -> BytePath {
    guard let p else { throw .cArgument(EFAULT, "\(what): NULL path") }
    return BytePath(platformString: p)
}
