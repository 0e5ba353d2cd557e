import XCTest
final class PlaceholderTests_ACCryptoTests: XCTestCase { func testNothing() {} }
