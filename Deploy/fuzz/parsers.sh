#!/usr/bin/env bash
# Builds the libFuzzer targets (Tests/StratusFuzz; the project's own modules instrumented with
# libFuzzer coverage and AddressSanitizer, see Package.swift) and runs each for
# STRATUS_FUZZ_SECONDS (default 30), seeded with Tests/StratusFuzz/Corpus/<target>, which also
# holds every input that once broke a target (so each run replays them first). Targets:
# STRATUS_FUZZ_TARGETS (default: json schema query token http). Fails on any finding; its input
# is kept under .build/test-output/fuzz/.
#
# Two modes:
# - exploring (the default): random seeds; the inputs a run found interesting stay in
#   .build/fuzz-corpus/<target> and seed the next run on this machine. Run it for long stretches
#   (STRATUS_FUZZ_SECONDS=600) and keep what it finds in the corpus.
# - repeatable (STRATUS_FUZZ_REPEATABLE=1, as the test command runs it): a fixed seed, a fixed
#   number of inputs per target, deterministic hashing and only the repository's corpus, so
#   every machine tries the same inputs on the same code and a test run cannot fail by luck.
#   STRATUS_FUZZ_SECONDS stays an upper bound on a slow machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${STRATUS_FUZZ_SECONDS:-30}
targets=${STRATUS_FUZZ_TARGETS:-http json schema query token}
resources=$(swiftc -print-target-info | sed -n 's/.*"runtimeResourcePath": "\(.*\)".*/\1/p' | head -1)
arch=$(uname -m)
library="$resources/clang/lib/linux/libclang_rt.fuzzer_no_main-$arch.a"
if [ ! -f "$library" ]; then
  echo "fuzz: libFuzzer is not in this Swift toolchain ($library)" >&2
  exit 1
fi
# In the usual build folder: the dependencies are reused as built, and only the project's own
# modules are compiled again (instrumented here, plain again at the next ordinary build, about
# half a minute each way on 2 cores; a folder of its own would build every dependency again).
echo "fuzz: building stratus-fuzz (the project's modules with libFuzzer and AddressSanitizer)"
STRATUS_FUZZ_LIBRARY=$library swift build --product stratus-fuzz >.build/fuzz-build.log 2>&1 || {
  grep -E "error" .build/fuzz-build.log | sort -u | head -40 >&2
  exit 1
}
binary=.build/debug/stratus-fuzz
out=.build/test-output/fuzz
mkdir -p "$out"
# Targets run STRATUS_FUZZ_PARALLEL at a time (default 2, one a core): each still runs its full
# time; the HTTP target mostly waits on its sockets.
run_target() {
  local target=$1
  local corpus=.build/fuzz-corpus/$target
  local mode=() launcher=()
  if [ "${STRATUS_FUZZ_REPEATABLE:-0}" = 1 ]; then
    # What a run adds goes to a scratch folder, so the next run starts from the same corpus.
    corpus=$(mktemp -d)
    # Counts a target gets through in about 17 s here (2 cores, two targets at once), so that the
    # count ends the run and not the time limit: until 2026-11-27 they were up to twice these,
    # and every target here stopped at its 30 s, after however many inputs the machine managed.
    local runs
    case $target in
      http) runs=6000 ;;
      schema) runs=70000 ;;
      query) runs=160000 ;;
      token) runs=150000 ;;
      *) runs=200000 ;;
    esac
    mode=(-seed=1 -runs="$runs")
    # Without address randomisation where the machine allows it: the runtime's pointer-keyed
    # caches otherwise vary the coverage, and with it the inputs tried.
    if setarch "$(uname -m)" -R true 2>/dev/null; then launcher=(setarch "$(uname -m)" -R); fi
  fi
  mkdir -p "$corpus"
  local dictionary=()
  if [ -f "Tests/StratusFuzz/Corpus/$target.dict" ]; then dictionary=("-dict=Tests/StratusFuzz/Corpus/$target.dict"); fi
  local log="$out/$target.log"
  if SWIFT_BACKTRACE=enable=no SWIFT_DETERMINISTIC_HASHING=1 ASAN_OPTIONS=detect_leaks=0 "${launcher[@]}" "$binary" "$target" "${mode[@]}" \
      -max_total_time="$seconds" -timeout=30 -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="$out/$target-" "${dictionary[@]}" "$corpus" "Tests/StratusFuzz/Corpus/$target" >"$log" 2>&1; then
    local executed
    executed=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    echo "fuzz: $target: ${executed:-?} inputs, no finding (corpus $(ls "$corpus" | wc -l) inputs)"
    if [ "${#mode[@]}" -gt 0 ]; then rm -rf "$corpus"; fi
  else
    { echo "fuzz: $target: FAILED; the input is kept as $out/$target-*; the log:"; grep -vE "^#[0-9]+" "$log" | tail -40; } >&2
    return 1
  fi
}
parallel=${STRATUS_FUZZ_PARALLEL:-2}
status=0
pids=()
for target in $targets; do
  run_target "$target" &
  pids+=($!)
  if [ "${#pids[@]}" -ge "$parallel" ]; then
    wait "${pids[0]}" || status=1
    pids=("${pids[@]:1}")
  fi
done
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
exit "$status"
