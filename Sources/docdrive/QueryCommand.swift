// QueryCommand: `docdrive query`: find documents by name, kind, size, date, status and tags, in
// the seeds' scopes; `--watch` keeps printing what enters, leaves or changes.
import ArgumentParser
import DocDriveCore
import Foundation

struct Query: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "query",
        abstract: "Print the mount paths of the items that match an expression.",
        discussion: """
        Terms (implicit AND; OR, -term or NOT term, parentheses): a bare word (the name contains it, \
        case- and accent-insensitive), name:*.odt, kind:document|image|pdf|text|spreadsheet|presentation|\
        audio|video|archive|folder, size>1M (also <, >=, <=, size:N), modified:today|yesterday|2026-11-01, \
        modified>2026-11-01, modified<7d (younger than 7 days), status:pending|uploading|failed|conflict|\
        placeholder|synced, tag:WORD (user.xdg.tags), app:ID, store:NAME, external (reference entries). \
        Scopes (--in, several allowed): documents (the default: every app's Documents and every store), \
        data (the apps' private Data), external (references and their targets), a store name, an app id, \
        or a folder of the mount. Put "--" before an expression that starts with "-".
        """)

    @OptionGroup var drive: DriveOptions
    @Option(name: .customLong("in"), help: ArgumentHelp("Where to look (repeatable): documents, data, external, a store, an app id or a folder.", valueName: "scope"))
    var scopes: [String] = []
    @Flag(help: "Print JSON (an array; one object per line with --watch).") var json = false
    @Flag(name: .customShort("0"), help: "Separate paths with NUL (for xargs -0).") var nul = false
    @Flag(help: "Print only how many items match.") var count = false
    @Flag(help: "Print the results, then one line per item that enters (+), leaves (-) or changes (~), until interrupted.") var watch = false
    @Option(help: ArgumentHelp("Order: name (A to Z), size (largest first) or modified (newest first).", valueName: "key"))
    var sort: String?
    @Flag(help: "Reverse the order of --sort.") var reverse = false
    @Option(help: "Print at most N items.") var limit: Int?
    @Argument(parsing: .allUnrecognized, help: ArgumentHelp("The expression (no expression: every item in the scopes).", valueName: "expr"))
    var expression: [String] = []

    func validate() throws {
        if [json, nul, count].filter({ $0 }).count > 1 { throw ValidationError("Choose one of --json, -0 and --count.") }
        if count && watch { throw ValidationError("--count cannot be used with --watch.") }
        if let sort, QuerySort(rawValue: sort) == nil { throw ValidationError("Sort by name, size or modified, not \"\(sort)\".") }
        if let limit, limit < 0 { throw ValidationError("--limit must be 0 or more.") }
    }

    func run() throws {
        try guarded {
            // A malformed expression is refused here, mounted or not (exit 4).
            _ = try QueryParser().parse(expression)
            let home = drive.driveHome
            var request = ControlRequest.Query(expr: expression, scopes: try scopes.map { s throws(DriveError) in try Self.scope(s, home: home) },
                                               limit: limit, count: count, pathsOnly: !json && !watch)
            if let sort {
                request.sort = QuerySort(rawValue: sort)
                let natural = sort != "name"  // size and modified: largest and newest first
                request.descending = reverse ? !natural : natural
            }
            let mnt = home.liveMountRecord()?.mountpoint ?? ""
            let base = mnt.hasSuffix("/") ? String(mnt.dropLast()) : mnt
            if !watch {
                let result = try ControlClient.call(home, request)
                if count {
                    print(result.count ?? 0)
                    return
                }
                if json {
                    printJSON(jsonObject((result.items ?? []).map { Self.absolute($0, base) }))
                } else {
                    var out = ""
                    for p in result.paths ?? [] { out += base + "/" + p + (nul ? "\0" : "\n") }
                    FileHandle.standardOutput.write(Data(out.utf8))
                }
                return
            }
            // The first answer holds the current items; each later one, items that changed.
            var first = true
            try ControlClient.stream(home, .queryWatch(request)) { (answer: QueryAnswer) in
                for item in (answer.items ?? []).map({ Self.absolute($0, base) }) {
                    if json {
                        Self.emit(Self.jsonLine(item), nul)
                    } else {
                        Self.emit(first ? item.path : "\(item.event ?? "?") \(item.path)", nul)
                    }
                }
                first = false
                return true
            }
            throw DriveError(.io, "The daemon ended the live query (was the drive unmounted?).")
        }
    }

    static func emit(_ s: String, _ nul: Bool) {
        FileHandle.standardOutput.write(Data((s + (nul ? "\0" : "\n")).utf8))
    }

    static func jsonLine(_ item: QueryItem) -> String {
        guard let d = try? JSONSerialization.data(withJSONObject: jsonObject(item), options: [.sortedKeys, .withoutEscapingSlashes]) else { return "{}" }
        return String(decoding: d, as: UTF8.self)
    }

    static func absolute(_ item: QueryItem, _ base: String) -> QueryItem {
        var i = item
        i.path = base + "/" + i.path
        return i
    }

    /// A scope as given: a path (absolute, ./, ../ or with a "/") is made mount-relative.
    static func scope(_ s: String, home: DriveHome) throws(DriveError) -> String {
        if s.hasPrefix("/") || s.hasPrefix("./") || s.hasPrefix("../") || s == "." || s == ".." {
            let rel = try mountRelative(s, home: home)
            if rel.isEmpty { return "documents" }
            return "folder:" + rel
        }
        if s.contains("/") { return "folder:" + s.split(separator: "/").joined(separator: "/") }
        return s
    }
}
