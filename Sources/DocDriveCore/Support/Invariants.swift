// Invariants: the checks of the rules written at the declarations of the drive's states (a
// node's slot, a store's sync memory, ...). On in debug builds and whenever DOCDRIVE_CHECKS=1
// (mount-scripts/test.sh sets it for every test, the daemons it starts included); off in a
// user's daemon, where a check costs one load of a constant. A broken rule is a bug of ours,
// never something from outside: it stops the process at once, where it broke, as
// passthrough_hp's asserts do, rather than letting a test pass on a state that should not be.

/// A state whose rules can be checked: `broken` says which rule does not hold, nil when all do.
protocol CheckedState {
    var broken: String? { get }
}

enum Invariants {
    /// Whether checks run in this process.
    static let on: Bool = {
        #if DEBUG
        true
        #else
        Tunables.process.checks
        #endif
    }()

    /// Stops the process when `state` breaks one of its rules (checks on only).
    @inline(__always)
    static func check<S: CheckedState>(_ state: @autoclosure () -> S, file: StaticString = #fileID, line: UInt = #line) {
        guard on else { return }
        if let why = state().broken { fatalError("invariant broken: \(why)", file: file, line: line) }
    }

    /// Stops the process when `holds` is false (checks on only): for a rule between states.
    @inline(__always)
    static func check(_ holds: @autoclosure () -> Bool, _ rule: @autoclosure () -> String,
                      file: StaticString = #fileID, line: UInt = #line) {
        guard on else { return }
        if !holds() { fatalError("invariant broken: \(rule())", file: file, line: line) }
    }
}
