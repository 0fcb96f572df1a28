import Foundation
import PackagePlugin

/// Compiles files into a target as Swift source, so `stratus` carries them: it migrates and
/// serves its pages and documents from any folder, and as an installed copy. The files stay
/// where they are written; each build generates the source again when one changes or is added.
///
/// - `StratusStore`: the SQL migrations, `Migrations/*.sql` at the package root
///   (`EmbeddedMigrations.files`).
/// - Any other target: the files under its `Sources/<target>/Resources/` folder (`EmbeddedResources.files`, by
///   path below `Resources/`), such as the OpenAPI document the server answers.
@main
struct EmbedMigrations: BuildToolPlugin {
    func createBuildCommands(context: PluginContext, target: any Target) throws -> [Command] {
        let isStore = target.name == "StratusStore"
        let folder = isStore ? context.package.directoryURL.appending(path: "Migrations")
                             : context.package.directoryURL.appending(path: "Sources/\(target.name)/Resources")
        let files = try Self.files(under: folder).filter { !isStore || $0.pathExtension == "sql" }
        let enumName = isStore ? "EmbeddedMigrations" : "EmbeddedResources"
        let output = context.pluginWorkDirectoryURL.appending(path: "\(enumName).swift")
        return [
            .buildCommand(displayName: "Embedding \(files.count) files into \(target.name)",
                          executable: try context.tool(named: "stratus-embed").url,
                          arguments: [enumName, folder.path, output.path] + files.map(\.path),
                          inputFiles: files, outputFiles: [output]),
        ]
    }

    /// The regular files below `folder`, in path order (none when it does not exist).
    static func files(under folder: URL) throws -> [URL] {
        guard let walker = FileManager.default.enumerator(at: folder, includingPropertiesForKeys: [.isRegularFileKey]) else { return [] }
        var found: [URL] = []
        for case let url as URL in walker where (try url.resourceValues(forKeys: [.isRegularFileKey])).isRegularFile == true {
            found.append(url)
        }
        return found.sorted { $0.path < $1.path }
    }
}
