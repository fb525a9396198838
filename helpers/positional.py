"""Positional information for attention, which on its own cannot see word order."""

from __future__ import annotations

import torch
from torch import nn


class LearnedPositionalEmbedding(nn.Module):
    """One learned vector per position ``0 .. block_size - 1`` (as in GPT-2).

    Raises a clear ``ValueError`` for a sequence longer than ``block_size`` instead of the
    ``IndexError`` an ``nn.Embedding`` lookup would give.
    """

    def __init__(self, block_size: int, n_embd: int) -> None:
        super().__init__()
        if block_size <= 0 or n_embd <= 0:
            raise ValueError(f"block_size and n_embd must be positive, got {block_size} and {n_embd}")
        self.block_size = block_size
        self.weight = nn.Embedding(block_size, n_embd).weight

    def forward(self, T: int, offset: int = 0) -> torch.Tensor:
        """Embeddings of positions ``offset .. offset + T - 1``, shape ``(T, n_embd)``."""
        if T <= 0 or offset < 0:
            raise ValueError(f"need T > 0 and offset >= 0, got T={T}, offset={offset}")
        if offset + T > self.block_size:
            raise ValueError(
                f"positions up to {offset + T - 1} requested, but this model only has "
                f"block_size={self.block_size} positions (0..{self.block_size - 1}); "
                f"crop the context to the last {self.block_size} tokens"
            )
        return self.weight[offset : offset + T]
