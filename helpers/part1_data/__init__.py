"""Data that Part I shows but does not compute, stored with the package so that Colab has it.

``previous_token_head.json`` holds one attention head of the book's trained Shakespeare GPT
(block 0, head 2) on one line of the validation text, written by
``tools/export_previous_token_head.py``; Part I loads it without importing Part II's code.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import NamedTuple

import torch

PREVIOUS_TOKEN_HEAD = "previous_token_head.json"


class StoredHead(NamedTuple):
    """One attention head of a trained model on one line of text."""

    text: str  #: the line, ``T`` characters
    weights: (
        torch.Tensor
    )  #: ``(T, T)``: row ``i`` the query at character ``i``, column ``j`` the key
    block: int  #: which block of the model the head is in
    head: int  #: which head of that block


def load_previous_token_head(path: str | Path | None = None) -> StoredHead:
    """The text, the ``(T, T)`` attention weights (rounded to 3 decimals) and the place (block,
    head) of the shipped Shakespeare GPT's previous-token head on one validation line of ``T``
    characters. ``path`` reads another file of the same format instead of the stored one.

    Raises:
        ValueError: the stored file is malformed (not square, not one row per character, or
            a row that is not a causal distribution).
    """
    if path is None:
        raw = resources.files(__package__).joinpath(PREVIOUS_TOKEN_HEAD).read_text()
    else:
        raw = Path(path).read_text()
    payload = json.loads(raw)
    text, weights = payload["text"], torch.tensor(payload["weights"], dtype=torch.float32)
    T = len(text)
    if weights.shape != (T, T):
        raise ValueError(
            f"expected ({T}, {T}) weights for {T} characters, got {tuple(weights.shape)}"
        )
    if weights.triu(diagonal=1).abs().max() > 0:
        raise ValueError("the weights put weight on a future character: not a causal head")
    if (weights.sum(dim=-1) - 1).abs().max() > 0.01:
        raise ValueError("a row of the weights does not sum to 1 (to the 3 stored decimals)")
    return StoredHead(text, weights, int(payload["block"]), int(payload["head"]))
