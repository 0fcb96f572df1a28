import Foundation
@testable import StratusTestSupport
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import StratusCore
@testable import StratusServer
@testable import StratusStore
import Testing

/// The sign-in page in a real browser (Debian's headless Chromium, driven over the DevTools
/// protocol by `Browser/signin_driver.py`): a web app on another origin gets
/// `AUTHENTICATION_REQUIRED`, opens the `redirectURL` in a popup, the person creates an account
/// there, and the app receives the token (postMessage to the opener, or the API token's sign-in
/// callback) and calls `users/caller` with it. Screenshots go to `.build/test-output/sign-in/`.
@Suite(.timeLimit(.minutes(TestTime.minutes(10)))) struct SignInPageTests {
    static let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    static var chromium: String? {
        ["/usr/bin/chromium", "/usr/bin/chromium-browser"].first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    /// Sends a request to a served binary; status and parsed answer.
    static func request(_ method: String, _ url: String, body: JSON? = nil, admin: Bool = false) async throws -> (status: Int, json: JSON) {
        var request = URLRequest(url: URL(string: url)!)
        request.httpMethod = method
        if let body { request.httpBody = Data(JSONWriter.string(body).utf8) }
        if admin { request.setValue("Bearer browser-admin", forHTTPHeaderField: "Authorization") }
        let (data, response) = try await URLSession.shared.data(for: request)
        return ((response as? HTTPURLResponse)?.statusCode ?? 0, (try? JSONParser.parse(Array(data))) ?? .null)
    }

    @Test func signingUpInThePopupHandsTheTokenToTheApp() async throws {
        let chromium = try #require(Self.chromium, "Chromium is needed for this test: apt-get install chromium (Deploy/test.sh installs it)")
        // Two `stratus serve` processes on one database: the browser uses the first.
        let configuration = try await TestCluster.shared.newDatabase()
        let folder = try Programs.scratchFolder("stratus-browser")
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let password = configuration.password.map { ":" + ($0.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? $0) } ?? ""
        let databaseURL = "postgres://\(configuration.username)\(password)@\(configuration.host):\(configuration.port)/\(configuration.database)"
        var servers: [String] = []
        var pids: [pid_t] = []
        defer { for index in 0..<2 { TestOutput.keepServerLog(folder + "/serve-\(index).log", name: "browser") } }
        defer { for pid in pids { Subprocess.killAndReap(pid) } }
        for index in 0..<2 {
            let port = Programs.freePort()
            let server = "http://127.0.0.1:\(port)"
            pids.append(try Subprocess.spawn([Programs.binary, "serve", "--port", String(port), "--database-url", databaseURL,
                                              "--bcrypt-cost", "4", "--public-url", server],
                                             outputPath: folder + "/serve-\(index).log", environment: Programs.serveEnvironment(adminToken: "browser-admin")))
            let health = try await Programs.waitForHealth(server)
            try #require(health?.0 == 200, "server \(index): \(((try? String(contentsOfFile: folder + "/serve-\(index).log", encoding: .utf8)) ?? "").suffix(2000))")
            servers.append(server)
        }
        let stratus = servers[0]
        let appPort = Programs.freePort()
        let appOrigin = "http://127.0.0.1:\(appPort)"
        let name = "iCloud.com.example.Browser"
        #expect(try await Self.request("POST", "\(stratus)/management/1/containers", body: ["name": .string(name)], admin: true).status == 201)
        // One API token hands the web auth token back by postMessage, to the app's origin only;
        // the other sends the person to the app's sign-in callback.
        let popupToken = try await Self.request("POST", "\(stratus)/management/1/containers/\(name)/tokens",
                                                body: ["environment": "development", "allowedOrigins": [.string(appOrigin)]], admin: true)
        let callbackToken = try await Self.request("POST", "\(stratus)/management/1/containers/\(name)/tokens",
                                                   body: ["environment": "development", "signInCallback": .string("\(appOrigin)/done")], admin: true)
        let outDir = Self.repositoryRoot.appendingPathComponent(".build/test-output/sign-in").path
        var scenarios: [JSON] = []
        for (mode, token) in [("popup", popupToken), ("callback", callbackToken)] {
            scenarios.append(["name": .string(mode), "mode": .string(mode), "stratus": .string(stratus), "container": .string(name),
                              "apiToken": token.json["apiToken"] ?? "", "email": .string("\(mode)@example.com"), "password": "correct horse battery"])
        }
        let settings: JSON = ["chromium": .string(chromium), "appPort": .int(Int64(appPort)), "outDir": .string(outDir), "scenarios": .array(scenarios)]
        let driver = Self.repositoryRoot.appendingPathComponent("Tests/StratusServerTests/Browser/signin_driver.py").path
        let run = try await Subprocess.runDetached(["/usr/bin/env", "python3", driver, JSONWriter.string(settings)])
        let line = run.text.split(separator: "\n").last { $0.hasPrefix("RESULT ") }
        let results = try #require(line.flatMap { try? JSONParser.parse(String($0.dropFirst(7))) }?.arrayValue, "driver output: \(run.text)")
        for secret in [popupToken.json["apiToken"], callbackToken.json["apiToken"], "correct horse battery"] + results.map({ $0["token"] }) {
            TestSecrets.record(secret?.stringValue)
        }
        print("sign-in page in Chromium: \(JSONWriter.string(.array(results)))".replacingOccurrences(of: #""token":"[^"]*""#, with: #""token":"…""#,
                                                                                                  options: .regularExpression))
        print("screenshots: \(outDir)")
        #expect(results.count == 2)
        for result in results {
            let mode = result["name"]?.stringValue ?? "?"
            #expect(result["error"] == nil, "\(mode): \(result)")
            #expect(result["first"]?["status"] == 421 && result["first"]?["serverErrorCode"] == "AUTHENTICATION_REQUIRED", "\(mode): \(result)")
            #expect(result["redirectURL"]?.stringValue?.hasPrefix("\(stratus)/auth/1/\(name)/development/signin?ckAPIToken=") == true, "\(mode): \(result)")
            #expect(result["second"]?["status"] == 200 && result["second"]?["sessionHeader"] == true, "\(mode): \(result)")
            let user = result["second"]?["user"]?.stringValue ?? ""
            #expect(user.hasPrefix("_") && user.count == 33, "\(mode): \(result)")
            if mode == "popup" {
                #expect(result["messageOrigin"]?.stringValue == stratus, "\(result)")
                #expect(result["messageKeys"] == ["ckSession", "ckWebAuthToken"] && result["sameTokenInBothKeys"] == true, "\(result)")
                #expect(result["popupClosed"] == true, "\(result)")
            } else {
                #expect(result["landedOn"]?.stringValue == "\(appOrigin)/done", "\(result)")
            }
        }

        // After sign-out the browser's token is refused by both server processes.
        let token = try #require(results.first?["token"]?.stringValue)
        let encoded = token.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? token
        let query = "ckAPIToken=\(popupToken.json["apiToken"]?.stringValue ?? "")&ckWebAuthToken=\(encoded)"
        let callerPath = "/database/1/\(name)/development/public/users/caller?\(query)"
        #expect(try await Self.request("GET", servers[1] + callerPath).status == 200)
        #expect(try await Self.request("POST", "\(stratus)/auth/1/\(name)/development/signout?\(query)").status == 200)
        for server in servers {
            var status = 200
            let start = ContinuousClock.now
            while status == 200, ContinuousClock.now - start < .seconds(5) {
                status = try await Self.request("GET", server + callerPath).status
                if status == 200 { try await Task.sleep(for: .milliseconds(20)) }
            }
            #expect(status == 401, "\(server) still accepted the signed-out token")
        }
    }
}
