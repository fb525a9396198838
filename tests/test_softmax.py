"""The stable softmax agrees with PyTorch's everywhere; the naive formula overflows."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from helpers.softmax import naive_softmax, stable_softmax


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_stable_matches_torch_softmax(seed: int, dim: int) -> None:
    g = torch.Generator().manual_seed(seed)
    x = 3 * torch.randn(4, 7, 5, generator=g)
    assert_close(stable_softmax(x, dim=dim), torch.softmax(x, dim=dim))


def test_naive_matches_on_small_logits() -> None:
    x = torch.randn(6, 9, generator=torch.Generator().manual_seed(0))
    assert_close(naive_softmax(x), torch.softmax(x, dim=-1))


@pytest.mark.parametrize("big", [100.0, 1e4, 1e30])
def test_stable_handles_huge_logits(big: float) -> None:
    x = torch.tensor([[big, big - 1.0, big - 2.0], [-big, 0.0, big]])
    out = stable_softmax(x)
    assert torch.isfinite(out).all()
    assert_close(out, torch.softmax(x, dim=-1))
    assert_close(out.sum(-1), torch.ones(2))


def test_naive_overflows_to_nan() -> None:
    # exp(89) is larger than the largest float32 (about 3.4e38): inf / inf = NaN.
    x = torch.tensor([89.0, 88.0, 0.0])
    assert torch.isinf(torch.exp(x)).any()
    out = naive_softmax(x)
    assert torch.isnan(out).any()
    assert torch.isfinite(stable_softmax(x)).all()


def test_naive_underflows_to_nan_for_very_negative_logits() -> None:
    # Every exp(x) rounds to 0, and 0 / 0 is NaN too.
    x = torch.tensor([-200.0, -201.0])
    assert torch.isnan(naive_softmax(x)).all()
    assert_close(stable_softmax(x), torch.softmax(x, dim=-1))


def test_fully_masked_row_is_zeros_not_nan() -> None:
    x = torch.tensor([[0.0, float("-inf"), 1.0], [float("-inf")] * 3])
    out = stable_softmax(x)
    assert torch.isnan(torch.softmax(x, dim=-1)[1]).all()  # what PyTorch's own softmax does
    assert_close(out[1], torch.zeros(3))
    assert_close(out[0], torch.softmax(x[0], dim=-1))


def test_shift_invariance() -> None:
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    assert_close(stable_softmax(x + 1234.5), stable_softmax(x))


@pytest.mark.parametrize("seed", [0, 1])
def test_gradient_matches_torch_softmax(seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    x1 = torch.randn(3, 6, generator=g, dtype=torch.float64).requires_grad_()
    x2 = x1.detach().clone().requires_grad_()
    upstream = torch.randn(3, 6, generator=g, dtype=torch.float64)
    (stable_softmax(x1) * upstream).sum().backward()
    (torch.softmax(x2, dim=-1) * upstream).sum().backward()
    assert_close(x1.grad, x2.grad)


def test_fully_masked_row_has_finite_gradient() -> None:
    x = torch.tensor([[0.5, -0.5], [0.0, 0.0]], requires_grad=True)
    mask = torch.tensor([[True, True], [False, False]])
    stable_softmax(x.masked_fill(~mask, float("-inf"))).sum().backward()
    assert torch.isfinite(x.grad).all()
    assert_close(x.grad[1], torch.zeros(2))


@pytest.mark.parametrize("fn", [naive_softmax, stable_softmax])
def test_integer_logits_are_refused_with_a_clear_message(fn) -> None:
    # torch.exp would silently promote, but torch.softmax refuses integer input; so do we.
    with pytest.raises(ValueError, match="floating-point"):
        fn(torch.tensor([1, 2, 3]))


@pytest.mark.parametrize("fn", [naive_softmax, stable_softmax])
@pytest.mark.parametrize("dim", [2, -3, 1.0, True])
def test_bad_dim_is_refused(fn, dim) -> None:
    with pytest.raises(ValueError, match="dim"):
        fn(torch.zeros(2, 3), dim=dim)


def test_non_tensor_is_refused() -> None:
    with pytest.raises(ValueError, match="torch.Tensor"):
        stable_softmax([1.0, 2.0])  # type: ignore[arg-type]
