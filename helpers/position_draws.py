"""Equal initial weights across position schemes: a stand-in that draws what a position table
would.

Used by ``helpers.model.GPT`` (chapter 10, "From GPT-2 to a modern transformer"). A GPT with
learned positions creates a ``(block_size, n_embd)`` table of position vectors and initialises
it; one with rotary positions or none has no table. Without a stand-in, the random numbers the
table consumes would shift every later draw, and two models built from the same seed would
start from different blocks: an ablation would compare two initialisations as well as the
switch.
"""

from __future__ import annotations

import torch
from torch import nn

from helpers.validation import check_positive_int


class PositionDraws(nn.Module):
    """Takes the position table's place in a model without one: it draws the random numbers
    that creating and initialising the table would draw, and holds no parameter (nothing in the
    ``state_dict``).

    Creating it draws ``block_size * n_embd`` standard normals, as ``nn.Embedding`` does when it
    is created; :meth:`draw` draws them again, as the model's initialisation redraws the table
    (normal, std 0.02). The model calls :meth:`draw` where it would initialise the table, so
    every later draw lines up.
    """

    def __init__(self, block_size: int, n_embd: int) -> None:
        super().__init__()
        block_size = check_positive_int("block_size", block_size, what="the number of positions")
        n_embd = check_positive_int("n_embd", n_embd, what="the token size C")
        self.shape = (block_size, n_embd)
        torch.empty(self.shape).normal_()  # as nn.Embedding's own initialisation

    def draw(self) -> None:
        """Draw the numbers the table's initialisation draws, and discard them."""
        torch.empty(self.shape).normal_(mean=0.0, std=0.02)
