#!/usr/bin/env bash
# scripts/format.sh [--check] — applies .clang-format to every tracked C++/CUDA source
# (kernels, sim, engines, experiments, tests, python/src); --check changes nothing and
# exits 1 naming the files that are not formatted.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "format.sh: clang-format is not installed (apt-get install clang-format)" >&2; exit 2; }
mapfile -t files < <(git ls-files -- kernels sim engines experiments tests python/src |
                     grep -E '\.(h|cpp|cu|cuh)$')
if [[ ${1:-} == --check ]]; then
  bad=0
  for f in "${files[@]}"; do
    if ! clang-format --dry-run -Werror "$f" >/dev/null 2>&1; then echo "not formatted: $f"; bad=1; fi
  done
  exit $bad
fi
clang-format -i "${files[@]}"
echo "format.sh: ${#files[@]} files formatted with $(clang-format --version | head -1)"
