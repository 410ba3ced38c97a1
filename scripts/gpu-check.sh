#!/usr/bin/env bash
# scripts/gpu-check.sh — everything that can only be checked on a GPU, in one command:
# builds the CUDA backend with its tests, runs the whole ctest suite on it, runs
# `asgdsim bench` (a, b, f) with --batched-gradients 1, 4, 16 and 64 and (g) once, and the
# default experiment, and writes one report (Markdown). Exits non-zero when any step fails.
# On a machine without a GPU it says so and exits 0: nothing here can run there (CI
# compiles the same CUDA targets in scripts/test.sh).
#
#   ./scripts/gpu-check.sh [--build-dir DIR] [--prebuilt] [--steps tests,bench,experiment]
#                          [--report FILE] [--data DIR] [--quick] [--cpu-reference INDEX.csv]
#
#   --build-dir DIR   the CUDA build folder (default build-gpu/)
#   --prebuilt        use DIR as it is (built elsewhere with the same CUDA toolkit, e.g.
#                     on a machine that has the Debian packages a GPU machine may lack)
#   --steps LIST      which of tests, bench, experiment to run (default all three)
#   --report FILE     the report (default DIR/gpu-check-report.md)
#   --data DIR        the Fashion-MNIST folder (default /usr/share/datasets/fashion-mnist)
#   --quick           `asgdsim bench --quick` (seconds per K instead of a minute)
#   --cpu-reference F index.csv of the default experiment run on a CPU backend: the
#                     report then compares each run's test accuracy with it
#   --exclude REGEX   ctest -E REGEX (the report names what was left out)
# Environment: ASGD_CUDA_ARCH (CMAKE_CUDA_ARCHITECTURES for the build; default "native"),
# ASGD_JOBS (build jobs), ASGD_ACC_TOLERANCE (default 0.01: the largest |GPU - CPU|
# test accuracy accepted; rounding differs between cuBLAS and OpenBLAS, so runs drift).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

build=build-gpu
prebuilt=0
steps="tests,bench,experiment"
report=""
data=/usr/share/datasets/fashion-mnist
quick=()
cpu_ref=""
exclude=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --build-dir) build=$2; shift 2 ;;
    --prebuilt) prebuilt=1; shift ;;
    --steps) steps=$2; shift 2 ;;
    --report) report=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --quick) quick=(--quick); shift ;;
    --cpu-reference) cpu_ref=$2; shift 2 ;;
    --exclude) exclude=(-E "$2"); shift 2 ;;
    -h|--help) sed -n '2,24p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-check: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
for s in ${steps//,/ }; do
  case $s in tests|bench|experiment) ;; *) echo "gpu-check: unknown step '$s' (allowed: tests, bench, experiment)" >&2; exit 2 ;; esac
done
has_step() { [[ ",$steps," == *",$1,"* ]]; }

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "gpu-check: no GPU on this machine (nvidia-smi lists none); nothing to check. CI compiles the CUDA targets in scripts/test.sh."
  exit 0
fi

report=${report:-$build/gpu-check-report.md}
mkdir -p "$(dirname "$report")"
work=$(mktemp -d "${TMPDIR:-/tmp}/asgd-gpu.XXXXXX")
failed=()
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
say() { echo "$*" | tee -a "$report"; }

{
  echo "# asgdsim GPU check"
  echo
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "- commit: $(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
  echo "- GPU: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -n 1)"
  echo "- CPU cores: $(nproc)"
  echo
} >"$report"

# ---- build
if [[ $prebuilt -eq 0 ]]; then
  source scripts/deps.sh
  t=$(now)
  nvcc=${ASGD_CUDA_ROOT:-/usr/local/cuda}/bin/nvcc
  [[ -x $nvcc ]] || nvcc=$(command -v nvcc)
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DASGD_BACKEND=CUDA \
    -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_CUDA_ARCHITECTURES="${ASGD_CUDA_ARCH:-native}" \
    -DASGD_BUILD_TESTS=ON -DASGD_MPI=OFF
  cmake --build "$build" -j "${ASGD_JOBS:-$(nproc)}"
  say "- build: $build ($(secs "$t") s)"
else
  say "- build: $build, prebuilt"
fi
bin=$build/asgdsim
[[ -x $bin ]] || { echo "gpu-check: $bin is missing (build it, or drop --prebuilt)" >&2; exit 1; }
grep -q '"backend": *"CUDA"\|backend.*CUDA' <("$bin" --version 2>&1) ||
  { echo "gpu-check: $bin is not a CUDA build: $("$bin" --version 2>&1 | head -n 1)" >&2; exit 1; }
echo >>"$report"

# ---- tests: the whole ctest suite on the GPU
if has_step tests; then
  say "## Tests (ctest, CUDA backend)"
  t=$(now)
  set +e
  [[ ${#exclude[@]} -eq 0 ]] || say "- left out: tests matching '${exclude[1]}' (--exclude)"
  ctest --test-dir "$build" --output-on-failure -j "$(nproc)" "${exclude[@]}" >"$work/ctest.log" 2>&1
  rc=$?
  set -e
  cat "$work/ctest.log"
  {
    echo
    grep -E '^[0-9]+% tests passed' "$work/ctest.log" | tail -n 1 | sed 's/^/- /'
    echo "- time: $(secs "$t") s"
    if grep -q '^The following tests did not run:' "$work/ctest.log"; then
      echo "- skipped (each test says why in the log):"
      sed -n '/^The following tests did not run:/,/^$/p' "$work/ctest.log" |
        grep -E '^[[:space:]]+[0-9]+ - ' | sed 's/^[[:space:]]*/  - /'
    fi
    if grep -q '^The following tests FAILED:' "$work/ctest.log"; then
      echo "- failed:"
      sed -n '/^The following tests FAILED:/,/^Errors while running CTest/p' "$work/ctest.log" |
        grep -E '^[[:space:]]+[0-9]+ - ' | sed 's/^[[:space:]]*/  - /'
    fi
    echo
  } >>"$report"
  [[ $rc -eq 0 ]] || failed+=("tests")
fi

# ---- bench: batched gradients K = 1, 4, 16, 64 on the MLP (a, b) and the CNN (f); the
# sparse workload (g) once, since it has no batched form
if has_step bench; then
  say "## Benchmark (asgdsim bench --only a,b,f ${quick[*]}; --only g)"
  for k in 1 4 16 64; do
    echo "gpu-check: bench --batched-gradients $k"
    if ! "$bin" bench --only a,b,f "${quick[@]}" --data "$data" --batched-gradients "$k" \
         --json "$work/bench-$k.jsonl"; then
      failed+=("bench K=$k")
    fi
  done
  echo "gpu-check: bench --only g"
  "$bin" bench --only g "${quick[@]}" --data "$data" --json "$work/bench-g.jsonl" || failed+=("bench g")
  # One row per workload and K: the simulated and bare rates and their ratio, and each
  # side's arithmetic (the JSON's flops_per_gradient) as a fraction of the GPU's FP32 peak.
  python3 - "$work" "$report" <<'EOF'
import json, os, subprocess, sys
work, report = sys.argv[1], sys.argv[2]
rows = []
for k in ["1", "4", "16", "64", "g"]:
    f = os.path.join(work, f"bench-{k}.jsonl")
    if not os.path.exists(f):
        continue
    for line in open(f):
        line = line.strip()
        if line.startswith("{"):
            rows.append(json.loads(line))
# FP32 peak: SMs x FP32 lanes per SM (128 on sm_80+/sm_90) x 2 (FMA) x max SM clock.
peak = None
try:
    q = subprocess.run(["nvidia-smi", "--query-gpu=clocks.max.sm,name", "--format=csv,noheader,nounits"],
                       capture_output=True, text=True, check=True).stdout.strip().splitlines()[0]
    mhz = float(q.split(",")[0])
    sms = None
    try:
        import torch  # optional: the SM count; absent elsewhere
        sms = torch.cuda.get_device_properties(0).multi_processor_count
    except Exception:
        pass
    if sms:
        peak = sms * 128 * 2 * mhz * 1e6
except Exception:
    pass
with open(report, "a") as out:
    out.write("\n| workload | engine | K | simulated | bare | ratio | gradients/s (sim) | MFLOP/gradient "
              "| GFLOP/s sim | GFLOP/s bare | roofline sim | roofline bare |\n")
    out.write("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
    for r in rows:
        grads = r.get("gradients", 0) / max(r.get("sim_seconds", 1e-12), 1e-12)
        fl = r.get("flops_per_gradient", 0)
        sg, bg = r.get("sim_gflops", 0), r.get("bare_gflops", 0)
        frac = lambda g: f"{g * 1e9 / peak:.2e}" if peak and fl else "n/a"
        out.write(f"| {r.get('workload')} | {r.get('engine')} | {r.get('batched_gradients', 1)} | "
                  f"{r.get('sim_rate', 0):,.0f} {r.get('rate_unit', '')} | {r.get('bare_rate', 0):,.0f} | "
                  f"{r.get('ratio', 0):.2f} | {grads:,.0f} | {fl / 1e6:.1f} | {sg:.1f} | {bg:.1f} | "
                  f"{frac(sg)} | {frac(bg)} |\n")
    if peak:
        out.write(f"\nFP32 peak taken as {peak / 1e12:.1f} TFLOP/s (SMs x 128 lanes x 2 x max SM clock). "
                  "FLOPs per gradient: Model::flops_per_sample() x batch (GEMMs only; see docs/benchmarks.md).\n\n")
EOF
fi

# ---- the default experiment
if has_step experiment; then
  say "## Default experiment (experiments/configs/default.json)"
  t=$(now)
  if "$bin" run experiments/configs/default.json --out "$work/runs" --set "data.path=\"$data\"" --quiet; then
    say "- time: $(secs "$t") s"
    python3 - "$work/runs/default/index.csv" "$report" "$cpu_ref" "${ASGD_ACC_TOLERANCE:-0.01}" <<'EOF' || failed+=("experiment vs CPU")
import csv, sys
index, report, ref, tol = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
gpu = {r["run_id"]: r for r in csv.DictReader(open(index))}
cpu = {r["run_id"]: r for r in csv.DictReader(open(ref))} if ref else {}
bad = []
with open(report, "a") as out:
    out.write("\n| run | status | final train loss | test accuracy (GPU) | test accuracy (CPU) | difference |\n")
    out.write("| --- | --- | --- | --- | --- | --- |\n")
    for rid, r in gpu.items():
        acc = float(r["final_test_accuracy"])
        c = cpu.get(rid)
        if c:
            d = acc - float(c["final_test_accuracy"])
            if abs(d) > tol or r["status"] != "completed":
                bad.append(rid)
            out.write(f"| {rid} | {r['status']} | {float(r['final_train_loss']):.4f} | {acc:.4f} | {float(c['final_test_accuracy']):.4f} | {d:+.4f} |\n")
        else:
            out.write(f"| {rid} | {r['status']} | {float(r['final_train_loss']):.4f} | {acc:.4f} | | |\n")
    if ref:
        out.write(f"\nTolerance: |difference| <= {tol}. " + (f"Outside it: {', '.join(bad)}\n" if bad else "All within it.\n"))
sys.exit(1 if bad else 0)
EOF
  else
    failed+=("experiment")
  fi
fi

echo >>"$report"
if [[ ${#failed[@]} -gt 0 ]]; then
  say "**gpu-check: FAILED: ${failed[*]}**"
  echo "gpu-check: report in $report" >&2
  exit 1
fi
say "gpu-check: every step passed."
echo "gpu-check: report in $report"
