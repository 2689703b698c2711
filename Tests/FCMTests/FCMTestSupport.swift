import Foundation
import MockProviders
import PushgateCore
import TestSupport
import XCTest

@testable import FCM

/// One RSA-2048 service account shared by the tests (key generation is slow in debug builds).
enum Fixtures {
    static let account: TestServiceAccount = try! TestServiceAccount.generate(projectID: "pushgate-test")
    /// A second, unrelated key (for "wrong key" tests).
    static let otherAccount: TestServiceAccount = try! TestServiceAccount.generate(projectID: "pushgate-test")

    static func serviceAccount(tokenURI: String = "https://oauth2.example.test/token") throws -> ServiceAccount {
        try ServiceAccount(json: account.json(tokenURI: tokenURI))
    }
}

func jsonObject(_ bytes: [UInt8]) -> [String: Any] {
    (try? JSONSerialization.jsonObject(with: Data(bytes))) as? [String: Any] ?? [:]
}

func notification(_ configure: (inout PushNotification) -> Void) -> PushNotification {
    .test(.android, tokens: ["token-1"], configure)
}

func decodeNotification(_ json: String) throws -> PushNotification {
    try JSONDecoder().decode(PushNotification.self, from: Data(json.utf8))
}
