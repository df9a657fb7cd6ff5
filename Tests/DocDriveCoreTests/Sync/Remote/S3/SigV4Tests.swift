// SigV4Tests: the signer against AWS's published Signature Version 4 test vectors (the requests
// and their expected canonical requests, strings to sign and signatures are AWS's, copied as data).
import Crypto
import DocDriveCore
import Foundation
import XCTest

final class SigV4Tests: XCTestCase {
    static let signer = SigV4(credentials: .init(accessKeyID: "AKIDEXAMPLE", secretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"),
                              region: "us-east-1", service: "service")
    static let date = Date(timeIntervalSince1970: 1_440_938_160)  // 20150830T123600Z

    struct Vector {
        let name: String
        let method: String
        let path: String
        let query: [(String, String)]
        let headers: [(String, String)]
        let body: String
        let creq: String
        let sts: String
        let signature: String
    }

    static let host = ("Host", "example.amazonaws.com")
    static let xdate = ("X-Amz-Date", "20150830T123600Z")
    static let empty = SigV4.emptyPayloadHash

    static let vectors: [Vector] = [
        Vector(name: "get-vanilla", method: "GET", path: "/", query: [], headers: [host, xdate], body: "",
               creq: "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n\(empty)",
               sts: "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\nbb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63",
               signature: "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"),
        Vector(name: "get-header-key-duplicate", method: "GET", path: "/", query: [],
               headers: [host, ("My-Header1", "value2"), ("My-Header1", "value2"), ("My-Header1", "value1"), xdate], body: "",
               creq: "GET\n/\n\nhost:example.amazonaws.com\nmy-header1:value2,value2,value1\nx-amz-date:20150830T123600Z\n\nhost;my-header1;x-amz-date\n\(empty)",
               sts: "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\ndc7f04a3abfde8d472b0ab1a418b741b7c67174dad1551b4117b15527fbe966c",
               signature: "c9d5ea9f3f72853aea855b47ea873832890dbdd183b4468f858259531a5138ea"),
        Vector(name: "get-header-value-order", method: "GET", path: "/", query: [],
               headers: [host, ("My-Header1", "value4"), ("My-Header1", "value1"), ("My-Header1", "value3"), ("My-Header1", "value2"), xdate], body: "",
               creq: "GET\n/\n\nhost:example.amazonaws.com\nmy-header1:value4,value1,value3,value2\nx-amz-date:20150830T123600Z\n\nhost;my-header1;x-amz-date\n\(empty)",
               sts: "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n31ce73cd3f3d9f66977ad3dd957dc47af14df92fcd8509f59b349e9137c58b86",
               signature: "08c7e5a9acfcfeb3ab6b2185e75ce8b1deb5e634ec47601a50643f830c755c01"),
        Vector(name: "get-header-value-trim", method: "GET", path: "/", query: [],
               headers: [host, ("My-Header1", " value1"), ("My-Header2", " \"a   b   c\""), xdate], body: "",
               creq: "GET\n/\n\nhost:example.amazonaws.com\nmy-header1:value1\nmy-header2:\"a b c\"\nx-amz-date:20150830T123600Z\n\nhost;my-header1;my-header2;x-amz-date\n\(empty)",
               sts: "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\na726db9b0df21c14f559d0a978e563112acb1b9e05476f0a6a1c7d68f28605c7",
               signature: "acc3ed3afb60bb290fc8d2dd0098b9911fcaa05412b367055dee359757a9c736"),
        Vector(name: "get-unreserved", method: "GET", path: "/-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz", query: [],
               headers: [host, xdate], body: "",
               creq: "GET\n/-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n\(empty)",
               sts: "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n6a968768eefaa713e2a6b16b589a8ea192661f098f37349f4e2c0082757446f9",
               signature: "07ef7494c76fa4850883e2b006601f940f8a34d404d0cfa977f52a65bbf5f24f"),
        Vector(name: "get-vanilla-empty-query-key", method: "GET", path: "/", query: [("Param1", "value1")], headers: [host, xdate], body: "",
               creq: "GET\n/\nParam1=value1\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n\(empty)",
               sts: "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n1e24db194ed7d0eec2de28d7369675a243488e08526e8c1c73571282f7c517ab",
               signature: "a67d582fa61cc504c4bae71f336f98b97f1ea3c7a6bfe1b6e45aec72011b9aeb"),
        Vector(name: "get-vanilla-query-order-key", method: "GET", path: "/", query: [("Param1", "value2"), ("Param1", "Value1")],
               headers: [host, xdate], body: "",
               creq: "GET\n/\nParam1=Value1&Param1=value2\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n\(empty)",
               sts: "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n704b4cef673542d84cdff252633f065e8daeba5f168b77116f8b1bcaf3d38f89",
               signature: "eedbc4e291e521cf13422ffca22be7d2eb8146eecf653089df300a15b2382bd1"),
        Vector(name: "get-vanilla-query-order-key-case", method: "GET", path: "/", query: [("Param2", "value2"), ("Param1", "value1")],
               headers: [host, xdate], body: "",
               creq: "GET\n/\nParam1=value1&Param2=value2\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n\(empty)",
               sts: "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n816cd5b414d056048ba4f7c5386d6e0533120fb1fcfa93762cf0fc39e2cf19e0",
               signature: "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500"),
        Vector(name: "get-vanilla-query-order-value", method: "GET", path: "/", query: [("Param1", "value2"), ("Param1", "value1")],
               headers: [host, xdate], body: "",
               creq: "GET\n/\nParam1=value1&Param1=value2\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n\(empty)",
               sts: "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\nc968629d70850097a2d8781c9bf7edcb988b04cac14cca9be4acc3595f884606",
               signature: "5772eed61e12b33fae39ee5e7012498b51d56abc0abb7c60486157bd471c4694"),
        Vector(name: "post-vanilla", method: "POST", path: "/", query: [], headers: [host, xdate], body: "",
               creq: "POST\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n\(empty)",
               sts: "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n553f88c9e4d10fc9e109e2aeb65f030801b70c2f6468faca261d401ae622fc87",
               signature: "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b"),
        Vector(name: "post-x-www-form-urlencoded", method: "POST", path: "/", query: [],
               headers: [("Content-Type", "application/x-www-form-urlencoded"), host, xdate], body: "Param1=value1",
               creq: "POST\n/\n\ncontent-type:application/x-www-form-urlencoded\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\ncontent-type;host;x-amz-date\n9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e",
               sts: "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n42a5e5bb34198acb3e84da4f085bb7927f2bc277ca766e6d19c73c2154021281",
               signature: "ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196a0fe09473a"),
    ]

    func testAWSPublishedVectors() {
        for v in Self.vectors {
            let hash = SigV4Tests.sha256Hex(v.body)
            let s = Self.signer.sign(method: v.method, path: v.path, query: v.query, headers: v.headers, payloadHash: hash, date: Self.date)
            XCTAssertEqual(s.canonicalRequest, v.creq, v.name)
            XCTAssertEqual(s.stringToSign, v.sts, v.name)
            let signed = v.headers.map { $0.0.lowercased() }.reduce(into: Set<String>()) { $0.insert($1) }.sorted().joined(separator: ";")
            XCTAssertEqual(s.authorization, "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=\(signed), Signature=\(v.signature)", v.name)
        }
    }

    func testAnotherSecretGivesAnotherSignature() {
        let other = SigV4(credentials: .init(accessKeyID: "AKIDEXAMPLE", secretAccessKey: "wrong"), region: "us-east-1", service: "service")
        let v = Self.vectors[0]
        let s = other.sign(method: v.method, path: v.path, headers: v.headers, payloadHash: SigV4.emptyPayloadHash, date: Self.date)
        XCTAssertFalse(s.authorization.hasSuffix(v.signature))
    }

    func testASignerKeptPastMidnightSignsWithTheNewDaysKey() {
        // Given a signer that signed today (its key of the day is kept),
        let kept = SigV4(credentials: Self.signer.credentials, region: "us-east-1", service: "service")
        let v = Self.vectors[0]
        _ = kept.sign(method: v.method, path: v.path, headers: [Self.host], payloadHash: Self.empty, date: Self.date)
        // when it signs the next day (and past a year's end), it signs as a fresh signer does.
        for later in [Self.date.addingTimeInterval(86_400), Date(timeIntervalSince1970: 1_451_606_399), Date(timeIntervalSince1970: 1_451_606_400)] {
            let s = kept.sign(method: v.method, path: v.path, headers: [Self.host], payloadHash: Self.empty, date: later)
            let fresh = SigV4(credentials: Self.signer.credentials, region: "us-east-1", service: "service")
                .sign(method: v.method, path: v.path, headers: [Self.host], payloadHash: Self.empty, date: later)
            XCTAssertEqual(s.authorization, fresh.authorization, "\(later)")
        }
        // The timestamp is the request's own second, in UTC (2015-12-31 23:59:59, then 2016-01-01).
        XCTAssertTrue(kept.sign(method: "GET", path: "/", headers: [Self.host], payloadHash: Self.empty,
                                date: Date(timeIntervalSince1970: 1_451_606_399)).headers.contains { $0 == ("X-Amz-Date", "20151231T235959Z") })
        XCTAssertTrue(kept.sign(method: "GET", path: "/", headers: [Self.host], payloadHash: Self.empty,
                                date: Date(timeIntervalSince1970: 1_451_606_400)).authorization.contains("/20160101/us-east-1/"))
    }

    func testSessionTokenIsSentAndSigned() {
        let s = SigV4(credentials: .init(accessKeyID: "A", secretAccessKey: "S", sessionToken: "TOKEN"), region: "us-east-1")
            .sign(method: "GET", path: "/bucket/key", headers: [("Host", "127.0.0.1:8333")], payloadHash: SigV4.unsignedPayload, date: Self.date)
        XCTAssertTrue(s.headers.contains { $0.0 == "X-Amz-Security-Token" && $0.1 == "TOKEN" })
        XCTAssertTrue(s.authorization.contains("SignedHeaders=host;x-amz-date;x-amz-security-token,"))
        XCTAssertTrue(s.canonicalRequest.hasSuffix("\nUNSIGNED-PAYLOAD"))
    }

    func testKeysAreEncodedByteForByte() {
        XCTAssertEqual(SigV4.encode("Reports/Q3 été+1.odt", slash: false), "Reports/Q3%20%C3%A9t%C3%A9%2B1.odt")
        XCTAssertEqual(SigV4.encode("a/b", slash: true), "a%2Fb")
        XCTAssertEqual(SigV4.encode("-._~", slash: true), "-._~")
    }

    static func sha256Hex(_ s: String) -> String {
        SHA256.hash(data: Data(s.utf8)).map { String(format: "%02x", $0) }.joined()
    }
}
