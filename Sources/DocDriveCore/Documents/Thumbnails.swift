// Thumbnails: a small picture of a document (the seeds' "Document thumbnails"), made when it is
// saved in a store, kept with its item beside the index, readable as `user.docdrive.thumbnail`
// without reading the document, and put into the user's freedesktop thumbnail cache so that a
// file manager shows it and never opens the file.
import Crypto
import Foundation
import Logging
import Synchronization
import ZIPFoundation
#if canImport(Glibc)
import Glibc
#endif

public final class Thumbnailer: Sendable {
    /// `HOME/thumbnails`: ITEM-ID.png, one per item that has a picture.
    let folder: String
    /// `$XDG_CACHE_HOME/thumbnails/large`, the freedesktop cache (nil: not written).
    let freedesktopCache: String?
    /// The mount point, for the file URIs of the freedesktop cache (set once mounted). Lock:
    /// taken before `uncached`.
    let mountpoint = Mutex<String?>(nil)
    /// Items waiting for a picture. Lock: leaf.
    private let waiting = Mutex<Set<String>>([])
    /// Documents from other devices whose pictures are being fetched. Lock: leaf.
    private let arriving = Mutex<Set<String>>([])
    private let work = DispatchQueue(label: "docdrive-thumbnails", qos: .utility)
    let logger: Logger

    /// The largest picture kept: an extended attribute's value cannot be larger.
    static let maxBytes = 64 * 1024
    /// Kinds with a picture, by name ending.
    static let odf: Set<String> = ["odt", "ods", "odp", "odg", "odf", "ott", "ots", "otp", "otg"]
    static let images: Set<String> = ["png", "jpg", "jpeg", "gif", "webp", "bmp", "tif", "tiff", "svg"]

    public init(home: DriveHome, logger: Logger, tunables: Tunables = .process) {
        folder = home.path + "/thumbnails"
        freedesktopCache = tunables.noThumbnailCache ? nil : tunables.cacheHome.map { $0 + "/thumbnails/large" }
        self.logger = logger
    }

    /// Pictures kept before the mount point was known (a store's first poll at mount): their
    /// freedesktop cache entries are written once it is. Lock: leaf.
    private let uncached = Mutex<[(png: [UInt8], backing: String, shown: String)]>([])

    public func setMountpoint(_ path: String) {
        mountpoint.withLock { $0 = path }
        let late = uncached.withLock { l in defer { l = [] }; return l }
        guard !late.isEmpty else { return }
        work.async { [self] in
            for p in late { try? cacheEntry(p.png, backing: p.backing, shown: p.shown) }
        }
    }

    /// Whether a file with this name can have a picture.
    static func hasPicture(_ name: String) -> Bool {
        guard let dot = name.lastIndex(of: ".") else { return false }
        let ext = name[name.index(after: dot)...].lowercased()
        return odf.contains(ext) || ext == "pdf" || images.contains(ext)
    }

    /// A document was saved: make its picture off the request threads. `backing`: its path in
    /// the backing folder; `shown`: its path in the mount, below the mount point ("Work/a.odt");
    /// `item`: its item id, asked for on the thumbnails' own thread; `publish`: hands the
    /// picture to the store's remote, for the other devices.
    func saved(backing: String, shown: String, item: @escaping @Sendable () -> String?,
               publish: (@Sendable (_ item: String, _ png: [UInt8]) -> Void)? = nil) {
        guard Self.hasPicture(backing), waiting.withLock({ $0.insert(backing).inserted }) else { return }
        work.async { [self] in
            waiting.withLock { _ = $0.remove(backing) }
            guard let item = item(), let png = Self.make(from: backing), png.count <= Self.maxBytes else { return }
            if keep(png, item: item, backing: backing, shown: shown) { publish?(item, png) }
        }
    }

    /// A document another device saved arrived here (as a placeholder, or `downloaded`): its
    /// picture, made there, is fetched (`fetch`, off the request threads) unless this device
    /// has it. The other device puts it on the remote a moment after the document, so a fetch
    /// that finds none is tried again 2 and 10 s later; a downloaded document's picture is
    /// then made here.
    func arrived(backing: String, shown: String, item: String, downloaded: Bool, fetch: @escaping @Sendable () -> [UInt8]?) {
        guard Self.hasPicture(backing), RemotePictures.isSafeID(item), picture(item: item) == nil,
              arriving.withLock({ $0.insert(backing).inserted }) else { return }
        work.async { [self] in fetchPicture(backing: backing, shown: shown, item: item, downloaded: downloaded, retries: [2, 10], fetch: fetch) }
    }

    private func fetchPicture(backing: String, shown: String, item: String, downloaded: Bool, retries: [Double],
                              fetch: @escaping @Sendable () -> [UInt8]?) {
        guard picture(item: item) == nil else { return arriving.withLock { _ = $0.remove(backing) } }
        if let png = fetch(), png.count <= Self.maxBytes, Self.isPNG(png) {
            arriving.withLock { _ = $0.remove(backing) }
            _ = keep(png, item: item, backing: backing, shown: shown)
            return
        }
        if let next = retries.first {
            work.asyncAfter(deadline: .now() + next) { [self] in
                fetchPicture(backing: backing, shown: shown, item: item, downloaded: downloaded, retries: Array(retries.dropFirst()), fetch: fetch)
            }
            return
        }
        arriving.withLock { _ = $0.remove(backing) }
        if downloaded, let png = Self.make(from: backing), png.count <= Self.maxBytes {
            _ = keep(png, item: item, backing: backing, shown: shown)
        }
    }

    /// Keeps `png` as the picture of `item` beside the index and in the freedesktop cache
    /// (keyed by the file's URI in the mount, its mtime and size as `stat` shows them).
    private func keep(_ png: [UInt8], item: String, backing: String, shown: String) -> Bool {
        guard RemotePictures.isSafeID(item) else { return false }
        do {
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            try Self.writeAtomically(png, to: folder + "/" + item + ".png", mode: 0o644)
            try cacheEntry(png, backing: backing, shown: shown)
            return true
        } catch {
            logger.warning("thumbnail of \(shown) not kept: \(error)")
            return false
        }
    }

    /// Writes the freedesktop cache's entry of the picture (later, when the mount point is not
    /// known yet).
    private func cacheEntry(_ png: [UInt8], backing: String, shown: String) throws {
        guard let cache = freedesktopCache else { return }
        let known: String? = mountpoint.withLock { mp in
            if mp == nil { uncached.withLock { $0.append((png, backing, shown)) } }
            return mp
        }
        guard let mp = known else { return }
        var st = stat()
        guard stat(backing, &st) == 0 else { return }
        let uri = Self.fileURI(mp + "/" + shown)
        let tagged = Self.withTextChunks(png, ["Thumb::URI": uri, "Thumb::MTime": String(st.st_mtim.tv_sec),
                                               "Thumb::Size": String(st.st_size), "Software": "DocDrive"])
        try FileManager.default.createDirectory(atPath: cache, withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o700])
        try Self.writeAtomically(tagged, to: cache + "/" + Self.md5(uri) + ".png", mode: 0o600)
    }

    /// The item's picture, if it has one.
    public func picture(item: String) -> [UInt8]? {
        guard RemotePictures.isSafeID(item) else { return nil }
        return FileManager.default.contents(atPath: folder + "/" + item + ".png").map { [UInt8]($0) }
    }

    /// Waits until the pictures asked for so far are made (tests, unmount).
    public func drain() { work.sync {} }

    // MARK: making pictures

    static func make(from path: String) -> [UInt8]? {
        let ext = (path as NSString).pathExtension.lowercased()
        if odf.contains(ext) {
            // An ODF document carries its own picture (Thumbnails/thumbnail.png, 256 px).
            guard let archive = Archive(url: URL(fileURLWithPath: path), accessMode: .read),
                  let entry = archive["Thumbnails/thumbnail.png"], entry.uncompressedSize <= UInt64(maxBytes) else { return nil }
            var data = Data()
            guard (try? archive.extract(entry, consumer: { data.append($0) })) != nil else { return nil }
            return isPNG(data) ? [UInt8](data) : nil
        }
        let tmp = NSTemporaryDirectory() + "docdrive-thumb-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        defer { unlink(tmp + ".png") }
        if ext == "pdf" {
            guard run("pdftoppm", ["-png", "-singlefile", "-scale-to", "256", "-f", "1", "-l", "1", path, tmp]) else { return nil }
        } else {
            guard run("gdk-pixbuf-thumbnailer", ["-s", "256", path, tmp + ".png"]) else { return nil }
        }
        guard let data = FileManager.default.contents(atPath: tmp + ".png"), isPNG(data) else { return nil }
        return [UInt8](data)
    }

    /// Runs a freedesktop tool if it is installed (30 s at most); true if it succeeded.
    static func run(_ tool: String, _ args: [String]) -> Bool {
        guard let exe = ["/usr/bin/", "/bin/", "/usr/local/bin/"].map({ $0 + tool }).first(where: { access($0, X_OK) == 0 }) else { return false }
        let p = Process()
        p.executableURL = URL(fileURLWithPath: exe)
        p.arguments = args
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle.nullDevice
        guard (try? p.run()) != nil else { return false }
        let deadline = Date().addingTimeInterval(30)
        while p.isRunning && Date() < deadline { usleep(20_000) }
        if p.isRunning { p.terminate(); return false }
        return p.terminationStatus == 0
    }

    static func isPNG<D: DataProtocol>(_ d: D) -> Bool { d.starts(with: [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) }

    // MARK: the freedesktop cache

    /// file:// and the path, each byte outside the unreserved set and `/` escaped (as GLib does).
    static func fileURI(_ path: String) -> String {
        var out = "file://"
        for b in path.utf8 {
            switch b {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"), UInt8(ascii: "/"),
                 UInt8(ascii: "!"), UInt8(ascii: "$"), UInt8(ascii: "&"), UInt8(ascii: "'"), UInt8(ascii: "("), UInt8(ascii: ")"),
                 UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: ","), UInt8(ascii: ";"), UInt8(ascii: "="), UInt8(ascii: ":"),
                 UInt8(ascii: "@"):
                out.unicodeScalars.append(Unicode.Scalar(b))
            default:
                out += String(format: "%%%02X", b)
            }
        }
        return out
    }

    static func md5(_ s: String) -> String {
        Hex.encode(Array(Insecure.MD5.hash(data: Data(s.utf8))))
    }

    /// The PNG with tEXt chunks added right after its header chunk (the cache's keys).
    static func withTextChunks(_ png: [UInt8], _ text: [String: String]) -> [UInt8] {
        // 8-byte signature, then IHDR: 4 length + 4 type + 13 data + 4 CRC.
        let afterHeader = 8 + 25
        guard png.count > afterHeader else { return png }
        var out = Array(png[0..<afterHeader])
        for (k, v) in text.sorted(by: { $0.key < $1.key }) {
            let body = Array("tEXt".utf8) + Array(k.utf8) + [0] + Array(v.utf8)
            out += bigEndian(UInt32(body.count - 4)) + body + bigEndian(crc32(body))
        }
        return out + png[afterHeader...]
    }

    static func bigEndian(_ v: UInt32) -> [UInt8] { [UInt8(v >> 24), UInt8(v >> 16 & 0xFF), UInt8(v >> 8 & 0xFF), UInt8(v & 0xFF)] }

    private static let crcTable: [UInt32] = (0..<256).map { n -> UInt32 in
        var c = UInt32(n)
        for _ in 0..<8 { c = c & 1 != 0 ? 0xEDB8_8320 ^ (c >> 1) : c >> 1 }
        return c
    }

    static func crc32(_ bytes: [UInt8]) -> UInt32 {
        var c: UInt32 = 0xFFFF_FFFF
        for b in bytes { c = crcTable[Int((c ^ UInt32(b)) & 0xFF)] ^ (c >> 8) }
        return c ^ 0xFFFF_FFFF
    }

    static func writeAtomically(_ bytes: [UInt8], to path: String, mode: mode_t) throws {
        let tmp = path + ".tmp-\(getpid())"
        guard FileManager.default.createFile(atPath: tmp, contents: Data(bytes), attributes: [.posixPermissions: Int(mode)]) else {
            throw DriveError(.io, "cannot write \(tmp)")
        }
        guard rename(tmp, path) == 0 else {
            unlink(tmp)
            throw DriveError(.io, "cannot write \(path)")
        }
    }
}
