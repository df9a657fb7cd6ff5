// Inode+Slot: a node's descriptor, how to open it when it has none, and who is using it: the
// node's life, its transitions and their rules.

extension Inode {
    /// The node's O_PATH descriptor and who is using it. An idle node's descriptor may be closed
    /// to stay within the open-file limit (the kernel can hold far more nodes than a process may
    /// have descriptors); it is reopened from its file handle on next use.
    ///
    /// A node's life is one of four (`life`):
    ///
    ///     unopened  looked up, never opened: no descriptor; `way` is its name (most files are
    ///               only stat'ed)
    ///     open      fd >= 0: `users` operations are using it, `opens` open files were made from it
    ///     evicted   its descriptor closed to stay within the budget; `way` is its handle
    ///     closed    no descriptor, and none to open on use: removed, replaced or forgotten (see
    ///               `marks`), or a virtual node (which has none of its own)
    ///
    /// The marks only ever come, never go: `pinned` (it cannot be reopened: never evicted),
    /// `removed` (through the mount: answers ENOENT), `replaced` (behind the kernel's back:
    /// answers ESTALE), `dead` (forgotten by the kernel: answers ESTALE, its descriptor closes
    /// when its last user lets go). They are not lives of their own because they combine: a
    /// removed node is forgotten later and must still say it was removed (no place to remember
    /// it at), a node pinned while in use may be replaced and must still never be evicted.
    ///
    /// The transitions, one method each below (the `Inode` method that calls it in brackets);
    /// each ends with `Invariants.check` of the rules in `broken`:
    ///
    ///     from                          event                                         to        and
    ///     -                             made with a descriptor (init)                 open
    ///     -                             made with a name (a lookup, lazily)           unopened
    ///     -                             made with neither (a virtual node)            closed
    ///     open                          use (acquire)                                 open      users+1, referenced
    ///     unopened, evicted             reopen (acquire, opened outside the lock)     open      users+1, referenced, name dropped
    ///     closed (a reopen began first) reopen                                        open      users+1, referenced
    ///     open (another reopened first) reopen                                        open      users+1; the fresh fd is closed
    ///     open                          release, the last user of a dead node         closed    fd closed
    ///     open                          release, otherwise                            open      users-1
    ///     unopened                      seen (a lookup, a rename)                     unopened  another name
    ///     any                           file opened, closed (noteOpened, noteClosed)  same      opens+1, opens-1
    ///     open, idle, not dead          remove (unlink or rmdir through the mount)    closed    +removed, no way, fd closed
    ///     any other                     remove                                        same
    ///     open, idle, not dead          replace behind (closeReplaced)                closed    +replaced, no way, fd closed
    ///     open, busy or dead            replace behind                                open      +replaced, no way
    ///     unopened, evicted, closed     replace behind                                closed    +replaced, no way
    ///     open, no users                forget (retire)                               closed    +dead, fd closed
    ///     open, in use                  forget                                        open      +dead: closes at the last release
    ///     unopened, evicted, closed     forget                                        closed    +dead
    ///     not open, not dead            adopt (a lookup opened it anyway)             open      name dropped, referenced
    ///     open, no users, not dead, not pinned, referenced
    ///                                   begin eviction, not forced (evict)            open      referenced cleared
    ///     open, no users, not dead, not pinned
    ///                                   begin eviction                                open      users+1 while a handle is made
    ///     any                           pin (the kernel refuses handles here)         same      +pinned
    ///     open                          end eviction: idle, the handle works, no      evicted   users-1, way its handle, fd closed
    ///                                   end mark (removed, replaced, dead)
    ///     open                          end eviction: idle, dead or replaced since    closed    users-1, fd closed
    ///     open                          end eviction otherwise (used meanwhile, or    open      users-1; no handle: +pinned
    ///                                   the handle does not work)
    ///     closed (shut down meanwhile)  end eviction                                  closed    users-1
    ///     open                          hold, to make a handle to remember it by      open      users+1 (then release)
    ///                                   (placeForRemembering)
    ///     any                           shut down (closeForShutdown, at unmount)      closed    +dead, fd closed
    ///
    /// A reopen and an adoption may land on a node that was removed or replaced while they
    /// opened its file outside the lock (the code has always let them): the node is open again,
    /// with its marks, and answers on that descriptor.
    ///
    /// Its fields are ordered by size (a struct is laid out in the order written): the
    /// references first, the 4-byte ones, then the 1-byte ones, so that no padding lies between
    /// them: 39 bytes, a 40-byte stride (41 and 48 while the marks were four Bools).
    package struct Slot: CheckedState {
        /// How to open the node when it has no descriptor: a node is either never opened (a
        /// name) or has been opened (a handle, once evicted), so one field holds either, in
        /// 16 bytes where a field for each and the anchor took 28.
        package enum Way {
            case none
            /// Not opened yet: where the node was last seen, to open it on first use.
            case lazy(LazyName)
            /// File handle and an open folder on the same filesystem (`anchor`), set at eviction
            /// (and kept once reopened).
            case handle([UInt8], anchor: Int32)
        }

        /// Where the node's descriptor stands (see the table above).
        package enum Life: UInt8 {
            case unopened
            case open
            case evicted
            case closed
        }

        /// What happened to the node that keeps it from being evicted or reopened (see above).
        package struct Marks: OptionSet, Sendable {
            package let rawValue: UInt8
            package init(rawValue: UInt8) { self.rawValue = rawValue }

            /// Cannot be reopened (no file handle on this filesystem): never evicted.
            package static let pinned = Marks(rawValue: 1)
            /// Removed through the mount and its descriptor closed at once (see `closeRemoved`).
            package static let removed = Marks(rawValue: 2)
            /// Its file became another item's content, or was replaced, behind the kernel's back
            /// (an editor's save through a reference): it answers ESTALE, so that the kernel looks
            /// its path up again and finds what is there now (see `closeReplaced`).
            package static let replaced = Marks(rawValue: 4)
            /// Forgotten by the kernel (or shut down): the descriptor closes when the last user
            /// lets go.
            package static let dead = Marks(rawValue: 8)
            /// The marks after which a node is never opened on use again.
            package static let ends: Marks = [.removed, .replaced, .dead]
        }

        package private(set) var way = Way.none
        /// The versions a file keeps once it is opened or created through the mount, or a
        /// folder once it is listed (nil until then: most nodes are only looked up, and two
        /// versions inline were a third of a node). Under this lock rather than one of their
        /// own (8 bytes of every node): what reads or sets them does nothing else meanwhile.
        var versions: OpenedVersions? = nil
        /// O_PATH descriptor of the backing file, or -1 when not open (and for virtual nodes).
        package private(set) var fd: Int32
        /// Operations currently using `fd` (between `acquire()` and `release()`).
        package private(set) var users: Int32 = 0
        /// Open files made from this node (they hold their own descriptors).
        package private(set) var opens: Int32 = 0
        /// Used since the last eviction sweep (a clock bit).
        package private(set) var referenced = true
        package private(set) var life: Life
        package private(set) var marks: Marks = []

        /// Made with its descriptor, or its name, or neither (a virtual node).
        package init(fd: Int32, lazy: LazyName?) {
            self.fd = fd
            if fd >= 0 {
                life = .open
            } else if let lazy {
                way = .lazy(lazy)
                life = .unopened
            } else {
                life = .closed
            }
            Invariants.check(self)
        }

        /// Any state, even one that breaks the rules (for tests of `broken`).
        package init(life: Life, marks: Marks = [], way: Way = .none, fd: Int32 = -1, users: Int32 = 0, opens: Int32 = 0) {
            self.life = life
            self.marks = marks
            self.way = way
            self.fd = fd
            self.users = users
            self.opens = opens
        }

        package var lazy: LazyName? {
            if case .lazy(let l) = way { l } else { nil }
        }
        package var handle: [UInt8]? {
            if case .handle(let h, _) = way { h } else { nil }
        }
        package var dead: Bool { marks.contains(.dead) }
        package var pinned: Bool { marks.contains(.pinned) }
        package var removed: Bool { marks.contains(.removed) }
        package var replaced: Bool { marks.contains(.replaced) }

        // MARK: The rules

        /// What holds of every slot between transitions (checked after each, see Invariants).
        package enum Rule: String, CaseIterable {
            case usersCounted = "a node's users are never counted below zero"
            case opensCounted = "a node's open files are never counted below zero"
            case descriptorWhenOpen = "a node has a descriptor (fd >= 0) exactly when it is open"
            case nameUntilOpened = "a node keeps its name only until it is opened"
            case noNameOnceGone = "a removed or replaced node keeps no name to open it at"
            case unopenedHasName = "an unopened node has its name to open it at"
            case unopenedUnmarked = "an unopened node is neither pinned, removed, replaced nor dead"
            case evictedHasHandle = "an evicted node has its handle to reopen it by"
            case pinnedNeverEvicted = "a pinned node is never evicted"
            case evictedNotEnded = "an evicted node is neither removed, replaced nor dead (those close it for good)"
            case closedForAReason = "a closed node that has a way to open it was removed, replaced or forgotten"
            case deadIdleClosed = "a dead node that no one uses has closed its descriptor"
        }

        /// The first rule this slot breaks, nil if it keeps them all.
        package var brokenRule: Rule? {
            if users < 0 { return .usersCounted }
            if opens < 0 { return .opensCounted }
            if (fd >= 0) != (life == .open) { return .descriptorWhenOpen }
            if case .lazy = way {
                if life == .open { return .nameUntilOpened }
                if removed || replaced { return .noNameOnceGone }
            }
            switch life {
            case .unopened:
                guard case .lazy = way else { return .unopenedHasName }
                if !marks.isEmpty { return .unopenedUnmarked }
            case .evicted:
                guard case .handle = way else { return .evictedHasHandle }
                if pinned { return .pinnedNeverEvicted }
                if !marks.isDisjoint(with: .ends) { return .evictedNotEnded }
            case .closed:
                if case .none = way {} else if marks.isDisjoint(with: .ends) { return .closedForAReason }
            case .open:
                break
            }
            if dead, users == 0, fd >= 0 { return .deadIdleClosed }
            return nil
        }

        package var broken: String? {
            guard let rule = brokenRule else { return nil }
            let w = switch way { case .none: "none"; case .lazy: "a name"; case .handle: "a handle" }
            return "\(rule.rawValue) (life \(life), marks \(marks.rawValue), fd \(fd), users \(users), opens \(opens), way \(w))"
        }

        // MARK: The transitions

        /// What `use` found: the descriptor (counted as used), or how to open one.
        package enum Next {
            case ready(Int32)
            case reopen([UInt8], anchor: Int32)
            case open(LazyName)
            /// ESTALE: forgotten, replaced, or nothing to open it by.
            case gone
            /// ENOENT: removed through the mount.
            case removed
        }

        /// The first half of `acquire`: an open node is used at once; the others say how to
        /// open them (outside the lock, then `reopen`).
        package mutating func use() -> Next {
            switch life {
            case .open:
                users += 1
                referenced = true
                Invariants.check(self)
                return .ready(fd)
            case .unopened, .evicted:
                switch way {
                case .lazy(let l): return .open(l)
                case .handle(let h, let anchor): return .reopen(h, anchor: anchor)
                case .none: return .gone
                }
            case .closed:
                return removed && !replaced && !dead ? .removed : .gone
            }
        }

        /// The second half of `acquire`: `fresh` was opened for this node; returns the
        /// descriptor to use and the one to close (-1 if none: `fresh` is kept).
        package mutating func reopen(with fresh: Int32) -> (fd: Int32, spare: Int32) {
            users += 1
            referenced = true
            if case .lazy = way { way = .none }  // opened at last: a handle is kept, a name not
            if life == .open {  // another thread reopened it first
                Invariants.check(self)
                return (fd, fresh)
            }
            fd = fresh
            life = .open
            Invariants.check(self)
            return (fresh, -1)
        }

        /// A user lets go; returns the descriptor to close (-1 if none): a dead node's last user closes it.
        package mutating func release() -> Int32 {
            users -= 1
            var toClose: Int32 = -1
            if users == 0, dead, life == .open {
                toClose = fd
                fd = -1
                life = .closed
            }
            Invariants.check(self)
            return toClose
        }

        /// The node was just found at `lazy`: remember that place if it is still unopened.
        package mutating func seen(at lazy: LazyName) {
            guard case .lazy = way else { return }
            way = .lazy(lazy)
            Invariants.check(self)
        }

        package mutating func fileOpened() {
            opens += 1
            Invariants.check(self)
        }

        package mutating func fileClosed() {
            opens -= 1
            Invariants.check(self)
        }

        /// Removed through the mount (see `closeRemoved`): an idle open node closes for good;
        /// returns the descriptor to close (-1 if none).
        package mutating func remove() -> Int32 {
            guard life == .open, users == 0, opens == 0, !dead else { return -1 }
            marks.insert(.removed)
            way = .none
            let toClose = fd
            fd = -1
            life = .closed
            Invariants.check(self)
            return toClose
        }

        /// Replaced behind the kernel's back (see `closeReplaced`): answers ESTALE from now on;
        /// returns the descriptor to close (-1 if none, or while it is used).
        package mutating func replaceBehind() -> Int32 {
            marks.insert(.replaced)
            way = .none
            var toClose: Int32 = -1
            switch life {
            case .open:
                if users == 0, opens == 0, !dead {
                    toClose = fd
                    fd = -1
                    life = .closed
                }
            case .unopened, .evicted:
                life = .closed
            case .closed:
                break
            }
            Invariants.check(self)
            return toClose
        }

        /// The kernel forgot the node (see `retire`); returns the descriptor to close (-1 if
        /// none, or while it is used: the last release closes it).
        package mutating func forget() -> Int32 {
            marks.insert(.dead)
            var toClose: Int32 = -1
            switch life {
            case .open:
                if users == 0 {
                    toClose = fd
                    fd = -1
                    life = .closed
                }
            case .unopened, .evicted:
                life = .closed
            case .closed:
                break
            }
            Invariants.check(self)
            return toClose
        }

        /// A lookup opened the node's file anyway: keep that descriptor if it has none and is
        /// not dead. False if not taken (the caller closes it).
        package mutating func adopt(_ fresh: Int32) -> Bool {
            guard life != .open, !dead else { return false }
            fd = fresh
            life = .open
            if case .lazy = way { way = .none }
            referenced = true
            Invariants.check(self)
            return true
        }

        /// An eviction sweep comes by: an idle node that may be evicted is held while its handle
        /// is made (its descriptor returned), unless it was used since the last sweep and the
        /// sweep is not forced (it loses its clock bit). -1 if not to be evicted now.
        package mutating func beginEviction(force: Bool) -> Int32 {
            guard life == .open, users == 0, !dead, !pinned else { return -1 }
            if referenced && !force {
                referenced = false
                Invariants.check(self)
                return -1
            }
            users += 1
            Invariants.check(self)
            return fd
        }

        /// It cannot be reopened from a handle here (the kernel refuses them): never evicted.
        package mutating func pin() {
            marks.insert(.pinned)
            Invariants.check(self)
        }

        /// The eviction begun by `beginEviction` ends with the node's handle (nil: this
        /// filesystem has none, pinned from now on) made on `anchor`, which reopens it if
        /// `works`; returns the descriptor to close (-1 if it stays open).
        package mutating func endEviction(handle: [UInt8]?, anchor: Int32, works: Bool) -> Int32 {
            users -= 1
            if let handle {
                // The first anchor stays (a handle is opened on the anchor it was checked with).
                var anchor = anchor
                if case .handle(_, let first) = way, first >= 0 { anchor = first }
                way = .handle(handle, anchor: anchor)
            } else {
                marks.insert(.pinned)  // this filesystem has no file handles
                if case .handle = way { way = .none }
            }
            var toClose: Int32 = -1
            if users == 0, life == .open, works || dead {
                toClose = fd
                fd = -1
                life = marks.isDisjoint(with: .ends) ? .evicted : .closed
            }
            Invariants.check(self)
            return toClose
        }

        /// Where the node can be found again after the kernel forgets it (see
        /// `placeForRemembering`).
        package enum Place {
            case handle([UInt8])
            /// Its descriptor, held (release it once a handle is made from it).
            case held(Int32)
            case name(LazyName)
            case none
        }

        /// The handle it has, else its descriptor held to make one from, else its name.
        package mutating func holdToRemember() -> Place {
            if removed { return .none }
            if case .handle(let h, _) = way { return .handle(h) }
            if life == .open {
                users += 1
                Invariants.check(self)
                return .held(fd)
            }
            if case .lazy(let l) = way { return .name(l) }
            return .none
        }

        /// At unmount: closed whatever its state; returns the descriptor to close (-1 if none).
        package mutating func shutDown() -> Int32 {
            marks.insert(.dead)
            let toClose = fd
            fd = -1
            life = .closed
            Invariants.check(self)
            return toClose
        }
    }
}
