"""Sampling the next token: temperature, top-k, the vanishing-temperature limit, clear errors."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from helpers.sampling import check_sampling, sample_next


def logits_for(seed: int, B: int = 4, V: int = 12) -> torch.Tensor:
    return torch.randn(B, V, generator=torch.Generator().manual_seed(seed)) * 3


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(("temperature", "top_k"), [(1.0, None), (0.7, 5), (2.5, 1), (0.05, 3)])
def test_draws_exactly_what_the_formula_draws(seed: int, temperature: float, top_k: int) -> None:
    """softmax of the top-k logits divided by the temperature, one multinomial draw: the same
    ids for the same generator."""
    logits = logits_for(seed)
    scaled = logits / temperature
    if top_k is not None:
        kth = scaled.topk(top_k).values[:, -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    expected = torch.multinomial(
        F.softmax(scaled, -1), 1, generator=torch.Generator().manual_seed(seed)
    )
    got = sample_next(logits, temperature, top_k, torch.Generator().manual_seed(seed))
    assert got.shape == (4, 1)
    assert torch.equal(got, expected)


def test_frequencies_follow_the_softmax_and_top_k_cuts_the_rest() -> None:
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]]).expand(20_000, 4)
    g = torch.Generator().manual_seed(0)
    ids = sample_next(logits, 1.0, None, g)[:, 0]
    freq = torch.bincount(ids, minlength=4) / ids.numel()
    assert torch.allclose(freq, F.softmax(logits[0], -1), atol=0.01)
    ids = sample_next(logits, 1.0, 2, g)[:, 0]
    freq = torch.bincount(ids, minlength=4) / ids.numel()
    assert torch.allclose(freq, torch.tensor([0.7311, 0.2689, 0.0, 0.0]), atol=0.01)


@pytest.mark.parametrize("temperature", [1e-45, 1e-39, 5e-324])
def test_a_temperature_that_overflows_the_logits_samples_the_argmax(temperature: float) -> None:
    """logits / 1e-45 overflows float32 (inf - inf in the softmax would give NaN): the limit of
    a vanishing temperature, the most likely token, is drawn instead."""
    logits = logits_for(3)
    assert (logits / temperature).isinf().any()  # the case this test is about
    got = sample_next(logits, temperature, None, torch.Generator().manual_seed(0))
    assert torch.equal(got[:, 0], logits.argmax(-1))
    got = sample_next(logits, temperature, 4, torch.Generator().manual_seed(0))
    assert torch.equal(got[:, 0], logits.argmax(-1))


def test_the_vanishing_temperature_limit_shares_ties_and_leaves_other_rows_alone() -> None:
    tied = torch.tensor([[5.0, 1.0, 5.0, 0.0]]).expand(4000, 4)
    ids = sample_next(tied, 1e-45, None, torch.Generator().manual_seed(0))[:, 0]
    counts = torch.bincount(ids, minlength=4)
    assert counts[1] == counts[3] == 0 and abs(counts[0] - counts[2]) < 300
    small = torch.tensor([[1e-8, 0.0, -1e-8]])  # 1e-8 / 1e-30 = 1e22: no overflow
    probs = F.softmax(small / 1e-30, -1)
    ids = sample_next(small.expand(2000, 3), 1e-30, None, torch.Generator().manual_seed(0))
    assert torch.equal(torch.bincount(ids[:, 0], minlength=3) > 0, probs[0] > 0)


@pytest.mark.parametrize(
    ("top_k", "message"),
    [
        ("5", "got '5'"),
        (5.0, "got 5.0"),
        (True, "got True"),
        (0, "got 0"),
        (13, "got 13"),
        (np.int64(13), "got np.int64(13)"),
    ],
)
def test_bad_top_k_is_reported_with_its_repr(top_k: object, message: str) -> None:
    expected = f"top_k must be in 1..12 (an int, or None to keep every token), {message}"
    with pytest.raises(ValueError, match=re.escape(expected)):
        check_sampling(1.0, top_k, 12)


def test_numpy_numbers_are_accepted() -> None:
    top_k = check_sampling(np.float32(0.5), np.int64(5), 12)
    assert top_k == 5 and type(top_k) is int
    assert check_sampling(2, None, 12) is None


@pytest.mark.parametrize("temperature", [0, -1.0, float("nan"), float("inf"), "1", None, True])
def test_bad_temperature_is_reported(temperature: object) -> None:
    with pytest.raises(ValueError, match=re.escape(f"got {temperature!r}")):
        check_sampling(temperature, None, 12)
