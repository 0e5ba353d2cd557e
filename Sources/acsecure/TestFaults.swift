// Debug builds only (ACSECURE_SYSCALL_MOCKING, see Package.swift): scripts/test.d/30-cli.sh makes
// one system call of a command fail, to check that the streaming commands leave their output whole
// or untouched. A release build has neither this hook nor the layer's mocking.
#if ACSECURE_SYSCALL_MOCKING
#if canImport(Glibc)
import Glibc
#endif
import ACSystemCalls

enum TestFaults {
    nonisolated(unsafe) private static var driver: SystemCallDriver?

    /// `ACSECURE_TEST_SYSCALL_FAULT=<call>:<n>:<errno>` fails the n-th attempt (from 0) of that call
    /// on the main thread with that errno; `=count` only counts. Either way the attempts per call
    /// are written to stderr at exit ("acsecure: test: system calls: open=3 read=2 ...").
    static func installFromEnvironment() {
        guard let spec = getenv("ACSECURE_TEST_SYSCALL_FAULT").map({ String(cString: $0) }) else { return }
        let parts = spec.split(separator: ":").map(String.init)
        var target: (SystemCall, Int, Int32)?
        if parts.count == 3, let call = SystemCall(rawValue: parts[0]), let n = Int(parts[1]), let e = Int32(parts[2]) {
            target = (call, n, e)
        } else if spec != "count" {
            writeStderr("acsecure: test: ACSECURE_TEST_SYSCALL_FAULT=\(spec): expected <call>:<n>:<errno> or count\n")
            exit(ExitStatus.usage.rawValue)
        }
        let seen = Counter()
        let d = SystemCallDriver { call, _, _ in
            let n = seen.next(call)
            guard let (c, index, e) = target, c == call, n == index else { return nil }
            return .fail(e)
        }
        driver = d
        SystemCallDriver.current = d
        atexit {
            guard let attempts = TestFaults.driver?.attempts else { return }
            let list = attempts.sorted { $0.key.rawValue < $1.key.rawValue }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
            writeStderr("acsecure: test: system calls: \(list)\n")
        }
    }

    private final class Counter: @unchecked Sendable {
        private var counts: [SystemCall: Int] = [:]
        func next(_ call: SystemCall) -> Int { defer { counts[call, default: 0] += 1 }; return counts[call, default: 0] }
    }
}
#endif
