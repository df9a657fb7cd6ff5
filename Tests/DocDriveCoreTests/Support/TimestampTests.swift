// TimestampTests: a file's time from outside (a stat, a remote's metadata) is converted without
// trapping (Timestamp.swift): clamped to what nanoseconds in an Int64 hold, and back to a
// timespec that utimensat(2) takes, before 1970 too.
import DocDriveCore
import Foundation
import XCTest

final class TimestampTests: XCTestCase {
    func testTimesBeyondWhatNanosecondsHoldAreClampedNotATrap() {
        // ext4 holds seconds up to 2446 and back to 1901; nanoseconds in an Int64 end in 2262.
        XCTAssertEqual(Timestamp.nanoseconds(timespec(tv_sec: 9_300_000_000, tv_nsec: 0)), .max)
        XCTAssertEqual(Timestamp.nanoseconds(timespec(tv_sec: 17_179_869_183, tv_nsec: 999_999_999)), .max)
        XCTAssertEqual(Timestamp.nanoseconds(timespec(tv_sec: -9_300_000_000, tv_nsec: 0)), .min)
        XCTAssertEqual(Timestamp.nanoseconds(timespec(tv_sec: .max, tv_nsec: .max)), .max)
        XCTAssertEqual(Timestamp.nanoseconds(timespec(tv_sec: .min, tv_nsec: .min)), .min)
        // The last second that fits, with nanoseconds that would carry it over.
        XCTAssertEqual(Timestamp.nanoseconds(seconds: 9_223_372_036, nanoseconds: 854_775_807), .max)
        XCTAssertEqual(Timestamp.nanoseconds(seconds: 9_223_372_036, nanoseconds: 854_775_808), .max)
        XCTAssertEqual(Timestamp.nanoseconds(seconds: -9_223_372_036, nanoseconds: -854_775_809), .min)
        // Times inside the range are exact.
        XCTAssertEqual(Timestamp.nanoseconds(timespec(tv_sec: 1_700_000_000, tv_nsec: 123)), 1_700_000_000_000_000_123)
        XCTAssertEqual(Timestamp.nanoseconds(timespec(tv_sec: -2_147_483_648, tv_nsec: 0)), -2_147_483_648_000_000_000)
    }

    func testTheFirstSecondThatFitsKeepsItsFraction() {
        // -9223372037 s do not fit in an Int64 of nanoseconds, but with 0.415224192 s more they
        // do (the fuzzer's input: {"mtimeNanoseconds":-9223372036584775808}); they were clamped
        // to the first nanosecond, so such a time did not come back from its timespec.
        XCTAssertEqual(Timestamp.nanoseconds(seconds: -9_223_372_037, nanoseconds: 415_224_192), -9_223_372_036_584_775_808)
        XCTAssertEqual(Timestamp.nanoseconds(seconds: -9_223_372_037, nanoseconds: 145_224_192), .min)
        XCTAssertEqual(Timestamp.nanoseconds(seconds: -9_223_372_037, nanoseconds: 145_224_191), .min)
        XCTAssertEqual(Timestamp.nanoseconds(seconds: 9_223_372_037, nanoseconds: -145_224_193), .max)
        for ns: Int64 in [.min + 1, -9_223_372_036_584_775_808, .min + 854_775_807, .min + 854_775_808] {
            XCTAssertEqual(Timestamp.nanoseconds(Timestamp.timespec(ns)), ns, "\(ns) goes back and forth")
        }
    }

    func testNanosecondsGoBackToATimespecWithItsNanosecondsInRange() {
        for ns: Int64 in [0, 1, -1, 1_700_000_000_123_456_789, -500_000_000, -1_500_000_001, .max, .min] {
            let t = Timestamp.timespec(ns)
            XCTAssert((0..<1_000_000_000).contains(t.tv_nsec), "\(ns): tv_nsec \(t.tv_nsec)")
            XCTAssertEqual(Timestamp.nanoseconds(t), ns, "\(ns) goes back and forth")
        }
        XCTAssertEqual(Timestamp.timespec(-1).tv_sec, -1)
        XCTAssertEqual(Timestamp.timespec(-1).tv_nsec, 999_999_999)
    }

    func testDecimalSecondsAsRcloneWritesThem() {
        XCTAssertEqual(Timestamp.decimalSeconds(1_700_000_000_123_456_789), "1700000000.123456789")
        XCTAssertEqual(Timestamp.decimalSeconds(-500_000_000), "-0.500000000")
        XCTAssertEqual(Timestamp.decimalSeconds(.min), "-9223372036.854775808")
        XCTAssertEqual(Timestamp.decimalSeconds(.max), "9223372036.854775807")
        for ns: Int64 in [0, -1, 42, -500_000_000, 1_700_000_000_000_000_001, .max, .min] {
            XCTAssertEqual(Timestamp.nanoseconds(decimalSeconds: Timestamp.decimalSeconds(ns)), ns)
        }
        XCTAssertEqual(Timestamp.nanoseconds(decimalSeconds: "1700000000.5"), 1_700_000_000_500_000_000)
        XCTAssertEqual(Timestamp.nanoseconds(decimalSeconds: "1.1234567899"), 1_123_456_789)
        XCTAssertEqual(Timestamp.nanoseconds(decimalSeconds: "12."), 12_000_000_000)
        XCTAssertEqual(Timestamp.nanoseconds(decimalSeconds: ".5"), 500_000_000)
        XCTAssertEqual(Timestamp.nanoseconds(decimalSeconds: "99999999999999999999999999"), .max)
        XCTAssertEqual(Timestamp.nanoseconds(decimalSeconds: "-99999999999999999999999999.9"), .min)
        for bad in ["", ".", "-", "1e3", "1.2.3", "nan", "inf", " 1", "1 ", "٣"] {
            XCTAssertNil(Timestamp.nanoseconds(decimalSeconds: bad), bad)
        }
    }

    func testARemotesTimeHeadersOfAnyValueAreReadWithoutATrap() {
        // A foreign tool's rclone header beyond 2262, and DocDrive's own header out of range.
        XCTAssertEqual(S3Meta.meta([("X-Amz-Meta-Mtime", "9300000000.25")]).meta.mtimeNanoseconds, .max)
        XCTAssertEqual(S3Meta.meta([("X-Amz-Meta-Mtime", "-1e400")]).meta.mtimeNanoseconds, nil)
        XCTAssertNil(S3Meta.meta([("X-Amz-Meta-Docdrive-Mtime", "99999999999999999999")]).meta.mtimeNanoseconds)
        // What a device writes for the first and last nanosecond reads back the same.
        for ns: Int64 in [.max, .min] {
            var m = RemoteMeta()
            m.mtimeNanoseconds = ns
            let rclone = S3Meta.headers(m).filter { $0.0 == "x-amz-meta-mtime" }
            XCTAssertEqual(S3Meta.meta(rclone).meta.mtimeNanoseconds, ns)
        }
    }
}
