// Timestamp: a file's time from outside converted to and from the drive's own form without trapping.
import Glibc

/// Times as the drive keeps and sends them: nanoseconds since 1970 in an `Int64`, which holds
/// 1677-09-21 to 2262-04-11. A file's time comes from outside (a stat of a backing file, which
/// ext4 holds from 1901 to 2446; a remote's metadata written by another device or another
/// tool), so every conversion here saturates instead of trapping: a time beyond what an
/// `Int64` holds is kept as its last nanosecond, one before as its first, and goes to other
/// devices as that date.
public enum Timestamp {
    static let perSecond: Int64 = 1_000_000_000

    /// `seconds` and `nanoseconds` (any values, as they came) in nanoseconds since 1970, clamped.
    public static func nanoseconds(seconds: Int64, nanoseconds: Int64) -> Int64 {
        // In 128 bits, which hold any such sum: the seconds alone may overflow where the sum
        // does not (the first second an Int64 holds, -9223372037 s, with its fraction).
        Int64(clamping: Int128(seconds) * Int128(perSecond) + Int128(nanoseconds))
    }

    /// A `timespec` (a stat's time) in nanoseconds since 1970, clamped.
    public static func nanoseconds(_ t: timespec) -> Int64 {
        nanoseconds(seconds: Int64(t.tv_sec), nanoseconds: Int64(t.tv_nsec))
    }

    /// Nanoseconds since 1970 as a `timespec` whose `tv_nsec` is in 0..<1e9 (a time before
    /// 1970 too, as utimensat(2) needs it).
    public static func timespec(_ ns: Int64) -> Glibc.timespec {
        var s = ns / perSecond, n = ns % perSecond
        if n < 0 { s -= 1; n += perSecond }
        return Glibc.timespec(tv_sec: Int(s), tv_nsec: Int(n))
    }

    /// Nanoseconds since 1970 as decimal seconds with nine decimals ("-0.500000000"), as
    /// rclone's mtime header writes them.
    public static func decimalSeconds(_ ns: Int64) -> String {
        let whole = (ns / perSecond).magnitude, frac = String((ns % perSecond).magnitude)
        return (ns < 0 ? "-" : "") + "\(whole).\(String(repeating: "0", count: 9 - frac.count))\(frac)"
    }

    /// Decimal seconds ("1700000000.123456789", "-2.5") in nanoseconds since 1970, clamped (digits
    /// past the ninth decimal dropped); nil for text that is not such a number.
    public static func nanoseconds(decimalSeconds text: String) -> Int64? {
        var t = Substring(text)
        var negative = false
        if t.first == "-" || t.first == "+" { negative = t.first == "-"; t = t.dropFirst() }
        let parts = t.split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false)
        guard let intPart = parts.first, parts.count <= 2,
              !(intPart.isEmpty && (parts.count < 2 || parts[1].isEmpty)),
              intPart.allSatisfy(\.isASCIIDigitForTimestamp),
              parts.count < 2 || parts[1].allSatisfy(\.isASCIIDigitForTimestamp) else { return nil }
        var seconds: Int64 = 0
        for c in intPart {
            let (m, o1) = seconds.multipliedReportingOverflow(by: 10)
            let (a, o2) = m.addingReportingOverflow(Int64(c.asciiValue! - 48))
            if o1 || o2 { return negative ? .min : .max }
            seconds = a
        }
        var nanos: Int64 = 0, digits = 0
        if parts.count == 2 {
            for c in parts[1] where digits < 9 { nanos = nanos * 10 + Int64(c.asciiValue! - 48); digits += 1 }
            while digits < 9 { nanos *= 10; digits += 1 }
        }
        return negative ? nanoseconds(seconds: -seconds, nanoseconds: -nanos) : nanoseconds(seconds: seconds, nanoseconds: nanos)
    }
}

private extension Character {
    var isASCIIDigitForTimestamp: Bool { isASCII && isNumber }
}
