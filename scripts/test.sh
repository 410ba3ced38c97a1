#!/usr/bin/env bash
# scripts/test.sh — installs what is missing, builds, runs every test. .ci/run calls it.
#
#   ./scripts/test.sh [CTEST ARGS...]        e.g. ./scripts/test.sh -R Sync
#
# Phases (each timed):
#   1. deps    Debian packages and CUDA toolkit headers (scripts/deps.sh)
#   2. build   Release, ASGD_BACKEND=OMP, ASGD_MPI=ON (Open MPI from deps), into build/
#              (tests included; the MPI tests run asgdsim under mpirun on loopback)
#   3. cuda    when nvcc exists: ASGD_BACKEND=CUDA into build-cuda/ with the tests, compile
#              and link only (nothing CUDA runs here; scripts/gpu-check.sh runs them on a
#              GPU). ASGD_SKIP_CUDA=1 skips it.
#   4. sanitize  in CI (CI=true) or with ASGD_SANITIZERS=1: scripts/sanitize.sh (the
#              suites under ASan+UBSan and TSan, and bounded libFuzzer runs);
#              ASGD_SKIP_SANITIZERS=1 skips it.
#   5. ctest   ctest --test-dir build --output-on-failure -j2 [CTEST ARGS]
# The closing line of the output is ctest's summary ("100% tests passed, ..."). Exits
# non-zero when any phase fails; a failed CUDA build still lets ctest run first.
# Environment: ASGD_JOBS (build jobs, default nproc), ASGD_SKIP_CUDA=1, ASGD_CTEST_JOBS
# (default 2), ASGD_MPI=OFF (build without MPI: no mpirun sweeps, no asgdsim cluster).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/deps.sh
source scripts/deps.sh   # asgd_ensure_deps, now, elapsed

phase() { echo; echo "== test.sh: $*"; }
timings=()
record() {  # phase, seconds (or - when skipped), outcome
  local secs=$2
  [[ $secs == - ]] || secs="${secs}s"
  timings+=("$(printf '  %-7s %8s  %s' "$1" "$secs" "$3")")
}

jobs=${ASGD_JOBS:-$(nproc 2>/dev/null || echo 2)}
ctest_jobs=${ASGD_CTEST_JOBS:-2}
failed=()

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
asgd_ensure_deps
echo "deps: all present (CUDA toolkit: $ASGD_CUDA_ROOT)"
asgd_compiler_cache   # ASGD_CACHE_ARGS
record deps "$(elapsed "$t")" "ok"

# ---- 2. build (OMP)
mpi=${ASGD_MPI:-ON}
phase "build: Release, ASGD_BACKEND=OMP, ASGD_MPI=$mpi -> build/ (-j$jobs)"
t=$(now)
configure build -DASGD_BACKEND=OMP -DASGD_MPI="$mpi"
cmake --build build -j "$jobs"
record build "$(elapsed "$t")" "ok (OMP, MPI $mpi, build/)"

# ---- 3. cuda (compile and link only)
nvcc=""
if [[ -x "$ASGD_CUDA_ROOT/bin/nvcc" ]]; then
  nvcc="$ASGD_CUDA_ROOT/bin/nvcc"
elif command -v nvcc >/dev/null 2>&1; then
  nvcc=$(command -v nvcc)
fi
if [[ "${ASGD_SKIP_CUDA:-0}" == "1" ]]; then
  record cuda "-" "skipped (ASGD_SKIP_CUDA=1)"
elif [[ -z "$nvcc" ]]; then
  record cuda "-" "skipped (no nvcc)"
else
  phase "cuda: ASGD_BACKEND=CUDA -> build-cuda/ (tests included), compile and link only ($nvcc, -j$jobs)"
  t=$(now)
  if configure build-cuda -DASGD_BACKEND=CUDA -DCMAKE_CUDA_COMPILER="$nvcc" -DASGD_BUILD_TESTS=ON -DASGD_MPI=OFF &&
     cmake --build build-cuda -j "$jobs"; then
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
      gpu_note="a GPU is visible: scripts/gpu-check.sh runs the CUDA tests on it"
    else
      gpu_note="no GPU here"
    fi
    echo "cuda: the CUDA backend and its tests compiled and linked (build-cuda/); nothing CUDA was run ($gpu_note)."
    record cuda "$(elapsed "$t")" "ok (compiled and linked, not run)"
  else
    echo "cuda: FAILED: the CUDA backend did not compile or link (see above); ASGD_SKIP_CUDA=1 skips this step" >&2
    record cuda "$(elapsed "$t")" "FAILED"
    failed+=("cuda build")
  fi
fi

# ---- 4. sanitizers and fuzzing (CI, or ASGD_SANITIZERS=1; ASGD_SKIP_SANITIZERS=1 skips)
if [[ "${ASGD_SKIP_SANITIZERS:-0}" != "1" && ( "${CI:-}" == "true" || "${ASGD_SANITIZERS:-0}" == "1" ) ]]; then
  phase "sanitize: ASan+UBSan, libFuzzer, TSan (scripts/sanitize.sh)"
  t=$(now)
  if ./scripts/sanitize.sh; then
    record sanitize "$(elapsed "$t")" "ok (clean)"
  else
    record sanitize "$(elapsed "$t")" "FAILED"
    failed+=("sanitizers")
  fi
else
  record sanitize "-" "skipped (runs in CI, or with ASGD_SANITIZERS=1)"
fi

# ---- 5. ctest
phase "ctest: --test-dir build --output-on-failure -j$ctest_jobs $*"
t=$(now)
log=$(mktemp "${TMPDIR:-/tmp}/asgd-ctest.XXXXXX")
trap 'rm -f "$log"' EXIT
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

# ---- summary: timings, failures, and ctest's summary line last
echo
echo "== test.sh: phase timings"
printf '%s\n' "${timings[@]}"
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
