"""Write one head of the shipped Shakespeare GPT on one validation line into helpers/part1_data.

Chapter 6 (Part I) shows the previous-token head of the book's trained GPT (block 0, head 2;
chapter 13 measures it) next to a hand-built look-back head. Part I may not import Part II's
model code, so this script computes the head's weights once and stores them, with the text,
as ``helpers/part1_data/previous_token_head.json``; ``tests/test_part1_data.py`` recomputes
them from the shipped model. Run from the repository root::

    python tools/export_previous_token_head.py
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch

from helpers.circuits import attention_patterns
from helpers.data import load_tinyshakespeare
from helpers.export import load_gpt

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "book" / "explorer" / "gpt_shakespeare.js"
OUT = ROOT / "helpers" / "part1_data" / "previous_token_head.json"
BLOCK, HEAD = 0, 2  # the previous-token head (chapter 13)
MIN_LEN, MAX_LEN = 24, 32  # characters: the first validation line of this length is shown


def validation_line(text: str, min_len: int = MIN_LEN, max_len: int = MAX_LEN) -> str:
    """The first whole line of the validation text (the last 10% of ``text``, as
    ``helpers.training.train_val_split`` splits it) with ``min_len`` to ``max_len`` characters."""
    if not 0 < min_len <= max_len:
        raise ValueError(f"need 0 < min_len <= max_len, got {min_len}, {max_len}")
    validation = text[int(0.9 * len(text)) :]
    for line in validation.split("\n")[1:]:  # the first piece may be a cut line
        if min_len <= len(line) <= max_len:
            return line
    raise ValueError(f"no validation line of {min_len} to {max_len} characters")


def head_weights(line: str, model_path: Path = MODEL) -> torch.Tensor:
    """The ``(T, T)`` weights of block ``BLOCK``, head ``HEAD`` of the shipped GPT on ``line``
    alone (``T = len(line)``, at most the model's ``block_size``)."""
    model, tokenizer = load_gpt(model_path)
    if not 0 < len(line) <= model.config.block_size:
        raise ValueError(f"the line must have 1 to {model.config.block_size} characters")
    idx = torch.tensor([tokenizer.encode(line)])
    with torch.no_grad():
        return attention_patterns(model, idx)[BLOCK][0, HEAD]


def main() -> None:
    line = validation_line(load_tinyshakespeare())
    weights = head_weights(line)
    payload = {
        "about": f"block {BLOCK}, head {HEAD} of book/explorer/gpt_shakespeare.js on one line "
        "of the Tiny Shakespeare validation text; written by "
        "tools/export_previous_token_head.py",
        "block": BLOCK,
        "head": HEAD,
        "text": line,
        "weights": [[round(w, 3) for w in row] for row in weights.tolist()],
    }
    text = json.dumps(payload, indent=1)
    text = re.sub(r"\[\s+([^\[\]]*?)\s+\]", lambda m: "[" + " ".join(m[1].split()) + "]", text)
    OUT.write_text(text + "\n")  # one row of weights per line
    previous = weights.diagonal(offset=-1).mean().item()
    print(
        f"{OUT.relative_to(ROOT)}: {line!r}, mean weight on the previous character {previous:.3f}"
    )


if __name__ == "__main__":
    main()
