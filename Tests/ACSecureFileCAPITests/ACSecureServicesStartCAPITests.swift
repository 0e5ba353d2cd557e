#if canImport(Glibc)
import Glibc
#endif
import Foundation
import XCTest
import ACSecureTestSupport
import CACSecureFile
import ACSecureServices
@testable import ACSecureFileCAPI

/// ACSecureServicesStart / ACSecureServicesStartWithOptions (issue 15, finding 6): no invented app
/// ID, a store created only when asked, and a protected store required on request or when
/// $ACSECURE_PASSCODE is set.
final class ACSecureServicesStartCAPITests: XCTestCase {
    private var temporary: TemporaryDirectory!
    private var directory: String { temporary.path }
    private var saved: [String: String?] = [:]
    private static let variables = ["ACSECURE_HOME", "ACSECURE_APP_ID", "ACSECURE_PASSCODE", "ACSECURE_CREATE_STORE",
                                    "ACSECURE_REQUIRE_PROTECTED_STORE"]

    override func setUpWithError() throws {
        temporary = try TemporaryDirectory(prefix: "acsecure-start")
        for name in Self.variables {
            saved.updateValue(getenv(name).map { String(cString: $0) }, forKey: name)
            unsetenv(name)
        }
    }

    override func tearDownWithError() throws {
        for (name, value) in saved {
            if let value { setenv(name, value, 1) } else { unsetenv(name) }
        }
        SecureServices.current = nil
        temporary = nil
    }

    private var store: String { directory + "/store" }
    private var exists: Bool { access(store, F_OK) == 0 }

    private func assertFails(_ rc: Int32, errno expected: Int32, _ message: String = "", line: UInt = #line) {
        let e = errno
        XCTAssertEqual(rc, -1, message, line: line)
        XCTAssertEqual(e, expected, "\(message): errno \(e) \(String(cString: strerror(e)))", line: line)
    }

    private let requireProtected = UInt32(ACSECURESERVICESSTART_REQUIRE_PROTECTED_STORE)
    private let doNotCreate = UInt32(ACSECURESERVICESSTART_DO_NOT_CREATE_STORE)

    func testNoAppIDIsInvented() {
        assertFails(ACSecureServicesStart(nil, store), errno: EINVAL, "NULL app ID, no ACSECURE_APP_ID")
        XCTAssertFalse(exists, "no store created")
        setenv("ACSECURE_APP_ID", "from-environment", 1)
        XCTAssertEqual(ACSecureServicesStart(nil, store), 0)
        XCTAssertEqual(SecureServices.current?.appID, "from-environment")
    }

    /// Without ACSecureServicesStart and without ACSECURE_APP_ID, file calls fail with
    /// ACE_NO_KEYS_ERROR and create nothing.
    func testFileCallsDoNotStartServicesWithoutAnAppID() {
        SecureServices.current = nil
        setenv("ACSECURE_HOME", store, 1)
        setenv("ACSECURE_CREATE_STORE", "1", 1)
        let fd = ACSecureFile_openWithMode(directory + "/f", O_RDWR | O_CREAT, 0o600)
        assertFails(fd, errno: EACCES, "open without services")
        XCTAssertFalse(exists, "no store created")
        XCTAssertEqual(access(directory + "/f", F_OK), -1, "no file created")
        XCTAssertEqual(ACSecureServicesGetAvailability(), ACSECURESERVICESAVAILABILITY_UNAVAILABLE)
        assertFails(ACSecureServicesLock(), errno: EACCES, "lock without services")
        XCTAssertFalse(exists, "no store created")
    }

    func testDoNotCreateAndUnknownOptions() {
        assertFails(ACSecureServicesStartWithOptions("app", store, doNotCreate), errno: EACCES, "missing store")
        XCTAssertFalse(exists)
        assertFails(ACSecureServicesStartWithOptions("app", store, 1 << 7), errno: EINVAL, "unknown option")
        XCTAssertFalse(exists)
        XCTAssertEqual(ACSecureServicesStartWithOptions("app", store, 0), 0)
        XCTAssertTrue(exists)
        XCTAssertEqual(ACSecureServicesStartWithOptions("app", store, doNotCreate), 0, "an existing store opens")
    }

    /// The downgrade attack: an unprotected seed where a protected one is expected.
    func testRequireProtectedStoreRefusesAnUnprotectedSeed() {
        XCTAssertEqual(ACSecureServicesStart("app", store), 0)  // unprotected: the planted store
        let before = SecureServices.current
        assertFails(ACSecureServicesStartWithOptions("app", store, requireProtected), errno: EACCES, "option")
        XCTAssertTrue(SecureServices.current === before, "the failed start replaced nothing")
        setenv("ACSECURE_REQUIRE_PROTECTED_STORE", "1", 1)
        assertFails(ACSecureServicesStart("app", store), errno: EACCES, "ACSECURE_REQUIRE_PROTECTED_STORE=1")
        unsetenv("ACSECURE_REQUIRE_PROTECTED_STORE")
        setenv("ACSECURE_PASSCODE", "123456", 1)
        assertFails(ACSecureServicesStart("app", store), errno: EACCES, "ACSECURE_PASSCODE implies it")
    }

    func testRequireProtectedStoreWithAPasscode() {
        assertFails(ACSecureServicesStartWithOptions("app", store, requireProtected), errno: EINVAL, "no passcode to create one")
        XCTAssertFalse(exists)
        // A protected store, created with $ACSECURE_PASSCODE, then started without it.
        setenv("ACSECURE_PASSCODE", "pw", 1)
        XCTAssertEqual(ACSecureServicesStartWithOptions("app", store, requireProtected), 0)
        unsetenv("ACSECURE_PASSCODE")
        XCTAssertEqual(ACSecureServicesStartWithOptions("app", store, requireProtected), 0)
        XCTAssertEqual(ACSecureServicesGetAvailability(), ACSECURESERVICESAVAILABILITY_UNAVAILABLE)
        XCTAssertEqual(ACSecureServicesUnlock("pw"), 0)
        XCTAssertEqual(ACSecureServicesGetAvailability(), ACSECURESERVICESAVAILABILITY_AVAILABLE)
        assertFails(ACSecureServicesSetPasscode("pw", nil), errno: EINVAL, "the passcode cannot be removed")
    }
}
