// Uploader+Placeholders: the drive's side of content on demand. Opens of placeholders wait for
// one download per file (on a thread of its own, never a FUSE request thread), and the
// control commands pin, unpin and evict.
import Foundation
import Synchronization

extension Uploader {
    /// The indexer or thumbnailer `pid` runs when the store `root` refuses it placeholders'
    /// content (`indexers: skip`), else nil.
    public func refusedIndexer(_ root: String, pid: Int32) -> String? {
        guard let store = store(root), store.config.indexers == .skip else { return nil }
        return BackgroundReaders.indexer(pid: pid)
    }

    /// Fills the placeholder at `path` of the store `root` on a thread of its own, then calls
    /// `done` there (nil: filled, or it was no placeholder). A call for a path being filled
    /// waits for the same download.
    public func fill(root: String, path: StorePath, done: @escaping @Sendable (DriveError?) -> Void) {
        guard let store = store(root) else {
            done(DriveError(.notFound, "The store of \(path) is not in the config any more."))
            return
        }
        let key = root + "\0" + path.description
        let first = filling.withLock { m -> Bool in
            if m[key] != nil {
                m[key]!.append(done)
                return false
            }
            m[key] = [done]
            return true
        }
        guard first else { return }
        let t = Thread { [self] in
            var failure: DriveError?
            do throws(DriveError) {
                try store.sync.hydrate(path)
            } catch {
                failure = error
            }
            store.sync.noteFill(path, failure)
            if failure == nil { store.sync.keepUnderCacheLimit(keeping: path) }
            let waiters = filling.withLock { $0.removeValue(forKey: key) ?? [] }
            for w in waiters { w(failure) }
        }
        t.name = "docdrive-download-\(store.config.name)"
        t.start()
    }

    /// Fills the placeholder at `path` and waits for it (control commands: never a FUSE
    /// thread); returns the file's size.
    public func fillAndWait(root: String, path: StorePath) throws(DriveError) -> Int64 {
        let done = DispatchSemaphore(value: 0)
        let result = Mutex<DriveError?>(nil)
        fill(root: root, path: path) { e in
            result.withLock { $0 = e }
            done.signal()
        }
        done.wait()
        if let e = result.withLock({ $0 }) { throw e }
        return try storeOf(root).sync.files(under: path).first?.size ?? 0
    }

    private func storeOf(_ root: String) throws(DriveError) -> Store {
        guard let s = store(root) else { throw DriveError(.notFound, "That store is not in the config (or its remote cannot be used).") }
        return s
    }

    /// Pins (or unpins) `path`; returns the files at or under it (the placeholders among them
    /// are for the caller to fill: `docdrive pin` shows its progress).
    public func pin(root: String, path: StorePath, on: Bool) throws(DriveError) -> [(path: StorePath, placeholder: Bool, size: Int64)] {
        let store = try storeOf(root)
        try store.sync.setPinned(path, on)
        return try store.sync.files(under: path)
    }

    /// Frees the space of every clean, closed, unpinned file at or under `path`.
    public func evict(root: String, path: StorePath) throws(DriveError) -> EvictAnswer {
        let store = try storeOf(root)
        var report = EvictAnswer(files: 0, evicted: 0, freed: 0, refused: [])
        for f in try store.sync.files(under: path) {
            report.files += 1
            if f.placeholder { continue }
            do {
                report.freed += try store.sync.evict(f.path)
                report.evicted += 1
            } catch {
                report.refused.append(error.message)
            }
        }
        return report
    }
}
