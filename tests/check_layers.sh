#!/usr/bin/env bash
# tests/check_layers.sh SOURCE_DIR — the include rule of docs/architecture.md, checked:
# a lower layer never includes a higher one (kernels <- sim <- engines <- experiments),
# and the config vocabulary (sim/config/) sits below every component, including only
# itself and sim/core's time and error types. Prints each offending include; exits 1.
set -u
cd "${1:-.}" || exit 2
bad=0
check() {  # folder, regex of includes it must not have, why
  local hits
  hits=$(grep -rnE "^#include \"($2)" "$1" --include='*.h' --include='*.cpp' --include='*.cu' --include='*.cuh' || true)
  if [[ -n "$hits" ]]; then
    echo "$3:"
    echo "$hits"
    bad=1
  fi
}
check kernels 'sim/|engines/|experiments/' "kernels/ includes a higher layer"
check sim 'engines/|experiments/' "sim/ includes a higher layer"
check engines 'experiments/' "engines/ includes a higher layer"
hits=$(grep -rnE '^#include "sim/' sim/config | grep -vE '"sim/(config/|core/time\.h|core/errors\.h)' || true)
if [[ -n "$hits" ]]; then
  echo "sim/config/ includes a component above it:"
  echo "$hits"
  bad=1
fi
[[ $bad -eq 0 ]] && echo "layers: no include runs upward"
exit $bad
