#!/usr/bin/env bash
# scripts/lanes.sh — runs GoogleTest suites in parallel lanes, split into gtest shards, so
# that a suite of many tests keeps every core busy. Sourced by scripts/sanitize.sh (the
# suites under ASan+UBSan and TSan); not a general test runner (ctest is).
#
#   asgd_run_lanes DIR LANES SUITE[:SHARDS]...
#
# Each SUITE (a binary in DIR/tests/) runs as SHARDS processes (default 1), gtest's own
# sharding (GTEST_TOTAL_SHARDS / GTEST_SHARD_INDEX: test i goes to shard i mod SHARDS), at
# most LANES at a time, the jobs started in the order given (name the longest first). Every
# test of every suite runs exactly once, in a process of its suite, with the environment
# the caller exported (ASAN_OPTIONS, ...). Each job's output goes to DIR/lanes/SUITE.K.log;
# a line per finished job says how long it took. Returns non-zero when any job failed, after
# printing the end of each failed job's log.

# One job: DIR SUITE SHARD SHARDS (runs in a child bash: xargs starts it).
asgd_lane_job() {
  local dir=$1 suite=$2 shard=$3 shards=$4
  local log="$dir/lanes/$suite.$shard.log" start rc secs
  start=${EPOCHREALTIME}
  GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$shard "$dir/tests/$suite" --gtest_brief=1 >"$log" 2>&1
  rc=$?
  secs=$(awk -v a="$start" -v b="${EPOCHREALTIME}" 'BEGIN { printf "%.1f", b - a }')
  if [[ $rc -eq 0 ]]; then
    printf -- '-- %-24s shard %d/%d  %6ss  ok\n' "$suite" "$((shard + 1))" "$shards" "$secs"
  else
    printf -- '-- %-24s shard %d/%d  %6ss  FAILED (exit %d)\n' "$suite" "$((shard + 1))" "$shards" "$secs" "$rc"
    tail -n 60 "$log"
    echo "-- (whole log: $log)"
  fi
  return $rc
}
export -f asgd_lane_job

asgd_run_lanes() {
  local dir=$1 lanes=$2
  shift 2
  rm -rf "$dir/lanes"
  mkdir -p "$dir/lanes"
  local spec suite shards k
  for spec in "$@"; do
    suite=${spec%%:*}
    shards=1
    [[ $spec == *:* ]] && shards=${spec#*:}
    for ((k = 0; k < shards; k++)); do
      printf '%s %s %s %s\n' "$dir" "$suite" "$k" "$shards"
    done
  done | xargs -P "$lanes" -L 1 bash -c 'asgd_lane_job "$@"' _
}
