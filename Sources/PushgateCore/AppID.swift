import Foundation

public enum AppID {
    /// The app the top-level provider sections (`ios:`, `android:` …) and `core.api_keys` make: every
    /// gorush configuration is this one app.
    public static let defaultApp = "default"

    /// An app id as configured or requested: 1-64 of `A-Z a-z 0-9 . _ -` (it names metrics labels,
    /// store rows and log lines).
    public static func isValid(_ id: String) -> Bool {
        let n = id.utf8.count
        guard n >= 1, n <= 64 else { return false }
        return id.utf8.allSatisfy { b in
            (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || b == 0x2E || b == 0x5F || b == 0x2D
        }
    }
}
