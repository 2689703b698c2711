import PushgateCore
import XCTest

final class HexTests: XCTestCase {
    func testEncodeIsLowercaseTwoDigitsPerByteAndDecodesBack() {
        XCTAssertEqual(Hex.encode([UInt8]()), "")
        XCTAssertEqual(Hex.encode([0x00, 0x0f, 0xa0, 0xff]), "000fa0ff")
        let all = (0...255).map { UInt8($0) }
        let text = Hex.encode(all)
        XCTAssertEqual(text, all.map { String(format: "%02x", $0) }.joined())
        XCTAssertEqual(Hex.decode(Array(text.utf8)), all)
    }
}
