import XCTest
import ACCrypto
import CACSecureLibCrypto

final class CryptoErrorTests: XCTestCase {
    override func setUp() { ERR_clear_error() }

    /// The reason is read when the error is made, on the failing thread, and the queue is cleared
    /// there: a later, unrelated OpenSSL failure neither changes the message nor inherits this one.
    func testOpenSSLReasonIsCapturedWhenTheErrorIsMade() {
        XCTAssertNil(EVP_CIPHER_fetch(nil, "NO-SUCH-CIPHER", nil))
        let error = CryptoError.openSSL("EVP_CIPHER_fetch")
        XCTAssertEqual(ERR_peek_error(), 0, "the queue is cleared where the error is made")
        let text = error.description
        XCTAssertTrue(text.hasPrefix("OpenSSL EVP_CIPHER_fetch failed: error:"), text)
        XCTAssertFalse(text.contains("no detail"), text)

        XCTAssertNil(EVP_MD_fetch(nil, "NO-SUCH-DIGEST", nil))
        XCTAssertEqual(error.description, text, "printing reads nothing from OpenSSL")
        XCTAssertNotEqual(ERR_peek_error(), 0, "printing left the other failure's queue alone")
        let later = CryptoError.openSSL("EVP_MD_fetch")
        XCTAssertEqual(error.description, text)
        XCTAssertNotEqual(later, error)

        // Printed on another thread: the same stored text.
        let printed = DispatchSemaphore(value: 0)
        Thread { XCTAssertEqual(error.description, text); printed.signal() }.start()
        printed.wait()
    }

    /// A long queue is kept bounded and still cleared.
    func testLongQueueIsBoundedAndCleared() {
        for _ in 0..<20 { XCTAssertNil(EVP_CIPHER_fetch(nil, "NO-SUCH-CIPHER", nil)) }
        let error = CryptoError.openSSL("EVP_CIPHER_fetch")
        XCTAssertEqual(ERR_peek_error(), 0)
        guard case .openSSL(_, let detail) = error else { return XCTFail("\(error)") }
        XCTAssertLessThanOrEqual(detail.components(separatedBy: "; ").count, 4, detail)
    }

    func testNoQueuedReasonSaysSo() {
        XCTAssertEqual(CryptoError.openSSL("X").description, "OpenSSL X failed: no detail")
    }
}
