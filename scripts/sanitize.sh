#!/usr/bin/env bash
# scripts/sanitize.sh — the test suites under sanitizers, and bounded fuzzing (issue 8).
#
#   ./scripts/sanitize.sh            (scripts/test.sh runs it in CI, or with ASGD_SANITIZERS=1)
#
# 1. build-asan/ (clang -O1 -gline-tables-only, -fsanitize=fuzzer-no-link,address,undefined):
#    the GoogleTest suites below (issue 17's hardening table runs this build's asgdsim in
#    every row) with ASan/UBSan halting on the first report, in parallel lanes split into
#    gtest shards (scripts/lanes.sh: every test runs once, ASGD_JOBS lanes). A test that
#    trains or sweeps for a while runs its code at a reduced size here (the Release ctest
#    checks its numbers at full size): asgd::testing::reduced_size(), docs/ci.md says which.
#    The same build holds the libFuzzer targets, which then run side by side, each for
#    ASGD_FUZZ_SECONDS of CPU (default 60), from the seed corpus (experiments/configs/*.json;
#    two tiny IDX files; one svmlight file) and the corpus earlier runs on this machine grew
#    (ASGD_FUZZ_CORPUS, default ~/.cache/asgdsim/fuzz-corpus: kept between runs and clones).
#    A crash leaves its input in build-asan/fuzz-findings/ and fails the script: turn it into
#    a regression test.
# 2. build-tsan/ (clang, -fsanitize=thread): test_sim, test_engines, test_conformance,
#    test_time_model, test_disk_and_signals, test_checkpoint, in lanes. libgomp is not
#    TSan-instrumented, so OMP_NUM_THREADS=1 keeps OpenMP regions on one thread; the worker
#    pool, the scheduler and every job still run on their own threads.
# Both builds compile through the compiler cache (scripts/deps.sh, asgd_compiler_cache).
# Prints each phase's duration, and appends "PHASE|SECONDS|CACHE|OUTCOME" lines to
# $ASGD_TIMINGS_FILE when set (scripts/test.sh's phase table; CACHE is "warm|cold HITS/CALLS"
# for a build, "-" otherwise). Exits non-zero on any report or failure.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/deps.sh
source scripts/deps.sh   # asgd_ensure_deps, asgd_compiler_cache, now, elapsed
# shellcheck source=scripts/lanes.sh
source scripts/lanes.sh  # asgd_run_lanes
asgd_ensure_deps
asgd_compiler_cache      # ASGD_CACHE_ARGS

jobs=${ASGD_JOBS:-$(nproc 2>/dev/null || echo 2)}
fuzz_seconds=${ASGD_FUZZ_SECONDS:-60}
corpus_home=${ASGD_FUZZ_CORPUS:-${XDG_CACHE_HOME:-$HOME/.cache}/asgdsim/fuzz-corpus}
timings=()
record() {  # phase, seconds, outcome [, cache]
  local cache=${4:--}
  timings+=("$(printf '  %-12s %7ss  %-18s %s' "$1" "$2" "$cache" "$3")")
  if [[ -n "${ASGD_TIMINGS_FILE:-}" ]]; then echo "$1|$2|$cache|$3" >>"$ASGD_TIMINGS_FILE"; fi
}
configure() {
  local dir=$1
  shift
  # -O1 and line tables only: what ASan's authors recommend, and about half the compile
  # and link time of -O2 -g; reports still name file:line.
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only -DNDEBUG" \
    -DASGD_BACKEND=OMP -DCUDAToolkit_ROOT="$ASGD_CUDA_ROOT" "${ASGD_CACHE_ARGS[@]}" "$@" >/dev/null
}

# The suites each build runs, longest first (lanes start them in this order); ":N" splits a
# suite into N gtest shards. Every GoogleTest suite runs under ASan but test_bench (it times
# code against a bare loop; the Release ctest runs it).
asan_suites=(test_config:6 test_engines:4 test_time_model:3 test_bad_input:3 test_conformance test_sparse
             test_messages test_run_folders test_kernels test_topology test_measured_compute
             test_disk_and_signals test_sim test_layers test_launches test_checkpoint)
tsan_suites=(test_engines:2 test_conformance test_time_model test_disk_and_signals test_sim test_checkpoint)
targets() { local s; for s in "$@"; do echo "${s%%:*}"; done; }

echo "== sanitize.sh: ASan + UBSan (clang) -> build-asan/"
t=$(now)
cache_before=$(asgd_cache_counts)
configure build-asan -DASGD_SANITIZE=fuzzer-no-link,address,undefined -DASGD_FUZZ=ON
# shellcheck disable=SC2046  # one target per word
cmake --build build-asan -j "$jobs" --target asgdsim $(targets "${asan_suites[@]}") fuzz_config fuzz_idx fuzz_svmlight
record asan-build "$(elapsed "$t")" "ok" "$(asgd_cache_delta "$cache_before")"
t=$(now)
export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
if ! asgd_run_lanes build-asan "$jobs" "${asan_suites[@]}"; then
  record asan-tests "$(elapsed "$t")" "FAILED"
  echo "sanitize.sh: a suite failed under ASan/UBSan (above)" >&2
  exit 1
fi
record asan-tests "$(elapsed "$t")" "clean (${#asan_suites[@]} suites, $jobs lanes)"

echo "== sanitize.sh: fuzzing, ${fuzz_seconds} CPU-seconds per target, side by side"
t=$(now)
findings=build-asan/fuzz-findings
seeds=build-asan/fuzz-seeds
rm -rf "$seeds" "$findings"
mkdir -p "$seeds/config" "$seeds/idx" "$seeds/svmlight" "$findings"
cp experiments/configs/*.json "$seeds/config/"
printf '\x00\x00\x08\x03\x00\x00\x00\x02\x00\x00\x00\x02\x00\x00\x00\x02\x01\x02\x03\x04\x05\x06\x07\x08' \
  > "$seeds/idx/images"
printf '\x00\x00\x08\x01\x00\x00\x00\x02\x03\x07' > "$seeds/idx/labels"
printf '# comment\n+1 1:0.5 3:-2 7:1e-3 # tail\n\n-1\t2:4\r\n0 1:1 4:+2\n' > "$seeds/svmlight/sample"
# Three targets on $jobs cores: each gets its CPU share of the wall time.
wall=$(( (fuzz_seconds * 3 + jobs - 1) / jobs ))
pids=()
for target in config idx svmlight; do
  mkdir -p "$corpus_home/$target"
  # The first folder is the corpus libFuzzer grows (kept between runs); the second, the seeds.
  ASAN_OPTIONS=detect_leaks=1 build-asan/tests/fuzz/fuzz_$target -max_total_time="$wall" -print_final_stats=1 \
    -artifact_prefix="$findings/$target-" "$corpus_home/$target" "$seeds/$target" \
    > "build-asan/fuzz_$target.log" 2>&1 &
  pids+=($!)
done
crashed=()
for i in 0 1 2; do
  target=(config idx svmlight)
  if ! wait "${pids[$i]}"; then crashed+=("${target[$i]}"); fi
done
for target in config idx svmlight; do
  echo "-- fuzz_$target: $(grep -E 'stat::number_of_executed_units' "build-asan/fuzz_$target.log" | awk '{print $2}') inputs, corpus $(find "$corpus_home/$target" -type f | wc -l) files"
done
if [[ ${#crashed[@]} -gt 0 ]]; then
  for target in "${crashed[@]}"; do tail -n 40 "build-asan/fuzz_$target.log"; done
  echo "sanitize.sh: fuzz_${crashed[*]} found a crash; its input is in $findings/" >&2
  record fuzz "$(elapsed "$t")" "FAILED"
  exit 1
fi
record fuzz "$(elapsed "$t")" "clean (${fuzz_seconds} CPU-s x 3 targets, corpus $corpus_home)"

echo "== sanitize.sh: TSan (clang) -> build-tsan/"
t=$(now)
cache_before=$(asgd_cache_counts)
configure build-tsan -DASGD_SANITIZE=thread
# shellcheck disable=SC2046
cmake --build build-tsan -j "$jobs" --target asgdsim $(targets "${tsan_suites[@]}")
record tsan-build "$(elapsed "$t")" "ok" "$(asgd_cache_delta "$cache_before")"
t=$(now)
export TSAN_OPTIONS=halt_on_error=1:ignore_noninstrumented_modules=1 OMP_NUM_THREADS=1
if ! asgd_run_lanes build-tsan "$jobs" "${tsan_suites[@]}"; then
  record tsan-tests "$(elapsed "$t")" "FAILED"
  echo "sanitize.sh: a suite failed under TSan (above)" >&2
  exit 1
fi
record tsan-tests "$(elapsed "$t")" "clean (${#tsan_suites[@]} suites, $jobs lanes)"

echo
echo "== sanitize.sh: phase timings"
printf '%s\n' "${timings[@]}"
