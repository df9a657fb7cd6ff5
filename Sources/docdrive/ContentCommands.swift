// ContentCommands: `docdrive pin`, `unpin` and `evict`: which store files keep their content on
// this device (on-demand stores show the rest as placeholders, downloaded when opened).
import ArgumentParser
import DocDriveCore
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// "1.2 MB" for a byte count.
func byteText(_ n: Int64) -> String {
    ByteCountFormatter.string(fromByteCount: n, countStyle: .file)
}

struct Pin: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Keep store files (and folders, with what is added to them later) on this device, downloading them now.")
    @OptionGroup var options: RequestOptions
    @Argument(help: "Files or folders in a store (relative to the mount, or absolute paths in it).") var paths: [String]

    func run() throws {
        let home = options.drive.driveHome
        var report = [[String: Any]]()
        var failed = false
        for p in paths {
            let rel = try mountRelativeOrExit(p, options)
            var answer: PinAnswer?
            try guarded { answer = try ControlClient.call(home, ControlRequest.Pin(path: rel, on: true)) }
            guard let answer else { continue }
            let total = answer.toFill.reduce(Int64(0)) { $0 + $1.size }
            var done: Int64 = 0
            var errors = [String]()
            let tty = isatty(2) != 0 && !options.json
            for (i, f) in answer.toFill.enumerated() {
                if tty {
                    let pct = total > 0 ? Int(done * 100 / total) : 100
                    warn("\rDownloading \(i + 1)/\(answer.toFill.count): \(byteText(done)) of \(byteText(total)) (\(pct) %)\u{1B}[K", newline: false)
                }
                do throws(DriveError) {
                    done += try ControlClient.call(home, ControlRequest.Fill(path: f.path), timeout: 24 * 3600).size
                } catch {
                    errors.append("\(f.path): \(error.message)")
                }
            }
            if tty { warn("\r\u{1B}[K", newline: false) }
            failed = failed || !errors.isEmpty
            report.append(["path": rel, "files": answer.files, "downloaded": answer.toFill.count - errors.count,
                           "bytes": done, "errors": errors])
            if !options.json {
                print("Pinned \(rel): \(answer.files) file\(answer.files == 1 ? "" : "s") kept on this device"
                      + (answer.toFill.isEmpty ? "" : ", \(answer.toFill.count - errors.count) downloaded (\(byteText(done)))") + ".")
                for e in errors { warn("docdrive: \(e)") }
            }
        }
        if options.json { printJSON(report) }
        if failed { throw ExitCode(ExitCodes.code(for: .io)) }
    }
}

struct Unpin: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Undo `docdrive pin`: the files stay here until evicted (by `docdrive evict` or the cache limit).")
    @OptionGroup var options: RequestOptions
    @Argument(help: "Files or folders in a store.") var paths: [String]

    func run() throws {
        var report = [[String: Any]]()
        for p in paths {
            let rel = try mountRelativeOrExit(p, options)
            var answer: PinAnswer?
            try guarded { answer = try ControlClient.call(options.drive.driveHome, ControlRequest.Pin(path: rel, on: false)) }
            guard let answer else { continue }
            report.append(["path": rel, "files": answer.files])
            if !options.json { print("Unpinned \(rel).") }
        }
        if options.json { printJSON(report) }
    }
}

struct Evict: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Free the space of store files whose content is on the remote: they become placeholders, downloaded again when opened.",
        discussion: "A file with changes not uploaded yet, an open file and a pinned one stay; each is named with the reason.")
    @OptionGroup var options: RequestOptions
    @Argument(help: "Files or folders in a store.") var paths: [String]

    func run() throws {
        var report = [[String: Any]]()
        var refused = false
        for p in paths {
            let rel = try mountRelativeOrExit(p, options)
            var answer: EvictAnswer?
            try guarded { answer = try ControlClient.call(options.drive.driveHome, ControlRequest.Evict(path: rel)) }
            guard let answer else { continue }
            refused = refused || !answer.refused.isEmpty
            report.append(["path": rel, "files": answer.files, "evicted": answer.evicted, "freed": answer.freed, "refused": answer.refused])
            if !options.json {
                print("Evicted \(answer.evicted) file\(answer.evicted == 1 ? "" : "s") of \(rel), \(byteText(answer.freed)) freed.")
                for r in answer.refused { warn("docdrive: \(r)") }
            }
        }
        if options.json { printJSON(report) }
        if refused { throw ExitCode(ExitCodes.code(for: .busy)) }
    }
}
