import HTTPTypes
@testable import StratusServer
@testable import StratusTestSupport
import Testing

/// `StratusResponder` answers the data API ahead of the router for the paths `DataRoute.match`
/// takes; everything else goes through the router (whose behaviour the HTTP tests check). A
/// mismatch between the table's keys and the request's method would send every request the slow
/// way without failing any HTTP test, so the matching is checked here directly.
@Suite struct DataRouteTests {
    @Test func everyEndpointIsMatchedByItsOwnPath() throws {
        for route in DataRoute.all {
            let match = try #require(DataRoute.match(method: route.method, path: "/database/1/iCloud.a.b/development/private/\(route.path)"),
                                     "\(route.method) \(route.path)")
            #expect(match.route.path == route.path)
            #expect(match.route.method == route.method)
            #expect(match.container == "iCloud.a.b")
            #expect(match.environment == "development")
            #expect(match.database == "private")
        }
    }

    @Test func onlyWellFormedPathsWithAKnownMethodAreMatched() {
        let unmatched: [(HTTPRequest.Method, String)] = [
            (.get, "/database/1/c/development/private/records/lookup"),     // known endpoint, other method
            (.put, "/database/1/c/development/private/records/modify"),
            (.post, "/database/1/c/development/private/records/lookup/"),   // trailing slash: the router's
            (.post, "/database/1//development/private/records/lookup"),     // empty container
            (.post, "/database/1/c/development//records/lookup"),           // empty database
            (.post, "/database/1/c/development/private/records/explode"),
            (.post, "/database/1/c/development/private/records/lookup/more"),
            (.post, "/database/2/c/development/private/records/lookup"),
            (.post, "/database/1/c/development/records/lookup"),
            (.post, "/health"),
        ]
        for (method, path) in unmatched {
            #expect(DataRoute.match(method: method, path: path) == nil, "\(method) \(path)")
        }
        #expect(DataRoute.match(method: .get, path: "/database/1/c/production/public/zones/list")?.route.path == "zones/list")
    }

    @Test func aRequestTargetIsMatchedOnItsPathAlone() throws {
        let match = try #require(DataRoute.match(method: .post, target: "/database/1/iCloud.a.b/production/public/records/query?ckAPIToken=x/y&b=?"))
        #expect(match.route.path == "records/query")
        #expect([match.container, match.environment, match.database] == ["iCloud.a.b", "production", "public"])
        #expect(DataRoute.match(method: .post, target: "/database/1/c/production/public/records?/query") == nil)
        #expect(DataRoute.match(method: .post, target: "/database/1/c/production/public/records/query/?a") == nil)
    }
}
