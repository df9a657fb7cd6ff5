// main: `docdrive`, the command users type. It answers `docdrive query` in its plain forms itself
// (QueryFastPath) and hands every other command, unchanged, to the full program `docdrive-full`
// in the same folder, by execv: same process id, arguments (argv[0] too), environment, standard
// streams and signal dispositions, so exit codes and messages are the full program's own.
//
// Why two programs: a name query is mostly a process starting. The full program loads 23 shared
// objects (Foundation, ICU, NIO, GRDB...) and `docdrive --help` took 13.8 ms to start on this
// machine; this one imports Glibc only and is linked statically (Package.swift), and starts in
// about 0.5 ms, as a C program does. Handing over costs the other commands that half millisecond.
#if canImport(Glibc)
import Glibc
#endif

if CommandLine.arguments.count >= 2, CommandLine.arguments[1] == "query", let status = QueryFastPath.run(CommandLine.arguments[2...]) {
    exit(status)
}
Front.runFull()

enum Front {
    /// The full program's file name, beside this one.
    static let fullName = "docdrive-full"

    /// The folder this program's file is in (symbolic links resolved: /usr/local/bin/docdrive
    /// may link to a build folder, where docdrive-full is).
    static func ownFolder() -> String? {
        var buf = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let n = readlink("/proc/self/exe", &buf, buf.count - 1)
        if n > 0 {
            let path = String(decoding: buf[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
            if let slash = path.lastIndex(of: "/") { return String(path[..<slash]) }
        }
        // No /proc: the folder argv[0] names, if it names one.
        let a0 = CommandLine.arguments.first ?? ""
        guard let slash = a0.lastIndex(of: "/") else { return nil }
        return slash == a0.startIndex ? "/" : String(a0[..<slash])
    }

    static func runFull() -> Never {
        guard let folder = ownFolder() else {
            fail("cannot find the folder it was started from (is /proc mounted?)")
        }
        let full = folder + "/" + fullName
        execv(full, CommandLine.unsafeArgv)
        fail("cannot run \(full): \(String(cString: strerror(errno))) (install docdrive-full beside docdrive)")
    }

    static func fail(_ sentence: String) -> Never {
        let line = "docdrive: " + sentence + "\n"
        _ = line.withCString { write(2, $0, strlen($0)) }
        exit(1)
    }
}
