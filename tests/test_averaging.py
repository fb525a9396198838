"""The three forms of the averaging trick agree, average only the past, and reject bad input."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch
from torch.testing import assert_close

import helpers.averaging
from helpers.averaging import (
    average_past_loop,
    average_past_matmul,
    average_past_softmax,
    uniform_causal_weights,
)

FORMS = [average_past_loop, average_past_matmul, average_past_softmax]

# The averages of sequence 0 that the chapter prints for torch.manual_seed(42), B, T, C = 4, 8, 2.
XBOW0_SEED_42 = torch.tensor(
    [
        [1.9269, 1.4873],
        [1.4138, -0.3091],
        [1.1687, -0.6176],
        [0.8657, -0.8644],
        [0.5422, -0.3617],
        [0.3864, -0.5354],
        [0.2272, -0.5388],
        [0.1027, -0.3762],
    ]
)


def test_reproduces_the_chapter_example() -> None:
    torch.manual_seed(42)
    x = torch.randn(4, 8, 2)
    for form in FORMS:
        assert_close(form(x)[0], XBOW0_SEED_42, atol=1e-4, rtol=0)


@pytest.mark.parametrize("seed", range(5))
def test_three_forms_agree_on_random_shapes(seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    B, T, C = (int(n) for n in torch.randint(1, 9, (3,), generator=g))
    x = torch.randn(B, T, C, generator=g)
    reference = average_past_loop(x)
    assert reference.shape == (B, T, C)
    assert_close(average_past_matmul(x), reference)
    assert_close(average_past_softmax(x), reference)


@pytest.mark.parametrize("form", FORMS, ids=lambda f: f.__name__)
def test_matches_cumulative_mean(form) -> None:
    torch.manual_seed(3)
    x = torch.randn(2, 6, 3, dtype=torch.float64)
    counts = torch.arange(1, 7, dtype=torch.float64).view(1, 6, 1)
    assert_close(form(x), x.cumsum(dim=1) / counts)


@pytest.mark.parametrize("form", FORMS, ids=lambda f: f.__name__)
def test_first_position_is_itself_and_last_is_the_full_mean(form) -> None:
    torch.manual_seed(4)
    x = torch.randn(3, 7, 5)
    out = form(x)
    assert_close(out[:, 0], x[:, 0])
    assert_close(out[:, -1], x.mean(dim=1))


@pytest.mark.parametrize("form", FORMS, ids=lambda f: f.__name__)
def test_causal_future_tokens_do_not_change_the_past(form) -> None:
    torch.manual_seed(5)
    x = torch.randn(2, 8, 4)
    for t in range(8):
        changed = x.clone()
        changed[:, t + 1 :] = torch.randn_like(changed[:, t + 1 :]) * 100
        assert_close(form(changed)[:, : t + 1], form(x)[:, : t + 1])
        if t < 7:
            assert not torch.allclose(form(changed)[:, t + 1 :], form(x)[:, t + 1 :])


@pytest.mark.parametrize("T", [1, 2, 5, 16])
def test_uniform_weights_rows_sum_to_one_and_hide_the_future(T: int) -> None:
    w = uniform_causal_weights(T)
    assert w.shape == (T, T)
    assert_close(w.sum(dim=1), torch.ones(T))
    assert torch.equal(w.triu(diagonal=1), torch.zeros(T, T))
    assert_close(w[T - 1], torch.full((T,), 1.0 / T))
    assert_close(w.diagonal(), 1.0 / torch.arange(1, T + 1, dtype=torch.float32))


def test_weights_respect_dtype() -> None:
    assert uniform_causal_weights(4, dtype=torch.float64).dtype == torch.float64
    x = torch.randn(1, 4, 2, dtype=torch.float64)
    for form in FORMS:
        assert form(x).dtype == torch.float64


@pytest.mark.parametrize("form", FORMS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("shape", [(8, 2), (8,), (1, 2, 8, 2)])
def test_rejects_inputs_that_are_not_3d(form, shape) -> None:
    with pytest.raises(ValueError, match=r"x must have shape \(B, T, C\).*got \d-D shape"):
        form(torch.zeros(shape))


@pytest.mark.parametrize("form", FORMS, ids=lambda f: f.__name__)
def test_rejects_empty_sequences_integers_and_non_tensors(form) -> None:
    with pytest.raises(ValueError, match=r"at least one token \(T >= 1\)"):
        form(torch.zeros(2, 0, 3))
    with pytest.raises(ValueError, match="floating-point tensor.*torch.int64"):
        form(torch.ones(2, 3, 4, dtype=torch.int64))
    with pytest.raises(ValueError, match="must be a torch.Tensor.*ndarray"):
        form(np.zeros((2, 3, 4)))


@pytest.mark.parametrize("T", [0, -3, 2.5, True])
def test_uniform_weights_reject_bad_sizes(T) -> None:
    with pytest.raises(ValueError, match="T must be a positive int"):
        uniform_causal_weights(T)


def test_chapter_one_needs_no_later_chapter() -> None:
    # helpers.averaging is taught in chapter 1; the causal-mask helpers are chapter 2's.
    assert "helpers.masking" not in inspect.getsource(helpers.averaging)
