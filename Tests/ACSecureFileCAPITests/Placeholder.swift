import XCTest
final class PlaceholderTests_ACSecureFileCAPITests: XCTestCase { func testNothing() {} }
