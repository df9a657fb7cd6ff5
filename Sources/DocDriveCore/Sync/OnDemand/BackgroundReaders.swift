// BackgroundReaders: the desktop's indexers and thumbnailers, which open every file they find.
// On a mount they would download a whole on-demand store; a store with `indexers: skip` (the
// default) refuses them a placeholder's content, as OneDrive's Files On-Demand refuses its
// indexer. Their listing and stat of placeholders cost nothing and go on as usual.
import Foundation

public enum BackgroundReaders {
    /// Program names (argv[0]'s last part) of GNOME's LocalSearch/Tracker, KDE's Baloo and the
    /// freedesktop thumbnailers Debian ships.
    public static let programs: Set<String> = [
        // GNOME LocalSearch (Tracker 3) and Tracker 2
        "localsearch-3", "localsearch-extractor-3", "localsearch", "tracker-miner-fs-3", "tracker-extract-3",
        "tracker-miner-fs", "tracker-extract",
        // KDE Baloo
        "baloo_file", "baloo_file_extractor",
        // thumbnailers (freedesktop thumbnail spec: /usr/share/thumbnailers/*.thumbnailer)
        "gnome-thumbnail-factory", "gdk-pixbuf-thumbnailer", "evince-thumbnailer", "totem-video-thumbnailer",
        "ffmpegthumbnailer", "gnome-epub-thumbnailer", "gnome-mobi-thumbnailer", "gsf-office-thumbnailer",
        "atril-thumbnailer", "xreader-thumbnailer", "tumblerd",
        // DocDrive's own document picker (`docdrive pick`): it shows documents, never reads them,
        // but GTK reads the start of a file whose name does not say its type
        "docdrive-picker",
    ]

    /// The program of process `pid` when it is one of `programs`, else nil. Read from
    /// /proc/PID/cmdline (the same for every thread of a process; comm is cut at 15 bytes).
    public static func indexer(pid: Int32) -> String? {
        guard pid > 0, let fd = Optional(open("/proc/\(pid)/cmdline", O_RDONLY | O_CLOEXEC)), fd >= 0 else { return nil }
        defer { close(fd) }
        var buf = [UInt8](repeating: 0, count: 512)
        let n = buf.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        guard n > 0 else { return nil }
        let argv0 = buf[0..<n].split(separator: 0, maxSplits: 1, omittingEmptySubsequences: false).first ?? []
        let name = String(decoding: argv0.split(separator: UInt8(ascii: "/")).last ?? [], as: UTF8.self)
        return programs.contains(name) ? name : nil
    }
}
