import GatewayCore
import HTTPTypes
import Hummingbird
import NIOCore

/// The status page (`core.ui`, on by default): `GET /ui` and its script and style sheet, and the
/// admin route `GET /api/stat/live` it reads beside `/api/stat/app` and `/api/stat/go`.
///
/// The page's files are open: they are the same on every gateway and hold no data. Every figure
/// comes from the JSON routes, which need an admin key once keys are configured. A browser cannot
/// send a Bearer header when it navigates, so the page asks for the key and its script sends it as
/// `Authorization: Bearer` with each request (kept in the tab's `sessionStorage`, gone when the tab
/// closes). The key is never put in a URL: a query string lands in access logs, proxies' logs and
/// browser history. The page's Content-Security-Policy allows only the gateway's own script and
/// style sheet (no inline script, no other origin, no framing).
extension Gateway {
    /// The page, and the prefix of its files.
    static let uiRoute = "/ui"
    /// What the page draws that gorush's stat routes lack (`liveStatsJSON`).
    static let liveStatsRoute = "/api/stat/live"

    static let uiSecurityHeaders: [(HTTPField.Name, String)] = [
        (
            .contentSecurityPolicy,
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; object-src 'none'; "
                + "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
        ),
        (HTTPField.Name("X-Content-Type-Options")!, "nosniff"),
        (HTTPField.Name("X-Frame-Options")!, "DENY"),
        (HTTPField.Name("Referrer-Policy")!, "no-referrer"),
        (.cacheControl, "no-store"),
    ]

    func registerStatusPage(_ routes: GatewayRouter) {
        let r = settings.routes
        let pushBase = r.push.hasSuffix("/") ? String(r.push.dropLast()) : r.push
        var page = StatusPageAssets.html
        for (name, value) in [
            ("base", Self.uiRoute), ("statApp", r.statApp), ("statGo", r.statGo), ("live", Self.liveStatsRoute), ("push", pushBase),
        ] {
            page = page.replacingOccurrences(of: "{{\(name)}}", with: Self.htmlAttribute(value))
        }
        let html = page
        routes.on(.get, Self.uiRoute, access: .open) { _, _ in self.uiFile(html, type: "text/html; charset=utf-8") }
        routes.on(.get, Self.uiRoute + "/app.js", access: .open) { _, _ in
            self.uiFile(StatusPageAssets.js, type: "text/javascript; charset=utf-8")
        }
        routes.on(.get, Self.uiRoute + "/app.css", access: .open) { _, _ in
            self.uiFile(StatusPageAssets.css, type: "text/css; charset=utf-8")
        }
        routes.on(.get, Self.liveStatsRoute, access: .admin) { _, _ in
            self.json(.ok, self.liveStatsJSON())
        }
    }

    private func uiFile(_ text: String, type: String) -> Response {
        var headers = Self.jsonHeaders
        headers[.contentType] = type
        for (name, value) in Self.uiSecurityHeaders { headers[name] = value }
        requestCounters.count(200)
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(string: text)))
    }

    /// `s` as the value of a double-quoted HTML attribute.
    static func htmlAttribute(_ s: String) -> String {
        var out = ""
        for c in s {
            switch c {
            case "&": out += "&amp;"
            case "\"": out += "&quot;"
            case "'": out += "&#39;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            default: out.append(c)
            }
        }
        return out
    }
}
