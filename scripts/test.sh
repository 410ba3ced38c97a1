#!/usr/bin/env bash
# scripts/test.sh — installs what is missing, builds, runs every test. .ci/run calls it.
#
#   ./scripts/test.sh [CTEST ARGS...]        e.g. ./scripts/test.sh -R Sync
#
# Phases (each timed, and reported against its budget at the end; docs/ci.md):
#   1. deps    Debian packages and CUDA toolkit headers (scripts/deps.sh)
#   2. build   Release, ASGD_BACKEND=OMP, ASGD_MPI=ON (Open MPI from deps), into build/
#              (tests included; the MPI tests run asgdsim under mpirun on loopback)
#   3. cuda    when nvcc exists: ASGD_BACKEND=CUDA into build-cuda/ with the tests, compile
#              and link only (nothing CUDA runs here; scripts/gpu-check.sh runs them on a
#              GPU), for ASGD_CUDA_ARCHS (default 90, the H100/H200 the project is lent;
#              gpu-check.sh builds every architecture of cmake/Backend.cmake). Its host objects
#              are the OMP build's (same flags: the compiler cache answers them), so this
#              phase compiles the kernels with nvcc and links. ASGD_SKIP_CUDA=1 skips it.
#   4. sanitize  in CI (CI=true) or with ASGD_SANITIZERS=1: scripts/sanitize.sh (the
#              suites under ASan+UBSan and TSan in parallel lanes, and bounded libFuzzer
#              runs); ASGD_SKIP_SANITIZERS=1 skips it.
#   5. ctest   ctest --test-dir build --output-on-failure -j2 [CTEST ARGS]
# Every build compiles through the compiler cache (scripts/deps.sh: asgd_compiler_cache;
# ASGD_CCACHE=0 turns it off). A build phase whose compilations mostly missed the cache is
# held to its cold budget, otherwise to its warm one. The closing line of the output is
# ctest's summary ("100% tests passed, ..."). Exits non-zero when any phase fails; a failed
# CUDA build still lets ctest run first. Being over a budget is reported, not a failure.
# Environment: ASGD_JOBS (build jobs and test lanes, default nproc), ASGD_SKIP_CUDA=1,
# ASGD_CUDA_ARCHS, ASGD_CTEST_JOBS (default 2), ASGD_MPI=OFF (build without MPI: no mpirun
# sweeps, no asgdsim cluster), ASGD_CCACHE=0.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/deps.sh
source scripts/deps.sh   # asgd_ensure_deps, asgd_compiler_cache, asgd_cache_*, now, elapsed

# Budgets in seconds on 2 cores: warm (the compiler cache answers) and cold (an empty
# cache; only the build phases differ, deps compiles nothing). The sums: warm 23.7 min,
# cold 44.7 min (issue 49: at most 30 and 45).
declare -A budget_warm=([deps]=60 [build]=90 [cuda]=60 [asan-build]=90 [asan-tests]=420 [fuzz]=100
                        [tsan-build]=60 [tsan-tests]=120 [ctest]=420)
declare -A budget_cold=([deps]=60 [build]=420 [cuda]=300 [asan-build]=540 [asan-tests]=420 [fuzz]=100
                        [tsan-build]=300 [tsan-tests]=120 [ctest]=420)

phase() { echo; echo "== test.sh: $*"; }
timings_file=$(mktemp "${TMPDIR:-/tmp}/asgd-timings.XXXXXX")
log=$(mktemp "${TMPDIR:-/tmp}/asgd-ctest.XXXXXX")
trap 'rm -f "$log" "$timings_file"' EXIT
record() {  # phase, seconds (or - when skipped), outcome [, cache: "warm|cold HITS/CALLS"]
  echo "$1|$2|${4:--}|$3" >>"$timings_file"
}

jobs=${ASGD_JOBS:-$(nproc 2>/dev/null || echo 2)}
ctest_jobs=${ASGD_CTEST_JOBS:-2}
failed=()
started=$(now)

# Configures DIR with the given cache settings (Ninja, or whatever generator DIR was
# first configured with, so an existing build folder is reused, not clobbered).
configure() {
  local dir=$1
  shift
  local gen=(-G Ninja)
  if [[ -f "$dir/CMakeCache.txt" ]] && ! grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$' "$dir/CMakeCache.txt"; then
    gen=()
  fi
  cmake -S . -B "$dir" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DCUDAToolkit_ROOT="$ASGD_CUDA_ROOT" \
    "${ASGD_CACHE_ARGS[@]}" "$@"
}

# ---- 1. deps
phase "deps"
t=$(now)
ASGD_DEBIAN_PACKAGES+=(chromium)  # only the tests need it: they screenshot report.html headless
missing_before=0
command -v dpkg-query >/dev/null 2>&1 && missing_before=$(asgd_missing_packages | wc -l)
asgd_ensure_deps
echo "deps: all present (CUDA toolkit: $ASGD_CUDA_ROOT)"
asgd_compiler_cache   # ASGD_CACHE_ARGS
if [[ $missing_before -gt 0 ]]; then deps_state="cold $missing_before installed"; else deps_state="warm"; fi
record deps "$(elapsed "$t")" "ok" "$deps_state"

# ---- 2. build (OMP)
mpi=${ASGD_MPI:-ON}
phase "build: Release, ASGD_BACKEND=OMP, ASGD_MPI=$mpi -> build/ (-j$jobs)"
t=$(now)
cache_before=$(asgd_cache_counts)
configure build -DASGD_BACKEND=OMP -DASGD_MPI="$mpi"
cmake --build build -j "$jobs"
record build "$(elapsed "$t")" "ok (OMP, MPI $mpi, build/)" "$(asgd_cache_delta "$cache_before")"

# ---- 3. cuda (compile and link only)
nvcc=""
if [[ -x "$ASGD_CUDA_ROOT/bin/nvcc" ]]; then
  nvcc="$ASGD_CUDA_ROOT/bin/nvcc"
elif command -v nvcc >/dev/null 2>&1; then
  nvcc=$(command -v nvcc)
fi
cuda_archs=${ASGD_CUDA_ARCHS:-90}
if [[ "${ASGD_SKIP_CUDA:-0}" == "1" ]]; then
  record cuda "-" "skipped (ASGD_SKIP_CUDA=1)"
elif [[ -z "$nvcc" ]]; then
  record cuda "-" "skipped (no nvcc)"
else
  phase "cuda: ASGD_BACKEND=CUDA, architectures $cuda_archs -> build-cuda/ (tests included), compile and link only ($nvcc, -j$jobs)"
  t=$(now)
  cache_before=$(asgd_cache_counts)
  # MPI and position-independent code as in build/, so the host objects are the same
  # compilations (the Python package is on in build/ and makes its code PIC).
  if configure build-cuda -DASGD_BACKEND=CUDA -DCMAKE_CUDA_COMPILER="$nvcc" -DASGD_BUILD_TESTS=ON \
       -DASGD_MPI="$mpi" -DCMAKE_POSITION_INDEPENDENT_CODE=ON "-DCMAKE_CUDA_ARCHITECTURES=$cuda_archs" &&
     cmake --build build-cuda -j "$jobs"; then
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
      gpu_note="a GPU is visible: scripts/gpu-check.sh runs the CUDA tests on it"
    else
      gpu_note="no GPU here"
    fi
    echo "cuda: the CUDA backend and its tests compiled and linked (build-cuda/); nothing CUDA was run ($gpu_note)."
    record cuda "$(elapsed "$t")" "ok (sm_$cuda_archs, compiled and linked, not run)" "$(asgd_cache_delta "$cache_before")"
  else
    echo "cuda: FAILED: the CUDA backend did not compile or link (see above); ASGD_SKIP_CUDA=1 skips this step" >&2
    record cuda "$(elapsed "$t")" "FAILED" "$(asgd_cache_delta "$cache_before")"
    failed+=("cuda build")
  fi
fi

# ---- 4. sanitizers and fuzzing (CI, or ASGD_SANITIZERS=1; ASGD_SKIP_SANITIZERS=1 skips)
if [[ "${ASGD_SKIP_SANITIZERS:-0}" != "1" && ( "${CI:-}" == "true" || "${ASGD_SANITIZERS:-0}" == "1" ) ]]; then
  phase "sanitize: ASan+UBSan, libFuzzer, TSan (scripts/sanitize.sh)"
  if ! ASGD_TIMINGS_FILE="$timings_file" ./scripts/sanitize.sh; then
    failed+=("sanitizers")
  fi
else
  record sanitize "-" "skipped (runs in CI, or with ASGD_SANITIZERS=1)"
fi

# ---- 5. ctest
phase "ctest: --test-dir build --output-on-failure -j$ctest_jobs $*"
t=$(now)
set +e
ctest --test-dir build --output-on-failure -j "$ctest_jobs" "$@" 2>&1 | tee "$log"
ctest_rc=${PIPESTATUS[0]}
set -e
if [[ $ctest_rc -eq 0 ]]; then
  record ctest "$(elapsed "$t")" "ok"
else
  record ctest "$(elapsed "$t")" "FAILED (ctest exit $ctest_rc)"
  failed+=("ctest")
fi

# ---- summary: timings against budgets, failures, and ctest's summary line last
total=$(elapsed "$started")
echo
echo "== test.sh: phase timings (budgets on 2 cores: docs/ci.md)"
printf '  %-11s %8s  %8s  %-20s %s\n' phase seconds budget cache outcome
over=()
cold=0
while IFS='|' read -r name secs cache outcome; do
  budget=-
  if [[ -n "${budget_warm[$name]:-}" ]]; then
    budget=${budget_warm[$name]}
    if [[ $cache == cold* ]]; then budget=${budget_cold[$name]}; cold=1; fi
  fi
  mark=""
  if [[ $secs != - && $budget != - ]] && awk -v s="$secs" -v b="$budget" 'BEGIN { exit !(s > b) }'; then
    mark="  OVER BUDGET"
    over+=("$name")
  fi
  printf '  %-11s %8s  %8s  %-20s %s%s\n' "$name" "$secs" "$budget" "$cache" "$outcome" "$mark"
done <"$timings_file"
limit=1800
[[ $cold -eq 1 ]] && limit=2700
printf '  %-11s %8s  %8s  %s\n' total "$total" "$limit" "$([[ $cold -eq 1 ]] && echo "cold cache: 45 min" || echo "warm cache: 30 min")"
if [[ ${#over[@]} -gt 0 ]]; then
  echo "test.sh: over budget: ${over[*]} (a slower machine, or a suite that grew: docs/ci.md says what to do)"
fi
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "test.sh: FAILED: ${failed[*]}"
  if grep -q '^The following tests FAILED:' "$log"; then
    sed -n '/^The following tests FAILED:/,/^Errors while running CTest/p' "$log" | grep -v '^Errors while running CTest'
  fi
fi
summary=$(grep -E '^[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$log" | tail -n 1 || true)
if [[ -n "$summary" ]]; then
  echo "$summary"
else
  # no summary (e.g. "No tests were found!!!"): ctest's last words close the output
  grep -v '^[[:space:]]*$' "$log" | tail -n 1 || true
fi
[[ ${#failed[@]} -eq 0 ]]
