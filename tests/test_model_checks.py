"""The GPT's input checks: ids, the inputs of forward, and max_new_tokens."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from helpers.model import GPT, GPTConfig
from helpers.model_checks import (
    MAX_NEW_TOKENS,
    check_forward_inputs,
    check_id_tensor,
    check_ids_in_vocab,
    check_max_new_tokens,
    is_real,
)
from helpers.multihead import KVCache


@pytest.mark.parametrize(
    ("idx", "message"),
    [
        ([[1, 2]], "idx must be a (B, T) tensor of token ids, got list; for one sequence of ids"),
        (np.zeros((1, 2)), "idx must be a (B, T) tensor of token ids, got ndarray"),
        (torch.tensor([[]]), "idx is empty: it must hold at least one token, got T=0"),
        (torch.tensor([]), "idx is empty: it must hold at least one token, got T=0 (shape (0,))"),
        (torch.tensor(3), "idx must be (B, T) token ids, got shape ()"),
        (torch.zeros(2, 3, 4, dtype=torch.long), "got shape (2, 3, 4)"),
        (torch.tensor([[0.0, 1.0]]), "idx must hold integer token ids, got dtype torch.float32"),
    ],
)
def test_id_tensor_errors(idx: object, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        check_id_tensor(idx)


def test_ids_in_vocab() -> None:
    check_ids_in_vocab(torch.tensor([[0, 4]]), 5)
    with pytest.raises(ValueError, match=re.escape("token ids must be in 0..4, got 5")):
        check_ids_in_vocab(torch.tensor([[0, 5]]), 5)


def test_forward_inputs_are_checked_in_order() -> None:
    model = GPT(GPTConfig(vocab_size=7, block_size=4, n_layer=2, n_head=1, n_embd=4))
    idx = torch.zeros(1, 3, dtype=torch.long)
    check_forward_inputs(model, idx, idx, None)
    with pytest.raises(ValueError, match=re.escape("need one KVCache per layer (2), got 1")):
        check_forward_inputs(model, idx, idx[:, :1], [KVCache()])
    with pytest.raises(ValueError, match="context of 5 tokens is longer than block_size=4"):
        check_forward_inputs(model, torch.zeros(1, 5, dtype=torch.long), None, None)
    with pytest.raises(ValueError, match=re.escape("shape of idx (1, 3), got (1, 2)")):
        check_forward_inputs(model, idx, idx[:, :2], None)
    rope = GPT(GPTConfig(vocab_size=7, block_size=4, n_layer=2, n_head=1, n_embd=4, pos="rope"))
    check_forward_inputs(rope, torch.zeros(1, 9, dtype=torch.long), None, None)  # no limit


def test_max_new_tokens_up_to_the_cap() -> None:
    assert check_max_new_tokens(0) == 0
    assert check_max_new_tokens(np.int64(MAX_NEW_TOKENS)) == MAX_NEW_TOKENS
    with pytest.raises(ValueError, match=re.escape(f"max_new_tokens={MAX_NEW_TOKENS + 1:,} is")):
        check_max_new_tokens(MAX_NEW_TOKENS + 1)
    with pytest.raises(ValueError, match=re.escape("max_new_tokens must be an int >= 0, got 2.0")):
        check_max_new_tokens(2.0)


def test_is_real() -> None:
    assert is_real(1) and is_real(0.5) and is_real(np.float32(2.0))
    assert not is_real(True) and not is_real("1") and not is_real(None)
