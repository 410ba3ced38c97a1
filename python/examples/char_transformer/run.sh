#!/bin/sh
# Runs the character-level transformer example and makes its report (loss against virtual
# time, report.html, the study table, the per-seed table with perplexities).
#   python/examples/char_transformer/run.sh [OUT_DIR] [more `python3 -m asgdsim run` options]
# The text is Debian's fortunes (apt install fortunes), or CHAR_TEXT=/path/book.txt run.sh.
# The package is found in $ASGDSIM_PYTHONPATH, else <repo>/build/python.
set -e
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../env.sh"
out=${1:-runs}
[ $# -gt 0 ] && shift
/usr/bin/python3 -m asgdsim run "$here/char_transformer.json" --out "$out" "$@"
/usr/bin/python3 "$repo/analysis/plot.py" "$out/char_transformer" --x time --metric train_loss test_loss
/usr/bin/python3 "$repo/analysis/study_table.py" "$out/char_transformer" --target-loss 2.7 \
    | tee "$out/char_transformer/study_table.md"
/usr/bin/python3 "$here/../per_seed.py" "$out/char_transformer" --perplexity | tee "$out/char_transformer/per_seed.md"
