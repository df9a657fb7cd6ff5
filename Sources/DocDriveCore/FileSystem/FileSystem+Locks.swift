// FileSystem+Locks: fcntl record locks (POSIX and OFD) and flock through the mount, held on the backing files.
import CDocDriveSys
import SystemPackage
#if canImport(Glibc)
import Glibc
#endif

extension DriveFileSystem {
    /// The lock that would keep `owner` from taking `lock` on node `id` (type F_UNLCK: none).
    /// Locks taken through the mount are answered from the table, with the holder's pid; a
    /// lock of another program on the backing file from the backing file itself.
    public func getLock(_ id: UInt64, owner: UInt64, _ lock: RecordLock) throws(Errno) -> RecordLock {
        let held = try conflictingLock(id, owner: owner, lock)
        // The holder may have closed its file a moment ago, its release still queued, or
        // closed it while another process still has it (no release comes then).
        guard held.type != dd_F_UNLCK, releasesMayDropLocks else { return held }
        let waited = awaitQueuedReleases()
        let dropped = dropLocksOfClosedHolders(try lockable(id), owner: owner, lock)
        guard waited || dropped else { return held }
        return try conflictingLock(id, owner: owner, lock)
    }

    /// A conflict with locks taken through a file the drive created (opened without FLUSH):
    /// when their holder closes it while another process still has it open (a child that
    /// inherited the descriptor), the kernel tells the drive nothing, and no release comes.
    /// So the drive looks in /proc at each process that took such a lock: one that has no
    /// descriptor of the file any more (its `fdinfo` names no inode of that number) has closed
    /// it, and its locks go, as its close would have taken them. A process that cannot be
    /// looked at, or has such a descriptor (even of another file with that inode number),
    /// keeps its locks. True if some were dropped.
    func dropLocksOfClosedHolders(_ n: Inode, owner: UInt64, _ lock: RecordLock) -> Bool {
        let key = LockTable.OwnerKey(file: fileKey(n), owner: owner)
        var dropped = false
        for (holder, pids) in locks.conflictsThroughNoFlushFiles(key, lock)
        where pids.allSatisfy({ Self.hasClosed($0, fileIno: key.file.ino) }) {
            locks.dropOwner(holder)
            dropped = true
        }
        return dropped
    }

    /// Whether process `pid` has no open descriptor whose inode number is `fileIno` (false
    /// when that cannot be told: no such process, or its descriptors cannot be read).
    static func hasClosed(_ pid: Int32, fileIno: UInt64) -> Bool {
        guard pid > 0, let dir = Glibc.opendir("/proc/\(pid)/fdinfo") else { return false }
        defer { Glibc.closedir(dir) }
        let dfd = dirfd(dir)
        let wanted = Array("ino:\t\(fileIno)\n".utf8)
        var buf = [UInt8](repeating: 0, count: 512)
        while let e = Glibc.readdir(dir) {
            let name = withUnsafeBytes(of: e.pointee.d_name) { String(decoding: $0.prefix(while: { $0 != 0 }), as: UTF8.self) }
            guard name.first?.isNumber == true else { continue }
            let fd = Glibc.openat(dfd, name, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else { continue }  // closed meanwhile
            let got = buf.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            Sys.close(fd)
            guard got > 0 else { continue }
            let text = buf[0..<got]
            if text.starts(with: wanted) || text.firstRange(of: [10] + wanted) != nil { return false }
        }
        return true
    }

    private func conflictingLock(_ id: UInt64, owner: UInt64, _ lock: RecordLock) throws(Errno) -> RecordLock {
        let n = try lockable(id)
        let key = LockTable.OwnerKey(file: fileKey(n), owner: owner)
        enum Answer { case known(RecordLock), asked(RecordLock), failed(Int32), needProbe }
        let answer: Answer = locks.conflict(key, lock) { found, ownFD in
            if let found { return .known(found) }
            guard ownFD >= 0 else { return .needProbe }
            return Self.probe(ownFD, lock).map(Answer.asked) ?? .failed(dd_errno())
        }
        switch answer {
        case .known(let l), .asked(let l):
            return l
        case .failed(let e):
            throw Errno(rawValue: e)
        case .needProbe:
            // The owner holds nothing here: a descriptor of its own cannot hide any of its locks.
            let fd = try openBacking(n, readOnly: true)
            defer { Sys.close(fd) }
            guard let l = Self.probe(fd, lock) else { throw Sys.lastErrno }
            return l
        }
    }

    /// F_OFD_GETLK on a backing descriptor.
    private static func probe(_ fd: Int32, _ lock: RecordLock) -> RecordLock? {
        var type = lock.type, start = lock.start, length = lock.length, pid: Int32 = 0
        guard dd_ofd_getlk(fd, &type, &start, &length, &pid) == 0 else { return nil }
        return RecordLock(type: type, start: start, length: length, pid: pid)
    }

    /// Takes, changes or releases a record lock of `owner` (F_SETLK, or F_SETLKW when `wait`).
    /// A wait polls the backing file, which may be locked by another program too, so it cannot
    /// sleep on a kernel wait queue; `isInterrupted` ends it with EINTR (a signal to the waiter).
    /// `file`: the open file the request came through (an OFD lock's owner).
    public func setLock(_ id: UInt64, owner: UInt64, _ lock: RecordLock, file: OpenFile?, wait: Bool,
                        isInterrupted: () -> Bool) throws(Errno) {
        let n = try lockable(id)
        let key = LockTable.OwnerKey(file: fileKey(n), owner: owner)
        if lock.type == dd_F_UNLCK { return try locks.unlock(key, lock) }
        var spare: Int32 = -1
        defer { if spare >= 0 { Sys.close(spare) } }
        let via = file.map(ObjectIdentifier.init)
        func attempt() throws(Errno) -> Bool {
            while true {
                switch locks.tryLock(key, lock, via: via, viaNoFlush: file?.noFlush ?? false, spare: &spare) {
                case .granted: return true
                case .busy:
                    // A holder that has closed its created file while a child still has it.
                    guard releasesMayDropLocks, dropLocksOfClosedHolders(n, owner: owner, lock) else { return false }
                case .failed(let e): throw e
                case .needDescriptor: spare = try openBacking(n, readOnly: false)
                }
            }
        }
        // Without waiting: a conflict with a holder whose release is still queued is looked at
        // again once that release is handled (a waiting request polls anyway).
        if wait {
            try poll(wait: true, isInterrupted: isInterrupted, attempt)
        } else if try !attempt() {
            guard releasesMayDropLocks, awaitQueuedReleases(), try attempt() else { throw .resourceTemporarilyUnavailable }
        }
        if let file { tookLock(through: file) }
    }

    /// flock(2) on an open file: its own backing descriptor is its own open file description,
    /// so flocks conflict between open files as natively, and with programs using the backing file.
    public func flock(_ file: OpenFile, operation: Int32, pid: Int32, isInterrupted: () -> Bool) throws(Errno) {
        let key = fileKey(file.inode)
        let id = ObjectIdentifier(file)
        let op = operation & ~dd_LOCK_NB
        if op == dd_LOCK_UN {
            _ = try Sys.check { dd_flock(file.fd, dd_LOCK_UN) }
            locks.recordFlock(key, id, exclusive: nil, pid: pid)
            return
        }
        try poll(wait: operation & dd_LOCK_NB == 0, isInterrupted: isInterrupted) { () throws(Errno) -> Bool in
            if dd_flock(file.fd, op | dd_LOCK_NB) == 0 { return true }
            let e = dd_errno()
            if e == EWOULDBLOCK || e == EINTR { return false }
            throw Errno(rawValue: e)
        }
        locks.recordFlock(key, id, exclusive: op == dd_LOCK_EX, pid: pid)
    }

    /// Runs `attempt` until it succeeds: once (EAGAIN if it did not) unless `wait`, else with
    /// a 5 ms → 50 ms back-off, checking `isInterrupted` between tries (EINTR).
    func poll(wait: Bool, isInterrupted: () -> Bool, _ attempt: () throws(Errno) -> Bool) throws(Errno) {
        var delay: UInt32 = 5_000
        while true {
            if try attempt() { return }
            guard wait else { throw .resourceTemporarilyUnavailable }
            if isInterrupted() { throw .interrupted }
            usleep(delay)
            delay = min(delay * 2, 50_000)
        }
    }

    /// A close by `owner`: its POSIX locks on the file go.
    func dropLocks(_ file: OpenFile, owner: UInt64) {
        locks.dropOwner(LockTable.OwnerKey(file: fileKey(file.inode), owner: owner))
    }

    /// The last close of an open file: its OFD locks and its flock go.
    func releaseLocks(_ file: OpenFile) {
        locks.dropOpenFile(fileKey(file.inode), ObjectIdentifier(file))
    }

    /// Locks are for regular backing files (a second descriptor on a device or fifo could
    /// have effects of its own).
    private func lockable(_ id: UInt64) throws(Errno) -> Inode {
        let n = try backing(id)
        guard n.fileType == S_IFREG else { throw .noLocks }
        return n
    }

    /// The file the locks are on: the node's backing file, or a reference's target.
    private func fileKey(_ n: Inode) -> LockTable.FileKey {
        if n.reference != nil, let t = try? referenceTarget(n), let st = try? Sys.stat(fd: t) {
            return LockTable.FileKey(dev: UInt64(st.st_dev), ino: UInt64(st.st_ino))
        }
        return LockTable.FileKey(dev: n.dev, ino: n.ino)
    }

    /// A descriptor of the node's backing file that can carry OFD locks: read-write (any lock
    /// type), or read-only when that is all the daemon may (read locks only).
    private func openBacking(_ n: Inode, readOnly: Bool) throws(Errno) -> Int32 {
        let (nfd, _) = try acquireContent(n)
        defer { n.release() }
        if !readOnly, case let fd = dd_reopen(nfd, O_RDWR), fd >= 0 { return fd }
        return try Sys.check { dd_reopen(nfd, O_RDONLY) }
    }
}
