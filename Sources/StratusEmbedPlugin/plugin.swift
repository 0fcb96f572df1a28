import Foundation
import PackagePlugin

/// Compiles the SQL migrations (`Migrations/*.sql` at the package root) into the target as Swift
/// source, so `stratus` carries them: it migrates from any folder, and as an installed copy.
/// `Migrations/` stays the one place they are written; each build generates the source again
/// when a file there changes or is added.
@main
struct EmbedMigrations: BuildToolPlugin {
    func createBuildCommands(context: PluginContext, target: any Target) throws -> [Command] {
        let folder = context.package.directoryURL.appending(path: "Migrations")
        let files = try FileManager.default.contentsOfDirectory(at: folder, includingPropertiesForKeys: nil)
            .filter { $0.pathExtension == "sql" }
            .sorted { $0.lastPathComponent < $1.lastPathComponent }
        let output = context.pluginWorkDirectoryURL.appending(path: "EmbeddedMigrations.swift")
        return [
            .buildCommand(displayName: "Embedding \(files.count) migrations into \(target.name)",
                          executable: try context.tool(named: "stratus-embed").url,
                          arguments: [output.path] + files.map(\.path),
                          inputFiles: files, outputFiles: [output]),
        ]
    }
}
