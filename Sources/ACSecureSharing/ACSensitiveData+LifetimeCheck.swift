#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Dispatch
import ACCrypto

/// The reference's `AC_SENSITIVE_DATA_MAX_LIFETIME` debug check: reports every `ACSensitiveData`
/// (or mutable) object that is still alive `maximumLifetime` seconds after its allocation, with the
/// call stack of the allocation.
///
/// It is off unless the environment variable `AC_SENSITIVE_DATA_MAX_LIFETIME` holds a positive number
/// of seconds when the first object is created, or `maximumLifetime` is set. While on, every
/// allocation records its call stack (slow: a debugging aid). Each object is reported once, by a
/// background timer or at the latest when it is freed. The reference raises an Objective-C exception;
/// here the report goes to `reportHandler` (by default: standard error). Reports never contain the
/// object's bytes. `AC_SENSITIVE_DATA_MAX_RUN_LOOP_ITERATIONS` is not supported.
public enum ACSensitiveDataLifetimeCheck {
    /// One object that outlived the limit.
    public struct Report: Sendable, CustomStringConvertible {
        public var className: String
        public var length: Int
        /// Seconds since the allocation, when reported.
        public var age: Double
        public var maximumLifetime: Double
        /// The call stack at allocation (frames of the check itself removed).
        public var allocationStack: [String]

        public var description: String {
            "\(className) of \(length) bytes is still alive \(String(format: "%.2f", age)) s after its allocation "
                + "(AC_SENSITIVE_DATA_MAX_LIFETIME=\(maximumLifetime)); allocated at:\n" + allocationStack.joined(separator: "\n")
        }
    }

    private struct Entry {
        var born: UInt64
        var className: String
        var length: @Sendable () -> Int
        var stack: [String]
        var reported = false
    }

    private struct State {
        var configured = false
        var maximumLifetime: Double?
        var live: [ObjectIdentifier: Entry] = [:]
        var timer: DispatchSourceTimer?
        var handler: @Sendable (Report) -> Void = { report in
            FileHandle.standardError.write(Data(("ACSensitiveData lifetime check: " + report.description + "\n").utf8))
        }
    }

    private static let state = LockedValue(State())

    /// The limit in seconds (nil: off). Defaults to `AC_SENSITIVE_DATA_MAX_LIFETIME`. Objects created
    /// while it is off are not tracked.
    public static var maximumLifetime: Double? {
        get { state.withLock { s in configure(&s); return s.maximumLifetime } }
        set {
            state.withLock { s in
                s.configured = true
                s.maximumLifetime = newValue.flatMap { $0 > 0 ? $0 : nil }
                s.timer?.cancel()
                s.timer = nil
                if s.maximumLifetime == nil { s.live.removeAll() }
            }
        }
    }

    /// Receives each report (on a background queue, or on the thread freeing the object).
    public static var reportHandler: @Sendable (Report) -> Void {
        get { state.withLock { $0.handler } }
        set { state.withLock { $0.handler = newValue } }
    }

    /// Checks every tracked object now (the timer does this periodically).
    public static func checkNow() {
        let (reports, handler) = collect(onlyOverdue: true, removing: nil)
        for r in reports { handler(r) }
    }

    /// How many objects are tracked now (for tests).
    public static var trackedCount: Int { state.withLock { $0.live.count } }

    // MARK: engine side

    private static func configure(_ s: inout State) {
        guard !s.configured else { return }
        s.configured = true
        if let v = getenv("AC_SENSITIVE_DATA_MAX_LIFETIME"), let seconds = Double(String(cString: v)), seconds > 0 {
            s.maximumLifetime = seconds
        }
    }

    static func register(_ object: ACSensitiveData) {
        let enabled = state.withLock { s -> Bool in configure(&s); return s.maximumLifetime != nil }
        guard enabled else { return }
        // Drop the frames of this check and of the initialisers above it.
        let stack = Array(Thread.callStackSymbols.dropFirst(1))
        let className = String(describing: type(of: object))
        let id = ObjectIdentifier(object)
        let ref = UnownedReference(object)
        state.withLock { s in
            guard let limit = s.maximumLifetime else { return }
            // The length is read only while the object is alive (it unregisters in deinit, under this lock).
            s.live[id] = Entry(born: monotonicNanoseconds(), className: className,
                               length: { ref.object.storedLength }, stack: stack)
            if s.timer == nil {
                let t = DispatchSource.makeTimerSource(queue: .global(qos: .utility))
                let period = Swift.max(0.02, Swift.min(1.0, limit / 4))
                t.schedule(deadline: .now() + period, repeating: period)
                t.setEventHandler { checkNow() }
                t.resume()
                s.timer = t
            }
        }
    }

    static func unregister(_ object: ACSensitiveData) {
        let (reports, handler) = collect(onlyOverdue: true, removing: ObjectIdentifier(object))
        for r in reports { handler(r) }
    }

    /// Marks overdue entries reported and returns their reports; removes `removing` (reporting it first if overdue).
    private static func collect(onlyOverdue: Bool, removing: ObjectIdentifier?) -> ([Report], @Sendable (Report) -> Void) {
        state.withLock { s in
            guard let limit = s.maximumLifetime else {
                if let removing { s.live[removing] = nil }
                return ([], s.handler)
            }
            let now = monotonicNanoseconds()
            var reports: [Report] = []
            func report(_ e: Entry) -> Report {
                Report(className: e.className, length: e.length(), age: Double(now &- e.born) / 1e9,
                       maximumLifetime: limit, allocationStack: e.stack)
            }
            if let removing {
                if let e = s.live.removeValue(forKey: removing), !e.reported, Double(now &- e.born) / 1e9 >= limit {
                    reports.append(report(e))
                }
                return (reports, s.handler)
            }
            for (id, e) in s.live where !e.reported && Double(now &- e.born) / 1e9 >= limit {
                reports.append(report(e))
                s.live[id]?.reported = true
            }
            return (reports, s.handler)
        }
    }

    /// Lets the registry read an object's length while it is alive: it unregisters (under the registry's
    /// lock) in its deinit, before the reference can dangle.
    private final class UnownedReference: @unchecked Sendable {
        unowned(unsafe) let object: ACSensitiveData
        init(_ object: ACSensitiveData) { self.object = object }
    }

    private static func monotonicNanoseconds() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }
}
