// swift-tools-version:6.1
// DocDrive: a FUSE drive over app containers and storage providers.
import PackageDescription

let package = Package(
    name: "DocDrive",
    platforms: [.macOS(.v15)],
    products: [
        // `docdrive`, the command users type: answers plain queries, execs docdrive-full for the rest.
        .executable(name: "docdrive", targets: ["DocDriveFront"]),
        // The full program (every command, the daemon), installed beside it.
        .executable(name: "docdrive-full", targets: ["docdrive"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
        .package(url: "https://github.com/apple/swift-system", from: "1.4.0"),
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.0.0"),
        .package(url: "https://github.com/jpsim/Yams", from: "5.0.0"),
        .package(url: "https://github.com/apple/swift-crypto", from: "3.12.0"),
        .package(url: "https://github.com/weichsel/ZIPFoundation", from: "0.9.19"),
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
    ],
    targets: [
        // libfuse3 through pkg-config, plus static inline wrappers for its macros.
        .systemLibrary(
            name: "CFuse",
            pkgConfig: "fuse3",
            providers: [.apt(["libfuse3-dev"])]
        ),
        // Linux syscalls and constants that Glibc's Swift overlay does not expose, the query
        // index's name scan and the crash guard; no FUSE.
        .target(name: "CDocDriveSys"),
        // The FUSE transport in C, beside libfuse's: passthrough on libfuse 3.14, which request
        // each worker holds (the release barrier), FUSE over io_uring through liburing. Used by
        // the adapter only.
        .target(name: "CFuseTransport", linkerSettings: [.linkedLibrary("uring"), .linkedLibrary("fuse3")]),
        // What the front and the daemon must agree on for the query fast path (no Foundation).
        .target(name: "DocDriveWire"),
        .target(
            name: "DocDriveCore",
            dependencies: [
                "CDocDriveSys",
                "DocDriveWire",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "SystemPackage", package: "swift-system"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Yams", package: "Yams"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "ZIPFoundation", package: "ZIPFoundation"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
            ],
            // The lock order of the whole drive, beside the code it orders.
            exclude: ["Coordination/LockOrder.md"]
        ),
        .target(
            name: "DocDriveFUSE",
            dependencies: [
                "CFuse",
                "CFuseTransport",
                "CDocDriveSys",
                "DocDriveCore",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "SystemPackage", package: "swift-system"),
            ]
        ),
        // `docdrive`: Glibc and DocDriveWire only, linked statically (no shared object to load, no
        // relocations of the Swift runtime's: it starts in about 0.5 ms; see its main.swift).
        .executableTarget(
            name: "DocDriveFront",
            dependencies: ["DocDriveWire"],
            linkerSettings: [.unsafeFlags(["-static-executable"])]
        ),
        .executableTarget(
            name: "docdrive",
            dependencies: [
                "CDocDriveSys",
                "DocDriveCore",
                "DocDriveFUSE",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            // The file manager extension `docdrive desktop install` writes out and the document
            // picker `docdrive pick` runs, each after the status socket's client they share.
            resources: [.embedInCode("Desktop/docdrive_status.py"), .embedInCode("Desktop/docdrive_files.py"),
                        .embedInCode("Desktop/docdrive_picker.py"), .embedInCode("Desktop/docdrive_picker_service.py")]
        ),
        .testTarget(
            name: "DocDriveCoreTests",
            dependencies: ["DocDriveCore", "CDocDriveSys", "CFuseTransport",
                           .product(name: "Crypto", package: "swift-crypto"),
                           .product(name: "GRDB", package: "GRDB.swift")]
        ),
    ]
)

// The fuzzers (Fuzz/, mount-scripts/fuzz.sh): only when DOCDRIVE_FUZZ=1, so that `swift build` and
// `swift test` neither build them nor need libFuzzer. The parsers' modules are instrumented for
// libFuzzer (and AddressSanitizer: DOCDRIVE_FUZZ_SANITIZE) and built for testing (the targets use
// `@testable import`); the dependencies are built as for the release, which fuzz.sh can share
// with the release build (FUZZ_SCRATCH). libFuzzer gives the program its main.
if Context.environment["DOCDRIVE_FUZZ"] == "1" {
    let sanitize = "-sanitize=" + (Context.environment["DOCDRIVE_FUZZ_SANITIZE"] ?? "fuzzer,address")
    for t in package.targets where t.name == "DocDriveCore" || t.name == "DocDriveWire" {
        t.swiftSettings = (t.swiftSettings ?? []) + [.unsafeFlags([sanitize, "-enable-testing"])]
    }
    package.targets.append(.executableTarget(
        name: "DocDriveFuzz",
        dependencies: ["DocDriveCore", "DocDriveWire", .product(name: "Crypto", package: "swift-crypto")],
        path: "Fuzz/Sources/DocDriveFuzz",
        swiftSettings: [.unsafeFlags(["-parse-as-library", sanitize])],
        linkerSettings: [.unsafeFlags([sanitize])]
    ))
    package.products.append(.executable(name: "docdrive-fuzz", targets: ["DocDriveFuzz"]))
}
