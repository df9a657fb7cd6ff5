/// The paths of the items with an id in the last listing of a store's remote: where each id is
/// (a rename made on another device), and what each folder holds (the children of a folder the
/// sync makes on the remote or places here are looked at with it).
///
/// What a folder holds is sorted out once per listing, at the first question, not per folder:
/// a tree of 600 folders unpacked into a store of 100,000 items asked 600 times of every item.
public struct ListedIDs: Sendable {
    public private(set) var byID: [String: StorePath]
    /// The paths of `byID` by their folder; nil until asked for after a listing.
    private var byFolder: [StorePath: [StorePath]]?

    public init(byID: [String: StorePath] = [:]) {
        self.byID = byID
        self.byFolder = nil
    }

    /// The listed paths (with an id) directly in `folder`, in no particular order.
    public mutating func inFolder(_ folder: StorePath) -> [StorePath] {
        if let byFolder { return byFolder[folder] ?? [] }
        var made = [StorePath: [StorePath]]()
        for p in byID.values { made[p.folder, default: []].append(p) }
        byFolder = made
        return made[folder] ?? []
    }
}
