#if canImport(Glibc)
import Glibc
#endif
import XCTest
import ACSecureTestSupport
import CACSecureFile
import ACSecureFileCAPI

/// Each test gets a temporary directory, and the C API's services started on its `store/`
/// (ACSecureServicesStart, as a C program starts them) under the subclass's app ID.
class CAPITestCase: XCTestCase {
    class var appID: String { "capi-tests" }

    private var temporary: TemporaryDirectory!
    var directory: String { temporary.path }

    override func setUpWithError() throws {
        temporary = try TemporaryDirectory(prefix: "acsecure-\(Self.appID)")
        XCTAssertEqual(ACSecureServicesStart(Self.appID, directory + "/store"), 0, String(cString: strerror(errno)))
    }

    override func tearDownWithError() throws { temporary = nil }
}
