"""Next-character data sets for the char_transformer example.

make() (data.module "char_data.py:make") returns (training set, test set): pairs of long
tensors (inputs (N, T), targets (N, T)), where the targets are the inputs shifted by one
character. The text is Debian's fortunes (/usr/share/games/fortunes/*, package
`fortunes`, the `%` separator lines stripped), or the file(s) named by the environment
variable CHAR_TEXT (colon-separated) — or write your own factory:

    def make_mine():
        return char_data.make_from(["/path/to/book.txt"])

The vocabulary is fixed (VOCAB characters: newline, printable ASCII, and one "other"
symbol for everything else; tabs read as spaces), so the model needs nothing from the data to be built.
The last TEST_FRACTION of the text is the test set; both sets are non-overlapping windows
of CONTEXT + 1 characters.
"""
import glob
import os

import torch

CONTEXT = 32  # characters a sample sees (the model's maximum context)
TEST_FRACTION = 0.05
CHARS = "\n" + "".join(chr(c) for c in range(32, 127))  # newline + printable ASCII
VOCAB = len(CHARS) + 1  # + one symbol for every other character
FORTUNES = "/usr/share/games/fortunes"


def fortune_files(folder=FORTUNES):
    """The plain-text fortune files (not the .dat indexes, not the .u8 links), sorted."""
    return sorted(f for f in glob.glob(os.path.join(folder, "*"))
                  if os.path.isfile(f) and not f.endswith((".dat", ".u8")))


def read_text(paths):
    parts = []
    for p in paths:
        with open(p, encoding="utf-8", errors="replace") as f:
            lines = [line.replace("\t", " ") for line in f.read().splitlines() if line.strip() != "%"]
        parts.append("\n".join(lines) + "\n")
    return "".join(parts)


def encode(text):
    index = {c: i for i, c in enumerate(CHARS)}
    other = len(CHARS)
    return torch.tensor([index.get(c, other) for c in text], dtype=torch.long)


def decode(ids):
    return "".join(CHARS[i] if i < len(CHARS) else "~" for i in ids)


def windows(ids, context=CONTEXT):
    """Non-overlapping windows: inputs ids[k:k+T], targets ids[k+1:k+T+1]."""
    n = (len(ids) - 1) // context
    x = ids[: n * context].view(n, context)
    y = ids[1: n * context + 1].view(n, context)
    return x.contiguous(), y.contiguous()


def make_from(paths, context=CONTEXT, test_fraction=TEST_FRACTION):
    ids = encode(read_text(paths))
    if len(ids) < 20 * (context + 1):
        raise ValueError(f"{paths}: {len(ids)} characters, too little text for context {context}")
    cut = int(len(ids) * (1 - test_fraction))
    return windows(ids[:cut], context), windows(ids[cut:], context)


def make():
    named = os.environ.get("CHAR_TEXT")
    paths = named.split(":") if named else fortune_files()
    if not paths:
        raise FileNotFoundError(f"no text: {FORTUNES} is empty (apt install fortunes) and CHAR_TEXT is not set")
    return make_from(paths)
