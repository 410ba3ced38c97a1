#!/usr/bin/env bash
# scripts/deps.sh — makes sure what asgdsim builds and plots with is on this machine:
# the Debian packages below (installed with apt-get, only those missing, only as root)
# and the CUDA toolkit's headers (Thrust/CCCL and cuRAND's header-only Philox), which
# every backend compiles against, the CPU ones included.
# What it is not: a general installer. It never installs the CUDA toolkit, never touches
# anything already installed, and only checks for packages on systems without dpkg.
#
# Sourced by scripts/test.sh and scripts/run.sh (then call asgd_ensure_deps), or run
# directly: scripts/deps.sh. On success it exports ASGD_CUDA_ROOT (the toolkit folder).

# Phase timing shared by the scripts: t=$(now); ...; elapsed "$t" prints seconds.
now() { echo "${EPOCHREALTIME:-$(date +%s)}"; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

ASGD_DEBIAN_PACKAGES=(
  cmake ninja-build g++
  libboost-program-options-dev nlohmann-json3-dev libopenblas-dev libgtest-dev zlib1g-dev
  python3-matplotlib python3-pandas python3-numpy python3-seaborn python3-scipy
  dataset-fashion-mnist
  clang libclang-rt-14-dev
  openmpi-bin libopenmpi-dev
  pybind11-dev python3-dev python3-torch python3-tqdm fortunes
  ccache
)

# Prints the packages of ASGD_DEBIAN_PACKAGES that dpkg does not list as installed.
asgd_missing_packages() {
  local p
  for p in "${ASGD_DEBIAN_PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
      echo "$p"
    fi
  done
}

# Installs the missing packages (root only), then checks the CUDA toolkit headers.
# Returns non-zero, with a message on stderr saying what to do, when something is missing.
asgd_ensure_deps() {
  if command -v dpkg-query >/dev/null 2>&1; then
    local missing
    missing=$(asgd_missing_packages | tr '\n' ' ')
    missing=${missing% }
    if [[ -n "$missing" ]]; then
      if [[ $(id -u) -ne 0 ]]; then
        echo "deps: missing Debian packages: $missing" >&2
        echo "deps: install them as root, then re-run:" >&2
        echo "  sudo apt-get update && sudo apt-get install -y --no-install-recommends $missing" >&2
        return 1
      fi
      echo "deps: installing missing Debian packages: $missing"
      local log
      log=$(mktemp "${TMPDIR:-/tmp}/asgd-apt.XXXXXX")
      # shellcheck disable=SC2086  # $missing is a space-separated package list
      if ! { apt-get update -qq &&
             DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing; } \
           </dev/null >"$log" 2>&1; then
        tail -n 30 "$log" >&2
        echo "deps: apt-get failed installing: $missing (full log: $log)" >&2
        return 1
      fi
      rm -f "$log"
      missing=$(asgd_missing_packages | tr '\n' ' ')
      if [[ -n "${missing% }" ]]; then
        echo "deps: still missing after apt-get: $missing" >&2
        return 1
      fi
    fi
  else
    echo "deps: no dpkg-query (not Debian?): not checking packages; CMake will report what it cannot find" >&2
  fi

  # The CUDA toolkit: its headers are needed by every backend.
  local root nvcc_path candidates=()
  [[ -n "${CUDAToolkit_ROOT:-}" ]] && candidates+=("$CUDAToolkit_ROOT")
  [[ -n "${CUDA_HOME:-}" ]] && candidates+=("$CUDA_HOME")
  [[ -n "${CUDA_PATH:-}" ]] && candidates+=("$CUDA_PATH")
  candidates+=(/usr/local/cuda)
  if nvcc_path=$(command -v nvcc 2>/dev/null); then
    candidates+=("$(dirname "$(dirname "$(readlink -f "$nvcc_path")")")")
  fi
  for root in "${candidates[@]}"; do
    root=${root%/}
    if [[ -f "$root/include/curand_kernel.h" ]] &&
       { [[ -f "$root/include/cccl/thrust/version.h" ]] || [[ -f "$root/include/thrust/version.h" ]]; }; then
      export ASGD_CUDA_ROOT="$root"
      return 0
    fi
  done
  echo "deps: the CUDA toolkit's headers were not found (looked in: $(printf '%s\n' "${candidates[@]}" | awk '!seen[$0]++' | paste -sd ' '))." >&2
  echo "deps: asgdsim needs the toolkit's headers even for the CPU (OMP/CPP) builds:" >&2
  echo "deps:   include/cccl/thrust (Thrust/CCCL) and include/curand_kernel.h (cuRAND Philox)." >&2
  echo "deps: install NVIDIA's CUDA toolkit (asgdsim is developed against CUDA 13; no GPU or" >&2
  echo "deps: driver is needed to build), or set CUDA_HOME to where it is installed." >&2
  return 1
}

# The compiler cache the builds share (cmake/CompilerCache.cmake): sets ASGD_CACHE_ARGS,
# the CMake settings that turn it on (empty with ASGD_CCACHE=0 or without ccache), and
# ASGD_CCACHE_DIR (exported: `ccache -s` and the scripts' hit counts read it).
asgd_compiler_cache() {
  ASGD_CACHE_ARGS=()
  if [[ "${ASGD_CCACHE:-1}" == "0" ]]; then
    echo "ccache: off (ASGD_CCACHE=0)"
    ASGD_CACHE_ARGS=(-DASGD_CCACHE=OFF)
    return 0
  fi
  if ! command -v ccache >/dev/null 2>&1; then
    echo "ccache: not installed; building without a compiler cache"
    ASGD_CACHE_ARGS=(-DASGD_CCACHE=OFF)
    return 0
  fi
  export ASGD_CCACHE_DIR=${ASGD_CCACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/asgdsim/ccache}
  mkdir -p "$ASGD_CCACHE_DIR"
  ASGD_CACHE_ARGS=(-DASGD_CCACHE=ON "-DASGD_CCACHE_DIR=$ASGD_CCACHE_DIR")
  echo "ccache: $ASGD_CCACHE_DIR ($(du -sh "$ASGD_CCACHE_DIR" 2>/dev/null | cut -f1) held; ASGD_CCACHE=0 builds without it)"
}

# The cache's hit and miss counters as "HITS MISSES" (0 0 without a cache), for
# asgd_cache_delta: how many of a build's compilations the cache answered.
asgd_cache_counts() {
  if [[ -z "${ASGD_CCACHE_DIR:-}" ]] || ! command -v ccache >/dev/null 2>&1; then
    echo "0 0"
    return 0
  fi
  ccache -d "$ASGD_CCACHE_DIR" --print-stats 2>/dev/null |
    awk -F'\t' '$1 == "direct_cache_hit" || $1 == "preprocessed_cache_hit" { h += $2 }
                $1 == "cache_miss" { m += $2 } END { printf "%d %d\n", h, m }'
}

# Given asgd_cache_counts from before a build, prints "warm|cold HITS/CALLS": cold when
# more than a tenth of the compilations missed (then a build phase's cold budget applies).
asgd_cache_delta() {
  local before after
  read -r -a before <<<"$1"
  read -r -a after <<<"$(asgd_cache_counts)"
  local hits=$((after[0] - before[0])) misses=$((after[1] - before[1]))
  local calls=$((hits + misses)) state=warm
  if ((misses * 10 > calls)); then state=cold; fi
  echo "$state $hits/$calls"
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  set -euo pipefail
  asgd_ensure_deps
  echo "deps: all present (CUDA toolkit: $ASGD_CUDA_ROOT)"
fi
