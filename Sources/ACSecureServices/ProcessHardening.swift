#if canImport(Glibc)
import Glibc
#endif
import CACSecureLinux

/// Keeps keys out of core dumps and away from debuggers of the same user, for the whole process.
///
/// Keys in libsodium guarded memory are already excluded from core dumps (`MADV_DONTDUMP`), but
/// OpenSSL's AES key schedules (one per open file and direction, equivalent to the data key) live
/// in the ordinary heap while services are unlocked (docs/FORMAT.md, "Keys in memory"). An app
/// that handles secure files should therefore call `ProcessHardening.apply()` once at start-up
/// (C: `ACSecureHardenProcess()`). It is explicit, not automatic: it changes process-wide
/// behaviour (no core dumps for crash reports; `/proc/<pid>` files owned by root; `ptrace` by the
/// same user refused) that the app must choose.
public enum ProcessHardening {
    /// What `apply()` leaves in place, read back from the kernel.
    public struct State: Sendable, Equatable {
        /// `RLIMIT_CORE` soft and hard limits (0 and 0 after `apply()`).
        public var coreLimit: (soft: UInt64, hard: UInt64)
        /// `prctl(PR_GET_DUMPABLE)` (0 after `apply()`).
        public var dumpable: Int32

        public static func == (a: State, b: State) -> Bool {
            a.coreLimit == b.coreLimit && a.dumpable == b.dumpable
        }
    }

    /// Sets `RLIMIT_CORE` to 0 (soft and hard, so the process cannot raise it again) and
    /// `prctl(PR_SET_DUMPABLE, 0)`. Idempotent; inherited by children (the rlimit) or reset by
    /// `execve` of a set-user-ID program (the dumpable flag).
    /// - Returns: the state read back from the kernel.
    /// - Throws: `ProcessHardeningError` naming the call that failed and its errno.
    @discardableResult
    public static func apply() throws(ProcessHardeningError) -> State {
        var none = rlimit(rlim_cur: 0, rlim_max: 0)
        guard setrlimit(__rlimit_resource_t(RLIMIT_CORE.rawValue), &none) == 0 else {
            throw ProcessHardeningError(call: "setrlimit(RLIMIT_CORE, 0)", errno: errno)
        }
        guard CACSecureLinux_setDumpable(0) == 0 else {
            throw ProcessHardeningError(call: "prctl(PR_SET_DUMPABLE, 0)", errno: errno)
        }
        let state = try current()
        guard state.coreLimit == (0, 0), state.dumpable == 0 else {
            throw ProcessHardeningError(call: "read-back (core limit \(state.coreLimit), dumpable \(state.dumpable))", errno: EPERM)
        }
        return state
    }

    /// The process's current core limit and dumpable flag.
    public static func current() throws(ProcessHardeningError) -> State {
        var limit = rlimit()
        guard getrlimit(__rlimit_resource_t(RLIMIT_CORE.rawValue), &limit) == 0 else {
            throw ProcessHardeningError(call: "getrlimit(RLIMIT_CORE)", errno: errno)
        }
        let dumpable = CACSecureLinux_getDumpable()
        guard dumpable >= 0 else { throw ProcessHardeningError(call: "prctl(PR_GET_DUMPABLE)", errno: errno) }
        return State(coreLimit: (UInt64(limit.rlim_cur), UInt64(limit.rlim_max)), dumpable: dumpable)
    }
}

/// A process-hardening call failed.
public struct ProcessHardeningError: Error, CustomStringConvertible, Sendable {
    /// The call that failed, e.g. `setrlimit(RLIMIT_CORE, 0)`.
    public var call: String
    public var errno: Int32
    public var description: String { "process hardening: \(call) failed: \(String(cString: strerror(errno)))" }
}
