// LockTests: record locks and flocks of the core, on a real backing file (no kernel mount needed).
import DocDriveCore
import Foundation
import SystemPackage
import XCTest

extension FileSystemTests {
    private func lock(_ type: Int32, _ start: Int64, _ length: Int64, pid: Int32 = 0) -> RecordLock {
        RecordLock(type: Int16(type), start: start, length: length, pid: pid)
    }

    func testRecordLocksConflictSplitAndGoAtFlush() throws {
        let work = try lookup(DriveFileSystem.rootID, "Work").inode.nodeID
        let (e, f) = try "l.txt".withCString { (c) throws in
            try fs.create(parent: work, name: c, mode: 0o644, flags: O_RDWR, caller: me)
        }
        let id = e.inode.nodeID
        try fs.setLock(id, owner: 1, lock(F_WRLCK, 0, 100, pid: 111), file: f, wait: false) { false }
        XCTAssertEqual(try fs.getLock(id, owner: 2, lock(F_WRLCK, 50, 10)), lock(F_WRLCK, 0, 100, pid: 111))
        XCTAssertEqual(try fs.getLock(id, owner: 1, lock(F_WRLCK, 50, 10)).type, Int16(F_UNLCK), "its own lock")
        expectErrno(.resourceTemporarilyUnavailable) {
            try fs.setLock(id, owner: 2, lock(F_WRLCK, 50, 10), file: f, wait: false) { false }
        }
        var asked = 0
        expectErrno(.interrupted) {
            try fs.setLock(id, owner: 2, lock(F_RDLCK, 50, 10), file: f, wait: true) { asked += 1; return asked > 3 }
        }
        // Unlocking 0..49 keeps 50..99.
        try fs.setLock(id, owner: 1, lock(F_UNLCK, 0, 50), file: f, wait: false) { false }
        try fs.setLock(id, owner: 2, lock(F_WRLCK, 10, 10), file: f, wait: false) { false }
        expectErrno(.resourceTemporarilyUnavailable) {
            try fs.setLock(id, owner: 2, lock(F_WRLCK, 60, 10), file: f, wait: false) { false }
        }
        XCTAssertTrue(fs.locks.isWriteLocked(dev: UInt64(e.attr.st_dev), ino: UInt64(e.attr.st_ino)))
        try fs.flush(f, lockOwner: 1)  // owner 1 closes: its locks go
        try fs.setLock(id, owner: 2, lock(F_WRLCK, 60, 10), file: f, wait: true) { false }
        XCTAssertEqual(fs.locks.counts.records, 1)
        fs.release(f)
        XCTAssertEqual(fs.locks.counts.records, 0)
        XCTAssertFalse(fs.locks.isWriteLocked(dev: UInt64(e.attr.st_dev), ino: UInt64(e.attr.st_ino)))
    }

    func testFlocksConflictBetweenOpenFiles() throws {
        let work = try lookup(DriveFileSystem.rootID, "Work").inode.nodeID
        let (e, a) = try "k.txt".withCString { (c) throws in
            try fs.create(parent: work, name: c, mode: 0o644, flags: O_RDWR, caller: me)
        }
        let b = try fs.open(e.inode.nodeID, flags: O_RDWR)
        try fs.flock(a, operation: LOCK_EX, pid: 1) { false }
        expectErrno(.resourceTemporarilyUnavailable) { try fs.flock(b, operation: LOCK_SH | LOCK_NB, pid: 2) { false } }
        expectErrno(.interrupted) { try fs.flock(b, operation: LOCK_SH, pid: 2) { true } }
        XCTAssertEqual(fs.locks.counts.flocks, 1)
        fs.release(a)
        try fs.flock(b, operation: LOCK_EX | LOCK_NB, pid: 2) { false }
        try fs.flock(b, operation: LOCK_UN, pid: 2) { false }
        XCTAssertEqual(fs.locks.counts.flocks, 0)
        fs.release(b)
    }
}
