"""The stand-in for a position table draws exactly the random numbers the table would."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from helpers.position_draws import PositionDraws
from helpers.positional import LearnedPositionalEmbedding


@pytest.mark.parametrize(("block_size", "n_embd"), [(8, 4), (64, 64), (1, 3)])
def test_draws_what_creating_and_initialising_a_table_draws(block_size: int, n_embd: int) -> None:
    torch.manual_seed(0)
    table = LearnedPositionalEmbedding(block_size, n_embd)
    after_creation = torch.rand(3)
    torch.manual_seed(0)
    table = LearnedPositionalEmbedding(block_size, n_embd)
    nn.init.normal_(table.weight, mean=0.0, std=0.02)
    after_init = torch.rand(3)

    torch.manual_seed(0)
    draws = PositionDraws(block_size, n_embd)
    assert torch.equal(torch.rand(3), after_creation)
    torch.manual_seed(0)
    draws = PositionDraws(block_size, n_embd)
    draws.draw()
    assert torch.equal(torch.rand(3), after_init)


def test_holds_nothing_a_checkpoint_would_store() -> None:
    draws = PositionDraws(16, 8)
    assert list(draws.parameters()) == [] and draws.state_dict() == {}


def test_rejects_bad_sizes() -> None:
    with pytest.raises(ValueError, match="block_size must be a positive int"):
        PositionDraws(0, 8)
    with pytest.raises(ValueError, match="n_embd must be a positive int"):
        PositionDraws(8, 2.0)  # type: ignore[arg-type]
