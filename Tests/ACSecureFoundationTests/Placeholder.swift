import XCTest
final class PlaceholderTests_ACSecureFoundationTests: XCTestCase { func testNothing() {} }
