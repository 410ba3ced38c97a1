#!/usr/bin/env bash
# scripts/bench_hardening.sh [BUILD_DIR] — the two speed floors of issue #42, measured (a
# benchmark, not a test: docs/benchmarks.md keeps the figures):
#   1. `asgdsim validate` of 50,000 runs (experiments/configs/default.json, 4 engines x
#      12,500 repeats): under 5 s wall on an idle machine.
#   2. analysis/plot.py on 2,000,000 metrics rows (an experiment of 2 runs x 1,000,000
#      rows, made by `asgdsim run` and then given long metrics.csv files): under 10 s and
#      1.2 GB peak resident memory.
# Each is run REPEATS times (default 3); prints wall, user and system seconds and the
# peak resident memory (GNU time). Needs /usr/bin/time and Debian's python3 with pandas
# and matplotlib.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
repeats=${REPEATS:-3}
bin=$build/asgdsim
[[ -x $bin ]] || { echo "bench_hardening: no $bin (build first)" >&2; exit 2; }
work=$(mktemp -d /tmp/asgd-bench-hardening.XXXXXX)
trap 'rm -rf "$work"' EXIT
measure() {  # label, command...
  local label=$1
  shift
  for ((i = 1; i <= repeats; ++i)); do
    /usr/bin/time -f "$label: %e s wall, %U s user, %S s system, %M KB peak" "$@" > /dev/null 2> "$work/time.txt" ||
      { cat "$work/time.txt" >&2; exit 1; }
    tail -1 "$work/time.txt"
  done
}

measure "validate, 50000 runs" "$bin" validate experiments/configs/default.json --set repeats=12500

cat > "$work/c.json" <<'EOF'
{"name": "rows", "model": {"type": "quadratic", "dim": 10}, "cluster": {"workers": 2},
 "stop": {"updates": 200}, "engines": [{"type": "async"}, {"type": "sync"}]}
EOF
"$bin" run "$work/c.json" --quiet --out "$work/out" > /dev/null
for run in async-seed1 sync-seed1; do  # 1,000,000 rows each, in metrics.csv's own columns
  csv=$work/out/rows/$run/metrics.csv
  header=$(head -1 "$csv")
  { echo "$header"
    awk -v cols="$(echo "$header" | tr ',' '\n' | wc -l)" 'BEGIN {
      for (i = 0; i < 1000000; ++i) {
        line = sprintf("%.9g,%d,%d,%d,%.9g", i * 0.001, i, i, i * 32, i / 1875.0)
        for (c = 6; c <= cols; ++c) line = line "," sprintf("%.9g", 1.0 / (1 + i * 1e-4) + c * 1e-3)
        print line
      } }'
  } > "$csv.new"
  mv "$csv.new" "$csv"
done
measure "plot.py, 2000000 metrics rows" /usr/bin/python3 analysis/plot.py "$work/out/rows" --out "$work/figures" --format png
