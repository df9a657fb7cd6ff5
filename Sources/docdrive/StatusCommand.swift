// StatusCommand: `docdrive status`: the drive, its mount, apps, stores, uploads (with progress) and index.
import ArgumentParser
import DocDriveCore
import Foundation
#if canImport(Glibc)
import Glibc
#endif

struct Status: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show the drive: where it is, whether it is mounted, apps, stores, uploads and their progress, items.")

    @OptionGroup var drive: DriveOptions
    @Flag(help: "Print JSON.") var json = false
    @Flag(help: ArgumentHelp("Redraw each time something shown changes, until nothing is left to upload (or Ctrl-C).",
                             discussion: "The daemon pushes each change (at most four a second); with --json, one JSON object per line."))
    var watch = false

    /// Everything the report shows, read once per drawing: the config and the mount record read
    /// here, the rest (`DriveStatus`) asked of the daemon, or read from the index without one.
    struct Snapshot {
        var config: DriveConfig
        var record: MountRecord?
        var status: DriveStatus
        /// Why the daemon could not be asked (another control protocol version, no answer): the
        /// status is then read from the index.
        var daemonProblem: String?

        /// Each store of the config with its status (an empty one if the answer lacks it).
        var stores: [(config: StoreConfig, status: StoreStatus)] {
            config.stores.map { c in (c, status.stores.first { $0.name == c.name } ?? StoreStatus(name: c.name)) }
        }
    }

    func run() throws {
        try guarded {
            let home = drive.driveHome
            guard watch else {
                if json {
                    printJSON(Self.json(home, try Self.snapshot(home)))
                } else {
                    print(Self.render(home, try Self.snapshot(home), bars: isatty(1) != 0), terminator: "")
                }
                return
            }
            try Self.watch(home, json: json, tty: isatty(1) != 0)
        }
    }

    /// `--watch`: draws the daemon's status each time it pushes one (`status-watch`), until
    /// nothing is left to upload. A daemon that cannot push (older, or not answering) is said so
    /// in one line on stderr, and then asked every half second; with no daemon there is nothing
    /// to watch: the status is drawn once, as `status` draws it.
    static func watch(_ home: DriveHome, json: Bool, tty: Bool) throws {
        func draw(_ s: Snapshot) {
            if json {
                // One object per line (printJSON's are several lines each).
                if let data = try? JSONSerialization.data(withJSONObject: Self.json(home, s), options: [.sortedKeys, .withoutEscapingSlashes]) {
                    print(String(decoding: data, as: UTF8.self))
                }
            } else {
                let text = render(home, s, bars: tty)
                print(tty ? "\u{1B}[H\u{1B}[2J" + text : text, terminator: "")
            }
            fflush(nil)  // all streams: stdout is not concurrency-safe to name
        }
        func say(_ line: String) { FileHandle.standardError.write(Data("docdrive: \(line)\n".utf8)) }
        let config = try home.loadConfig()
        guard home.liveMountRecord() != nil else {
            draw(try snapshot(home))
            say("The drive is not mounted, so nothing changes to watch: this is its status as the index has it.")
            return
        }
        var ended = false
        do {
            try ControlClient.stream(home, .statusWatch(ControlRequest.Status())) { (status: DriveStatus) in
                draw(Snapshot(config: (try? home.loadConfig()) ?? config, record: home.liveMountRecord(), status: status))
                ended = status.waiting == 0
                return !ended
            }
            if ended { return }
            throw DriveError(.notMounted, "The daemon ended the watch: the drive was unmounted.")
        } catch let e as DriveError where e.code == .badRequest {
            say("The mounted daemon cannot push its status (it is older than this docdrive); asking it every half second instead.")
        } catch let e as DriveError where e.code != .notMounted {
            let why = e.message.hasSuffix(".") ? String(e.message.dropLast()) : e.message
            say("The daemon's status cannot be watched (\(why)); reading it every half second instead.")
        }
        while true {
            let s = try snapshot(home)
            draw(s)
            if s.status.waiting == 0 { break }
            usleep(500_000)
        }
    }

    /// The daemon's status when one runs (a live mount record); else, or when it cannot answer
    /// (one sentence says why), the same facts gathered here from the index opened read-only.
    static func snapshot(_ home: DriveHome) throws(DriveError) -> Snapshot {
        let config = try home.loadConfig()
        let record = home.liveMountRecord()
        var problem: String?
        if record != nil {
            do throws(DriveError) {
                return Snapshot(config: config, record: record, status: try ControlClient.call(home, ControlRequest.Status(), timeout: 30))
            } catch where error.code == .protocolMismatch {
                problem = error.message
            } catch {
                let why = error.message.hasSuffix(".") ? String(error.message.dropLast()) : error.message
                problem = "The daemon could not be asked (\(why)); what follows is read from the index."
            }
        }
        let index = FileManager.default.fileExists(atPath: home.indexPath) ? try? ItemIndex(readingOnly: home.indexPath) : nil
        return Snapshot(config: config, record: record, status: DriveStatus.gather(home: home, stores: config.stores, index: index),
                        daemonProblem: problem)
    }

    /// Below this the drive home's disk counts as full: saves fail and the index cannot grow.
    static let fullBelow = DriveStatus.homeDiskFullBelow

    static func homeDiskIsFull(_ s: Snapshot) -> Bool { (s.status.homeDiskFree ?? .max) < fullBelow }

    static func json(_ home: DriveHome, _ s: Snapshot) -> [String: Any] {
        let counts = { (c: [UploadState: Int]) in Dictionary(uniqueKeysWithValues: UploadState.allCases.map { ($0.rawValue, c[$0] ?? 0) }) }
        let inFlight = { (u: InFlightUpload) -> [String: Any] in ["store": u.store, "path": u.path, "done": u.done, "total": u.total,
                                                                         "direction": u.isDownload ? "down" : "up"] }
        var out: [String: Any] = [
            "home": home.path, "config": home.configPath, "mounted": s.record != nil, "items": s.status.items,
            "uploads": counts(s.status.uploads),
            "bytesLeft": s.stores.map(\.status.bytesLeft).reduce(0, +),
            "inFlight": s.stores.flatMap(\.status.inFlight).map(inFlight),
            "apps": s.config.apps.map { ["id": $0.id, "name": $0.name, "public": $0.isPublic] as [String: Any] },
            "stores": s.stores.map { (c, st) -> [String: Any] in
                var r: [String: Any] = [
                    "name": c.name, "display": c.displayName, "remote": c.remote.summary,
                    "workers": c.workers, "uploads": counts(st.uploads), "bytesLeft": st.bytesLeft,
                    "failed": st.failed.map { ["path": $0.path, "error": $0.error] },
                    "inFlight": st.inFlight.map(inFlight),
                ]
                if let b = c.bandwidth { r["bandwidth"] = b }
                r["content"] = c.content.rawValue
                if let l = c.cacheLimit { r["cacheLimit"] = l }
                if let w = st.runningWorkers { r["runningWorkers"] = w }
                r["held"] = st.held
                if let rs = st.remote {
                    var o: [String: Any] = ["offline": rs.offlineSince != nil, "devices": rs.devices]
                    if let t = rs.lastPoll { o["lastPoll"] = t }
                    if let t = rs.lastListing { o["lastListing"] = t }
                    if let t = rs.lastJournal { o["lastJournal"] = t }
                    if let n = rs.polls { o["polls"] = n }
                    if let t = rs.offlineSince { o["offlineSince"] = t }
                    if let why = rs.offlineReason { o["offlineReason"] = why }
                    if let why = rs.downloadProblem { o["downloadProblem"] = why }
                    if let b = rs.cacheBytes { o["cacheBytes"] = b }
                    r["sync"] = o
                }
                if st.keptDeleted.files > 0 {
                    r["keptDeleted"] = ["folder": st.keptDeleted.folder, "files": st.keptDeleted.files, "bytes": st.keptDeleted.bytes] as [String: Any]
                }
                r["conflicts"] = st.conflicts.map { ["path": $0.path, "copy": $0.copy, "device": $0.device, "time": $0.time] as [String: Any] }
                return r
            },
        ]
        if let d = s.status.device { out["device"] = ["id": d.id, "name": d.name] }
        if let e = s.status.indexWriteError { out["indexWriteError"] = e }
        if let free = s.status.homeDiskFree { out["homeDiskFree"] = free }
        out["homeDiskFull"] = homeDiskIsFull(s)
        out["references"] = jsonObject(s.status.references ?? [])
        if let p = s.daemonProblem { out["daemonProblem"] = p }
        if let r = s.record { out["mount"] = ["mountpoint": r.mountpoint, "pid": r.pid, "options": r.options, "started": r.started,
                                              "fileIO": r.fileIO ?? "unknown"] }
        return out
    }

    static func render(_ home: DriveHome, _ s: Snapshot, bars: Bool) -> String {
        var out = ""
        func line(_ l: String) { out += l + "\n" }
        line("Drive:   \(home.path)")
        if let d = s.status.device { line("Device:  \(d.name) (id \(d.id))") }
        if homeDiskIsFull(s) {
            line("Disk:    the drive home's disk is full (\(bytes(s.status.homeDiskFree ?? 0)) free): saves fail with \"No space left on device\" and uploads wait until space is freed there")
        }
        if let r = s.record {
            line("Mounted: \(r.mountpoint) (daemon pid \(r.pid), -o \(r.options)\(r.fileIO == "passthrough" ? ", file I/O passed through" : ""))")
            if let p = s.daemonProblem { line("         \(p)") }
        } else if let dead = home.deadMountRecord() {
            line("Mounted: dead mount at \(dead.mountpoint) (daemon pid \(dead.pid) is gone; `docdrive mount` or `docdrive unmount` clears it)")
        } else {
            line("Mounted: no")
        }
        line("Apps:    \(s.config.apps.isEmpty ? "none" : "")")
        for a in s.config.apps { line("  \(a.id)  \"\(a.name)\"  \(a.isPublic ? "public" : "private")") }
        line("Stores:  \(s.config.stores.isEmpty ? "none" : "")")
        for (c, st) in s.stores {
            let limit = (c.bandwidth.map { ", at most \(bytes($0))/s" } ?? "") + (c.content == .onDemand ? ", on demand" : "")
            line("  \(c.name)  \"\(c.displayName)\"  \(c.remote.summary)  (\(c.workers) worker\(c.workers == 1 ? "" : "s")\(limit))")
            line("    \(UploadState.allCases.map { "\(st.uploads[$0] ?? 0) \($0.rawValue)" }.joined(separator: ", ")); \(bytes(st.bytesLeft)) left")
            if homeDiskIsFull(s), (st.uploads[.pending] ?? 0) + (st.uploads[.uploading] ?? 0) > 0 {
                line("    waiting: the drive home's disk is full, so the upload queue cannot be written")
            } else if st.held, (st.uploads[.pending] ?? 0) > 0 {
                line("    waiting for a pause: files keep changing; uploads start \(seconds(c.writebackDelay)) after the last change")
            }
            if let rs = st.remote {
                if let since = rs.offlineSince {
                    let why = rs.offlineReason ?? "The remote does not answer."
                    line("    offline since \(clock(since)): \(why)\(why.hasSuffix(".") ? "" : ".") Changes wait here until it answers.")
                } else if let last = rs.lastPoll {
                    line("    remote looked at \(clock(last))\(rs.devices.isEmpty ? "" : "; devices writing to it: " + rs.devices.joined(separator: ", "))")
                    if case .s3 = c.remote, let whole = rs.lastListing {
                        // (a quiet poll reads only the change mark, which another tool leaves as it is)
                        line("    listed whole at \(clock(whole)): what another tool writes in the bucket shows by \(clock(whole + c.reconcile)) (reconcile \(duration(c.reconcile)))")
                        if let j = rs.lastJournal, j > whole {
                            line("    journal read at \(clock(j)): other DocDrive devices' changes since the listing came from it")
                        }
                    }
                }
                if let why = rs.downloadProblem { line("    download failed: \(why)") }
                if let b = rs.cacheBytes, let l = c.cacheLimit { line("    on this device: \(bytes(b)) of its cache limit of \(bytes(l))") }
            }
            for c in st.conflicts { line("    conflict: \(c.path): the version from \(c.device) is kept as \(c.copy)") }
            if st.keptDeleted.files > 0 {
                let n = st.keptDeleted.files
                line("    deleted elsewhere, kept here: \(n) file\(n == 1 ? "" : "s") (\(bytes(st.keptDeleted.bytes))) in \(st.keptDeleted.folder), each for \(RecentlyDeleted.keepDays) days")
            }
            for f in st.failed { line("    failed: \(f.path): \(f.error)") }
            for u in st.inFlight {
                let verb = u.isDownload ? "downloading" : "uploading"
                line(bars ? "    \(verb) " + progressBar(u) : "    \(verb) \(u.path): \(bytes(u.done)) of \(bytes(u.total))")
            }
        }
        line("Items:   \(s.status.items) with a stable id in the index")
        if let e = s.status.indexWriteError { line("Index:   the last write to the index failed: \(e)") }
        if s.record != nil, let references = s.status.references {
            let bad = references.filter { $0.status != "ok" }
            line("References: \(references.count)\(bad.isEmpty ? "" : ", \(bad.count) not working:")")
            for r in bad {
                line("  \(r.path)  \(r.status)  -> \(r.target ?? "?")")
            }
        }
        line("Uploads: \(UploadState.allCases.map { "\(s.status.uploads[$0] ?? 0) \($0.rawValue)" }.joined(separator: ", "))")
        return out
    }

    /// `name  [#######-------]  12.0 MB / 30.0 MB  40%`
    static func progressBar(_ u: InFlightUpload, width: Int = 24) -> String {
        let fraction = u.total > 0 ? min(1, Double(u.done) / Double(u.total)) : 1
        let filled = Int(fraction * Double(width))
        let bar = String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled)
        return "\(u.path)  [\(bar)]  \(bytes(u.done)) / \(bytes(u.total))  \(Int(fraction * 100))%"
    }

    /// A time of day, local: "14:03:27".
    static func clock(_ t: Double) -> String {
        let f = DateFormatter()
        f.dateFormat = "yyyy-MM-dd HH:mm:ss"
        return f.string(from: Date(timeIntervalSince1970: t))
    }

    /// "2 s", "0.5 s".
    static func seconds(_ t: Double) -> String { String(format: "%g s", t) }

    /// A longer time as people say it: "90 s", "10 min", "1 h", "2 days".
    static func duration(_ t: Double) -> String {
        if t < 120 { return seconds(t) }
        if t < 3600 { return String(format: "%g min", (t / 60 * 10).rounded() / 10) }
        if t < 172_800 { return String(format: "%g h", (t / 3600 * 10).rounded() / 10) }
        return String(format: "%g days", (t / 86400 * 10).rounded() / 10)
    }

    /// Sizes the way people read them (binary units, one decimal).
    static func bytes(_ n: Int64) -> String {
        if n < 1024 { return "\(n) B" }
        var v = Double(n) / 1024
        for unit in ["KB", "MB", "GB", "TB"] {
            if v < 1024 || unit == "TB" { return String(format: "%.1f", v) + " " + unit }
            v /= 1024
        }
        return "\(n) B"
    }
}
