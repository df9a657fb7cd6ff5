// Inode+Slot: a node's descriptor, how to open it when it has none, and who is using it.

extension Inode {
    /// The node's O_PATH descriptor and who is using it. An idle node's descriptor may be closed
    /// to stay within the open-file limit (the kernel can hold far more nodes than a process may
    /// have descriptors); it is reopened from its file handle on next use.
    ///
    /// Its fields are ordered by size (a struct is laid out in the order written): the
    /// references first, the 4-byte ones, then the flags, so that no padding lies between them.
    struct Slot {
        /// How to open the node when it has no descriptor: a node is either never opened (a
        /// name) or has been opened (a handle, once evicted), so one field holds either, in
        /// 16 bytes where a field for each and the anchor took 28.
        enum Way {
            case none
            /// Not opened yet: where the node was last seen, to open it on first use.
            case lazy(LazyName)
            /// File handle and an open folder on the same filesystem (`anchor`), set at eviction
            /// (and kept once reopened).
            case handle([UInt8], anchor: Int32)
        }
        var way = Way.none
        /// The versions a file keeps once it is opened or created through the mount, or a
        /// folder once it is listed (nil until then: most nodes are only looked up, and two
        /// versions inline were a third of a node). Under this lock rather than one of their
        /// own (8 bytes of every node): what reads or sets them does nothing else meanwhile.
        var versions: OpenedVersions? = nil
        /// O_PATH descriptor of the backing file, or -1 while evicted (or for virtual nodes).
        var fd: Int32
        /// Operations currently using `fd` (between `acquire()` and `release()`).
        var users: Int32 = 0
        /// Open files made from this node (they hold their own descriptors).
        var opens: Int32 = 0
        /// Used since the last eviction sweep (a clock bit).
        var referenced = true
        /// Forgotten by the kernel: the descriptor closes when the last user lets go.
        var dead = false
        /// Cannot be reopened (no file handle on this filesystem, or deleted): never evicted.
        var pinned = false
        /// Removed through the mount and its descriptor closed at once (see `closeRemoved`).
        var removed = false
        /// Its file became another item's content, or was replaced, behind the kernel's back
        /// (an editor's save through a reference): it answers ESTALE, so that the kernel looks
        /// its path up again and finds what is there now (see `closeReplaced`).
        var replaced = false

        init(fd: Int32) { self.fd = fd }

        var lazy: LazyName? {
            if case .lazy(let l) = way { l } else { nil }
        }
        var handle: [UInt8]? {
            if case .handle(let h, _) = way { h } else { nil }
        }
        /// Opened at last: the name is no longer needed (a handle is kept).
        mutating func dropLazy() {
            if case .lazy = way { way = .none }
        }
    }
}
