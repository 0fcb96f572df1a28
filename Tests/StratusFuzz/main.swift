import Foundation

// stratus-fuzz TARGET [libFuzzer options and corpus folders or files]
//
// libFuzzer targets for the project's own code that faces untrusted bytes, built only by
// Deploy/fuzz/parsers.sh (see Package.swift: STRATUS_FUZZ_LIBRARY). Each target checks
// properties, not just the absence of crashes; a broken one stops the run through
// `FuzzFailure.fail`, which libFuzzer records as a crash with its input.

typealias FuzzCallback = @convention(c) (UnsafePointer<UInt8>?, Int) -> Int32

@_silgen_name("LLVMFuzzerRunDriver")
func LLVMFuzzerRunDriver(_ argc: UnsafeMutablePointer<Int32>,
                         _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>>,
                         _ callback: FuzzCallback) -> Int32

/// The targets by name, each taking one input.
let targets: [String: ([UInt8]) -> Void] = [
    "json": JSONTarget.run,
    "schema": SchemaTarget.run,
    "query": QueryTarget.run,
    "token": TokenTarget.run,
    "http": HTTPTarget.run,
]

nonisolated(unsafe) var selected: (([UInt8]) -> Void)?

let arguments = CommandLine.arguments
guard arguments.count >= 2, let target = targets[arguments[1]] else {
    FileHandle.standardError.write(Data("usage: stratus-fuzz \(targets.keys.sorted().joined(separator: "|")) [libFuzzer options] [corpus…]\n".utf8))
    exit(64)
}
selected = target

// libFuzzer reads the arguments after the target's name (argv[0] stays the program).
var argc = CommandLine.argc - 1
let argv = CommandLine.unsafeArgv
argv[1] = argv[0]
var shifted = argv + 1
exit(LLVMFuzzerRunDriver(&argc, &shifted) { data, size in
    let bytes = size == 0 ? [] : Array(UnsafeBufferPointer(start: data, count: size))
    selected?(bytes)
    return 0
})
