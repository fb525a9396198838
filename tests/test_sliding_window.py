"""Which keys a query may see: the sliding-window mask, and the cheapest exact mask for a
given number of new and kept tokens."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from helpers.sliding_window import attention_mask, sliding_window_mask


def test_sliding_window_mask_values() -> None:
    m = sliding_window_mask(3, T_past=1, window=2)
    expected = torch.tensor([[1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]]).bool()
    assert torch.equal(m, expected)
    assert torch.equal(sliding_window_mask(5, window=5), torch.ones(5, 5).tril().bool())


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"T": 0, "window": 3}, "T must be a positive int"),
        ({"T": 2, "T_past": -1, "window": 3}, "T_past must be an int >= 0, got -1"),
        ({"T": 2, "window": 0}, "window must be a positive int"),
    ],
)
def test_sliding_window_mask_rejects_bad_sizes(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        sliding_window_mask(**kwargs)


@pytest.mark.parametrize(
    ("T", "T_past", "window", "kind"),
    [
        (5, 0, 8, "is_causal"),  # a prompt that fits: the causal kernel, no mask tensor
        (1, 6, 8, "none"),  # one new token that may see every kept key
        (3, 4, 8, "causal"),  # several new tokens after kept ones: the shifted causal mask
        (6, 4, 8, "sliding"),  # more than the window: the sliding-window mask
        (12, 0, 8, "sliding"),
        (1, 7, 8, "none"),  # the largest a rolling cache keeps: 7 + 1 keys
    ],
)
def test_attention_mask_picks_the_cheapest_exact_form(
    T: int, T_past: int, window: int, kind: str
) -> None:
    mask, is_causal = attention_mask(T, T_past, window)
    got = "is_causal" if is_causal else "none" if mask is None else None
    if mask is not None:
        assert not is_causal and mask.shape == (T, T_past + T)
        full = sliding_window_mask(T, T_past=T_past, window=window)
        assert torch.equal(mask, full)
        got = "causal" if bool(mask.all(dim=1).any()) or T_past + T <= window else "sliding"
    assert got == kind


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_attention_mask_gives_the_sliding_window_attention(seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    for T, T_past, window in [(5, 0, 8), (1, 6, 8), (3, 4, 8), (6, 4, 8), (12, 0, 5), (1, 4, 5)]:
        q = torch.randn(2, 3, T, 4, generator=g)
        k, v = torch.randn(2, 2, 3, T_past + T, 4, generator=g)
        mask, is_causal = attention_mask(T, T_past, window)
        got = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal)
        full = sliding_window_mask(T, T_past=T_past, window=window)
        assert_close(got, F.scaled_dot_product_attention(q, k, v, attn_mask=full))
