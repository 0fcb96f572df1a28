/// The suites' time limits (`.timeLimit(.minutes(TestTime.minutes(10)))`), doubled on Citus.
///
/// Swift Testing starts every test's clock when the run starts but runs only a bounded number of
/// tests at once, so a suite's limit bounds the whole run up to that suite's last test, not the
/// test alone. The Citus families (`Deploy/citus/suite.sh`) run as one such run, and cost far more
/// per request there: on a machine in a slow phase they took 647 s together, and the 21 tests
/// still unfinished at 600 s failed on their limit without any assertion failing.
///
/// Every suite that runs test apps has ten minutes: waiting for a harness slot counts, and suites
/// with five ran out in a slowed fresh-clone run before sending a request (`SignupLimitTests`).
/// A test that waited long for its slot says so (`HarnessSlots`).
enum TestTime {
    static func minutes(_ minutes: Int) -> Int { TestCluster.citusPorts == nil ? minutes : 2 * minutes }
}
