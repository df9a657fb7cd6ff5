// StatusCommand: `docdrive status`: the drive, its mount, apps, stores and index.
import ArgumentParser
import DocDriveCore
import Foundation

struct Status: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Show the drive: where it is, whether it is mounted, apps, stores, items.")

    @OptionGroup var drive: DriveOptions
    @Flag(help: "Print JSON.") var json = false

    func run() throws {
        try guarded {
            let home = drive.driveHome
            let config = try home.loadConfig()
            let record = home.liveMountRecord()
            var counts = [String: Int]()
            var uploads = [UploadState: Int]()
            if FileManager.default.fileExists(atPath: home.indexPath), let index = try? ItemIndex(path: home.indexPath) {
                counts = (try? index.counts()) ?? [:]
                uploads = (try? index.uploads.counts()) ?? [:]
            }
            let uploadCounts = Dictionary(uniqueKeysWithValues: UploadState.allCases.map { ($0.rawValue, uploads[$0] ?? 0) })
            let items = counts.values.reduce(0, +)
            // Reference entries whose document is gone, altered or revoked (asked of the daemon).
            let refs = record == nil ? [] : ((try? ControlClient.call(home, ["command": "references"], timeout: 30))?["references"] as? [[String: Any]] ?? [])
            let badRefs = refs.filter { $0["status"] as? String != "ok" }
            if json {
                var out: [String: Any] = [
                    "home": home.path, "config": home.configPath, "mounted": record != nil, "items": items, "uploads": uploadCounts,
                    "apps": config.apps.map { ["id": $0.id, "name": $0.name, "public": $0.isPublic] as [String: Any] },
                    "stores": config.stores.map { ["name": $0.name, "display": $0.displayName, "remote": $0.remote.summary] },
                ]
                out["references"] = refs
                if let r = record { out["mount"] = ["mountpoint": r.mountpoint, "pid": r.pid, "options": r.options, "started": r.started] }
                printJSON(out)
                return
            }
            print("Drive:   \(home.path)")
            if let r = record {
                print("Mounted: \(r.mountpoint) (daemon pid \(r.pid), -o \(r.options))")
            } else if let dead = home.lastMountRecord(), MountTable.docdriveMount(at: dead.mountpoint) != nil {
                print("Mounted: dead mount at \(dead.mountpoint) (daemon pid \(dead.pid) is gone; `docdrive mount` or `docdrive unmount` clears it)")
            } else {
                print("Mounted: no")
            }
            print("Apps:    \(config.apps.isEmpty ? "none" : "")")
            for a in config.apps { print("  \(a.id)  \"\(a.name)\"  \(a.isPublic ? "public" : "private")") }
            print("Stores:  \(config.stores.isEmpty ? "none" : "")")
            for s in config.stores { print("  \(s.name)  \"\(s.displayName)\"  \(s.remote.summary)") }
            print("Items:   \(items) with a stable id in the index")
            if record != nil {
                print("References: \(refs.count)\(badRefs.isEmpty ? "" : ", \(badRefs.count) not working:")")
                for r in badRefs {
                    print("  \(r["path"] as? String ?? "")  \(r["status"] as? String ?? "")  -> \(r["target"] as? String ?? "?")")
                }
            }
            print("Uploads: \(UploadState.allCases.map { "\(uploadCounts[$0.rawValue]!) \($0.rawValue)" }.joined(separator: ", "))")
        }
    }
}
