#if canImport(Glibc)
import Glibc
#endif

/// A POSIX error number.
public struct Errno: Error, Equatable, Sendable {
    public var rawValue: Int32
    public init(_ v: Int32) { rawValue = v }

    /// `strerror(3)` of the number.
    public var text: String { String(cString: strerror(rawValue)) }
}

/// The result of a system call that returns -1 and sets `errno` on failure.
@inline(__always)
package func valueOrErrno<I: FixedWidthInteger>(_ value: I) -> Result<I, Errno> {
    value == -1 ? .failure(Errno(errno)) : .success(value)
}

/// Runs `body` again while it fails with `EINTR`: the one retry loop of the layer (a signal
/// handler interrupting a call never turns into an error, whatever module made the call).
@inline(__always)
package func retryingOnInterrupt<T>(_ body: () -> Result<T, Errno>) -> Result<T, Errno> {
    while true {
        let result = body()
        if case .failure(let e) = result, e.rawValue == EINTR { continue }
        return result
    }
}

/// Repeats a transfer until `count` bytes are done or `step` reports end of file (0 bytes): the one
/// loop for short reads and writes. `step(done, remaining)` transfers at most `remaining` bytes
/// starting `done` bytes in; each step is already retried on `EINTR`.
@inline(__always)
package func transferringAll(_ count: Int, _ step: (_ done: Int, _ remaining: Int) -> Result<Int, Errno>) -> Result<Int, Errno> {
    var done = 0
    while done < count {
        switch step(done, count - done) {
        case .success(0): return .success(done)
        case .success(let n): done += n
        case .failure(let e): return .failure(e)
        }
    }
    return .success(done)
}
