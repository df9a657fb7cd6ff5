// MigrateCommand: `docdrive migrate`: adopt an existing folder of documents as an app's container
// (or into a store), every item with an id; running it again finishes an interrupted run.
import ArgumentParser
import CDocDriveSys
import DocDriveCore
import Foundation
#if canImport(Glibc)
import Glibc
#endif

struct Migrate: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Adopt an existing folder of documents into an app's Documents or a store.",
        discussion: """
        With the drive mounted, the documents go in through the mount (each gets its id at once,
        and in a store it is uploaded); unmounted, they go into the backing folder and get their
        ids now. Nothing at the destination is overwritten: a name that holds something else is
        reported and left. A run that was interrupted is finished by running it again.
        """)

    @OptionGroup var drive: DriveOptions
    @Argument(help: "The folder whose content to adopt.") var folder: String
    @Option(help: ArgumentHelp("The app whose Documents receive it.", valueName: "id")) var app: String?
    @Option(help: ArgumentHelp("The store that receives it.", valueName: "name")) var store: String?
    @Option(help: ArgumentHelp("A folder inside the Documents or the store to put it in.", valueName: "path")) var into: String?
    @Flag(help: "Move the documents (the default) or copy them (the folder stays as it is).") var mode: Mode = .move
    @Flag(help: "Print JSON.") var json = false

    enum Mode: String, EnumerableFlag {
        case move, copy
    }

    func validate() throws {
        if (app == nil) == (store == nil) { throw ValidationError("Give either --app ID or --store NAME.") }
    }

    func run() throws {
        try guarded {
            let home = drive.driveHome
            let config = try home.loadConfig()
            let source = DriveHome.absolute(folder)
            var isDir: ObjCBool = false
            guard FileManager.default.fileExists(atPath: source, isDirectory: &isDir), isDir.boolValue else {
                throw DriveError(.notFound, "\(folder) is not a folder.")
            }
            if let into, !Names.isSafeRelativePath(into) {
                throw DriveError(.invalidName, "--into \(into): give a folder path inside the destination, without .. or a leading /.")
            }
            let mounted = home.liveMountRecord()
            var backing: String, shownRoot: String, rootKey: String
            if let app {
                guard let a = config.apps.first(where: { $0.id == app }) else { throw DriveError(.notFound, "There is no app \(app) (see `docdrive app list`).") }
                backing = home.documentsPath(a.id)
                shownRoot = mounted.map { $0.mountpoint + "/.by-app/" + a.id + "/Documents" } ?? backing
                rootKey = RootKey.app(id: a.id, folder: "Documents").description
            } else {
                guard let s = config.stores.first(where: { $0.name == store }) else { throw DriveError(.notFound, "There is no store \(store ?? "") (see `docdrive store list`).") }
                backing = home.cachePath(s.name)
                shownRoot = mounted.map { $0.mountpoint + "/" + s.displayName } ?? backing
                rootKey = s.rootKey
            }
            for inside in [backing, shownRoot, home.path] where source == inside || source.hasPrefix(inside + "/") || inside.hasPrefix(source + "/") {
                throw DriveError(.invalidName, "\(source) is inside the drive (or holds it): adopt a folder from outside.")
            }
            let destination = into.map { shownRoot + "/" + $0 } ?? shownRoot
            // Ids: through the mount, asking for the id gives one; unmounted, the index directly.
            let index: ItemIndex? = mounted == nil ? try ItemIndex(path: home.indexPath) : nil
            defer { index?.stop() }
            let tty = isatty(2) != 0
            let migration = Migration(mode: mode == .copy ? .copy : .move, adopted: { path in
                if mounted != nil {
                    let fd = open(path, dd_O_PATH | dd_O_NOFOLLOW | dd_O_CLOEXEC)
                    if fd >= 0 {
                        _ = dd_getxattr_path(fd, "user.docdrive.id", nil, 0)
                        close(fd)
                    }
                } else if let index {
                    Self.giveID(index, rootKey: rootKey, backing: backing, path: path)
                }
            }, progress: { n in if tty { warn("\r\(n) items adopted…", newline: false) } })
            let r = try migration.run(source: source, destination: destination)
            if tty { warn("\r", newline: false) }
            if json {
                printJSON(["files": r.files, "folders": r.folders, "links": r.links, "alreadyThere": r.skipped,
                           "clashes": r.clashes, "notAdopted": r.unsupported, "destination": destination, "mode": mode.rawValue])
            } else {
                print("Adopted \(r.files) file\(r.files == 1 ? "" : "s"), \(r.folders) folder\(r.folders == 1 ? "" : "s") and \(r.links) link\(r.links == 1 ? "" : "s") into \(destination)\(r.skipped > 0 ? " (\(r.skipped) already there)" : "").")
                for c in r.clashes { warn("docdrive: \(c) was left where it is: the destination already has something else under that name.") }
                for u in r.unsupported { warn("docdrive: \(u) was not adopted: only files, folders and links with UTF-8 names can be.") }
            }
            if !r.clashes.isEmpty || !r.unsupported.isEmpty { throw ExitCode(ExitCodes.code(for: .alreadyExists)) }
        }
    }

    /// The id of an item adopted into a backing folder while unmounted (identity is the inode).
    static func giveID(_ index: ItemIndex, rootKey: String, backing: String, path: String) {
        var st = stat(), pst = stat()
        guard lstat(path, &st) == 0, lstat((path as NSString).deletingLastPathComponent, &pst) == 0 else { return }
        let kind: ItemKind = st.st_mode & S_IFMT == S_IFDIR ? .directory : st.st_mode & S_IFMT == S_IFREG ? .file : .symlink
        _ = try? index.itemID(root: rootKey, ino: Int64(st.st_ino), parentIno: Int64(pst.st_ino),
                              name: (path as NSString).lastPathComponent, kind: kind)
    }
}
