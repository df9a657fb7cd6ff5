// RemotePictures: documents' thumbnails kept on the remote beside the documents, so that every
// device shows a document's picture without downloading it (the seeds' "Document thumbnails").
// A folder remote keeps them in `.docdrive-store-pictures/ITEM-ID.png`, an S3 remote at
// `PREFIX.docdrive/pictures/ITEM-ID.png`; neither is a document of the store.
import CDocDriveSys
import Foundation
import NIOCore
import SystemPackage
#if canImport(Glibc)
import Glibc
#endif

public enum RemotePictures {
    /// The largest picture kept (an extended attribute's value cannot be larger).
    public static let maxBytes = 64 * 1024

    /// Whether `id` can name a picture: 1-64 letters, digits, "-" or "_" (an id another device
    /// or a hostile remote gave never leads a file name out of its folder).
    public static func isSafeID(_ id: String) -> Bool {
        let u = id.utf8
        return !u.isEmpty && u.count <= 64 && u.allSatisfy { b in
            (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || b == 0x2D || b == 0x5F
        }
    }

    static func isPNG(_ d: [UInt8]) -> Bool { d.starts(with: [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) }

    static func refuse(_ id: String) -> RemoteError {
        RemoteError(.invalidName, "\"\(id)\" cannot name a picture (an item id is letters, digits, - and _).")
    }
}

extension FolderRemote {
    /// The folder of the pictures, at the top of the remote folder.
    static let picturesFolder = ".docdrive-store-pictures"

    public func picture(item id: String) throws(RemoteError) -> [UInt8]? {
        guard RemotePictures.isSafeID(id) else { throw RemotePictures.refuse(id) }
        let rootfd = try openRoot()
        defer { close(rootfd) }
        guard case .success(let dir) = Beneath.openFolder(rootfd, [Array(Self.picturesFolder.utf8)[...]]) else { return nil }
        defer { close(dir) }
        let fd = Beneath.openForReading(dir, Array((id + ".png").utf8)[...])
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var buf = [UInt8](repeating: 0, count: RemotePictures.maxBytes + 1)
        var got = 0
        while got < buf.count {
            let n = buf[got...].withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n <= 0 { break }
            got += n
        }
        guard got <= RemotePictures.maxBytes else { return nil }
        let png = Array(buf[0..<got])
        return RemotePictures.isPNG(png) ? png : nil
    }

    public func putPicture(item id: String, _ png: [UInt8]) throws(RemoteError) {
        guard RemotePictures.isSafeID(id) else { throw RemotePictures.refuse(id) }
        let rootfd = try openRoot()
        defer { close(rootfd) }
        guard case .success(let dir) = Beneath.openFolder(rootfd, [Array(Self.picturesFolder.utf8)[...]], create: true) else {
            throw RemoteError.io("cannot make \(Self.picturesFolder) in \(root)", Errno(rawValue: errno))
        }
        defer { close(dir) }
        let tmp = Self.temporaryPrefix + "picture-" + id
        let fd = openat(dir, tmp, O_WRONLY | O_CREAT | O_TRUNC | dd_O_NOFOLLOW | dd_O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw RemoteError.io("cannot write the picture of \(id) in \(root)", Errno(rawValue: errno)) }
        let wrote = png.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        let e = errno
        close(fd)
        guard wrote == png.count, renameat(dir, tmp, dir, id + ".png") == 0 else {
            unlinkat(dir, tmp, 0)
            throw RemoteError.io("cannot write the picture of \(id) in \(root)", Errno(rawValue: wrote < 0 ? e : errno))
        }
    }
}

extension S3Remote {
    func pictureKey(_ id: String) -> String { keys.ownKey(S3Keys.ownFolder + "/pictures/" + id + ".png") }

    public func picture(item id: String) throws(RemoteError) -> [UInt8]? {
        guard RemotePictures.isSafeID(id) else { throw RemotePictures.refuse(id) }
        var body = [UInt8]()
        var tooLarge = false
        // Read through a sink: a server that sends more than a picture is not read to the end.
        let r: S3Response
        do {
            r = try client.send(.GET, key: pictureKey(id), headers: [("Range", "bytes=0-\(RemotePictures.maxBytes)")], sink: { head, buf in
            guard head.status.code / 100 == 2 else { return }
            if body.count + buf.readableBytes > RemotePictures.maxBytes {
                tooLarge = true
                throw RemoteError(.io, "the picture of \(id) is larger than \(RemotePictures.maxBytes) bytes")
            }
            body += buf.readableBytesView
            })
        } catch where tooLarge {
            return nil
        }
        if r.status == 404 { return nil }
        guard r.status / 100 == 2 else { throw client.failure(r, "read the picture of \(id)") }
        return RemotePictures.isPNG(body) ? body : nil
    }

    public func putPicture(item id: String, _ png: [UInt8]) throws(RemoteError) {
        guard RemotePictures.isSafeID(id) else { throw RemotePictures.refuse(id) }
        let r = try client.send(.PUT, key: pictureKey(id), headers: [("Content-Type", "image/png")], body: .bytes(png))
        guard r.status == 200 else { throw client.failure(r, "keep the picture of \(id)") }
    }
}
