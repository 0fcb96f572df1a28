// swift-tools-version:6.0
// A client generated from Stratus's OpenAPI document by swift-openapi-generator, and a program
// that uses it against a live server (Deploy/contract/contract.sh builds and runs it). Not part of the
// stratus package: it only proves that the document generates a client that compiles and works.
import PackageDescription

let package = Package(
    name: "stratus-openapi-client",
    platforms: [.macOS(.v13)],
    dependencies: [
        .package(url: "https://github.com/apple/swift-openapi-generator.git", from: "1.14.0"),
        .package(url: "https://github.com/apple/swift-openapi-runtime.git", from: "1.13.0"),
        .package(url: "https://github.com/apple/swift-openapi-urlsession.git", from: "1.4.0"),
    ],
    targets: [
        .executableTarget(
            name: "StratusClientCheck",
            dependencies: [
                .product(name: "OpenAPIRuntime", package: "swift-openapi-runtime"),
                .product(name: "OpenAPIURLSession", package: "swift-openapi-urlsession"),
            ],
            plugins: [.plugin(name: "OpenAPIGenerator", package: "swift-openapi-generator")]
        ),
    ]
)
