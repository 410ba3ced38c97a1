#!/usr/bin/env bash
# scripts/reduced_coverage.sh — checks that the tests the sanitizers run at a reduced size
# (tests/test_helpers.h: reduced_size()) execute the same code at both sizes, so that
# running them smaller under ASan/UBSan and TSan cannot miss a finding the full size would
# reach. Not part of CI (it builds a coverage build, minutes); docs/ci.md records its answer
# and says when to run it again (when a test gains a reduced size, or its code changes).
#
#   ./scripts/reduced_coverage.sh [SUITE:FILTER ...]
#
# Builds build-cov/ (clang source-based coverage, -O1, no sanitizer), runs each SUITE with
# gtest FILTER twice, ASGD_TEST_SIZE=full and ASGD_TEST_SIZE=reduced (every asgdsim process
# a test starts writes its own profile), and compares the lines of sim/, engines/,
# experiments/ and kernels/ each size executed. Prints, per test, the executed line counts
# and every line the full size ran that the reduced size did not; exits 1 if there is any.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/deps.sh
source scripts/deps.sh
asgd_ensure_deps
asgd_compiler_cache >/dev/null

tests=("$@")
if [[ ${#tests[@]} -eq 0 ]]; then
  tests=(test_engines:CnnAccuracy.LeNetSyncLearnsFashionMnistAtReducedSize
         test_time_model:Studies.BandwidthKneeIsTheClosedForm
         test_measured_compute:MeasuredCompute.AsyncStalenessFollowsTheLawOfIndependentWorkers)
fi
profdata=$(command -v llvm-profdata-14 || command -v llvm-profdata)
llvmcov=$(command -v llvm-cov-14 || command -v llvm-cov)
jobs=${ASGD_JOBS:-$(nproc 2>/dev/null || echo 2)}

flags="-O1 -fprofile-instr-generate -fcoverage-mapping"
cmake -S . -B build-cov -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=$flags -DNDEBUG" "-DCMAKE_EXE_LINKER_FLAGS=-fprofile-instr-generate" \
  -DASGD_BACKEND=OMP -DASGD_PYTHON=OFF -DCUDAToolkit_ROOT="$ASGD_CUDA_ROOT" "${ASGD_CACHE_ARGS[@]}" >/dev/null
suites=()
for t in "${tests[@]}"; do suites+=("${t%%:*}"); done
cmake --build build-cov -j "$jobs" --target asgdsim "${suites[@]}" >/dev/null

# Executed lines of the project's sources as "FILE:LINE", one per line, sorted.
executed_lines() {  # profdata, binaries...
  local data=$1
  shift
  local objects=()
  for b in "$@"; do objects+=(-object "$b"); done
  "$llvmcov" export -format=lcov -instr-profile="$data" "${objects[@]}" 2>/dev/null |
    awk '/^SF:/ { file = substr($0, 4)
                  if (match(file, /(^|\/)(sim|engines|experiments|kernels)\//)) {
                    file = substr(file, RSTART); sub(/^\//, "", file)
                  } else file = "" }
         /^DA:/ && file != "" { split(substr($0, 4), a, ","); if (a[2] > 0) print file ":" a[1] }' |
    sort -u
}

status=0
for t in "${tests[@]}"; do
  suite=${t%%:*} filter=${t#*:}
  for size in full reduced; do
    dir=build-cov/profiles/$suite.$filter.$size
    rm -rf "$dir"
    mkdir -p "$dir"
    start=$(now)
    LLVM_PROFILE_FILE="$PWD/$dir/%p.profraw" ASGD_TEST_SIZE=$size \
      "build-cov/tests/$suite" --gtest_filter="$filter" --gtest_brief=1 >"$dir.log" 2>&1 ||
      { echo "$suite $filter ($size) failed: $dir.log" >&2; exit 1; }
    echo "$filter $size: $(elapsed "$start") s"
    "$profdata" merge -sparse "$dir"/*.profraw -o "$dir.profdata"
    executed_lines "$dir.profdata" "build-cov/tests/$suite" build-cov/asgdsim >"$dir.lines"
  done
  full=build-cov/profiles/$suite.$filter.full.lines
  reduced=build-cov/profiles/$suite.$filter.reduced.lines
  missed=$(comm -23 "$full" "$reduced")
  echo "$filter: full size executed $(wc -l <"$full") lines, reduced $(wc -l <"$reduced");" \
       "full only: $(if [[ -z "$missed" ]]; then echo 0; else echo "$missed" | wc -l; fi)"
  if [[ -n "$missed" ]]; then
    echo "$missed" | sed 's/^/  full only: /'
    status=1
  fi
done
exit $status
