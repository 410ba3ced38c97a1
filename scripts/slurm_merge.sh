#!/usr/bin/env bash
#SBATCH --job-name=asgdsim-merge
#SBATCH --time=00:15:00
# scripts/slurm_merge.sh — after scripts/slurm_sweep.sbatch's array: rebuilds
# SHARED_OUT/<name>/index.csv from the run folders the tasks copied there (asgdsim index),
# then checks that every run the config makes has its results, naming those that do not
# (docs/slurm.md).
#
#   sbatch --dependency=afterany:JOBID scripts/slurm_merge.sh CONFIG.json SHARED_OUT [--set ...]
#
# Give it the --set options the array had. Environment: ASGDSIM as for slurm_sweep.sbatch.
# Exit code: 0 every run is there, 1 some are missing, asgdsim's (2) when it refuses.
set -euo pipefail
config=$1
shared=$2
shift 2
asgdsim=${ASGDSIM:-${SLURM_SUBMIT_DIR:-.}/build/asgdsim}
# "N run(s) for experiment 'NAME':", then a line per run in run order, its id first
listing=$("$asgdsim" validate "$config" "$@")
name=$(sed -n "1s/^[0-9]* run(s) for experiment '\(.*\)':\$/\1/p" <<<"$listing")
[ -n "$name" ] || { echo "slurm_merge: cannot read the experiment's name from asgdsim validate" >&2; exit 1; }
"$asgdsim" index "$shared/$name"
missing=()
k=0
while read -r id _; do
  [ -f "$shared/$name/$id/summary.json" ] || missing+=("$id (run $k)")
  k=$((k + 1))
done < <(tail -n +2 <<<"$listing")
if [ ${#missing[@]} -gt 0 ]; then
  echo "slurm_merge: ${#missing[@]} of $k runs have no results in $shared/$name: ${missing[*]}" >&2
  echo "slurm_merge: run k is array task k mod K's (K tasks): re-submit those tasks (sbatch --array=I,...), then this" >&2
  exit 1
fi
echo "slurm_merge: all $k runs are in $shared/$name; report: /usr/bin/python3 analysis/plot.py $shared/$name"
