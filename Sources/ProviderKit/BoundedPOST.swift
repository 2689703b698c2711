import AsyncHTTPClient
import NIOCore

/// One POST over the shared HTTP client whose answer is untrusted: its body is read up to
/// `maxBytes` (a longer one fails the read), with its `Retry-After`, so a provider or token endpoint cannot make the
/// gateway buffer more. The vendors' sends and the OAuth token requests use it.
public enum BoundedPOST {
    public static func send(
        _ client: HTTPClient, url: String, contentType: String, headers: [(String, String)] = [], body: [UInt8], maxBytes: Int,
        timeout: TimeAmount
    ) async throws -> (status: Int, body: [UInt8], retryAfter: String?) {
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.headers.add(name: "content-type", value: contentType)
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        request.body = .bytes(ByteBuffer(bytes: body))
        let response = try await client.execute(request, timeout: timeout)
        var buffer = try await response.body.collect(upTo: maxBytes)
        return (Int(response.status.code), buffer.readBytes(length: buffer.readableBytes) ?? [], response.headers.first(name: "retry-after"))
    }
}
