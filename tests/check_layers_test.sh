#!/usr/bin/env bash
# tests/check_layers_test.sh SOURCE_DIR — tests/check_layers.sh catches what it is for: on a
# copy of the tree it passes, then each planted include (a floor including one above it,
# a sibling on its floor, a folder on no floor) must make it fail naming the file.
set -u
src=$(cd "${1:-.}" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
mkdir -p "$tmp/clean"
(cd "$src" && find kernels sim engines experiments \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) \
  -print0 | tar cf - --null -T -) | (cd "$tmp/clean" && tar xf -)
fresh() {
  rm -rf "$tmp/tree"
  cp -r "$tmp/clean" "$tmp/tree"
}
expect() {  # what, file, include line, text the failure must name
  fresh
  [[ $2 == */ ]] && { mkdir -p "$tmp/tree/$2"; set -- "$1" "$2planted.h" "$3" "$4"; }
  echo "$3" >>"$tmp/tree/$2"
  local out rc
  out=$(bash "$src/tests/check_layers.sh" "$tmp/tree" 2>&1)
  rc=$?
  if [[ $rc -ne 1 ]] || ! grep -qF -- "$4" <<<"$out"; then
    echo "FAIL: $1: exit $rc, output:"
    echo "$out"
    fail=1
  else
    echo "ok: $1"
  fi
}
fresh
if ! out=$(bash "$src/tests/check_layers.sh" "$tmp/tree" 2>&1); then
  echo "FAIL: the unchanged tree does not pass:"
  echo "$out"
  exit 1
fi
echo "ok: the unchanged tree passes"
expect "the ground includes the roof" sim/base/time.h '#include "sim/core/simulation.h"' "sim/base/time.h"
expect "a sibling on one floor" sim/models/catalog.h '#include "sim/timing/distribution.h"' "sim/models/catalog.h"
expect "experiments' config includes the runner" experiments/config/config.h '#include "experiments/run/runner.h"' "experiments/config/config.h"
expect "the vocabulary includes a component" sim/config/field.h '#include "sim/data/catalog.h"' "sim/config/field.h"
expect "sim includes an engine" sim/core/engine.h '#include "engines/async.h"' "sim/core/engine.h"
expect "a folder on no floor" sim/extra/ '#include "sim/base/time.h"' "sim/extra/ is on no floor"
exit $fail
