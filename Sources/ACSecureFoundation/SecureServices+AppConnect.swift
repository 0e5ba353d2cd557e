import Foundation
import ACCrypto
import ACSecureServices

// The secure-services part of the reference's `AppConnect` singleton ("Secure services API
// details"): the availability and secure file I/O policy properties, the `AppConnectDelegate`
// callbacks for their changes, and the library version. Here the `SecureServices` object plays the
// singleton's role (`SecureServices.current` is the one the Foundation layer uses).

/// The reference's `ACSecureFileIOPolicy`.
///
/// On AppConnect the server always requires secure file I/O, so the policy is always
/// `.required`. On Linux there is no server and nothing can change the policy: it is `.required`
/// for ever, and `appConnect(_:secureFileIOPolicyChangedTo:)` is never called.
public enum ACSecureFileIOPolicy: Int32, Sendable {
    /// `ACSECUREFILEIOPOLICY_OPTIONAL`: sensitive files may be stored with plain or secure file I/O.
    case optional = 0
    /// `ACSECUREFILEIOPOLICY_REQUIRED`: sensitive files must be stored with secure file I/O only.
    case required = 1
}

/// The reference's `ACSecureServicesAvailability` (this package's `SecureServicesAvailability`:
/// `.available`, `.unavailable`).
public typealias ACSecureServicesAvailability = SecureServicesAvailability

/// The secure-services callbacks of the reference's `AppConnectDelegate`. Both are optional (they
/// have empty default implementations), as in the reference.
///
/// Callbacks run synchronously on the thread that changed the availability (the one calling
/// `lock()`, `unlock(passcode:)`, `retire()`, or the auto-lock timer), after the change: secure
/// file calls made from the callback already see the new state.
public protocol AppConnectDelegate: AnyObject {
    /// `-appConnect:secureServicesAvailabilityChangedTo:` — services became available (unlocked)
    /// or unavailable (locked, auto-locked or retired).
    func appConnect(_ appConnect: SecureServices, secureServicesAvailabilityChangedTo secureServicesAvailability: ACSecureServicesAvailability)

    /// `-appConnect:secureFileIOPolicyChangedTo:` — never called on Linux: the policy is always
    /// `.required` (see `ACSecureFileIOPolicy`). Kept so ported delegates compile unchanged.
    func appConnect(_ appConnect: SecureServices, secureFileIOPolicyChangedTo newSecureFileIOPolicy: ACSecureFileIOPolicy)
}

extension AppConnectDelegate {
    public func appConnect(_ appConnect: SecureServices, secureServicesAvailabilityChangedTo secureServicesAvailability: ACSecureServicesAvailability) {}
    public func appConnect(_ appConnect: SecureServices, secureFileIOPolicyChangedTo newSecureFileIOPolicy: ACSecureFileIOPolicy) {}
}

extension SecureServices {
    /// `+[AppConnect version]`: the version of this library.
    public static var version: String { ACSecureFileKitVersion }

    /// `secureServicesAvailability`: whether secure file I/O can be used now (same as `availability`).
    public var secureServicesAvailability: ACSecureServicesAvailability { availability }

    /// `secureFileIOPolicy`: always `.required` (the AppConnect server always requires secure file
    /// I/O, and on Linux nothing can change it).
    public var secureFileIOPolicy: ACSecureFileIOPolicy { .required }

    /// The delegate told about availability changes (`AppConnect.delegate`). Held weakly, as a
    /// delegate is; setting nil (or releasing the delegate) stops the callbacks.
    public var delegate: (any AppConnectDelegate)? {
        get { DelegateRegistry.delegate(of: self) }
        set { DelegateRegistry.setDelegate(newValue, of: self) }
    }
}

/// Delegates per `SecureServices` (an extension cannot add stored properties). Each entry holds
/// the services weakly too, so a new object at a reused address never inherits a delegate.
private enum DelegateRegistry {
    final class Entry: @unchecked Sendable {
        weak var services: SecureServices?
        // Written once before the observer can run; weak, as delegates are.
        weak var delegate: (any AppConnectDelegate)?
        var observer: UInt64 = 0
        init(services: SecureServices, delegate: any AppConnectDelegate) {
            self.services = services
            self.delegate = delegate
        }
    }

    static let entries = LockedValue<[ObjectIdentifier: Entry]>([:])

    static func delegate(of services: SecureServices) -> (any AppConnectDelegate)? {
        entries.withLock { table in
            guard let entry = table[ObjectIdentifier(services)], entry.services === services else { return nil }
            return entry.delegate
        }
    }

    static func setDelegate(_ delegate: (any AppConnectDelegate)?, of services: SecureServices) {
        let old: Entry? = entries.withLock { $0.removeValue(forKey: ObjectIdentifier(services)) }
        if let old, old.services === services { services.removeObserver(old.observer) }
        guard let delegate else { return }
        let entry = Entry(services: services, delegate: delegate)
        entry.observer = services.addObserver { [weak entry] availability in
            guard let entry, let services = entry.services, let delegate = entry.delegate else { return }
            delegate.appConnect(services, secureServicesAvailabilityChangedTo: availability)
        }
        entries.withLock { $0[ObjectIdentifier(services)] = entry }
    }
}
