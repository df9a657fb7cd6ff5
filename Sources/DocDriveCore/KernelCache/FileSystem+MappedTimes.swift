// FileSystem+MappedTimes: how long the kernel may keep a file's attributes, so that stores through a shared mapping show their times.
import SystemPackage
#if canImport(Glibc)
import Glibc
#endif

/// With FUSE passthrough the kernel maps the backing file itself: a store through a MAP_SHARED
/// mapping updates the backing file's mtime and ctime, and msync writes it back, without a
/// request to the drive. The kernel's cached attributes of the FUSE file would then show the old
/// times until they expire (measured: up to the whole attribute timeout after msync, and after
/// munmap and close). So while such a mapping is possible (a passed-through file open for reading
/// and writing), the node's attributes are given with no validity, and its cached ones are
/// dropped at that open (the adapter). Files opened only for reading, or only for writing, keep
/// the timeout; without passthrough every write-back comes through the drive, which the kernel
/// notices by itself.
extension OpenFile {
    /// Only a file opened for reading and writing can be mapped shared and writable.
    var mappableShared: Bool { readable && writable }
}

extension Inode {
    /// A shared mapping may be changing the file behind the kernel's cached attributes.
    public var attributesMayChangeUnseen: Bool { mappableOpens.load(ordering: .relaxed) > 0 }
}

extension DriveFileSystem {
    /// The attributes for the kernel, and how long it may keep them.
    public func kernelAttributes(_ id: UInt64) throws(Errno) -> (stat, Double) {
        let n = try node(id)
        let st = try shown(getattr(node: n))
        noteTold(n, st)
        return (st, attributeTimeout(n))
    }

    /// setattr, with how long the kernel may keep the attributes it returns.
    public func kernelSetattr(_ id: UInt64, _ c: AttributeChanges, file: OpenFile?, caller: Caller?) throws(Errno) -> (stat, Double) {
        let n = try backing(id)
        let st = try shown(setattr(node: n, c, file: file, caller: caller))
        noteTold(n, st)
        return (st, attributeTimeout(n))
    }

    /// A lookup's, a create's or a listing's attributes for the kernel (a filled placeholder
    /// shows its placeholder's ctime: Sync/FilledTimes.swift).
    public func kernelEntryAttributes(_ e: NodeEntry) -> stat {
        let st = shown(e.attr)
        noteTold(e.inode, st)
        return st
    }

    @inline(__always)
    public func attributeTimeout(_ n: Inode) -> Double {
        if n.attributesMayChangeUnseen { return 0 }
        return n.keptLong.load(ordering: .relaxed) ? options.keptTimeout : options.attrTimeout
    }

    /// True if opening `file` with passthrough makes its node's attributes volatile.
    public func opensMappable(_ file: OpenFile) -> Bool { file.mappableShared }
}
