import XCTest
final class PlaceholderTests_ACSecureServicesTests: XCTestCase { func testNothing() {} }
