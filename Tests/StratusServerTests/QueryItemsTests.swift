@testable import StratusServer
@testable import StratusTestSupport
import Testing

/// `QueryItems` reads the data API's credentials from the request target as Hummingbird's
/// `URI.queryParameters` did: the first value of a name, percent-escapes decoded, `+` kept.
@Suite struct QueryItemsTests {
    @Test func valuesAreFoundAndDecoded() {
        let query = QueryItems(target: "/database/1/c/development/private/records/lookup?ckAPIToken=abc&ckWebAuthToken=a%2Bb%2F%3D+c&flag&empty=&ckAPIToken=second")
        #expect(query.get("ckAPIToken") == "abc")
        #expect(query.get("ckWebAuthToken") == "a+b/=+c")
        #expect(query.get("flag") == "")
        #expect(query.get("empty") == "")
        #expect(query.get("ckSession") == nil)
        #expect(query.get("ckAPITok") == nil)
        #expect(query.get("APIToken") == nil)
    }

    @Test func aValueThatDoesNotDecodeIsTakenAsItIs() {
        #expect(QueryItems(target: "/p?t=50%&u=%zz").get("t") == "50%")
        #expect(QueryItems(target: "/p?t=50%&u=%zz").get("u") == "%zz")
    }

    @Test func aTargetWithoutAQueryHasNoValues() {
        #expect(QueryItems(target: "/database/1/c/development/private/records/lookup").get("ckAPIToken") == nil)
        #expect(QueryItems(target: nil).get("ckAPIToken") == nil)
        #expect(QueryItems(target: "/p?").get("") == nil)
        #expect(QueryItems(target: "/p?=x").get("a") == nil)
    }
}
