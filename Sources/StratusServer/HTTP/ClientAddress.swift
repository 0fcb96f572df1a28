/// The address of the client whose request the current task serves, as the connection shows it
/// (`StratusHTTPChannel` sets it per request). `nil` outside a request, or in the in-process
/// router tests. Used for sign-in throttling and the audit log; never taken from a header a
/// client could forge.
enum ClientAddress {
    @TaskLocal static var current: String?
}
