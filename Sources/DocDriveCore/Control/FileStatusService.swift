// FileStatusService: what the desktop status socket answers: the state of a path of the mount
// (the same as its user.docdrive.status, found by path rather than through a kernel node), its
// pin mark, its conflicts, and the store paths whose state may have changed (StatusMarks).
// Runs on the status socket's threads, never on a FUSE request thread.
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

public final class FileStatusService: Sendable {
    let fs: DriveFileSystem
    let documents: DocumentService

    public init(fs: DriveFileSystem, documents: DocumentService) {
        self.fs = fs
        self.documents = documents
    }

    /// The state of `rel` (relative to the mount root; "" is the root) and whether it is pinned.
    public func status(_ rel: String) -> (state: FileState, pinned: Bool) {
        guard !rel.isEmpty, let place = try? documents.place(rel) else { return (rel.isEmpty ? .local : .none, false) }
        let base = open(place.root.path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard base >= 0 else { return (.none, false) }
        defer { close(base) }
        let path = StorePath(place.rel)
        var isFile = false, dirFD: Int32 = -1
        defer { if dirFD >= 0 { close(dirFD) } }
        if !path.isEmpty {
            guard case .success(let dir) = Beneath.openFolder(base, Array(path.folder.names)) else { return (.none, false) }
            dirFD = dir
            guard let st = Beneath.stat(dir, path.lastName) else {
                // A reference entry (its backing file is NAME.docdrive-ref) has its target's state.
                if !place.root.isStore, let target = referenceTarget(dir, path) { return status(target) }
                return (.none, false)
            }
            isFile = st.st_mode & S_IFMT == S_IFREG
        }
        let sync = fs.sync
        guard place.root.isStore, sync.uploads(place.root.key) else {
            return (.local, false)
        }
        if path.isEmpty { return (sync.storeState(root: place.root.key), false) }
        let pinned = sync.onDemand.isPinned(root: place.root.key, path: path)
        let dir = dirFD
        let state = sync.fileState(root: place.root.key, path: path, isFile: isFile,
                                       isPlaceholder: { Placeholder.isPlaceholder(dir, path.lastName) })
        return (state, pinned)
    }

    /// The target of the reference entry `path` in the folder `dir`, relative to the mount root.
    private func referenceTarget(_ dir: Int32, _ path: StorePath) -> String? {
        let name = String(decoding: path.lastName, as: UTF8.self) + ReservedNames.referenceSuffix
        guard let p = ReferenceLink.read(dir, name, key: fs.driveKey), let root = fs.namespace.root(key: p.rootKey),
              root.isStore,
              let found = fs.locate(root: root, item: p.item, handle: Data(base64Encoded: p.handle).map { [UInt8]($0) }, hint: p.hint)
        else { return nil }
        Sys.close(found.fd)
        return fs.namespace.displayPath(rootKey: root.key, found.path)
    }

    /// The conflicts of `rel` (the document or its copy), or of every document under it when it
    /// is a folder: the document and the copy, relative to the mount root, and the other device.
    public func conflicts(_ rel: String) -> [(document: String, copy: String, device: String)] {
        guard let place = try? documents.place(rel), place.root.isStore,
              let all = try? fs.index.bases.conflicts(root: place.root.key) else { return [] }
        let key = place.root.key
        let under = place.rel.isEmpty ? "" : place.rel + "/"
        return all.map(\.1).filter { c in
            place.rel.isEmpty || c.path == place.rel || c.copy == place.rel || c.path.hasPrefix(under) || c.copy.hasPrefix(under)
        }.map { c in
            (fs.namespace.displayPath(rootKey: key, c.path), fs.namespace.displayPath(rootKey: key, c.copy), c.device)
        }
    }

    /// The paths (relative to the mount root) marked as changed since the last call.
    /// Waits until a path is marked or `timeout` seconds pass.
    func waitForChanges(timeout: Double) { _ = fs.sync.statusMarks.waitForMarks(timeout: timeout) }

    /// Wakes the thread waiting in `waitForChanges`.
    func wakeWaiter() { fs.sync.statusMarks.wakeWaiter() }

    public func takeChanged() -> [String] {
        return fs.sync.statusMarks.take().map { fs.namespace.displayPath(rootKey: $0.root, $0.path.description) }
    }

    /// Someone listens for changes (marks are kept) or stopped listening.
    public func listening(_ on: Bool) {
        fs.sync.statusMarks.listeners.add(on ? 1 : -1, ordering: .relaxed)
    }
}

/// Store paths whose state may have changed (a save, a fill, an eviction, a pin), kept only while
/// a status socket listens. `mark` is called on FUSE request threads (through the change feed's
/// UploadNotes and SyncService.noteChanged): one atomic load when nobody listens, else an append
/// under a leaf lock.
public final class StatusMarks: Sendable {
    let listeners = Atomic<Int>(0)
    /// A mark is also a change of what `docdrive status` shows (a save queued, a conflict, a
    /// fill), for `status-watch`; the sync engine raises it through here for its remotes' states.
    let changes: StatusChanges

    init(changes: StatusChanges = StatusChanges()) { self.changes = changes }
    /// Lock: leaf.
    private let marked = Mutex<[(root: String, path: StorePath)]>([])
    /// More than this many marks between two looks are dropped (a `cp -r` of a huge tree): the
    /// listener still learns of the files it asked about through their passing states.
    private static let maxMarks = 20_000

    func mark(root: String, path: StorePath) {
        changes.changed()
        guard listeners.load(ordering: .relaxed) > 0 else { return }
        marked.withLock { m in
            if m.count < Self.maxMarks { m.append((root, path)) }
        }
        // The status socket's thread wakes for the first mark since it last looked (one signal
        // however many marks follow before it looks).
        if !signalled.exchange(true, ordering: .acquiringAndReleasing) { arrived.signal() }
    }

    /// Set by the first mark since the last look; `arrived` is signalled then.
    private let signalled = Atomic<Bool>(false)
    private let arrived = DispatchSemaphore(value: 0)

    /// Waits until a path is marked (true) or `timeout` seconds pass (false).
    func waitForMarks(timeout: Double) -> Bool {
        let got = arrived.wait(timeout: .now() + timeout) == .success
        signalled.store(false, ordering: .releasing)
        return got
    }

    /// Wakes whoever waits for marks (at stop).
    func wakeWaiter() { arrived.signal() }

    func take() -> [(root: String, path: StorePath)] {
        marked.withLock { m in
            defer { m.removeAll(keepingCapacity: true) }
            return m
        }
    }
}

/// A path the sync engine changed behind the mount has a new state to show.
extension StatusMarks: DriveChangeSubscriber {
    public var follows: DriveChangeKinds { .remote }

    public func changed(_ change: DriveChange) {
        if case let .remote(.entry(root, path, _)) = change { mark(root: root, path: path) }
    }
}
