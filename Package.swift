// swift-tools-version:6.0
import PackageDescription

let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("NonisolatedNonsendingByDefault")
]

let package = Package(
    name: "stratus",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "stratus", targets: ["stratus"]),
        // The load generator (`Deploy/bench/`), a program of its own beside the admin CLI.
        .executable(name: "stratus-bench", targets: ["stratus-bench"]),
    ],
    dependencies: [
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.20.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-auth.git", from: "2.0.0"),
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.25.0"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.6.0"),
        .package(url: "https://github.com/apple/swift-crypto.git", from: "3.0.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.6.0"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.80.0"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.27.0"),
        .package(url: "https://github.com/apple/swift-http-types.git", from: "1.3.0"),
        // The push providers' client: HTTP/2 to APNs (many streams on one connection), HTTPS to Web Push services.
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        // APNs connections, and the load generator's APNs stand-in; async-http-client builds it anyway.
        .package(url: "https://github.com/apple/swift-nio-http2.git", from: "1.36.0"),
    ],
    targets: [
        .target(
            name: "StratusCore",
            swiftSettings: swiftSettings
        ),
        // Generates Swift source carrying the migrations (StratusStore) and the server's
        // Resources/ (StratusServer): see StratusEmbedPlugin.
        .executableTarget(
            name: "stratus-embed",
            path: "Sources/stratus-embed"
        ),
        .plugin(
            name: "StratusEmbedPlugin",
            capability: .buildTool(),
            dependencies: ["stratus-embed"],
            path: "Sources/StratusEmbedPlugin"
        ),
        .target(
            name: "StratusStore",
            dependencies: [
                "StratusCore",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                // ConnectionPoolError: what a lease throws when the pool cannot connect.
                .product(name: "_ConnectionPoolModule", package: "postgres-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                // CommitWatch: its handler goes after PostgreSQL's TLS handler.
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings,
            plugins: ["StratusEmbedPlugin"]
        ),
        .target(
            name: "StratusServer",
            dependencies: [
                "StratusCore",
                "StratusStore",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "HummingbirdBcrypt", package: "hummingbird-auth"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "_NIOFileSystem", package: "swift-nio"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
            ],
            // Compiled in by the plugin (EmbeddedResources), not copied as SwiftPM resources.
            exclude: ["Resources"],
            swiftSettings: swiftSettings,
            plugins: ["StratusEmbedPlugin"]
        ),
        // What the two command-line programs share: settings, errors, the local admin token.
        .target(
            name: "StratusCommandLine",
            dependencies: ["StratusCore"],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "stratus",
            dependencies: [
                "StratusCommandLine",
                "StratusCore",
                "StratusStore",
                "StratusServer",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "stratus-bench",
            dependencies: [
                "StratusCommandLine",
                "StratusCore",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "StratusBenchTests",
            dependencies: ["stratus-bench", "StratusCore", "StratusStore"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "StratusCoreTests",
            dependencies: ["StratusCore"],
            swiftSettings: swiftSettings
        ),
        // What the test targets share: one PostgreSQL cluster per test process, the apps under
        // test and their clients, the built programs, secrets and time limits.
        .target(
            name: "StratusTestSupport",
            dependencies: [
                "StratusCore",
                "StratusStore",
                "StratusServer",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            path: "Tests/StratusTestSupport",
            swiftSettings: swiftSettings
        ),
        // PostgreSQL below the HTTP surface: migrations, statements, pools.
        .testTarget(
            name: "StratusStoreTests",
            dependencies: [
                "StratusCore",
                "StratusStore",
                "StratusTestSupport",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        // The HTTP surface: the data, auth and management APIs, the console, sign-in.
        .testTarget(
            name: "StratusServerTests",
            dependencies: [
                "StratusCore",
                "StratusStore",
                "StratusServer",
                "StratusTestSupport",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            // Read from the source tree: test data (Wycheproof vectors), the browser driver.
            exclude: ["Data", "Browser"],
            swiftSettings: swiftSettings
        ),
        // The built programs: `stratus` served and used as the admin CLI, several processes, the
        // loopback cluster, a container moved between servers, and the operator's files.
        .testTarget(
            name: "StratusCLITests",
            dependencies: [
                "StratusCore",
                "StratusStore",
                "StratusServer",
                "StratusTestSupport",
                // Built for the tests that run them (SwiftPM builds a test target's executables).
                "stratus",
                "stratus-bench",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
    ]
)

// The fuzzers (Deploy/fuzz/parsers.sh): with STRATUS_FUZZ_LIBRARY naming libFuzzer's archive
// without its main (libclang_rt.fuzzer_no_main), the project's own modules are built with
// libFuzzer's coverage and AddressSanitizer, and the stratus-fuzz product drives them (its
// targets are in Tests/StratusFuzz). Dependencies are built as always. An ordinary build never
// sees any of this.
if let libFuzzer = Context.environment["STRATUS_FUZZ_LIBRARY"], !libFuzzer.isEmpty {
    let instrumented: [SwiftSetting] = [.unsafeFlags(["-sanitize=fuzzer,address"])]
    for target in package.targets where ["StratusCore", "StratusServer"].contains(target.name) {
        target.swiftSettings = (target.swiftSettings ?? []) + instrumented
    }
    package.targets.append(.executableTarget(
        name: "stratus-fuzz",
        dependencies: [
            "StratusCore",
            "StratusStore",
            "StratusServer",
            .product(name: "Hummingbird", package: "hummingbird"),
            .product(name: "HummingbirdCore", package: "hummingbird"),
            .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "NIOPosix", package: "swift-nio"),
            .product(name: "HTTPTypes", package: "swift-http-types"),
            .product(name: "Logging", package: "swift-log"),
        ],
        path: "Tests/StratusFuzz",
        exclude: ["Corpus"],
        swiftSettings: swiftSettings + instrumented,
        linkerSettings: [.unsafeFlags(["-sanitize=address", "-Xlinker", libFuzzer, "-lstdc++"])]
    ))
    package.products.append(.executable(name: "stratus-fuzz", targets: ["stratus-fuzz"]))
}
