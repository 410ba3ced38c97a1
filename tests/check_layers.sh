#!/usr/bin/env bash
# tests/check_layers.sh SOURCE_DIR — the include rule of docs/architecture.md, checked:
# a lower layer never includes a higher one (kernels <- sim <- engines <- experiments), and
# inside sim/ and experiments/ the folders are floors with the same rule: a folder includes
# itself and the floors below it, never a floor above or a sibling on its own floor.
# Prints each offending include; exits 1.
set -u
cd "${1:-.}" || exit 2

# The floors, lowest first; folders in one string share a floor and do not include each
# other. Every folder of sources must be named here (a new folder is placed on purpose).
sim_floors=(base config data 'models timing net' run core)
experiments_floors=(config run bench cluster cli)

ranks() {  # layer floors... -> "layer/folder rank" lines
  local layer=$1 i dir
  shift
  for ((i = 0; i < $#; i++)); do
    local floor=("${@:i+1:1}")
    for dir in ${floor[0]}; do echo "$layer/$dir $i"; done
  done
}
sources() { find "$@" \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) -print 2>/dev/null; }

{
  echo "#floors"
  ranks sim "${sim_floors[@]}"
  ranks experiments "${experiments_floors[@]}"
  echo "#folders"
  sources sim experiments | awk -F/ 'NF > 2 { print $1 "/" $2 }' | sort -u
  echo "#includes"
  sources kernels sim engines experiments | xargs grep -nE '^#include "' /dev/null
} | awk '
  BEGIN { layer["kernels"] = 0; layer["sim"] = 1; layer["engines"] = 2; layer["experiments"] = 3 }
  /^#floors$/ { part = "f"; next }
  /^#folders$/ { part = "d"; next }
  /^#includes$/ { part = "i"; next }
  part == "f" { floor[$1] = $2; next }
  part == "d" {
    split($0, p, "/")
    if ((p[1] == "sim" || p[1] == "experiments") && !($0 in floor)) {
      print $0 "/ is on no floor: place it in tests/check_layers.sh (docs/architecture.md, \"Layers\")"
      bad = 1
    }
    next
  }
  part == "i" {
    file = $0; sub(/:.*/, "", file)
    target = $0; sub(/^[^"]*"/, "", target); sub(/".*/, "", target)
    split(file, s, "/"); n = split(target, t, "/")
    if (!(t[1] in layer) || n < 2) next
    why = ""
    if (layer[t[1]] > layer[s[1]]) why = s[1] "/ includes a higher layer"
    else if (t[1] == s[1] && n > 2) {
      from = s[1] "/" s[2]; to = t[1] "/" t[2]
      if (from != to && (from in floor) && (to in floor) && floor[to] >= floor[from])
        why = from "/ includes a floor above it or beside it"
    }
    if (why == "") next
    print why ": " $0
    bad = 1
  }
  END {
    if (!bad) print "layers: no include runs upward"
    exit bad
  }'
