#!/usr/bin/env bash
# Runs the whole test suite against a real PostgreSQL (an embedded cluster the tests start
# themselves under the temporary folder). Installs PostgreSQL when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
. Deploy/lib.sh
ensure_postgres
ensure_browser
ensure_promtool
# A whole run also needs the contract checks' Python tools and, where its source is here, Citus:
# fetched and built in the background while Swift builds (niced: the build comes first; it
# leaves a core idle now and then, and pip mostly waits on the network). The steps that use
# them check again, and do it themselves if this failed.
prepared=""
if [ "$#" -eq 0 ]; then
    mkdir -p .build/test-output
    (
        started=$SECONDS
        ensure_python_tools
        if [ -f ../shared/vendor/citus-13.2.2.tar.gz ]; then nice -n 19 Deploy/citus/build.sh; fi
        echo "test.sh: the Python tools and Citus were ready after $((SECONDS - started)) s"
    ) >.build/test-output/prepare.log 2>&1 &
    prepared=$!
fi
swift build --build-tests
# After the build the suite takes two to four minutes here (2 cores), the contract, console and
# fuzzing checks after it about six more. Each suite that talks to PostgreSQL has a time limit
# that names a test running past it; a run that still hangs is stopped after 30 minutes rather
# than holding CI to its own limit.
# At most six test apps run at a time (STRATUS_TEST_WIDTH; `HarnessSlots` in the tests' harness):
# Swift Testing starts every test at once, and ~190 apps with pools of their own on 2 cores left
# the run queue at 20-30 and requests waiting past their clients' 15 s limit.
rm -rf .build/test-output/server-logs .build/test-output/secrets-*.txt .build/test-output/postgres-*.log
status=0
# (The suite's output is also kept, so a failed run can say at its end which tests failed or
# never finished: CI shows only the end of a run.)
set +e
timeout --signal=INT --kill-after=60 1800 swift test --skip-build "$@" 2>&1 | tee .build/test-output/swift-test.log
status=${PIPESTATUS[0]}
set -e
if [ "$status" -eq 124 ]; then
    echo "test.sh: the tests ran past 30 minutes and were stopped (a test hangs; see the time-limit issues above)" >&2
fi
suite_trouble=""
if [ "$status" -ne 0 ]; then
    show_test_database_trouble
    suite_trouble=$(unfinished_tests .build/test-output/swift-test.log)
    echo "$suite_trouble" >&2
fi
# Only for a whole run: a filtered one sees too little to be worth checking, and the contract
# checks (the OpenAPI document, a client generated from it, schemathesis against a live server),
# the console and the sign-in page's origin rules in a browser (Playwright on Chromium), HTTPS
# and the parsers' fuzzers (repeatable: a fixed seed and number of inputs) are not tests a
# filter names.
# Each check's time is printed after it, and all of them at the end (where CI's time goes).
timings="build and tests ${SECONDS} s"
step() {  # step NAME COMMAND...
    local started=$SECONDS
    "$@" || status=1
    echo "test.sh: $1 took $((SECONDS - started)) s"
    timings="$timings, $1 $((SECONDS - started)) s"
}
if [ "$#" -eq 0 ]; then
    check_logs_for_secrets || status=1
    wait "$prepared" || echo "test.sh: preparing the Python tools or Citus failed (the steps below try again):" >&2
    cat .build/test-output/prepare.log
    # The generated client's build (the contract's), niced, while the browser and HTTPS checks
    # leave a core mostly idle; Deploy/contract/contract.sh waits for it. Started beside the Swift build
    # instead (at nice 15, on 2026-11-27), it took 420 s there and the Swift build 915 s, against
    # 740 s alone the same evening (692-890 s on other fresh clones); the contract check then
    # waited for nothing (135 s against 227), but the whole run took 1,833 s against 1,786.
    nice -n 19 swift build --package-path Deploy/contract/openapi-client --scratch-path .build/openapi-client \
        >.build/test-output/openapi-client-build.log 2>&1 &
    step Deploy/console/e2e.sh
    step Deploy/signin/e2e.sh
    step Deploy/tls/e2e.sh
    step Deploy/tls/postgres.sh
    step Deploy/push/e2e.sh
    step Deploy/contract/contract.sh
    # The fault campaign's short form: one cycle of each fault against two servers (the long form
    # is a hand run: Deploy/faults/faults.sh --cycles 20).
    step Deploy/faults/faults.sh --bin .build/debug/stratus --cycles 1 --servers 2
    STRATUS_FUZZ_REPEATABLE=1 step Deploy/fuzz/parsers.sh
    # The end-to-end families again on a live Citus cluster, and a container moved between its
    # workers under load, when Citus can be built here (its source sits beside the repository,
    # as on CI) or is installed.
    if [ -f ../shared/vendor/citus-13.2.2.tar.gz ] || [ -f /usr/lib/postgresql/15/lib/citus.so ]; then
        step Deploy/citus/suite.sh
    else
        echo "test.sh: no Citus source in ../shared/vendor and no Citus installed; the Citus suite did not run" >&2
    fi
    echo "test.sh: $timings; $SECONDS s in all"
    if [ -n "$suite_trouble" ]; then echo "$suite_trouble" >&2; fi
fi
exit "$status"
