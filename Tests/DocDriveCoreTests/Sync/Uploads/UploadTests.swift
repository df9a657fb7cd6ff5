// UploadTests: the folder remote's atomic, verified uploads and the durable upload queue.
import DocDriveCore
import Foundation
import GRDB
import Synchronization
import XCTest

final class FolderRemoteTests: XCTestCase {
    var dir: String!
    var remote: FolderRemote!

    override func setUpWithError() throws {
        dir = NSTemporaryDirectory() + "dd-remote-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dir + "/remote", withIntermediateDirectories: true)
        remote = FolderRemote(root: dir + "/remote")
        try remote.writeMarker(store: "work")
    }

    override func tearDown() {
        try? FileManager.default.removeItem(atPath: dir)
    }

    func local(_ name: String, _ content: String) -> Int32 {
        let p = dir + "/" + name
        FileManager.default.createFile(atPath: p, contents: Data(content.utf8))
        return open(p, O_RDONLY)
    }

    func testUploadLandsWholeWithItsHashAndNoTemporaryFile() throws {
        let fd = local("a", "hello world")
        defer { close(fd) }
        let r = try remote.upload(from: fd, to: "docs/sub/a.txt")
        XCTAssertEqual(r.size, 11)
        XCTAssertEqual(r.sha256, "b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9")
        XCTAssertEqual(try String(contentsOfFile: dir + "/remote/docs/sub/a.txt", encoding: .utf8), "hello world")
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: dir + "/remote/docs/sub").filter { $0.hasPrefix(".docdrive-upload-") }
        XCTAssertEqual(leftovers, [])
    }

    func testAFileChangedDuringItsUploadIsNotPublished() throws {
        // Given a file that is appended to after it was copied but before it is published
        let fd = local("b", "version 1")
        defer { close(fd) }
        XCTAssertThrowsError(try remote.upload(from: fd, to: "b.txt", afterCopy: {
            let h = FileHandle(forWritingAtPath: self.dir + "/b")!
            h.seekToEndOfFile()
            h.write(Data(" and more".utf8))
            h.closeFile()
        })) { e in
            XCTAssertEqual((e as? RemoteError)?.code, .sourceChanged)
        }
        // Then the remote holds nothing (no mix of versions), and the next try publishes the new one
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/remote/b.txt"))
        XCTAssertEqual(try remote.upload(from: fd, to: "b.txt").size, 18)
    }

    func testABigFileDeletedDuringItsUploadStopsEarly() throws {
        // Given a 48 MiB file that is deleted locally once its copy has begun
        let fd = local("big", String(repeating: "x", count: 48 << 20))
        defer { close(fd) }
        var copied: Int64 = 0
        XCTAssertThrowsError(try remote.upload(from: fd, to: "big.bin", progress: { done, _ in
            if copied == 0 && done > 0 { unlink(self.dir + "/big") }
            copied = done
        })) { e in
            XCTAssertEqual((e as? RemoteError)?.code, .sourceChanged)
        }
        // Then the copy stopped at the next look, not at the end, and nothing was published
        XCTAssertLessThanOrEqual(copied, Int64(FolderRemote.changeCheckInterval) + (1 << 20))
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/remote/big.bin"))
    }

    func testAnUnmountedShareIsUnreachableNotFilled() throws {
        // Given the remote's folder without the store's marker (a NAS mount point with nothing mounted)
        unlink(dir + "/remote/" + FolderRemote.markerName)
        let fd = local("c", "x")
        defer { close(fd) }
        XCTAssertThrowsError(try remote.upload(from: fd, to: "c.txt")) { e in
            XCTAssertEqual((e as? RemoteError)?.code, .unreachable)
            XCTAssertTrue((e as! RemoteError).message.contains("is the disk or share mounted"))
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/remote/c.txt"))
        // And a remote folder that is gone altogether says so
        try FileManager.default.removeItem(atPath: dir + "/remote")
        XCTAssertThrowsError(try remote.upload(from: fd, to: "c.txt")) { e in
            XCTAssertEqual((e as? RemoteError)?.code, .unreachable)
        }
    }

    func testPathsCannotEscapeTheRemote() throws {
        let fd = local("d", "x")
        defer { close(fd) }
        for bad in ["../d", "a/../../d", "", "/abs", "a//b", "."] {
            XCTAssertThrowsError(try remote.upload(from: fd, to: StorePath(bad)), bad) { e in
                XCTAssertEqual((e as? RemoteError)?.code, .invalidName, bad)
            }
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/d.remote"))
    }

    func testASymlinkOnTheRemoteIsNeverFollowed() throws {
        // Given a folder outside the remote and a symlink to it planted where a folder should be
        let outside = dir + "/outside"
        try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
        FileManager.default.createFile(atPath: outside + "/victim.txt", contents: Data("theirs".utf8))
        try FileManager.default.createSymbolicLink(atPath: dir + "/remote/trap", withDestinationPath: outside)
        let fd = local("g", "evil")
        defer { close(fd) }
        // Then an upload through it fails with a sentence, and a removal or listing does nothing there
        XCTAssertThrowsError(try remote.upload(from: fd, to: "trap/evil.txt")) { e in
            XCTAssertTrue((e as? RemoteError)?.message.contains("symbolic link") ?? false, "\(e)")
        }
        try remote.delete("trap/victim.txt", version: "")
        XCTAssertFalse(try remote.list().contains { $0.path.description.hasPrefix("trap/") }, "a listing went through the link")
        XCTAssertEqual(try remote.item(at: "trap")?.kind, .symlink)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: outside), ["victim.txt"])
        // And the remote's own names are never a user's path
        for own in [".docdrive-store", "sub/.docdrive-upload-x"] {
            XCTAssertThrowsError(try remote.upload(from: fd, to: StorePath(own)), own)
            XCTAssertThrowsError(try remote.delete(StorePath(own), version: ""), own)
        }
        XCTAssertNoThrow(try remote.checkReachable(), "the marker is still there")
    }

    func testConditionalMoveAndDeleteOnTheRemote() throws {
        let fd = local("e", "e")
        defer { close(fd) }
        let made = try remote.upload(from: fd, to: "old.txt", expecting: .absent, meta: RemoteMeta(itemID: "id-1"), limit: nil, progress: nil)
        // A version this device has not seen is never moved or deleted.
        XCTAssertThrowsError(try remote.move("old.txt", version: "1:2:3", to: "x.txt")) { e in
            XCTAssertEqual((e as? RemoteError)?.code, .changed)
        }
        let moved = try remote.move("old.txt", version: made.version, to: "new/dir/new.txt")
        XCTAssertEqual(moved.meta.itemID, "id-1", "the id travels with the item")
        XCTAssertEqual(moved.version, made.version, "a move keeps the version")
        XCTAssertTrue(FileManager.default.fileExists(atPath: dir + "/remote/new/dir/new.txt"))
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/remote/old.txt"))
        XCTAssertThrowsError(try remote.delete("new/dir/new.txt", version: "1:2:3")) { e in
            XCTAssertEqual((e as? RemoteError)?.code, .changed)
        }
        try remote.delete("new/dir/new.txt", version: moved.version)
        try remote.delete("never-uploaded.txt", version: "1:2:3")
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/remote/new/dir/new.txt"))
        // A folder with something in it is not deleted.
        _ = try remote.upload(from: fd, to: "new/dir/other.txt", expecting: .absent, meta: RemoteMeta(), limit: nil, progress: nil)
        XCTAssertThrowsError(try remote.delete("new/dir", version: "")) { e in
            XCTAssertEqual((e as? RemoteError)?.code, .changed)
        }
    }

    func testTwoDevicesWritingOneNameAtOnceNeverOverwriteEachOther() throws {
        // Given two devices on one folder remote, each writing the same names at the same moment
        let other = FolderRemote(root: remote.root, owner: "other-device")
        let mine = local("m", String(repeating: "mine ", count: 2000))
        let theirs = local("t", String(repeating: "theirs ", count: 2000))
        defer { close(mine); close(theirs) }
        let remotes: [FolderRemote] = [remote, other]
        let fds = [mine, theirs]
        for round in 0..<40 {
            let name = StorePath("race\(round).txt")
            // Both create it (create-only): exactly one wins.
            let wins = Mutex<[Int]>([])
            DispatchQueue.concurrentPerform(iterations: 2) { i in
                do {
                    _ = try remotes[i].upload(from: fds[i], to: name, expecting: .absent, meta: RemoteMeta(), limit: nil, progress: nil)
                    wins.withLock { $0.append(i) }
                } catch let e as RemoteError {
                    XCTAssertEqual(e.code, .changed, "\(e)")
                } catch { XCTFail("\(error)") }
            }
            XCTAssertEqual(wins.withLock { $0 }.count, 1, "round \(round): both or neither created it")
            // Both replace the version they saw: exactly one wins again.
            let seen = try XCTUnwrap(try remote.item(at: name)).version
            let replaced = Mutex<Int>(0)
            DispatchQueue.concurrentPerform(iterations: 2) { i in
                if (try? remotes[i].upload(from: fds[1 - i], to: name, expecting: .version(seen), meta: RemoteMeta(), limit: nil, progress: nil)) != nil {
                    replaced.withLock { $0 += 1 }
                }
            }
            XCTAssertEqual(replaced.withLock { $0 }, 1, "round \(round): a replace went over a version its device had not seen")
        }
    }
}

final class UploadQueueTests: XCTestCase {
    var dir: String!
    var index: ItemIndex!
    var queue: UploadQueue { index.uploads }

    override func setUpWithError() throws {
        dir = NSTemporaryDirectory() + "dd-queue-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        index = try ItemIndex(path: dir + "/i.sqlite")
    }

    override func tearDown() {
        index = nil
        try? FileManager.default.removeItem(atPath: dir)
    }

    func testAClaimTakesOnlyWhatIsDueByItsCutOff() throws {
        // Given entries due 30 s ago, 5 s ago and in 10 s
        try queue.enqueue(root: "s", path: "old", due: 70, now: 60)
        try queue.enqueue(root: "s", path: "recent", due: 95, now: 90)
        try queue.enqueue(root: "s", path: "later", due: 110, now: 100)
        // When a burst holds back what is due less than 20 s ago, only the old entry goes
        XCTAssertEqual(try queue.claim(root: "s", limit: 16, dueBy: 80, now: 100).map(\.path), ["old"])
        // And without a hold everything due by now goes, nothing before its time
        XCTAssertEqual(try queue.claim(root: "s", limit: 16, now: 100).map(\.path), ["recent"])
        XCTAssertEqual(try queue.claim(root: "s", limit: 16, now: 100), [])
    }

    func testSavesCoalesceAndWaitForTheirDueTime() throws {
        try queue.enqueue(root: "store:w", path: "a", due: 102, now: 100)
        try queue.enqueue(root: "store:w", path: "a", due: 103, now: 101)
        XCTAssertNil(try queue.claim(root: "store:w", now: 102.5), "the second save pushed the upload back")
        let job = try XCTUnwrap(try queue.claim(root: "store:w", now: 103))
        XCTAssertEqual(job.path, "a")
        XCTAssertNil(try queue.claim(root: "store:w", now: 104), "one upload at a time per file")
        try queue.complete(job)
        XCTAssertEqual(try queue.counts(), [.synced: 1])
    }

    func testWorkersClaimTheirShareAndFinishABatchInOneGo() throws {
        try queue.enqueueAll((0..<6).map { ("r", "f\($0)", Double($0)) }, now: 0)
        // Six due, two workers: three each, most overdue first, so both have files to upload.
        let first = try queue.claim(root: "r", limit: 16, sharedBy: 2, now: 10)
        XCTAssertEqual(first.map(\.path), ["f0", "f1", "f2"])
        XCTAssertEqual(try queue.claim(root: "r", limit: 2, sharedBy: 1, now: 10).map(\.path), ["f3", "f4"], "at most the limit")
        XCTAssertEqual(try queue.counts(), [.pending: 1, .uploading: 5])
        try queue.enqueue(root: "r", path: "f1", due: 20, now: 11)  // saved again during its upload
        try queue.finish([(first[0], .synced), (first[1], .synced), (first[2], .again(due: 30))], now: 12)
        XCTAssertEqual(try queue.state(root: "r", path: "f0")?.0, .synced)
        XCTAssertEqual(try queue.state(root: "r", path: "f1")?.0, .pending, "the newer save still waits")
        XCTAssertEqual(try queue.state(root: "r", path: "f2")?.0, .pending)
        XCTAssertEqual(try queue.claim(root: "r", limit: 16, now: 25).map(\.path), ["f5", "f1"], "f2 waits until 30")
    }

    func testAStoppedWorkerHandsBackWhatItDidNotStart() throws {
        try queue.enqueueAll([("r", "a", 0), ("r", "b", 0), ("r", "gone", 0)], now: 0)
        let jobs = try queue.claim(root: "r", limit: 16, now: 1)
        XCTAssertEqual(jobs.count, 3)
        try queue.finish([(jobs[0], .failed("The remote folder /nas is full.")), (jobs[1], .unstarted), (jobs[2], .removed)], now: 2)
        XCTAssertEqual(try queue.state(root: "r", path: "a")?.1, "The remote folder /nas is full.")
        XCTAssertEqual(try queue.state(root: "r", path: "b")?.0, .pending)
        XCTAssertNil(try queue.state(root: "r", path: "gone"))
        XCTAssertEqual(try queue.claim(root: "r", limit: 16, now: 2).map(\.path), ["b"], "a waits for its back-off")
    }

    /// The index refuses the queue's updates as a full disk does ("database or disk is full")
    /// while `body` runs: a trigger written through a connection of its own, so that the
    /// queue's own statements fail where they would.
    private func withTheIndexFull(_ body: () throws -> Void) throws {
        let other = try DatabaseQueue(path: dir + "/i.sqlite")
        try other.write { db in
            try db.execute(sql: """
                CREATE TRIGGER full BEFORE UPDATE ON upload BEGIN SELECT RAISE(FAIL, 'database or disk is full'); END;
                CREATE TRIGGER full_insert BEFORE INSERT ON upload BEGIN SELECT RAISE(FAIL, 'database or disk is full'); END;
                """)
        }
        defer { try? other.write { db in try db.execute(sql: "DROP TRIGGER full; DROP TRIGGER full_insert") } }
        try body()
    }

    func testEndingsThatCouldNotBeRecordedAreRecordedOnceTheIndexCanBeWritten() throws {
        // Given two uploads claimed (one transaction) whose endings cannot be recorded (another)
        try queue.enqueueAll([("r", "up", 0), ("r", "fails", 0), ("r", "saved-again", 0)], now: 0)
        let jobs = try queue.claim(root: "r", limit: 16, now: 1)
        XCTAssertEqual(jobs.map(\.path), ["up", "fails", "saved-again"])
        try withTheIndexFull {
            XCTAssertThrowsError(try queue.finish([(jobs[0], .synced), (jobs[1], .failed("No space left on device.")),
                                                   (jobs[2], .synced)], now: 2))
            XCTAssertEqual(queue.unrecordedCount, 3)
            // A save while the disk is full cannot be queued either (the uploader keeps it).
            XCTAssertThrowsError(try queue.enqueue(root: "r", path: "saved-again", due: 3, now: 2.5))
            XCTAssertEqual(queue.unrecordedCount, 3, "kept after a write that failed")
            XCTAssertEqual(try queue.counts(), [.uploading: 3])
        }
        // When the index can be written again, a save of one of them records every ending
        // first, then queues the save: nothing stays uploading with no worker on it.
        try queue.enqueue(root: "r", path: "saved-again", due: 2.6, now: 2.5)
        XCTAssertEqual(queue.unrecordedCount, 0)
        XCTAssertEqual(try queue.state(root: "r", path: "up")?.0, .synced)
        XCTAssertEqual(try queue.state(root: "r", path: "fails")?.0, .pending)
        XCTAssertEqual(try queue.state(root: "r", path: "fails")?.1, "No space left on device.")
        XCTAssertEqual(try queue.state(root: "r", path: "saved-again")?.0, .pending, "its later save waits for its upload")
        XCTAssertEqual(try queue.claim(root: "r", limit: 16, now: 2.7).map(\.path), ["saved-again"], "fails waits for its back-off")
    }

    func testAnIdleWorkersClaimRecordsWhatWasNotRecorded() throws {
        try queue.enqueueAll([("r", "a", 0)], now: 0)
        let jobs = try queue.claim(root: "r", limit: 16, now: 1)
        try withTheIndexFull {
            XCTAssertThrowsError(try queue.finish([(jobs[0], .synced)], now: 2))
            XCTAssertThrowsError(try queue.claim(root: "r", limit: 16, now: 3), "nothing due, the record still cannot be written")
        }
        // Nothing is saved, nothing is due: the next look for work records it.
        XCTAssertEqual(try queue.claim(root: "r", limit: 16, now: 4), [])
        XCTAssertEqual(try queue.counts(), [.synced: 1])
        XCTAssertEqual(try queue.waitingCount(now: 4), 0, "docdrive sync has nothing to wait for")
    }

    func testAPollQueueingAFailedPathAgainKeepsItsRetriesWhereASaveStartsItAfresh() throws {
        try queue.enqueueAll([("r", "no-room", 0), ("r", "fresh", 0)], now: 0)
        let jobs = try queue.claim(root: "r", limit: 16, now: 1)
        XCTAssertEqual(jobs.map(\.path), ["no-room", "fresh"])
        try queue.finish([(jobs[0], .failed("cannot write the download of no-room: No space left on device.")), (jobs[1], .synced)], now: 1)
        // A poll finds both differences again: the failed path keeps its error and back-off
        // (due at 2), the one without a failure is queued as before.
        try queue.enqueueAll([("r", "no-room", 1.5), ("r", "fresh", 1.5)], now: 1.5, keepingRetries: true)
        XCTAssertEqual(try queue.state(root: "r", path: "no-room")?.1, "cannot write the download of no-room: No space left on device.")
        XCTAssertEqual(try queue.claim(root: "r", limit: 16, now: 1.6).map(\.path), ["fresh"])
        // Its tries go on at their delay: the third failure ends it failed.
        for t in [2.0, 4.0] {
            let again = try queue.claim(root: "r", limit: 16, now: t)
            XCTAssertEqual(again.map(\.path), ["no-room"], "at \(t)")
            try queue.finish([(again[0], .failed("No space left on device."))], now: t)
            try queue.enqueueAll([("r", "no-room", t)], now: t, keepingRetries: true)
        }
        XCTAssertEqual(try queue.state(root: "r", path: "no-room")?.0, .failed)
        // A save (any other queueing) starts it afresh.
        try queue.enqueue(root: "r", path: "no-room", due: 5, now: 5)
        XCTAssertEqual(try queue.state(root: "r", path: "no-room")?.0, .pending)
        XCTAssertNil(try queue.state(root: "r", path: "no-room")?.1)
    }

    func testAnUnmountWaitsForWhatWasPutBackButNotForAFailure() throws {
        try queue.enqueueAll([("r", "busy", 0), ("r", "failing", 0.5)], now: 0)
        let jobs = try queue.claim(root: "r", limit: 16, now: 1)
        XCTAssertEqual(jobs.map(\.path), ["busy", "failing"])
        XCTAssertEqual(try queue.activeCount(now: 1), 2, "uploading")
        // One path was busy with another sync (put back for 0.3 s), the other's remote is away.
        try queue.finish([(jobs[0], .again(due: 1.3)), (jobs[1], .failed("The remote folder /nas is not reachable."))], now: 1)
        XCTAssertEqual(try queue.activeCount(now: 1.1), 1, "the put-back entry is still to upload; the failed one waits for its back-off")
        let again = try queue.claim(root: "r", limit: 16, now: 1.3)
        XCTAssertEqual(again.map(\.path), ["busy"])
        try queue.finish([(again[0], .synced)], now: 1.4)
        XCTAssertEqual(try queue.activeCount(now: 1.5), 0)
        // Made due again (an unmount's start), the failed entry gets one more try.
        XCTAssertEqual(try queue.makeDue(.all, now: 1.5), 1)
        XCTAssertEqual(try queue.activeCount(now: 1.5), 1)
    }

    func testAnIdleWorkerSleepsUntilWorkIsQueuedOrDue() throws {
        let queue = self.queue
        // Nothing queued: an enqueue from elsewhere wakes the sleeper long before its cap.
        var ticket = queue.workTicket()
        DispatchQueue.global().asyncAfter(deadline: .now() + 0.2) { try? queue.enqueue(root: "r", path: "a", due: 0) }
        var start = Date()
        queue.waitForWork(root: "r", after: ticket, cap: 60)
        XCTAssertLessThan(Date().timeIntervalSince(start), 30, "not woken by the enqueue")
        XCTAssertEqual(try queue.claim(root: "r").map(\.path), "a")
        // An entry due later: the sleeper wakes when it is due, with no signal.
        try queue.enqueue(root: "r", path: "b", due: Date().timeIntervalSince1970 + 0.3)
        ticket = queue.workTicket()
        start = Date()
        queue.waitForWork(root: "r", after: ticket, cap: 60)
        XCTAssertLessThan(Date().timeIntervalSince(start), 30, "slept past the due time")
        XCTAssertEqual(try queue.claim(root: "r").map(\.path), "b")
        // A signal between the ticket and the wait is not lost.
        ticket = queue.workTicket()
        try queue.makeDue(.all)
        start = Date()
        queue.waitForWork(root: "r", after: ticket, cap: 60)
        XCTAssertLessThan(Date().timeIntervalSince(start), 30, "the signal before the wait was lost")
    }

    func testAFileSavedDuringItsUploadGoesAgain() throws {
        try queue.enqueue(root: "r", path: "a", due: 0, now: 0)
        let job = try XCTUnwrap(try queue.claim(root: "r", now: 1))
        try queue.enqueue(root: "r", path: "a", due: 3, now: 2)   // saved again while uploading
        try queue.complete(job, now: 2.5)
        XCTAssertEqual(try queue.counts(), [.pending: 1])
        let again = try XCTUnwrap(try queue.claim(root: "r", now: 3))
        XCTAssertGreaterThan(again.generation, job.generation)
    }

    func testFailuresBackOffAreShownAndKeepRetrying() throws {
        try queue.enqueue(root: "r", path: "a", due: 0, now: 0)
        var now = 1.0
        var job = try XCTUnwrap(try queue.claim(root: "r", now: now))
        // Each failure doubles the wait before the next try: 1, 2, 4, 8, 16 s.
        for delay in [1.0, 2, 4, 8, 16] {
            try queue.fail(job, error: "The remote folder /nas is not reachable.", now: now)
            XCTAssertNil(try queue.claim(root: "r", now: now + delay - 0.01), "retried before \(delay) s")
            job = try XCTUnwrap(try queue.claim(root: "r", now: now + delay), "not retried after \(delay) s")
            now += delay
        }
        try queue.fail(job, error: "The remote folder /nas is full.", now: now)
        // After three failures it shows as failed, with its error, and is still retried later.
        let (state, error) = try XCTUnwrap(try queue.state(root: "r", path: "a"))
        XCTAssertEqual(state, .failed)
        XCTAssertEqual(error, "The remote folder /nas is full.")
        XCTAssertNotNil(try queue.claim(root: "r", now: now + 301))
    }

    func testFailedEntriesCanBeMadeDueWithoutCuttingTheDelayOfSaves() throws {
        // Given a file that failed four times (its next try 8 s after the last)
        try queue.enqueue(root: "r", path: "failed", due: 0, now: 0)
        var now = 1.0
        for k in 0..<4 {
            if k > 0 { now += 20 }
            let job = try XCTUnwrap(try queue.claim(root: "r", now: now))
            try queue.fail(job, error: "refused", now: now)
        }
        now += 1
        XCTAssertEqual(try queue.state(root: "r", path: "failed")?.0, .failed)
        // and two saves in their write-back delay, in two stores
        try queue.enqueue(root: "r", path: "saved", due: now + 100, now: now)
        try queue.enqueue(root: "s", path: "other", due: now + 100, now: now)
        XCTAssertEqual(try queue.claim(root: "r", limit: 16, now: now).map(\.path), [])
        // When the failed entries are made due, the failed file goes now and the save still waits
        XCTAssertEqual(try queue.makeDue(.failed, now: now), 1)
        XCTAssertEqual(try queue.claim(root: "r", limit: 16, now: now).map(\.path), ["failed"])
        // and when everything of one store is, its save goes now, not the other store's
        XCTAssertEqual(try queue.makeDue(.all, root: "r", now: now), 1)
        XCTAssertEqual(try queue.claim(root: "r", limit: 16, now: now).map(\.path), ["saved"])
        XCTAssertEqual(try queue.claim(root: "s", limit: 16, now: now).map(\.path), [])
    }

    func testQueueSurvivesRestartAndInterruptedUploadsResume() throws {
        try queue.enqueue(root: "r", path: "a", due: 0, now: 0)
        try queue.enqueue(root: "r", path: "b", due: 0, now: 0)
        _ = try queue.claim(root: "r", now: 1)   // a crash in the middle of this upload
        index = nil
        index = try ItemIndex(path: dir + "/i.sqlite")
        try queue.recoverInterrupted()
        XCTAssertEqual(try queue.counts(), [.pending: 2])
    }

    func testRenamesAndDeletesFollowTheQueue() throws {
        try queue.enqueue(root: "r", path: "a", due: 0, now: 0)
        try queue.enqueue(root: "r", path: "gone", due: 0, now: 0)
        try queue.rename(root: "r", from: "a", to: "b")
        try queue.remove(root: "r", path: "gone")
        let job = try XCTUnwrap(try queue.claim(root: "r", now: 1))
        XCTAssertEqual(job.path, "b")
        XCTAssertNil(try queue.claim(root: "r", now: 1))
    }

    func testBytesLeftAreTheSizesOfTheWaitingLocalFiles() throws {
        // Given a local copy with three files and a folder, and queue entries in every state
        let cache = dir + "/cache"
        try FileManager.default.createDirectory(atPath: cache + "/sub", withIntermediateDirectories: true)
        for (name, size) in [("a", 100), ("sub/b", 2000), ("c", 50_000)] {
            FileManager.default.createFile(atPath: cache + "/" + name, contents: Data(count: size))
        }
        try queue.enqueueAll([("r", "a", 0), ("r", "sub/b", 0), ("r", "c", 0), ("r", "gone", 0), ("r", "sub", 0), ("r", "", 0),
                              ("other", "a", 0)], now: 0)
        let synced = try XCTUnwrap(try queue.claim(root: "r", now: 1))
        try queue.complete(synced)
        _ = try XCTUnwrap(try queue.claim(root: "r", now: 1))            // one more is uploading
        // Then pending and uploading files count, synced ones, deleted paths and folders do not
        let sizes: [String: Int64] = ["a": 100, "sub/b": 2000, "c": 50_000]
        XCTAssertEqual(try queue.bytesLeft(root: "r", cache: cache), 52_100 - (sizes[synced.path.description] ?? 0))
        XCTAssertEqual(try queue.bytesLeft(root: "other", cache: cache), 100)
        // And a store that leaves the config forgets what waited, but keeps what is synced
        try queue.forgetWaiting(root: "r")
        XCTAssertEqual(try queue.counts(root: "r"), [.synced: 1])
        XCTAssertEqual(try queue.bytesLeft(root: "r", cache: cache), 0)
    }

    func testAPathThatIsNotUTF8IsKeptByteForByte() throws {
        // Given paths whose names are not valid UTF-8, beside one that is
        let odd = StorePath(bytes: Array("dir/caf".utf8) + [0xE9] + Array(".txt".utf8))
        let plain = StorePath("dir/cafe.txt")
        try queue.enqueueAll([("r", odd, 0), ("r", plain, 0)], now: 0)
        // Then they are two entries, and each comes back with its own bytes
        let jobs = try queue.claim(root: "r", limit: 16, now: 1)
        XCTAssertEqual(Set(jobs.map(\.path)), [odd, plain])
        XCTAssertEqual(try queue.state(root: "r", path: odd)?.0, .uploading)
        XCTAssertEqual(odd.description, "dir/caf\\xE9.txt")
    }

    func testBandwidthLimitPacesSpending() {
        // Given a limit of 100 KB/s, spending 50 KB three times takes about a second
        let limit = BandwidthLimit(bytesPerSecond: 100_000)
        let start = Date()
        for _ in 0..<3 { limit.spend(50_000) }
        let took = Date().timeIntervalSince(start)
        XCTAssertGreaterThan(took, 1.4)
        XCTAssertLessThan(took, 3)
    }
}

final class PollScheduleTests: XCTestCase {
    /// A quick look at the remote comes again `poll` seconds after it began; a look of more
    /// than a second (a large store) pushes the next one out to ten times its length.
    func testAStoreWhoseLooksTakeLongIsLookedAtLessOften() {
        XCTAssertEqual(SyncService.nextPoll(began: 100, took: 0.2, every: 10), 110)
        XCTAssertEqual(SyncService.nextPoll(began: 100, took: 1, every: 10), 110)
        XCTAssertEqual(SyncService.nextPoll(began: 100, took: 3.5, every: 10), 135)
        XCTAssertEqual(SyncService.nextPoll(began: 100, took: 3.5, every: 60), 160)
        XCTAssertEqual(SyncService.nextPoll(began: 100, took: 0.3, every: 0.5), 100.5, accuracy: 1e-9)
        XCTAssertEqual(SyncService.nextPoll(began: 100, took: 1.5, every: 0.5), 115, accuracy: 1e-9)
    }
}
