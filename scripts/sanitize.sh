#!/usr/bin/env bash
# scripts/sanitize.sh — the test suites under sanitizers, and bounded fuzzing (issue 8).
#
#   ./scripts/sanitize.sh            (scripts/test.sh runs it in CI, or with ASGD_SANITIZERS=1)
#
# 1. build-asan/ (clang, -fsanitize=fuzzer-no-link,address,undefined): the GoogleTest
#    suites test_kernels, test_layers, test_launches, test_sim, test_engines, test_timing,
#    test_time_model, test_config, test_reliability, test_sparse, test_messages,
#    test_topology, test_hardening, test_run_folders and test_measured_compute (issue 17's table: every row runs the ASan/UBSan
#    asgdsim of this build) run with ASan/UBSan halting on the first report; the same build
#    holds the libFuzzer targets,
#    which then run for ASGD_FUZZ_SECONDS each (default 60) from a seed corpus
#    (experiments/configs/*.json; two tiny IDX files). A crash leaves its input in
#    build-asan/fuzz-findings/ and fails the script: turn it into a regression test.
# 2. build-tsan/ (clang, -fsanitize=thread): test_sim, test_engines, test_timing,
#    test_reliability. libgomp is not TSan-instrumented, so OMP_NUM_THREADS=1 keeps
#    OpenMP regions on one thread; the worker pool, the scheduler and every job still
#    run on their own threads.
# Prints each phase's duration. Exits non-zero on any report or failure.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/deps.sh
source scripts/deps.sh   # asgd_ensure_deps, now, elapsed
asgd_ensure_deps
asgd_compiler_cache   # ASGD_CACHE_ARGS

jobs=${ASGD_JOBS:-$(nproc 2>/dev/null || echo 2)}
fuzz_seconds=${ASGD_FUZZ_SECONDS:-60}
timings=()
record() { timings+=("$(printf '  %-12s %7ss  %s' "$1" "$2" "$3")"); }
configure() {
  local dir=$1
  shift
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
    -DASGD_BACKEND=OMP -DCUDAToolkit_ROOT="$ASGD_CUDA_ROOT" "${ASGD_CACHE_ARGS[@]}" "$@" >/dev/null
}
run_suites() {  # dir, suites...
  local dir=$1
  shift
  for suite in "$@"; do
    echo "-- $suite"
    "$dir/tests/$suite" --gtest_brief=1
  done
}

echo "== sanitize.sh: ASan + UBSan (clang) -> build-asan/"
t=$(now)
configure build-asan -DASGD_SANITIZE=fuzzer-no-link,address,undefined -DASGD_FUZZ=ON
cmake --build build-asan -j "$jobs" --target asgdsim test_kernels test_layers test_launches test_sim test_engines test_timing test_time_model test_config test_reliability test_sparse test_messages test_topology test_hardening test_run_folders test_measured_compute fuzz_config fuzz_idx fuzz_svmlight
record asan-build "$(elapsed "$t")" "ok"
t=$(now)
ASAN_OPTIONS=detect_leaks=1:halt_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  run_suites build-asan test_kernels test_layers test_launches test_sim test_engines test_timing test_time_model test_config test_reliability test_sparse test_messages test_topology test_hardening test_run_folders test_measured_compute
record asan-tests "$(elapsed "$t")" "clean"

echo "== sanitize.sh: fuzzing, ${fuzz_seconds}s per target"
t=$(now)
findings=build-asan/fuzz-findings
rm -rf build-asan/fuzz-corpus "$findings"
mkdir -p build-asan/fuzz-corpus/config build-asan/fuzz-corpus/idx build-asan/fuzz-corpus/svmlight "$findings"
cp experiments/configs/*.json build-asan/fuzz-corpus/config/
printf '\x00\x00\x08\x03\x00\x00\x00\x02\x00\x00\x00\x02\x00\x00\x00\x02\x01\x02\x03\x04\x05\x06\x07\x08' \
  > build-asan/fuzz-corpus/idx/images
printf '\x00\x00\x08\x01\x00\x00\x00\x02\x03\x07' > build-asan/fuzz-corpus/idx/labels
printf '# comment\n+1 1:0.5 3:-2 7:1e-3 # tail\n\n-1\t2:4\r\n0 1:1 4:+2\n' > build-asan/fuzz-corpus/svmlight/sample
for target in config idx svmlight; do
  echo "-- fuzz_$target"
  if ! ASAN_OPTIONS=detect_leaks=1 build-asan/tests/fuzz/fuzz_$target -max_total_time="$fuzz_seconds" \
       -print_final_stats=1 -artifact_prefix="$findings/$target-" build-asan/fuzz-corpus/$target \
       > "build-asan/fuzz_$target.log" 2>&1; then
    tail -n 40 "build-asan/fuzz_$target.log"
    echo "sanitize.sh: fuzz_$target found a crash; its input is in $findings/" >&2
    exit 1
  fi
  grep -E 'stat::number_of_executed_units|stat::new_units_added' "build-asan/fuzz_$target.log"
done
record fuzz "$(elapsed "$t")" "clean (${fuzz_seconds}s x 3 targets)"

echo "== sanitize.sh: TSan (clang) -> build-tsan/"
t=$(now)
configure build-tsan -DASGD_SANITIZE=thread
cmake --build build-tsan -j "$jobs" --target asgdsim test_sim test_engines test_timing test_reliability
record tsan-build "$(elapsed "$t")" "ok"
t=$(now)
TSAN_OPTIONS=halt_on_error=1:ignore_noninstrumented_modules=1 OMP_NUM_THREADS=1 run_suites build-tsan test_sim test_engines test_timing test_reliability
record tsan-tests "$(elapsed "$t")" "clean"

echo
echo "== sanitize.sh: phase timings"
printf '%s\n' "${timings[@]}"
