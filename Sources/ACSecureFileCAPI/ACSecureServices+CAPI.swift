#if canImport(Glibc)
import Glibc
#endif
import CACSecureFile
import ACCrypto
import ACSecureFileCore
import ACSecureServices
import ACSystemCalls

// The functions of ACSecureServices.h. Every call but Start works on the process-wide services,
// starting them from the environment first if nothing has started them yet: otherwise a Lock
// before the first file call would be undone by the engine starting fresh, unlocked services.

@c @implementation
public func ACSecureServicesStart(_ appID: UnsafePointer<CChar>?, _ storeDirectory: UnsafePointer<CChar>?) -> Int32 {
    ACSecureServicesStartWithOptions(appID, storeDirectory, 0)
}

@c @implementation
public func ACSecureServicesStartWithOptions(_ appID: UnsafePointer<CChar>?, _ storeDirectory: UnsafePointer<CChar>?,
                                             _ options: UInt32) -> Int32 {
    CResult.services { () throws(SecureServicesError) in
        let requireProtected = UInt32(ACSECURESERVICESSTART_REQUIRE_PROTECTED_STORE)
        let doNotCreate = UInt32(ACSECURESERVICESSTART_DO_NOT_CREATE_STORE)
        guard options & ~(requireProtected | doNotCreate) == 0 else {
            throw SecureServicesError(.invalidArgument, "ACSecureServicesStartWithOptions: unknown options 0x\(String(options, radix: 16))")
        }
        // No app ID is invented: NULL means the environment's, and there must be one.
        guard let id = try appID.map({ p throws(SecureServicesError) in try servicesString(p, "the app ID") })
                ?? environmentString("ACSECURE_APP_ID").flatMap({ $0.isEmpty ? nil : $0 }) else {
            throw SecureServicesError(.invalidArgument, "ACSecureServicesStart: no app ID (pass one, or set ACSECURE_APP_ID)")
        }
        // The store directory byte for byte, as every path of the C API.
        let dir = storeDirectory.map { BytePath(platformString: $0) }
        let fromEnvironment: UnsafeMutablePointer<CChar>? = getenv("ACSECURE_PASSCODE")
        // An empty $ACSECURE_PASSCODE means "no passcode", as for a new store.
        let passcode = try fromEnvironment.flatMap { (p) throws(SecureServicesError) in p[0] == 0 ? nil : try passcodeBytes(p) }
        SecureServices.current = try SecureServices(
            appID: id, storePath: dir, passcode: passcode,
            requireProtectedStore: options & requireProtected != 0 || SecureServices.environmentFlag("ACSECURE_REQUIRE_PROTECTED_STORE"),
            createStoreIfMissing: options & doNotCreate == 0)
    }
}

@c @implementation
public func ACSecureHardenProcess() -> Int32 {
    do {
        try ProcessHardening.apply()
        return 0
    } catch {
        LastErrorMessage.set(error.description)
        errno = error.errno
        return -1
    }
}

@c @implementation
public func ACSecureServicesUnlock(_ passcode: UnsafePointer<CChar>?) -> Int32 {
    CResult.services { () throws(SecureServicesError) in
        try SecureServices.currentOrStartFromEnvironment().unlock(passcode: try passcode.map(passcodeBytes))
    }
}

@c @implementation
public func ACSecureServicesSetPasscode(_ oldPasscode: UnsafePointer<CChar>?, _ newPasscode: UnsafePointer<CChar>?) -> Int32 {
    CResult.services { () throws(SecureServicesError) in
        try SecureServices.currentOrStartFromEnvironment()
            .setPasscode(old: try oldPasscode.map(passcodeBytes), new: try newPasscode.map(passcodeBytes))
    }
}

@c @implementation
public func ACSecureServicesLock() -> Int32 {
    CResult.services { () throws(SecureServicesError) in
        try SecureServices.currentOrStartFromEnvironment().lock()
    }
}

@c @implementation
public func ACSecureServicesRetire() -> Int32 {
    CResult.services { () throws(SecureServicesError) in
        try SecureServices.currentOrStartFromEnvironment().retire()
    }
}

@c @implementation
public func ACSecureServicesGetAvailability() -> ACSecureServicesAvailability {
    let saved = errno
    defer { errno = saved }
    switch (try? SecureServices.currentOrStartFromEnvironment())?.availability {
    case .available?: return ACSECURESERVICESAVAILABILITY_AVAILABLE
    case .unavailable?, nil: return ACSECURESERVICESAVAILABILITY_UNAVAILABLE
    }
}

@c @implementation
public func ACSecureFileOpenWithGroupID(_ path: UnsafePointer<CChar>?, _ oflag: Int32, _ mode: mode_t,
                                        _ encryptionGroupID: UnsafePointer<CChar>?) -> Int32 {
    CResult.withoutFile { () throws(SecureFileError) -> Int32 in
        let path = try cPath(path, "ACSecureFileOpenWithGroupID")
        guard let encryptionGroupID, let group = String(validatingCString: encryptionGroupID), !group.isEmpty else {
            throw .cArgument(EINVAL, "ACSecureFileOpenWithGroupID(\(path)): the encryption group ID must be a non-empty UTF-8 string")
        }
        let file = try SecureFile.open(path, flags: oflag, mode: mode, key: .group(group))
        return DescriptorTable.shared.insert(file)
    }
}

// MARK: helpers

/// A passcode straight from C memory into guarded memory, without a Swift `String` or `[UInt8]`
/// copy that would outlive the call.
private func passcodeBytes(_ p: UnsafePointer<CChar>) throws(SecureServicesError) -> SecureBytes {
    do { return try SecureBytes(copying: UnsafeRawBufferPointer(start: p, count: strlen(p))) } catch {
        throw SecureServicesError(.outOfMemory, "the passcode: \(error)", errno: ENOMEM)
    }
}

private func servicesString(_ p: UnsafePointer<CChar>, _ what: String) throws(SecureServicesError) -> String {
    guard let s = String(validatingCString: p) else {
        throw SecureServicesError(.invalidArgument, "\(what) is not valid UTF-8")
    }
    return s
}

private func environmentString(_ name: String) -> String? {
    let value: UnsafeMutablePointer<CChar>? = getenv(name)
    return value.flatMap { String(validatingCString: $0) }
}
