import XCTest
final class PlaceholderTests_ACSecureFileCoreTests: XCTestCase { func testNothing() {} }
