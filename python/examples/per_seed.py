#!/usr/bin/python3
"""Prints an experiment's final metrics per engine and seed (a Markdown table), from the
run folders asgdsim wrote: what study_table.py summarises as mean and interval, seed by seed.

usage: /usr/bin/python3 python/examples/per_seed.py EXPERIMENT_DIR [--perplexity]
(needs the asgdsim package on PYTHONPATH: build/python)
"""
import math
import sys

import asgdsim


def main(argv):
    if not argv or argv[0].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    perplexity = "--perplexity" in argv
    s = asgdsim.Results(argv[0], 0).summaries()
    s["order"] = s.groupby("group", sort=False).ngroup()  # the groups in the config's order
    s = s.sort_values(["order", "seed"], kind="stable")
    cols = ["group", "seed", "status", "time", "epochs", "gradients", "final_train_loss", "final_test_loss"]
    if not perplexity:
        cols.append("final_test_accuracy")
    head = cols + (["test_perplexity"] if perplexity else [])
    print("| " + " | ".join(head) + " |")
    print("|" + " --- |" * len(head))
    for _, r in s.iterrows():
        cells = []
        for c in cols:
            v = r[c]
            if c in ("time", "epochs"):
                cells.append(f"{v:.3g}")
            elif isinstance(v, float):
                cells.append(f"{v:.4f}")
            else:
                cells.append(str(v))
        if perplexity:
            cells.append(f"{math.exp(r['final_test_loss']):.2f}")
        print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
