import XCTest
final class PlaceholderTests_ACSecureSharingTests: XCTestCase { func testNothing() {} }
