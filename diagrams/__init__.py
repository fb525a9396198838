"""The book's diagrams, drawn by code: one module per diagram, each with a ``draw()`` function.

``python -m diagrams`` (``make diagrams``) writes every diagram to ``book/figures/NAME.svg``;
``tests/test_diagrams.py`` checks that the committed files are exactly what the code draws.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from diagrams.style import save

# File name (without .svg) -> module; in the order the book shows them.
DIAGRAMS: dict[str, str] = {
    "averaging_matrix": "diagrams.averaging_matrix",
    "causal_mask": "diagrams.causal_mask",
    "attention_head": "diagrams.attention_head",
    "scaling": "diagrams.scaling",
    "multihead": "diagrams.multihead",
    "cross_attention": "diagrams.cross_attention",
    "positional_encoding": "diagrams.positional_encoding",
    "batching": "diagrams.batching",
    "gpt_block": "diagrams.gpt_block",
    "kv_cache": "diagrams.kv_cache",
    "flash_tiles": "diagrams.flash_tiles",
    "data_parallel": "diagrams.data_parallel",
    "induction_circuit": "diagrams.induction_circuit",
}


def write_all(out_dir: Path) -> list[Path]:
    """Draw every diagram into ``out_dir`` and return the files written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, module in DIAGRAMS.items():
        path = out_dir / f"{name}.svg"
        save(importlib.import_module(module).draw(), path)
        written.append(path)
    return written
