#!/usr/bin/env bash
# scripts/capture_contract.sh — what a refactor must leave identical, in one text file, so
# that a capture before and one after can be diffed (issue #44: "byte-identical outputs and
# identical list, validate and error messages"):
#   - every shipped config (experiments/configs/) run at the reduced size of
#     Configs/ShippedConfig.RunsAtReducedSize (tests/test_config.cpp): the sha256 of each run
#     folder's metrics.csv, staleness.csv, workers.csv, config.json and summary.json (its
#     wall_seconds, a wall-clock time, taken out); a config whose compute is "measured"
#     times this machine (a wall clock), so of its runs only config.json and the summary's
#     engine_config and status;
#   - `asgdsim list` and `asgdsim list --markdown`;
#   - `asgdsim validate`'s output and exit code for every shipped config and for bad engine
#     configs (unknown key and type, wrong types, every engine's cross-section checks), bad
#     model configs (each model's own checks, its checks against the data) and bad data
#     configs (each data set's keys and derived keys, its files, partitions, data/model
#     mismatches, and the combinations of an own error with a failing cross check);
#   - what `asgdsim cluster` refuses of an engine (check_real), under mpirun when there is one.
# usage: scripts/capture_contract.sh BUILD_DIR OUT_FILE   (run from anywhere; -j1, niced)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bin=$(cd "$1" && pwd)/asgdsim
out=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$repo"
: >"$out"
say() { printf '%s\n' "$*" >>"$out"; }
# Runs a command, appends its output (the temp folder's path written as TMP) and exit code.
record() {
  local shown="${*//$tmp/TMP}"
  say "\$ ${shown//$bin/asgdsim}"
  local rc=0
  nice -n 10 "$@" >"$tmp/o" 2>&1 || rc=$?
  sed "s#$tmp#TMP#g" "$tmp/o" >>"$out"
  say "exit $rc"
}

say "## list"
record "$bin" list
record "$bin" list --markdown

say "## shipped configs: validate"
for f in experiments/configs/*.json; do record "$bin" validate "$f"; done

say "## shipped configs at reduced size: sha256 of each run's files"
for f in experiments/configs/*.json; do
  stem=$(basename "$f" .json)
  size=(--set stop.epochs=0.02)
  measured=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("cluster",{}).get("compute",{}).get("dist",""))' "$f")
  if /usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])).get("data",{}); sys.exit(0 if d.get("type")=="fashion_mnist" and "train_limit" not in d else 1)' "$f"; then
    size=(--set stop.epochs=0.2 --set data.train_limit=6000)
  fi
  rc=0
  nice -n 10 "$bin" run "$f" --quiet --jobs 1 --threads 1 --out "$tmp/runs" "${size[@]}" --set repeats=1 \
    --set eval.test_samples=500 --set eval.train_samples=500 >"$tmp/o" 2>&1 || rc=$?
  say "# $stem: exit $rc"
  [ "$rc" = 0 ] || sed "s#$tmp#TMP#g" "$tmp/o" >>"$out"
  for d in "$tmp/runs/$stem"/*/; do
    [ -f "$d/summary.json" ] || continue
    grep -v '^  "wall_seconds": ' "$d/summary.json" >"$d/summary.stripped"  # the file as written, less its wall-clock time
    files=(metrics.csv staleness.csv workers.csv config.json summary.stripped)
    if [ "$measured" = measured ]; then
      /usr/bin/python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print(s["status"], json.dumps(s["engine_config"], sort_keys=True))' \
        "$d/summary.json" >"$d/summary.stripped"
      files=(config.json summary.stripped)
    fi
    for file in "${files[@]}"; do
      [ -f "$d/$file" ] && say "$(basename "$d")/$file $(sha256sum <"$d/$file" | cut -c1-64)"
    done
  done
  rm -rf "$tmp/runs"
done

say "## bad engine configs: validate"
cat >"$tmp/tiny.json" <<'EOF'
{"name": "tiny", "model": {"type": "softmax"},
 "data": {"type": "synthetic", "classes": 3, "features": 6, "train_samples": 128, "test_samples": 64},
 "train": {"batch_size": 8, "lr": 0.1}, "stop": {"updates": 10}, "eval": {"every": 5, "unit": "updates"},
 "cluster": {"workers": 2}, "engines": [{"type": "async"}]}
EOF
boxes='cluster.topology={"type":"boxes","boxes":2,"per_box":2}'
bad() { record "$bin" validate "$tmp/tiny.json" "${@/#/--set=}"; }
bad 'engines=[{"type":"async","bogus":1}]'
bad 'engines=[{"type":"asyncc"}]'
bad 'engines=[{"lr_staleness":"divide"}]'
bad 'engines=[{"type":"async","delay_compensation":"x"}]'
bad 'engines=[{"type":"async","lr_staleness":"halve","staleness_weight":3}]'
bad 'engines=[{"type":"sync","comm":1},{"type":"easgd","period":0,"order":"x"}]'
bad 'engines=[{"type":"async","delay_compensation":0.1}]' 'train.momentum=0.9'
bad 'engines=[{"type":"async","delay_compensation":0.1}]' 'train.optimizer=adam'
bad 'engines=[{"type":"async","delay_compensation":0.1,"bogus":1}]' 'train.momentum=0.9'
bad 'engines=[{"type":"async","delay_compensation":0.1}]' 'train.momentum=0.9' 'train.bogus=1'
bad 'engines=[{"type":"async","delay_compensation":0.1,"train":{"momentum":0.9}}]'
bad 'engines=[{"type":"async"},{"type":"async","name":"dc","delay_compensation":0.1}]' 'train.momentum=0.5'
bad 'engines=[{"type":"easgd","mode":"sync","alpha":0.9}]'
bad 'engines=[{"type":"easgd","alpha":"x"}]'
bad 'engines=[{"type":"easgd","alpha":2}]'
bad 'engines=[{"type":"easgd"}]' 'train.optimizer=adam' 'train.nesterov=true' 'train.momentum=0.9'
bad 'engines=[{"type":"easgd"}]' 'cluster.network.compression={"type":"topk"}'
bad 'engines=[{"type":"k_async","k":5}]'
bad 'engines=[{"type":"k_async","k":5,"batch":true}]'
bad 'engines=[{"type":"sync_backup","backups":2}]'
bad 'engines=[{"type":"sync","comm":"hierarchical"}]'
bad 'engines=[{"type":"sync","comm":"allreduce"}]' 'cluster.network.compression={"type":"int8"}'
bad 'engines=[{"type":"sync"}]' 'cluster.network.compression={"type":"powersgd"}'
bad 'engines=[{"type":"sync"}]' "$boxes" 'cluster.placement=host' 'cluster.network.compression={"type":"topk"}'
bad 'engines=[{"type":"sync_backup","backups":5,"comm":"hierarchical"}]' 'cluster.network.compression={"type":"topk"}'
bad 'engines=[{"type":"async"}]' 'cluster.network.compression={"type":"powersgd"}'
bad 'engines=[{"type":"async"}]' "$boxes" 'cluster.placement=host'
bad 'engines=[{"type":"mindflayer","budgets":[1,2,3]}]' 'staleness={"mode":"fixed","tau":2}'
bad 'engines=[{"type":"streaming_diloco","steps":4,"fragments":8}]'
bad 'engines=[{"type":"streaming_diloco","steps":8,"fragments":2,"overlap":4,"outer_momentum":0}]' 'cluster.network.compression={"type":"topk"}' 'cluster.failures={"rate":0.1}' 'staleness={"mode":"fixed","tau":2}'
bad 'engines=[{"type":"local_sgd","outer_nesterov":true}]' 'cluster.network.compression={"type":"topk"}'
bad 'engines=[{"type":"diloco","outer_momentum":0}]'
bad 'engines=[{"type":"async_local_sgd","nesterov_period":2}]'
bad 'engines=[{"type":"async_local_sgd","nesterov_period":2,"outer_nesterov":true,"outer_momentum":0}]'
bad 'engines=[{"type":"ssp","bound":-1},{"type":"ringmaster","delay_threshold":0},{"type":"k_batch_sync","k":0}]'

say "## bad model configs: validate"
none='data={"type":"none"}'
bad 'model={"type":"mlpp"}'
bad 'model={"type":"quadratic","dim":3,"curvature":[1,2]}' "$none"
bad 'model={"type":"quadratic","dim":3,"curvature":[1,-2]}' "$none"
bad 'model={"type":"quadratic","curvature":{"min":2,"max":1}}' "$none"
bad 'model={"type":"quadratic","dim":1000000000000}' "$none"
bad 'model={"type":"quadratic"}'
bad 'model={"type":"linear"}'
bad 'model={"type":"logistic"}'
bad 'model={"type":"sparse_logistic"}'
bad 'model={"type":"mlp","hidden":[0]}' 'data.task=regression'
bad 'model={"type":"cnn","conv":[{"channels":2,"kernel":5}],"hidden":[]}' 'data.features=9' 'data.image=[1,3,3]'
bad 'model={"type":"cnn","conv":[{"channels":2,"kernel":5}]}'
bad 'model={"type":"cnn","conv":[{"channels":0,"kernel":3}]}'
bad 'model={"type":"cnn","arch":"lenet5","hidden":[3]}'
bad 'model={"type":"torch","threads":0}'

say "## bad data configs: validate"
sparse='model={"type":"sparse_logistic"}'
bad 'data.bogus=1'
bad 'data=5'
bad 'data={"type":"bogus"}'
bad 'data={"type":"bogus"}' "$sparse"
bad 'data.classes=1' 'data.task=x' 'data.noise=-1'
bad 'data.image=[1,2]'
bad 'data.image=[0,2,2]'
bad 'data.image=[1,3,3]' 'data.features=8'
bad 'data.image=[1000,1000,1000]'
bad 'data={"type":"none","samples":0}' 'model={"type":"quadratic"}'
bad 'data={"type":"none"}'
bad 'data={"type":"fashion_mnist","path":"/nonexistent"}'
bad 'data={"type":"fashion_mnist","path":"/nonexistent","train_limit":-1}'
bad 'data={"type":"sparse_synthetic","features":10,"nnz":20}' "$sparse"
bad 'data={"type":"sparse_synthetic","features":10,"nnz":20,"noise":-1}' "$sparse"
bad 'data={"type":"sparse_synthetic","zipf":6,"classes":3}' "$sparse"
bad 'data={"type":"sparse_synthetic","classes":3}' "$sparse"
bad 'data={"type":"sparse_synthetic"}'
bad 'data={"type":"svmlight"}' "$sparse"
bad 'data={"type":"svmlight","path":"/nonexistent","test_path":"/nonexistent2"}' "$sparse"
bad 'data={"type":"svmlight","path":"/nonexistent","holdout":1,"index_base":2}' "$sparse"
bad 'data={"type":"svmlight","path":"/nonexistent","classes":3}' "$sparse"
bad 'data={"type":"torch"}'
bad 'data={"type":"torch","classes":-1}' 'model={"type":"torch"}'
bad 'data.task=regression'
bad 'data.task=regression' 'model={"type":"linear"}' 'data.partition=shards'
bad 'data.task=regression' 'data.classes=2' 'model={"type":"logistic"}'
bad 'data.classes=3' 'model={"type":"logistic"}'
bad 'model={"type":"linear"}' 'data.partition=bogus' 'data.task=regression'
bad 'model={"type":"cnn"}' 'data.noise=-1'
bad 'model={"type":"cnn"}' 'data.image=[1,8,8]' 'data.noise=-1'
bad 'data.partition=bogus' 'data.partition_alpha=0' 'data.partition_shards=0'
bad 'data.partition=shards' 'data.partition_shards=1000'
bad 'data.partition=dirichlet' 'data.train_samples=1'
bad 'data.partition=shards' 'data.partition_shards=1000' 'clients={"count":4,"speeds":{"dist":"constant","value":1}}'
bad 'data={"type":"none","partition":"shards"}' 'model={"type":"quadratic"}'

say "## cross-section checks: validate (each alone, then with an error of the section's own)"
sparse_data='data={"type":"sparse_synthetic"}'
bad 'stop={"updates":0}'
bad 'stop={"time":"x"}'
bad 'stop.target_accuracy=0.5' 'model={"type":"linear"}' 'data.task=regression'
bad 'stop={"updates":10,"target_accuracy":0.5,"time":"x"}' 'model={"type":"linear"}' 'data.task=regression'
bad 'staleness={"mode":"fixed","tau":2,"from_epoch":2,"until_epoch":1}'
bad 'staleness={"mode":"fixed","tau":2,"from_epoch":2,"until_epoch":1,"at":"x"}'
bad 'staleness={"mode":"per_layer","tau":[]}'
bad 'staleness={"mode":"per_layer","tau":[],"at":"x"}'
bad 'staleness={"mode":"per_layer","tau":[1]}' "$sparse" "$sparse_data"
bad 'staleness={"mode":"per_layer","tau":[1],"bogus":1}' "$sparse" "$sparse_data"
bad 'train.global_batch=7'
bad 'train.global_batch=40000000'
bad 'train.global_batch=7' 'train.lr=-1'
bad 'train.global_batch=40000000' 'train.bogus=1'
bad 'train.global_batch=7' 'cluster.workers=0'
bad 'engines=[{"type":"async"}]' "$boxes" 'cluster.placement=host' 'cluster.bogus=1'
bad 'engines=[{"type":"async"}]' 'cluster.placement=host'
bad 'engines=[{"type":"async"}]' 'cluster.placement=host' 'cluster.topology={"type":"star","bogus":1}'
bad 'engines=[{"type":"async"}]' 'cluster.network.compression={"type":"powersgd","rank":0}'
bad 'engines=[{"type":"sync"}]' 'cluster.network.compression={"type":"powersgd","rank":0}'
bad "$sparse" "$sparse_data" 'cluster.network.compression={"type":"topk"}'
bad "$sparse" "$sparse_data" 'cluster.network.compression={"type":"topk","ratio":2}'
bad 'clients={"count":1}'
bad 'clients={"count":1,"sampling":"x"}'
bad 'engines=[{"type":"easgd"}]' 'clients={"count":4}'
bad 'engines=[{"type":"easgd"}]' 'clients={"count":4,"sampling":"x"}'
bad 'engines=[{"type":"easgd","period":0}]' 'clients={"count":4}'
bad 'cluster.speeds=[1,2,3]'
bad 'cluster.speeds=[1,2,3]' 'cluster.bogus=1'
bad 'cluster.speeds=[1,"x",3]'
bad 'cluster.failures={"events":[{"worker":5,"at":1}]}'
bad 'cluster.failures={"events":[{"worker":5,"at":1}],"rate":-1}'
bad 'cluster.failures={"events":[{"worker":5,"at":1}]}' 'cluster.workers=0'
bad 'cluster.stragglers={"slow":[{"worker":5,"factor":2}]}'
bad 'cluster.stragglers={"slow":[{"worker":5,"factor":2}],"probability":2}'
bad 'cluster.stragglers={"slow":[{"worker":5,"factor":2,"bogus":1}]}'
bad 'eval={"every":1e-10,"unit":"time"}'
bad 'eval={"every":1e10,"unit":"time"}'
bad 'eval={"every":2.5,"unit":"updates"}'
bad 'eval={"every":2.5,"unit":"updates","bogus":1}'
bad 'eval={"every":1e-10,"unit":"time","train_samples":-1}'
bad 'train.lr_schedule={"scale":-1}'
bad 'train.lr_schedule={"scale":"x"}'
bad 'train.lr_schedule={"warmup_from":"x"}'
bad 'train.lr_schedule={"scale":"workers","warmup_from":-1}'
bad 'train.lr_schedule={"scale":-1,"type":"step","gamma":-1}'
bad 'train.lr_schedule={"scale":null,"warmup_from":[1]}'
bad 'engines=[{"type":"easgd","alpha":null}]'
bad 'engines=[{"type":"easgd","alpha":"autox"}]'
bad "$boxes" 'cluster.workers=3'
bad 'cluster.topology={"type":"boxes","boxes":2,"per_box":2,"bogus":1}' 'cluster.workers=3'
bad "$boxes" 'cluster.workers=3' 'cluster.bogus=1'
bad "$boxes" 'cluster.network.latency=0.1'
bad "$boxes" 'cluster.network={"latency":0.1,"bogus":1}'
bad "$boxes" 'cluster.network={"worker_bandwidth":"x"}'
bad 'cluster.compute={"dist":"flops","flops":"x"}'
bad 'cluster.compute={"dist":"flops","flops":-1}'
bad 'seed=-1' 'repeats=0'
bad 'seed="x"' 'repeats="y"'

say "## what asgdsim cluster refuses of an engine"
if command -v mpirun >/dev/null; then
  for e in '{"type":"sync","comm":"allreduce"}' '{"type":"sync_backup","late":"cancel"}' '{"type":"mindflayer"}' \
           '{"type":"streaming_diloco"}' '{"type":"ringmaster","late":"cancel"}' '{"type":"k_batch_sync"}'; do
    say "\$ mpirun -np 3 asgdsim cluster tiny.json --set engines=[$e]"
    rc=0
    nice -n 10 timeout 120 mpirun --allow-run-as-root --oversubscribe -np 3 "$bin" cluster "$tmp/tiny.json" \
      --out "$tmp/cl" --quiet "--set=engines=[$e]" >"$tmp/o" 2>&1 || rc=$?
    sed -n '/^---/q;p' "$tmp/o" | sed "s#$tmp#TMP#g" >>"$out"  # asgdsim's lines, not mpirun's
    say "exit $rc"
  done
else
  say "(no mpirun)"
fi
