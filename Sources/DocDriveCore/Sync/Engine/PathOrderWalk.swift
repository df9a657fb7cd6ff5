import Glibc

/// A walk of a folder tree in the order of its paths' bytes, the order the index keeps the
/// bases in (`BasesInOrder`), so that the two can be compared side by side with no map of
/// either. In one folder a name comes before the names that sort after it, and the folder's
/// contents come where "name/" sorts: "a", "a.txt", then "a/b" ('.' sorts before '/').
public enum PathOrderWalk {
    /// One name met: the folder it is in (`dir`, open for the call only), its name, its path,
    /// and whether that path is UTF-8 (so stored as text, not as a BLOB).
    public struct Step {
        public let dir: Int32
        public let name: [UInt8]
        public let path: StorePath
        public let utf8: Bool
    }

    /// Calls `visit` for each name below `dfd` whose path is `path` (nothing for `dfd` itself),
    /// skipping the names `skip` says yes to and what is below them. A folder is walked into
    /// when the folder's entry says it is one (never a link to one). Ends early, as it is,
    /// once `stopped` says yes.
    public static func walk<E: Error>(_ dfd: Int32, _ path: StorePath, utf8: Bool = true, skip: ([UInt8]) -> Bool,
                               stopped: () -> Bool, visit: (Step) throws(E) -> Void) throws(E) {
        var steps = [(key: [UInt8], name: [UInt8], into: Bool)]()
        for e in Beneath.names(dfd) ?? [] where !skip(e.name) {
            steps.append((e.name, e.name, false))
            let folder = e.type == DT_DIR
                || e.type == DT_UNKNOWN && Beneath.stat(dfd, e.name[...]).map { $0.st_mode & S_IFMT == S_IFDIR } == true
            if folder { steps.append((e.name + [UInt8(ascii: "/")], e.name, true)) }
        }
        steps.sort { $0.key.lexicographicallyPrecedes($1.key) }
        for step in steps {
            if stopped() { return }
            let rel = path.appending(step.name)
            let text = utf8 && String(validating: step.name, as: UTF8.self) != nil
            guard step.into else {
                try visit(Step(dir: dfd, name: step.name, path: rel, utf8: text))
                continue
            }
            guard case .success(let sub) = Beneath.openFolder(dfd, [step.name[...]]) else { continue }
            defer { close(sub) }
            try walk(sub, rel, utf8: text, skip: skip, stopped: stopped, visit: visit)
        }
    }
}
