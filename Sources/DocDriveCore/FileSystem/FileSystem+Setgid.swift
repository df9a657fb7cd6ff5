// FileSystem+Setgid: the setuid/setgid bits a caller without the privilege loses, where the kernel clears them natively.
import CDocDriveSys
import Foundation
import SystemPackage
#if canImport(Glibc)
import Glibc
#endif

extension Caller {
    /// Root is taken to hold CAP_FSETID, which keeps the bits (the kernel does not say).
    var keepsPrivilegeBits: Bool { uid == 0 }

    /// Whether the caller is in group `gid`: its own group, or a supplementary one. FUSE sends
    /// only the first, so the others are read from /proc (`pid` is the calling thread), on the
    /// rare paths that need them. Unreadable: not a member, the side that clears the bit.
    func isMember(of gid: gid_t) -> Bool {
        if gid == self.gid { return true }
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
              let line = status.split(separator: "\n").first(where: { $0.hasPrefix("Groups:") }) else { return false }
        return line.dropFirst("Groups:".count).split(whereSeparator: { $0 == " " || $0 == "\t" }).contains { gid_t($0) == gid }
    }
}

/// The kernel's rules (fs/attr.c, fs/inode.c since Linux 6.2), which a root daemon acting on the
/// backing file does not apply for its caller: the daemon holds CAP_FSETID.
enum PrivilegeBits {
    /// A chmod by the owner (or a POSIX ACL that sets the mode) keeps setgid only for a member
    /// of the file's group (setattr_copy, posix_acl_update_mode).
    static func chmodKeepsSetgid(_ caller: Caller?, fileGroup: gid_t) -> Bool {
        guard let caller, !caller.keepsPrivilegeBits else { return true }
        return caller.isMember(of: fileGroup)
    }

    /// What a change of the content (write, fallocate, punch hole, zero range) clears: setuid
    /// always, setgid with group-exec or for a non-member (should_remove_suid,
    /// setattr_should_drop_sgid). Regular files only.
    static func killedByModification(_ caller: Caller?, _ st: stat) -> mode_t {
        guard let caller, !caller.keepsPrivilegeBits, st.st_mode & S_IFMT == S_IFREG else { return 0 }
        var kill: mode_t = st.st_mode & S_ISUID
        if st.st_mode & S_ISGID != 0, st.st_mode & S_IXGRP != 0 || !caller.isMember(of: st.st_gid) { kill |= S_ISGID }
        return kill
    }
}

extension DriveFileSystem {
    /// Clears, on the open backing file `fd` (or, with `nodeFD`, the node's O_PATH descriptor),
    /// the bits a content change by `caller` clears natively. True when it cleared some: the
    /// kernel's cached mode is then stale.
    @discardableResult
    func dropPrivilegeBitsForModification(fd: Int32 = -1, nodeFD: Int32 = -1, caller: Caller?) -> Bool {
        let any = fd >= 0 ? fd : nodeFD
        guard let caller, !caller.keepsPrivilegeBits, let st = try? Sys.stat(fd: any),
              st.st_mode & (S_ISUID | S_ISGID) != 0 else { return false }
        let kill = PrivilegeBits.killedByModification(caller, st)
        guard kill != 0 else { return false }
        let mode = st.st_mode & 0o7777 & ~kill
        return (fd >= 0 ? fchmod(fd, mode) : dd_fchmod_path(nodeFD, mode)) == 0
    }

    /// Drops what a write to `file` by `caller` drops (`dropsSetIDBits`): after a write through
    /// the drive that the kernel marked, or at the open of a writer that needs the drive but is
    /// passed through all the same, because other files of its node already are (the kernel
    /// takes no other kind of open beside those). True when bits were dropped: the adapter must
    /// drop the kernel's cached attributes (an exec would use its cached mode).
    public func dropPrivilegeBits(of file: OpenFile, writtenBy caller: Caller) -> Bool {
        dropPrivilegeBitsForModification(fd: file.fd, caller: caller)
    }

    /// Whether `file`, opened by `caller`, must be written through the drive rather than passed
    /// through to its backing file. With `dropsSetIDBits` the kernel leaves the bits a write
    /// drops to the drive, and a write passed through never reaches it: so a writable open by
    /// anyone but root of a regular file that has setuid or setgid, or that is someone else's
    /// (its owner, or root, could set them while it is open), goes through the drive: its
    /// node's files are not passed through while it is open. A user's own files, and root's
    /// writes, still pass through; so does such an open while the node's files already are
    /// (`dropPrivilegeBits(of:writtenBy:)`).
    public func writesNeedTheDrive(_ file: OpenFile, caller: Caller) -> Bool {
        guard file.writable, !caller.keepsPrivilegeBits, dropsSetIDBits.load(ordering: .relaxed) else { return false }
        guard let st = try? Sys.stat(fd: file.fd) else { return true }
        guard st.st_mode & S_IFMT == S_IFREG else { return false }
        return st.st_mode & (S_ISUID | S_ISGID) != 0 || st.st_uid != caller.uid
    }

    /// After `caller` set a file's access ACL (node descriptor `nfd`): the mode the ACL gave it
    /// loses setgid unless the caller is in the file's group.
    func dropSetgidAfterACL(nodeFD nfd: Int32, caller: Caller?) {
        guard let caller, !caller.keepsPrivilegeBits, let st = try? Sys.stat(fd: nfd), st.st_mode & S_ISGID != 0,
              !PrivilegeBits.chmodKeepsSetgid(caller, fileGroup: st.st_gid) else { return }
        _ = dd_fchmod_path(nfd, st.st_mode & 0o7777 & ~S_ISGID)
    }
}
