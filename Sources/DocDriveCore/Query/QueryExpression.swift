// QueryExpression: `docdrive query`'s expression language (Baloo/Spotlight-like): the parser, its
// tree, and the one-sentence errors that point at the bad term.
import Foundation

/// What a `kind:` value names. A file's kind comes from its name's extension, else from its
/// first bytes (QueryKinds).
public enum QueryKind: String, Sendable, CaseIterable {
    case document, image, pdf, text, spreadsheet, presentation, audio, video, archive, folder
}

/// What a `status:` value names.
public enum QueryStatus: String, Sendable, CaseIterable {
    case pending, uploading, failed, conflict, placeholder, synced
}

/// One predicate of an expression.
public enum QueryTerm: Sendable, Equatable {
    /// A bare word: the name contains it (case- and accent-insensitive; folded already).
    case word(String)
    /// `name:PATTERN`: a glob over the whole name when it has `*`, `?` or `[`, else like a word.
    case nameGlob(String)
    case kind([QueryKind])
    /// Bounds in bytes, both inclusive.
    case size(min: Int64?, max: Int64?)
    /// Bounds in seconds since 1970: `from` inclusive, `until` exclusive.
    case modified(from: Double?, until: Double?)
    case status([QueryStatus])
    /// `tag:WORD` (folded): one of the freedesktop `user.xdg.tags`.
    case tag(String)
    case app(String)
    case store(String)
    /// `external`: reference entries.
    case external
}

/// An expression: terms joined by implicit AND, `OR`, `-` (not) and parentheses.
public indirect enum QueryNode: Sendable, Equatable {
    case all
    case term(QueryTerm)
    case and([QueryNode])
    case or([QueryNode])
    case not(QueryNode)
}

/// Parses expressions. `now` and `calendar` fix what `today` and `7d` mean (tests pass them).
public struct QueryParser: Sendable {
    public var now: Date
    public var calendar: Calendar

    public init(now: Date = Date(), calendar: Calendar = .current) {
        self.now = now
        self.calendar = calendar
    }

    /// Parses the words of the command line (each argument may hold several terms).
    public func parse(_ arguments: [String]) throws(DriveError) -> QueryNode {
        var tokens = [Token]()
        for a in arguments { tokens += try Self.tokenize(a) }
        var p = Cursor(tokens: tokens)
        if tokens.isEmpty { return .all }
        let node = try parseOr(&p)
        if let t = p.peek {
            if t.kind == .close { throw Self.error("\")\" closes no \"(\"") }
            throw Self.error("\"\(t.text)\" is not expected here")
        }
        return node
    }

    public func parse(_ expression: String) throws(DriveError) -> QueryNode { try parse([expression]) }

    static func error(_ what: String) -> DriveError {
        DriveError(.invalidName, "The query expression is not valid: \(what).")
    }

    // MARK: tokens

    struct Token: Equatable {
        enum Kind { case open, close, or, and, not, term }
        var kind: Kind
        var text: String
        /// The term was quoted: it is a word, never a keyword or a field.
        var quoted = false
    }

    static func tokenize(_ s: String) throws(DriveError) -> [Token] {
        var out = [Token]()
        var chars = Array(s)
        var i = 0
        // A NUL or control character has no place in a name or a term.
        if let bad = chars.first(where: { !$0.isWhitespace && $0.unicodeScalars.contains { $0.properties.generalCategory == .control } }) {
            throw error("it contains the control character \(bad.unicodeScalars.first!.escaped(asASCII: true))")
        }
        while i < chars.count {
            let c = chars[i]
            if c.isWhitespace { i += 1; continue }
            if c == "(" { out.append(Token(kind: .open, text: "(")); i += 1; continue }
            if c == ")" { out.append(Token(kind: .close, text: ")")); i += 1; continue }
            if c == "-" {
                // "-" at the start of a term negates it; "-" inside a word (file-name) is a letter.
                out.append(Token(kind: .not, text: "-"))
                i += 1
                continue
            }
            var text = ""
            var quoted = false
            let startsQuoted = c == "\""
            while i < chars.count, !chars[i].isWhitespace, chars[i] != "(", chars[i] != ")" {
                if chars[i] == "\"" {
                    // A quoted part, possibly after a field ("name:\"my report\"").
                    quoted = true
                    var j = i + 1
                    while j < chars.count, chars[j] != "\"" { j += 1 }
                    if j == chars.count { throw error("the quote in \(String(chars[i...]).debugQuoted) is never closed") }
                    text += String(chars[(i + 1)..<j])
                    i = j + 1
                    continue
                }
                text.append(chars[i])
                i += 1
            }
            quoted = quoted && startsQuoted
            if !quoted && text == "OR" { out.append(Token(kind: .or, text: text)); continue }
            if !quoted && text == "AND" { out.append(Token(kind: .and, text: text)); continue }
            if !quoted && text == "NOT" { out.append(Token(kind: .not, text: text)); continue }
            out.append(Token(kind: .term, text: text, quoted: quoted))
        }
        chars.removeAll()
        return out
    }

    struct Cursor {
        var tokens: [Token]
        var at = 0
        var depth = 0
        var peek: Token? { at < tokens.count ? tokens[at] : nil }
        mutating func next() -> Token? {
            defer { at += 1 }
            return peek
        }
    }

    // MARK: grammar
    // or   := and ("OR" and)*
    // and  := unary (("AND")? unary)*
    // unary:= ("-" | "NOT") unary | "(" or ")" | term

    private func parseOr(_ p: inout Cursor) throws(DriveError) -> QueryNode {
        var parts = [try parseAnd(&p)]
        while p.peek?.kind == .or {
            _ = p.next()
            guard let t = p.peek, t.kind != .close, t.kind != .or, t.kind != .and else {
                throw Self.error("\"OR\" needs a term after it")
            }
            parts.append(try parseAnd(&p))
        }
        return parts.count == 1 ? parts[0] : .or(parts)
    }

    private func parseAnd(_ p: inout Cursor) throws(DriveError) -> QueryNode {
        guard let first = p.peek else { throw Self.error("a term is missing at its end") }
        if first.kind == .or { throw Self.error("\"OR\" needs a term before it") }
        if first.kind == .and { throw Self.error("\"AND\" needs a term before it") }
        if first.kind == .close { throw Self.error(p.depth > 0 ? "\"()\" holds no term" : "\")\" closes no \"(\"") }
        var parts = [try parseUnary(&p)]
        while let t = p.peek, t.kind != .or, t.kind != .close {
            if t.kind == .and {
                _ = p.next()
                guard let n = p.peek, n.kind != .close, n.kind != .or, n.kind != .and else {
                    throw Self.error("\"AND\" needs a term after it")
                }
            }
            parts.append(try parseUnary(&p))
        }
        return parts.count == 1 ? parts[0] : .and(parts)
    }

    private func parseUnary(_ p: inout Cursor) throws(DriveError) -> QueryNode {
        guard let t = p.next() else { throw Self.error("a term is missing at its end") }
        switch t.kind {
        case .not:
            guard let n = p.peek, n.kind == .term || n.kind == .open || n.kind == .not else {
                throw Self.error("\"\(t.text)\" must be followed by a term")
            }
            return .not(try parseUnary(&p))
        case .open:
            guard p.depth < 64 else { throw Self.error("it nests parentheses more than 64 deep") }
            p.depth += 1
            guard p.peek != nil else { throw Self.error("a \"(\" is never closed") }
            if p.peek?.kind == .close { throw Self.error("\"()\" holds no term") }
            let inner = try parseOr(&p)
            guard p.next()?.kind == .close else { throw Self.error("a \"(\" is never closed") }
            p.depth -= 1
            return inner
        case .close:
            throw Self.error("\")\" closes no \"(\"")
        case .or, .and:
            throw Self.error("\"\(t.text)\" needs a term before it")
        case .term:
            return .term(try term(t))
        }
    }

    // MARK: terms

    static let fields = ["name", "kind", "size", "modified", "status", "tag", "app", "store"]

    func term(_ t: Token) throws(DriveError) -> QueryTerm {
        let text = t.text
        if t.quoted {
            guard !text.isEmpty else { throw Self.error("\"\" is an empty word") }
            return .word(Self.fold(text))
        }
        if text == "external" && !t.quoted { return .external }
        // field, operator, value: the first ":", "=", "<" or ">".
        guard let opStart = text.firstIndex(where: { ":<>=".contains($0) }) else {
            return .word(Self.fold(text))
        }
        let field = String(text[..<opStart]).lowercased()
        var opEnd = text.index(after: opStart)
        if opEnd < text.endIndex, text[opEnd] == "=", "<>".contains(text[opStart]) { opEnd = text.index(after: opEnd) }
        let op = String(text[opStart..<opEnd])
        let value = String(text[opEnd...])
        let quotedTerm = "\"\(text)\""
        guard Self.fields.contains(field) || field == "mtime" || field == "type" else {
            if field.isEmpty { throw Self.error("\(quotedTerm) has no field before \"\(op)\"") }
            throw Self.error("\(quotedTerm) names the unknown field \"\(field)\" (fields: \(Self.fields.joined(separator: ", ")))")
        }
        guard !value.isEmpty else { throw Self.error("\(quotedTerm) has no value after \"\(op)\"") }
        let compares = op != ":" && op != "="
        switch field {
        case "size":
            guard let n = Self.bytes(value) else {
                throw Self.error("\(quotedTerm) has the size \"\(value)\", which is not a number of bytes (such as 500, 20K, 1.5M, 2G)")
            }
            switch op {
            case ">": return .size(min: n == .max ? n : n + 1, max: nil)
            case ">=": return .size(min: n, max: nil)
            case "<": return .size(min: nil, max: n - 1)
            case "<=": return .size(min: nil, max: n)
            default: return .size(min: n, max: n)
            }
        case "modified", "mtime":
            return try modified(op: op, value: value, term: quotedTerm)
        default:
            break
        }
        if compares { throw Self.error("\(quotedTerm) compares \"\(field)\" with \"\(op)\"; only size and modified compare") }
        switch field {
        case "name":
            return .nameGlob(Self.fold(value))
        case "kind", "type":
            var kinds = [QueryKind]()
            for v in value.split(separator: "|", omittingEmptySubsequences: false) {
                let w = v.lowercased()
                guard let k = QueryKind(rawValue: w) ?? (w == "dir" || w == "directory" ? .folder : nil) else {
                    throw Self.error("\(quotedTerm) names the unknown kind \"\(v)\" (kinds: \(QueryKind.allCases.map(\.rawValue).joined(separator: ", ")))")
                }
                kinds.append(k)
            }
            return .kind(kinds)
        case "status":
            var states = [QueryStatus]()
            for v in value.split(separator: "|", omittingEmptySubsequences: false) {
                guard let s = QueryStatus(rawValue: v.lowercased()) else {
                    throw Self.error("\(quotedTerm) names the unknown status \"\(v)\" (states: \(QueryStatus.allCases.map(\.rawValue).joined(separator: ", ")))")
                }
                states.append(s)
            }
            return .status(states)
        case "tag":
            return .tag(Self.fold(value))
        case "app":
            if let p = Names.problem(withAppID: value) { throw Self.error("\(quotedTerm) is not an app id: \(p)") }
            return .app(value)
        default:
            return .store(value)
        }
    }

    /// "500", "20K", "1.5M", "2GB", "3MiB": 1024-based.
    static func bytes(_ s: String) -> Int64? {
        var digits = s.lowercased()
        var unit: Double = 1
        for (suffix, u) in [("kib", 1024.0), ("mib", 1048576.0), ("gib", 1073741824.0), ("tib", 1099511627776.0),
                            ("kb", 1024.0), ("mb", 1048576.0), ("gb", 1073741824.0), ("tb", 1099511627776.0),
                            ("k", 1024.0), ("m", 1048576.0), ("g", 1073741824.0), ("t", 1099511627776.0), ("b", 1.0)]
        where digits.hasSuffix(suffix) {
            digits.removeLast(suffix.count)
            unit = u
            break
        }
        guard !digits.isEmpty, digits.allSatisfy({ $0.isASCII && ($0.isNumber || $0 == ".") }),
              digits.filter({ $0 == "." }).count <= 1, digits != ".", let v = Double(digits) else { return nil }
        let b = (v * unit).rounded()
        guard b.isFinite, b >= 0, b < 9.0e18 else { return nil }
        return Int64(b)
    }

    /// `modified:today|yesterday|DATE|7d`, `modified>DATE`, `modified<7d` (younger than 7 days).
    private func modified(op: String, value: String, term: String) throws(DriveError) -> QueryTerm {
        let v = value.lowercased()
        let t = now.timeIntervalSince1970
        // A duration: the item's age.
        if let age = Self.duration(v) {
            switch op {
            case "<", "<=": return .modified(from: t - age, until: nil)  // younger than
            case ">", ">=": return .modified(from: nil, until: t - age)  // older than
            default: return .modified(from: t - age, until: nil)  // within the last
            }
        }
        let day: (Double, Double)
        if v == "today" || v == "yesterday" {
            let start = calendar.startOfDay(for: now)
            let s = v == "today" ? start : calendar.date(byAdding: .day, value: -1, to: start)!
            day = (s.timeIntervalSince1970, calendar.date(byAdding: .day, value: 1, to: s)!.timeIntervalSince1970)
        } else if let d = Self.date(v, calendar: calendar) {
            day = d
        } else {
            throw Self.error("\(term) has \"\(value)\", which is neither a date (2026-11-01), today, yesterday nor an age (30m, 12h, 7d, 2w)")
        }
        switch op {
        case ">": return .modified(from: day.1, until: nil)
        case ">=": return .modified(from: day.0, until: nil)
        case "<": return .modified(from: nil, until: day.0)
        case "<=": return .modified(from: nil, until: day.1)
        default: return .modified(from: day.0, until: day.1)
        }
    }

    static func duration(_ v: String) -> Double? {
        guard let u = v.last, let n = Double(v.dropLast()), v.dropLast().allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
        switch u {
        case "s": return n
        case "m": return n * 60
        case "h": return n * 3600
        case "d": return n * 86400
        case "w": return n * 7 * 86400
        case "y": return n * 365 * 86400
        default: return nil
        }
    }

    /// YYYY-MM-DD (local time): the day's start and end.
    static func date(_ v: String, calendar: Calendar) -> (Double, Double)? {
        let parts = v.split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[0].count == 4, parts[1].count <= 2, parts[2].count <= 2,
              let y = Int(parts[0]), let m = Int(parts[1]), let d = Int(parts[2]),
              (1...12).contains(m), (1...31).contains(d) else { return nil }
        let c = DateComponents(year: y, month: m, day: d)
        guard let start = calendar.date(from: c), calendar.component(.day, from: start) == d,
              let end = calendar.date(byAdding: .day, value: 1, to: start) else { return nil }
        return (start.timeIntervalSince1970, end.timeIntervalSince1970)
    }

    /// Case- and accent-insensitive form of a name or word.
    public static func fold(_ s: String) -> String {
        if s.utf8.allSatisfy({ $0 < 0x80 }) { return s.lowercased() }
        return s.folding(options: [.caseInsensitive, .diacriticInsensitive, .widthInsensitive], locale: nil).lowercased()
    }
}

extension String {
    var debugQuoted: String { "\"" + self + "\"" }
}
