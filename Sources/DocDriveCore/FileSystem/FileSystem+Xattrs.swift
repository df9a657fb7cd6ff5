// FileSystem+Xattrs: extended attributes, passed through, plus the drive's own user.docdrive.* ones.
import CDocDriveSys
import SystemPackage
#if canImport(Glibc)
import Glibc
#endif

extension DriveFileSystem {
    /// Attributes the drive computes; they are read-only and not stored on the backing file.
    static let ownPrefix = "user.docdrive."
    static let capabilityName = "security.capability"

    /// The value of the drive's own attribute `name`, or nil if it is not one of ours.
    func ownAttribute(_ n: Inode, _ name: String) throws(Errno) -> [UInt8]? {
        guard name.hasPrefix(Self.ownPrefix) else { return nil }
        if n.reference != nil { return try referenceAttribute(n, name) }
        // Computed without the node's descriptor: a node whose file was replaced behind the
        // kernel's back must still send the kernel to look the name up again.
        if n.kind == .backing, n.isReplaced { throw .staleNFSFileHandle }
        switch name {
        case "user.docdrive.id":
            guard n.kind == .backing, let root = n.root else { throw .noData }
            return Array(try itemID(n, root: root).utf8)
        case "user.docdrive.external":
            return Array("0".utf8)
        case "user.docdrive.thumbnail":
            guard n.kind == .backing, let root = n.root, let pic = thumbnails.picture(item: try itemID(n, root: root)) else { throw .noData }
            return pic
        case "user.docdrive.status":
            guard let status = uploadStatus(n) else { throw .noData }
            return Array(status.utf8)
        default:
            throw .noData
        }
    }

    /// What a reference entry says about itself (the seed's isExternalDocument,
    /// containerDisplayName and urlInLocalContainer).
    static let referenceAttributes = ["user.docdrive.external", "user.docdrive.container", "user.docdrive.target",
                                      "user.docdrive.status", "user.docdrive.id"]

    func referenceAttribute(_ n: Inode, _ name: String) throws(Errno) -> [UInt8] {
        let link = n.reference!
        switch name {
        case "user.docdrive.external":
            return Array("1".utf8)
        case "user.docdrive.status":
            return Array((uploadStatus(n) ?? "synced").utf8)
        case "user.docdrive.id":
            guard let p = link.payload else { throw .noData }
            return Array(p.item.utf8)
        case "user.docdrive.thumbnail":
            guard let p = link.payload, let pic = thumbnails.picture(item: p.item) else { throw .noData }
            return pic
        case "user.docdrive.container":
            guard let p = link.payload,
                  let store = namespace.current().config.stores.first(where: { $0.name == p.store }) else { throw .noData }
            return Array(store.displayName.utf8)
        case "user.docdrive.target":
            guard let root = link.storeRoot, let t = try? referenceTarget(n), let rel = relativePath(fd: t, root: root) else { throw .noData }
            return Array(namespace.displayPath(rootKey: root.key, rel).utf8)
        default:
            throw .noData
        }
    }

    /// The stable id of a node's item, assigned on first request.
    public func itemID(_ n: Inode, root: BackingRoot) throws(Errno) -> String {
        let nfd = try n.acquire()
        defer { n.release() }
        let st = try Sys.stat(fd: nfd)
        do {
            return try itemID(fd: nfd, st: st, root: root)
        } catch {
            logger.error("\(error.message)")
            throw Errno(answering: error)
        }
    }

    /// The stable id of the item `fd` (any descriptor of it) in `root`, assigned on first
    /// request. Identity is (root, inode number); its name and parent are hints kept with it.
    func itemID(fd: Int32, st: stat, root: BackingRoot) throws(DriveError) -> String {
        var name = "", parentIno: Int64 = 0
        if let rel = relativePath(fd: fd, root: root), !rel.isEmpty {
            name = String(rel.split(separator: "/").last ?? "")
            let parentPath = root.path + (rel.contains("/") ? "/" + rel[..<rel.lastIndex(of: "/")!] : "")
            var pst = stat()
            if dd_stat(parentPath, &pst) == 0 { parentIno = Int64(pst.st_ino) }
        }
        let type = st.st_mode & S_IFMT
        let kind: ItemKind = type == S_IFDIR ? .directory : type == S_IFLNK ? .symlink : type == S_IFREG ? .file : .other
        return try index.itemID(root: root.key, ino: Int64(st.st_ino), parentIno: parentIno, name: name, kind: kind)
    }

    public func getxattr(_ id: UInt64, name: UnsafePointer<CChar>, size: Int) throws(Errno) -> [UInt8] {
        let n = try node(id)
        let s = String(cString: name)
        if let own = try ownAttribute(n, s) {
            if size > 0 && own.count > size { throw .outOfRange }
            return own
        }
        guard n.kind == .backing else { throw .noData }
        let isCapability = s == Self.capabilityName
        if isCapability, n.hasNoCapability.load(ordering: .relaxed) { throw .noData }
        let (nfd, _) = try acquireContent(n)
        defer { n.release() }
        if size == 0 {
            let len: Int
            do {
                len = try Sys.check { dd_getxattr_path(nfd, name, nil, 0) }
            } catch {
                if isCapability, error == .noData { n.hasNoCapability.store(true, ordering: .relaxed) }
                throw error
            }
            return [UInt8](repeating: 0, count: len)  // the caller only wants the size
        }
        var buf = [UInt8](repeating: 0, count: size)
        let len = try Sys.check { buf.withUnsafeMutableBytes { dd_getxattr_path(nfd, name, $0.baseAddress, size) } }
        return Array(buf[0..<len])
    }

    public func listxattr(_ id: UInt64, size: Int) throws(Errno) -> [UInt8] {
        let n = try node(id)
        guard n.kind == .backing else { return [] }
        var out = [UInt8]()
        if n.reference != nil {
            for name in Self.referenceAttributes where (try? referenceAttribute(n, name)) != nil {
                out += Array(name.utf8) + [0]
            }
            guard referenceProblem(n) == nil else {
                if size > 0 && out.count > size { throw .outOfRange }
                return out
            }
        }
        let (nfd, _) = try acquireContent(n)
        defer { n.release() }
        let needed = try Sys.check { dd_listxattr_path(nfd, nil, 0) }
        var buf = [UInt8](repeating: 0, count: max(needed, 1))
        let len = try Sys.check { buf.withUnsafeMutableBytes { dd_listxattr_path(nfd, $0.baseAddress, needed) } }
        // Hide anything stored under our own prefix: those names are the drive's to answer.
        out.reserveCapacity(out.count + len)
        for part in buf[0..<len].split(separator: 0) {
            if part.starts(with: Self.ownPrefix.utf8) { continue }
            out.append(contentsOf: part)
            out.append(0)
        }
        if size > 0 && out.count > size { throw .outOfRange }
        return out
    }

    /// `caller`: who asks (an access ACL set by someone not in the file's group drops setgid).
    public func setxattr(_ id: UInt64, name: UnsafePointer<CChar>, value: UnsafeRawPointer?, size: Int, flags: Int32,
                         caller: Caller? = nil) throws(Errno) {
        let n = try backing(id)
        if String(cString: name).hasPrefix(Self.ownPrefix) { throw .notPermitted }
        let (nfd, _) = try acquireContent(n)
        defer { n.release() }
        n.hasNoCapability.store(false, ordering: .relaxed)
        _ = try Sys.check { dd_setxattr_path(nfd, name, value, size, flags) }
        if size > 0, strcmp(name, "system.posix_acl_access") == 0 { dropSetgidAfterACL(nodeFD: nfd, caller: caller) }
    }

    public func removexattr(_ id: UInt64, name: UnsafePointer<CChar>) throws(Errno) {
        let n = try backing(id)
        if String(cString: name).hasPrefix(Self.ownPrefix) { throw .notPermitted }
        let (nfd, _) = try acquireContent(n)
        defer { n.release() }
        _ = try Sys.check { dd_removexattr_path(nfd, name) }
    }
}
