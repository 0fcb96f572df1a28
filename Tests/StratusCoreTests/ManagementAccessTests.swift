import StratusCore
import Testing

/// The role table as data: what each role may do, written out here by hand from the product's
/// rules (owner: everything for the container; developer: development fully, production
/// read-only; viewer: read-only), against what `ManagementAccess` decides.
@Suite struct ManagementAccessTests {
    let member = ManagementCaller(isSuperuser: false, operatorID: 7)
    let superuser = ManagementCaller(isSuperuser: true, operatorID: 1)
    let container = "/management/1/containers/:container"

    func decide(_ route: String, _ role: TeamRole?, _ environment: ContainerEnvironment? = nil, caller: ManagementCaller? = nil) throws -> ManagementAccess.Decision {
        let requirement = try #require(ManagementAccess.routes[route], "no rule for \(route)")
        return ManagementAccess.decide(requirement, caller: caller ?? member, role: role, environment: environment, container: "C")
    }

    func allowed(_ route: String, _ role: TeamRole?, _ environment: ContainerEnvironment? = nil) throws -> Bool {
        try decide(route, role, environment) == .allowed
    }

    @Test func ownersDoEverythingForTheirContainer() throws {
        for route in ["POST \(container)/schema/deploy", "POST \(container)/schema/indexes/build", "PATCH \(container)/quota",
                      "POST \(container)/users/:user/erase", "GET \(container)/users/:user/export", "POST \(container)/users/:user/disable",
                      "POST \(container)/team", "PATCH \(container)/team/:operator", "DELETE \(container)/team/:operator"] {
            #expect(try allowed(route, .owner), "\(route)")
            #expect(try !allowed(route, .developer), "\(route)")
        }
        for environment in ContainerEnvironment.allCases {
            #expect(try allowed("POST \(container)/tokens", .owner, environment))
            #expect(try allowed("POST \(container)/keys/:key/revoke", .owner, environment))
        }
    }

    @Test func developersWorkInDevelopmentAndReadProduction() throws {
        #expect(try allowed("POST \(container)/schema/import", .developer))
        #expect(try allowed("POST \(container)/schema/reset", .developer))
        #expect(try decide("POST \(container)/schema/deploy", .developer)
                == .denied("this needs the owner role in container 'C'; you are its developer: ask one of its owners"))
        for route in ["POST \(container)/tokens", "PATCH \(container)/tokens/:token", "POST \(container)/tokens/:token/revoke",
                      "POST \(container)/keys", "POST \(container)/keys/:key/revoke", "POST \(container)/roles/:role/members",
                      "DELETE \(container)/roles/:role/members/:user"] {
            #expect(try allowed(route, .developer, .development), "\(route)")
            #expect(try decide(route, .developer, .production)
                    == .denied("this needs the owner role in container 'C' for production; you are its developer: ask one of its owners"), "\(route)")
        }
        for route in ["GET \(container)/schema", "GET \(container)/schema/diff", "GET \(container)/schema/history", "GET \(container)/usage",
                      "GET \(container)/audit", "GET \(container)/team"] {
            #expect(try allowed(route, .developer), "\(route)")
        }
    }

    @Test func viewersOnlyRead() throws {
        for (key, _) in ManagementAccess.routes where key.contains("/containers/:container") {
            let reads = (key.hasPrefix("GET ") && !key.hasSuffix("/export")) || ["/records/query", "/records/lookup", "/zones/list"].contains { key.hasSuffix($0) }
            #expect(try allowed(key, .viewer, .development) == reads, "\(key)")
        }
        #expect(try decide("POST \(container)/tokens", .viewer, .development)
                == .denied("this needs the developer role in container 'C' for development; you are its viewer: ask one of its owners"))
    }

    @Test func outsidersFindNoContainerAndSuperusersEveryone() throws {
        for (key, requirement) in ManagementAccess.routes where key.contains("/containers/:container") {
            #expect(try decide(key, nil, .production) == .notFound, "\(key)")
            #expect(ManagementAccess.decide(requirement, caller: superuser, role: nil, environment: .production) == .allowed, "\(key)")
            #expect(ManagementAccess.decide(requirement, caller: nil, role: nil, environment: .production) == .unauthenticated, "\(key)")
        }
    }

    @Test func serverWideRoutes() throws {
        for route in ["POST /management/1/containers", "GET /management/1/stats", "GET /management/1/usage/verify",
                      "GET /management/1/operators", "POST /management/1/operators", "DELETE /management/1/operators/:operator",
                      "POST /management/1/operators/:operator/disable"] {
            #expect(try decide(route, .owner) == .denied("this needs a superuser; ask one (or use the admin token)"), "\(route)")
            #expect(try decide(route, nil, caller: superuser) == .allowed, "\(route)")
        }
        for route in ["GET /management/1/containers", "GET /management/1/tokens", "GET /management/1/whoami", "POST /management/1/logout",
                      "POST /management/1/schema/validate"] {
            #expect(try allowed(route, nil), "\(route)")
            #expect(ManagementAccess.decide(try #require(ManagementAccess.routes[route]), caller: nil, role: nil, environment: nil) == .unauthenticated)
        }
        #expect(ManagementAccess.decide(.open, caller: nil, role: nil, environment: nil) == .allowed)
        let password = try #require(ManagementAccess.routes["POST /management/1/operators/:operator/password"])
        #expect(ManagementAccess.decide(password, caller: member, role: nil, environment: nil, targetsSelf: true) == .allowed)
        #expect(ManagementAccess.decide(password, caller: member, role: nil, environment: nil, targetsSelf: false)
                == .denied("only a superuser may do this for another operator"))
    }

    @Test func rolesHaveNamesAndOrder() {
        #expect(TeamRole.allCases.map(\.description) == ["viewer", "developer", "owner"])
        #expect(TeamRole(name: "developer") == .developer && TeamRole(name: "Owner") == nil)
        #expect(TeamRole.viewer < .developer && TeamRole.developer < .owner)
    }
}
