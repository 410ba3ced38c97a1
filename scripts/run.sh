#!/usr/bin/env bash
# scripts/run.sh — installs what is missing, builds Release into build/, runs an
# experiment into runs/, renders its plots and report, and prints where they are.
#
#   ./scripts/run.sh [CONFIG] [run options...]
#
# CONFIG defaults to experiments/configs/default.json. Run options go to `asgdsim run`
# as they are: --set KEY.PATH=VALUE, --out DIR (default runs), --threads N, --rerun,
# --supersede, --quiet, --trace. The backend is OMP unless ASGD_BACKEND (CUDA, OMP, CPP, Auto) is set
# in the environment. Exit code: asgdsim's (0 done, 2 invalid input, 1 other failure,
# 130 interrupted); 1 if the build or the plotting fails.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/deps.sh
source scripts/deps.sh   # asgd_ensure_deps, now, elapsed

phase() { echo; echo "== run.sh: $*"; }
timings=()
record() { timings+=("$(printf '  %-6s %7ss' "$1" "$2")"); }

config=experiments/configs/default.json
if [[ $# -gt 0 && "$1" != -* ]]; then
  config=$1
  shift
fi
if [[ ! -f "$config" ]]; then
  echo "run.sh: no such config file: $config" >&2
  exit 2
fi
# The output folder: asgdsim's --out if given, else runs/ (passed explicitly).
out=""
args=("$@")
for ((i = 0; i < ${#args[@]}; ++i)); do
  case "${args[i]}" in
    --out) out=${args[i + 1]:-} ;;
    --out=*) out=${args[i]#--out=} ;;
  esac
done
out_args=()
if [[ -z "$out" ]]; then
  out=runs
  out_args=(--out runs)
fi
backend=${ASGD_BACKEND:-OMP}
jobs=${ASGD_JOBS:-$(nproc 2>/dev/null || echo 2)}

# ---- deps
phase "deps"
t=$(now)
asgd_ensure_deps
asgd_compiler_cache   # ASGD_CACHE_ARGS
record deps "$(elapsed "$t")"

# ---- build (the asgdsim binary and, where it is on, the Python package build/python/asgdsim;
# the tests are scripts/test.sh's business)
phase "build: Release, ASGD_BACKEND=$backend -> build/ (-j$jobs)"
t=$(now)
gen=(-G Ninja)
if [[ -f build/CMakeCache.txt ]] && ! grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$' build/CMakeCache.txt; then
  gen=()   # reuse the generator build/ was first configured with
fi
cuda=()
if [[ "$backend" == "CUDA" || "$backend" == "Auto" ]]; then
  if [[ -x "$ASGD_CUDA_ROOT/bin/nvcc" ]]; then
    cuda=(-DCMAKE_CUDA_COMPILER="$ASGD_CUDA_ROOT/bin/nvcc")
  elif command -v nvcc >/dev/null 2>&1; then
    cuda=(-DCMAKE_CUDA_COMPILER="$(command -v nvcc)")
  fi
fi
cmake -S . -B build "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DASGD_BACKEND="$backend" \
  -DCUDAToolkit_ROOT="$ASGD_CUDA_ROOT" "${cuda[@]}" "${ASGD_CACHE_ARGS[@]}"
targets=(asgdsim)
if grep -q '^ASGD_PYTHON:BOOL=ON$' build/CMakeCache.txt; then
  targets+=(asgdsim_python)   # the extension and the package's .py files (docs/python.md)
else
  echo "run.sh: the Python package is off in build/ (ASGD_PYTHON: no pybind11-dev/python3-dev, or the CUDA backend)"
fi
cmake --build build -j "$jobs" --target "${targets[@]}"
record build "$(elapsed "$t")"

# ---- validate: fails fast on a bad config and names the experiment (its folder)
set +e
listing=$(build/asgdsim validate "$config" "$@")
rc=$?
set -e
if [[ $rc -ne 0 ]]; then
  exit "$rc"
fi
name=$(sed -n "s/^[0-9][0-9]* run(s) for experiment '\(.*\)':\$/\1/p" <<<"$listing" | head -n 1)
if [[ -z "$name" ]]; then
  echo "run.sh: could not read the experiment name from 'asgdsim validate':" >&2
  echo "$listing" >&2
  exit 1
fi
exp_dir="$out/$name"

# ---- run
phase "run: build/asgdsim run $config${out_args[*]:+ ${out_args[*]}}${*:+ $*}"
t=$(now)
set +e
build/asgdsim run "$config" "${out_args[@]}" "$@"
rc=$?
set -e
record run "$(elapsed "$t")"
if [[ $rc -ne 0 ]]; then
  case $rc in
    130) echo "run.sh: interrupted; finished runs and the partial one are in $exp_dir/ (re-running resumes)" >&2 ;;
    2) echo "run.sh: asgdsim rejected the input (exit 2)" >&2 ;;
    *) echo "run.sh: asgdsim failed (exit $rc); runs finished so far are in $exp_dir/" >&2 ;;
  esac
  exit "$rc"
fi

# ---- plots and report (analysis/ needs Debian's python3, which has matplotlib)
phase "plot: analysis/plot.py $exp_dir"
t=$(now)
python=/usr/bin/python3
[[ -x "$python" ]] || python=python3
"$python" analysis/plot.py "$exp_dir"
record plot "$(elapsed "$t")"

runs=$(find "$exp_dir" -mindepth 2 -maxdepth 2 -name config.json | wc -l)
echo
echo "== run.sh: timings"
printf '%s\n' "${timings[@]}"
echo
echo "== run.sh: results of experiment '$name'"
echo "  run folders: $exp_dir/<run_id>/  ($runs runs; one row each in $exp_dir/index.csv)"
echo "  figures:     $exp_dir/figure_*.png"
echo "  report:      $exp_dir/report.html  (also report.md, summary_table.csv)"
if [[ " ${targets[*]} " == *" asgdsim_python "* ]]; then
  echo "  from Python: PYTHONPATH=$PWD/build/python /usr/bin/python3 -c 'import asgdsim'  (docs/python.md)"
fi
