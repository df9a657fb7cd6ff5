// InternalCommands: `docdrive internal ...`, hidden: tools for benchmarks and tests that
// drive the core directly (no mount, no drive home).
import ArgumentParser
import DocDriveCore
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

struct Internal: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Tools for benchmarks and tests.", shouldDisplay: false, subcommands: [S3Copy.self])

    /// Uploads every file under a folder to an S3 remote with the S3 remote's own code, the
    /// way the upload workers do, and prints what it took as JSON (files, bytes, seconds, the
    /// process's peak memory). Credentials as for a store (AWS_* variables, ~/.aws/credentials).
    struct S3Copy: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "s3-copy", abstract: "Upload a folder to an S3 remote (benchmarks).")
        @Option var endpoint: String
        @Option var bucket: String
        @Option var prefix: String = ""
        @Option var region: String = S3Settings.defaultRegion
        @Flag var pathStyle = false
        @Option(help: "Files uploaded at once.") var workers: Int = StoreConfig.defaultWorkers
        @Option(help: "Part size in bytes.") var partSize: Int64 = S3Settings.defaultPartSize
        @Option var parallelParts: Int = S3Settings.defaultParallelParts
        @Argument var source: String

        func run() throws {
            try guarded {
                let settings = S3Settings(endpoint: endpoint, bucket: bucket, prefix: prefix, region: region, pathStyle: pathStyle,
                                          partSize: partSize, parallelParts: parallelParts)
                let remote = try S3Remote(settings: settings, device: "internal")
                let root = Array(URL(fileURLWithPath: source).standardizedFileURL.path.utf8)
                let paths = Self.files(under: root)
                let state = CopyState()
                let start = Date()
                let group = DispatchGroup()
                let all = paths
                for _ in 0..<max(1, workers) {
                    group.enter()
                    Thread {
                        while let i = state.take(all.count) {
                            let fd = Self.open(root + [UInt8(ascii: "/")] + all[i].bytes)
                            if fd < 0 {
                                state.failure.withLock { $0 = "Cannot open \(all[i])." }
                                continue
                            }
                            do {
                                let item = try remote.upload(from: fd, to: all[i], expecting: .absent, meta: RemoteMeta(),
                                                             limit: nil, progress: nil)
                                state.bytes.add(item.size, ordering: .relaxed)
                            } catch {
                                state.failure.withLock { $0 = "\(error)" }
                            }
                            close(fd)
                        }
                        group.leave()
                    }.start()
                }
                group.wait()
                let seconds = Date().timeIntervalSince(start)
                if let f = state.failure.withLock({ $0 }) { throw DriveError(.io, f) }
                let peak = Self.peakRSS()
                print("{\"files\": \(all.count), \"bytes\": \(state.bytes.load(ordering: .relaxed)), \"seconds\": \(seconds), \"peakRSS\": \(peak)}")
            }
        }

        /// The regular files under a folder, as store paths of bytes (names need not be UTF-8).
        static func files(under root: [UInt8]) -> [StorePath] {
            var out = [StorePath]()
            func walk(_ rel: StorePath) {
                let dir = rel.isEmpty ? root : root + [UInt8(ascii: "/")] + rel.bytes
                guard let d = Self.opendirBytes(dir) else { return }
                defer { closedir(d) }
                while let e = readdir(d) {
                    let name = withUnsafeBytes(of: e.pointee.d_name) { raw in Array(raw.prefix(while: { $0 != 0 })) }
                    if name == [46] || name == [46, 46] { continue }
                    let child = rel.appending(name)
                    var st = stat()
                    let full = root + [UInt8(ascii: "/")] + child.bytes + [0]
                    guard full.withUnsafeBufferPointer({ lstat(UnsafeRawPointer($0.baseAddress!).assumingMemoryBound(to: CChar.self), &st) }) == 0 else { continue }
                    if st.st_mode & S_IFMT == S_IFDIR { walk(child) } else if st.st_mode & S_IFMT == S_IFREG { out.append(child) }
                }
            }
            walk(.store)
            return out
        }

        static func opendirBytes(_ path: [UInt8]) -> OpaquePointer? {
            let c = path + [0]
            return c.withUnsafeBufferPointer { opendir(UnsafeRawPointer($0.baseAddress!).assumingMemoryBound(to: CChar.self)) }
        }

        static func open(_ path: [UInt8]) -> Int32 {
            let c = path + [0]
            return c.withUnsafeBufferPointer { Glibc.open(UnsafeRawPointer($0.baseAddress!).assumingMemoryBound(to: CChar.self), O_RDONLY) }
        }

        static func peakRSS() -> Int {
            let text = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
            for line in text.split(separator: "\n") where line.hasPrefix("VmHWM:") {
                return (Int(line.split(separator: " ").dropFirst().first ?? "0") ?? 0) * 1024
            }
            return 0
        }
    }
}

/// What S3Copy's threads share.
private final class CopyState: Sendable {
    let next = Mutex(0)
    let failure = Mutex<String?>(nil)
    let bytes = Atomic<Int64>(0)

    /// The next file's index, or nil when all are taken.
    func take(_ count: Int) -> Int? {
        next.withLock { n -> Int? in
            guard n < count else { return nil }
            n += 1
            return n - 1
        }
    }
}
