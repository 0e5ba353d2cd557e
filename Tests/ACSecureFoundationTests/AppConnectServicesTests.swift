import Foundation
import XCTest
import ACSecureServices
import ACSecureFoundation

/// The secure-services part of the reference's AppConnect singleton: the policy, the
/// availability property, the delegate callbacks and the version.
final class AppConnectServicesTests: SecureFoundationTestCase {
    final class Recorder: AppConnectDelegate {
        var availability: [ACSecureServicesAvailability] = []
        var policies: [ACSecureFileIOPolicy] = []
        func appConnect(_ appConnect: SecureServices, secureServicesAvailabilityChangedTo secureServicesAvailability: ACSecureServicesAvailability) {
            availability.append(secureServicesAvailability)
            // The callback comes after the change: the property already says so.
            XCTAssertEqual(appConnect.secureServicesAvailability, secureServicesAvailability)
        }
        func appConnect(_ appConnect: SecureServices, secureFileIOPolicyChangedTo newSecureFileIOPolicy: ACSecureFileIOPolicy) {
            policies.append(newSecureFileIOPolicy)
        }
    }

    /// A delegate that implements neither callback still compiles (both are optional).
    final class Silent: AppConnectDelegate {}

    func testPolicyIsAlwaysRequired() throws {
        XCTAssertEqual(services.secureFileIOPolicy, .required)
        XCTAssertEqual(ACSecureFileIOPolicy.required.rawValue, 1)
        XCTAssertEqual(ACSecureFileIOPolicy.optional.rawValue, 0)
        services.lock()
        XCTAssertEqual(services.secureFileIOPolicy, .required, "the policy does not depend on availability")
    }

    func testDelegateHearsAvailabilityChanges() throws {
        let recorder = Recorder()
        services.delegate = recorder
        XCTAssertTrue(services.delegate === recorder)
        XCTAssertEqual(services.secureServicesAvailability, .available)
        services.lock()
        XCTAssertEqual(services.secureServicesAvailability, .unavailable)
        try services.unlock(passcode: nil)
        XCTAssertEqual(recorder.availability, [.unavailable, .available])
        XCTAssertEqual(recorder.policies, [], "the policy never changes on Linux")

        // Replacing the delegate moves the callbacks; nil stops them.
        let second = Recorder()
        services.delegate = second
        services.lock()
        XCTAssertEqual(recorder.availability, [.unavailable, .available])
        XCTAssertEqual(second.availability, [.unavailable])
        services.delegate = nil
        XCTAssertNil(services.delegate)
        try services.unlock(passcode: nil)
        XCTAssertEqual(second.availability, [.unavailable])
        services.delegate = Silent()
        services.lock()
    }

    func testDelegateIsHeldWeakly() throws {
        var recorder: Recorder? = Recorder()
        services.delegate = recorder
        weak let weakRecorder = recorder
        recorder = nil
        XCTAssertNil(weakRecorder, "the services kept the delegate alive")
        XCTAssertNil(services.delegate)
        services.lock()  // must not crash calling a released delegate
    }

    func testDelegatesAreNotShared() throws {
        let other = try SecureServices(appID: "com.example.other", storeDirectory: directory + "/store", argonCost: .minimum)
        let recorder = Recorder()
        services.delegate = recorder
        XCTAssertNil(other.delegate)
        other.lock()
        XCTAssertEqual(recorder.availability, [], "another services object's change reached this delegate")
    }

    func testVersion() {
        let parts = SecureServices.version.split(separator: ".")
        XCTAssertEqual(parts.count, 3, SecureServices.version)
        XCTAssertTrue(parts.allSatisfy { Int($0) != nil }, SecureServices.version)
        XCTAssertEqual(SecureServices.version, ACSecureFileKitVersion)
    }
}
