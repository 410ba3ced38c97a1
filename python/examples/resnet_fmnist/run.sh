#!/bin/sh
# Runs the ResNet/Fashion-MNIST example and makes its report (figures, report.html, the
# study table and the per-seed table). About 3-6 minutes on one core.
#   python/examples/resnet_fmnist/run.sh [OUT_DIR] [more `python3 -m asgdsim run` options]
# e.g. run.sh runs --set repeats=5 --jobs 2. The package is found in $ASGDSIM_PYTHONPATH,
# else <repo>/build/python (cmake ... && ninja -C build asgdsim_python).
set -e
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../env.sh"
out=${1:-runs}
[ $# -gt 0 ] && shift
/usr/bin/python3 -m asgdsim run "$here/resnet_fmnist.json" --out "$out" "$@"
/usr/bin/python3 "$repo/analysis/plot.py" "$out/resnet_fmnist" --x time --target-accuracy 0.75
/usr/bin/python3 "$repo/analysis/study_table.py" "$out/resnet_fmnist" --target-accuracy 0.75 \
    | tee "$out/resnet_fmnist/study_table.md"
/usr/bin/python3 "$here/../per_seed.py" "$out/resnet_fmnist" | tee "$out/resnet_fmnist/per_seed.md"
