import ACSystemCalls
@_spi(Testing) import ACCrypto

// The engine's system calls go through `Sys` (the ACSystemCalls module), as every module's do.

/// A POSIX error number (`ACSystemCalls.Errno`).
@_spi(Testing) public typealias Errno = ACSystemCalls.Errno

#if ACSECURE_SYSCALL_MOCKING
/// Test hooks (debug builds only): fault injection into the system calls of the calling thread.
public enum SecureFileTesting {
    public typealias Call = SystemCall
    public typealias Fault = SystemCallFault

    /// Every system call this thread makes (in any module) asks this first, on every attempt;
    /// returning non-nil injects that fault (`.fail(EINTR)` is retried as a real interruption).
    /// Setting it installs a `SystemCallDriver` on the calling thread.
    public static var faultInjector: (@Sendable (Call) -> Fault?)? {
        get {
            guard let driver = SystemCallDriver.current else { return nil }
            return { call in driver.decide(call, 0, 0) }
        }
        set {
            guard let decide = newValue else { SystemCallDriver.current = nil; return }
            SystemCallDriver.current = SystemCallDriver({ call, _, _ in decide(call) })
        }
    }

    /// How many trailer positions the end-of-file recovery scans of this process have checked
    /// with GCM (docs/FORMAT.md "Recovery"): a damaged end must not cost one check per byte.
    public static var recoveryTrailerChecks: Int { SharedFile.recoveryTrailerChecks.withLock { $0 } }

    /// While `on`, every new guarded buffer fails (`SecureBytes.simulateGuardedMemoryExhaustion`),
    /// as when the process is out of mappings or address space. Set it only while no other thread
    /// uses the engine.
    public static func simulateGuardedMemoryExhaustion(_ on: Bool) {
        SecureBytes.simulateGuardedMemoryExhaustion(on)
    }

    /// As `faultInjector`, with each transfer's byte count and offset (0 for other calls): crash
    /// tests use it to tear a write at a given sector.
    public static var transferFaultInjector: (@Sendable (Call, _ count: Int, _ offset: Int64) -> Fault?)? {
        get {
            guard let driver = SystemCallDriver.current else { return nil }
            return { call, count, offset in driver.decide(call, count, offset) }
        }
        set {
            guard let decide = newValue else { SystemCallDriver.current = nil; return }
            SystemCallDriver.current = SystemCallDriver({ call, count, offset in decide(call, count, offset) })
        }
    }
}
#endif
