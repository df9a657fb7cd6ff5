// InodeSlotTests: a node's life (Nodes/Inode+Slot.swift): each transition of its table ends
// where the table says, every rule of `broken` can fail, and the slot stays small.
import DocDriveCore
import XCTest

private typealias Slot = Inode.Slot

final class InodeSlotTests: XCTestCase {
    private let parent = Inode(nodeID: 1, kind: .root)
    private var seenName: Inode.LazyName { Inode.LazyName(parent: parent, "a.txt") }
    private let handle = Slot.Way.handle([1, 2, 3], anchor: 7)
    private let fd: Int32 = 50

    // The states of the table's first column.
    private func unopened() -> Slot { Slot(fd: -1, lazy: seenName) }
    private func open(users: Int32 = 0, opens: Int32 = 0, marks: Slot.Marks = [], way: Slot.Way = .none) -> Slot {
        Slot(life: .open, marks: marks, way: way, fd: fd, users: users, opens: opens)
    }
    private func evicted() -> Slot { Slot(life: .evicted, way: handle) }
    private func closed(_ marks: Slot.Marks, way: Slot.Way = .none, users: Int32 = 0) -> Slot {
        Slot(life: .closed, marks: marks, way: way, users: users)
    }

    /// `s` is in `life` with `marks`, `users` and `opens`, and keeps every rule.
    private func expect(_ s: Slot, _ life: Slot.Life, marks: Slot.Marks = [], users: Int32 = 0, opens: Int32 = 0,
                        line: UInt = #line) {
        XCTAssertEqual(s.life, life, "life", line: line)
        XCTAssertEqual(s.marks, marks, "marks", line: line)
        XCTAssertEqual(s.users, users, "users", line: line)
        XCTAssertEqual(s.opens, opens, "opens", line: line)
        XCTAssertNil(s.broken, line: line)
    }

    private func isLazy(_ s: Slot) -> Bool { if case .lazy = s.way { true } else { false } }
    private func hasNoWay(_ s: Slot) -> Bool { if case .none = s.way { true } else { false } }

    /// The table at Slot's declaration, row by row, in its order.
    func testEachTransitionEndsWhereTheTableSays() {
        // made with a descriptor, a name, neither
        expect(Slot(fd: fd, lazy: nil), .open)
        var s = unopened()
        expect(s, .unopened)
        XCTAssertTrue(isLazy(s))
        expect(Slot(fd: -1, lazy: nil), .closed)

        // open: use
        s = open()
        guard case .ready(fd) = s.use() else { return XCTFail("an open node is used at once") }
        expect(s, .open, users: 1)
        XCTAssertTrue(s.referenced)
        // unopened, evicted, closed: use changes nothing and says how to open it
        s = unopened()
        guard case .open = s.use() else { return XCTFail("an unopened node is opened at its name") }
        expect(s, .unopened)
        s = evicted()
        guard case .reopen([1, 2, 3], anchor: 7) = s.use() else { return XCTFail("an evicted node is reopened by handle") }
        expect(s, .evicted)
        s = closed(.removed)
        guard case .removed = s.use() else { return XCTFail("a removed node answers ENOENT") }
        for marks: Slot.Marks in [.replaced, .dead, [.removed, .replaced], [.removed, .dead], []] {
            s = closed(marks)
            guard case .gone = s.use() else { return XCTFail("a closed node \(marks.rawValue) answers ESTALE") }
        }

        // unopened, evicted: reopen
        s = unopened()
        XCTAssertEqual(s.reopen(with: 60).spare, -1)
        expect(s, .open, users: 1)
        XCTAssertEqual(s.fd, 60)
        XCTAssertTrue(hasNoWay(s), "a node opened keeps no name")
        s = evicted()
        XCTAssertEqual(s.reopen(with: 60).fd, 60)
        expect(s, .open, users: 1)
        guard case .handle = s.way else { return XCTFail("a reopened node keeps its handle") }
        // closed, a reopen begun before it closed
        s = closed(.replaced)
        XCTAssertEqual(s.reopen(with: 60).spare, -1)
        expect(s, .open, marks: .replaced, users: 1)
        // open, another thread first: the fresh descriptor is the one to close
        s = open(users: 1)
        XCTAssertEqual(s.reopen(with: 60).spare, 60)
        expect(s, .open, users: 2)
        XCTAssertEqual(s.fd, fd)

        // open: release, the last user of a dead node; otherwise
        s = open(users: 1, marks: .dead)
        XCTAssertEqual(s.release(), fd)
        expect(s, .closed, marks: .dead)
        s = open(users: 2, marks: .dead)
        XCTAssertEqual(s.release(), -1)
        expect(s, .open, marks: .dead, users: 1)
        s = open(users: 1)
        XCTAssertEqual(s.release(), -1)
        expect(s, .open)

        // unopened: seen elsewhere; an opened node learns no name
        s = unopened()
        let other = Inode.LazyName(parent: parent, "b.txt")
        s.seen(at: other)
        expect(s, .unopened)
        s = open()
        s.seen(at: other)
        XCTAssertTrue(hasNoWay(s))

        // any: files opened and closed
        s = evicted()
        s.fileOpened()
        expect(s, .evicted, opens: 1)
        s.fileClosed()
        expect(s, .evicted)

        // open, idle, not dead: remove; any other: nothing
        s = open(way: handle)
        XCTAssertEqual(s.remove(), fd)
        expect(s, .closed, marks: .removed)
        XCTAssertTrue(hasNoWay(s))
        for busy in [open(users: 1), open(opens: 1), open(users: 1, marks: .dead)] {
            s = busy
            XCTAssertEqual(s.remove(), -1)
            expect(s, .open, marks: busy.marks, users: busy.users, opens: busy.opens)
        }
        s = unopened()
        XCTAssertEqual(s.remove(), -1)
        expect(s, .unopened)
        s = evicted()
        XCTAssertEqual(s.remove(), -1)
        expect(s, .evicted)

        // open, idle, not dead: replace behind; busy or dead; unopened, evicted, closed
        s = open(way: handle)
        XCTAssertEqual(s.replaceBehind(), fd)
        expect(s, .closed, marks: .replaced)
        XCTAssertTrue(hasNoWay(s))
        s = open(opens: 1)
        XCTAssertEqual(s.replaceBehind(), -1)
        expect(s, .open, marks: .replaced, opens: 1)
        s = open(users: 1, marks: .dead)
        XCTAssertEqual(s.replaceBehind(), -1)
        expect(s, .open, marks: [.dead, .replaced], users: 1)
        for from in [unopened(), evicted(), closed(.removed)] {
            s = from
            XCTAssertEqual(s.replaceBehind(), -1)
            expect(s, .closed, marks: from.marks.union(.replaced))
            XCTAssertTrue(hasNoWay(s))
        }

        // open, no users: forget; in use; unopened, evicted, closed
        s = open(opens: 1)
        XCTAssertEqual(s.forget(), fd)
        expect(s, .closed, marks: .dead, opens: 1)
        s = open(users: 1)
        XCTAssertEqual(s.forget(), -1)
        expect(s, .open, marks: .dead, users: 1)
        XCTAssertEqual(s.release(), fd, "a dead node closes at its last release")
        for from in [unopened(), evicted(), closed(.removed)] {
            s = from
            XCTAssertEqual(s.forget(), -1)
            expect(s, .closed, marks: from.marks.union(.dead))
        }
        s = unopened()
        _ = s.forget()
        XCTAssertTrue(isLazy(s), "a node forgotten unopened keeps its name (to be remembered by it)")

        // not open, not dead: adopt; otherwise refused
        for from in [unopened(), evicted(), closed(.replaced)] {
            s = from
            XCTAssertTrue(s.adopt(60))
            expect(s, .open, marks: from.marks)
            XCTAssertFalse(isLazy(s))
        }
        for from in [open(), closed(.dead)] {
            s = from
            XCTAssertFalse(s.adopt(60))
            expect(s, from.life, marks: from.marks)
        }

        // open, idle, not dead, not pinned: begin eviction, not forced while referenced
        s = open()
        XCTAssertEqual(s.beginEviction(force: false), -1)
        expect(s, .open)
        XCTAssertFalse(s.referenced)
        XCTAssertEqual(s.beginEviction(force: false), fd)
        expect(s, .open, users: 1)
        s = open()
        XCTAssertEqual(s.beginEviction(force: true), fd)
        expect(s, .open, users: 1)
        for from in [open(users: 1), open(marks: .pinned), evicted()] {  // (an idle open dead node is none: see the rules)
            s = from
            XCTAssertEqual(s.beginEviction(force: true), -1)
            expect(s, from.life, marks: from.marks, users: from.users)
        }

        // any: pin
        s = open(users: 1)
        s.pin()
        expect(s, .open, marks: .pinned, users: 1)

        // open: end eviction, idle, the handle works, no end mark
        s = open(users: 1)
        XCTAssertEqual(s.endEviction(handle: [9], anchor: 3, works: true), fd)
        expect(s, .evicted)
        guard case .handle([9], anchor: 3) = s.way else { return XCTFail("an evicted node has its handle") }
        // the first anchor stays
        s = open(users: 1, way: handle)
        _ = s.endEviction(handle: [9], anchor: 3, works: true)
        guard case .handle([9], anchor: 7) = s.way else { return XCTFail("the handle's first anchor stays") }
        // idle, dead or replaced since it began
        for marks: Slot.Marks in [.dead, .replaced, [.dead, .replaced]] {
            s = open(users: 1, marks: marks)
            XCTAssertEqual(s.endEviction(handle: [9], anchor: 3, works: true), fd)
            expect(s, .closed, marks: marks)
        }
        s = open(users: 1, marks: .dead)
        XCTAssertEqual(s.endEviction(handle: nil, anchor: -1, works: false), fd, "dead: closed even without a handle")
        expect(s, .closed, marks: [.dead, .pinned])
        // otherwise: used meanwhile, the handle does not work, no handle at all
        s = open(users: 2)
        XCTAssertEqual(s.endEviction(handle: [9], anchor: 3, works: true), -1)
        expect(s, .open, users: 1)
        s = open(users: 1)
        XCTAssertEqual(s.endEviction(handle: [9], anchor: -1, works: false), -1)
        expect(s, .open)
        s = open(users: 1, way: handle)
        XCTAssertEqual(s.endEviction(handle: nil, anchor: -1, works: false), -1)
        expect(s, .open, marks: .pinned)
        XCTAssertTrue(hasNoWay(s), "a node of a filesystem without handles keeps none")
        // closed (shut down meanwhile)
        s = closed(.dead, users: 1)
        XCTAssertEqual(s.endEviction(handle: [9], anchor: 3, works: true), -1)
        expect(s, .closed, marks: .dead)

        // open: hold to remember; the others answer without a change
        s = open()
        guard case .held(fd) = s.holdToRemember() else { return XCTFail("an open node is held") }
        expect(s, .open, users: 1)
        s = evicted()
        guard case .handle([1, 2, 3]) = s.holdToRemember() else { return XCTFail("an evicted node is remembered by handle") }
        expect(s, .evicted)
        s = unopened()
        guard case .name = s.holdToRemember() else { return XCTFail("an unopened node is remembered by name") }
        s = open(marks: .removed)
        guard case .none = s.holdToRemember() else { return XCTFail("a removed node is not remembered") }
        expect(s, .open, marks: .removed)

        // any: shut down
        for from in [open(users: 1), unopened(), evicted(), closed(.replaced)] {
            s = from
            XCTAssertEqual(s.shutDown(), from.fd)
            expect(s, .closed, marks: from.marks.union(.dead), users: from.users)
        }
    }

    /// Each rule of `broken` fails for a slot that breaks it, and for that rule only.
    func testEachRuleCanFail() {
        let breaking: [Slot.Rule: Slot] = [
            .usersCounted: open(users: -1),
            .opensCounted: evicted().withOpens(-1),
            .descriptorWhenOpen: Slot(life: .open, fd: -1),
            .nameUntilOpened: open(way: .lazy(seenName)),
            .noNameOnceGone: closed([.removed, .dead], way: .lazy(seenName)),
            .unopenedHasName: Slot(life: .unopened),
            .unopenedUnmarked: Slot(life: .unopened, marks: .pinned, way: .lazy(seenName)),
            .evictedHasHandle: Slot(life: .evicted, way: .lazy(seenName)),
            .pinnedNeverEvicted: Slot(life: .evicted, marks: .pinned, way: handle),
            .evictedNotEnded: Slot(life: .evicted, marks: .removed, way: handle),
            .closedForAReason: closed(.pinned, way: handle),
            .deadIdleClosed: open(marks: .dead),
        ]
        XCTAssertEqual(Set(breaking.keys), Set(Slot.Rule.allCases), "a broken slot for every rule")
        for (rule, s) in breaking {
            XCTAssertEqual(s.brokenRule, rule)
            XCTAssertTrue(s.broken?.hasPrefix(rule.rawValue) == true, "\(s.broken ?? "nil")")
        }
        // Also the other way round: a descriptor in a life that is not open.
        XCTAssertEqual(Slot(life: .closed, fd: 5).brokenRule, .descriptorWhenOpen)
    }

    /// The slot is in every node (a 144-byte allocation: FileSystemTests): 39 bytes, a 40-byte
    /// stride, since its four flags became one byte of marks and its life one (41 and 48 before).
    func testTheSlotStaysSmall() {
        XCTAssertLessThanOrEqual(MemoryLayout<Inode.Slot>.size, 39)
        XCTAssertLessThanOrEqual(MemoryLayout<Inode.Slot>.stride, 40)
    }
}

private extension Inode.Slot {
    func withOpens(_ n: Int32) -> Inode.Slot {
        Inode.Slot(life: life, marks: marks, way: way, fd: fd, users: users, opens: n)
    }
}
