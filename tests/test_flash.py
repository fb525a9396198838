"""Tests for helpers.flash: the online softmax merge and tiled attention, forward and backward."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close
from torch.utils.flop_counter import FlopCounterMode

from helpers.cost import attention_pairs
from helpers.flash import (
    block_partial,
    finish_partial,
    flash_attention,
    flash_attention_backward,
    flash_attention_forward,
    merge_partials,
)

NEG_INF = float("-inf")


def _qkv(shape: tuple[int, ...], seed: int, grad: bool = False) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=g).requires_grad_(grad) for _ in range(3)]


def _scores(q: torch.Tensor, k: torch.Tensor, causal: bool) -> torch.Tensor:
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        hidden = torch.ones(s.shape[-2:], dtype=torch.bool).tril().logical_not()
        s = s.masked_fill(hidden, NEG_INF)
    return s


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_merging_two_halves_equals_the_softmax_over_all_keys(seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(3, 5, 11, generator=g) * 4
    v = torch.randn(3, 11, 6, generator=g)
    split = 4 + seed
    merged = merge_partials(
        *block_partial(scores[..., :split], v[..., :split, :]),
        *block_partial(scores[..., split:], v[..., split:, :]),
    )
    out, lse = finish_partial(*merged)
    assert_close(out, torch.softmax(scores, dim=-1) @ v)
    assert_close(lse, torch.logsumexp(scores, dim=-1))
    # The order of the two sides does not matter.
    swapped = merge_partials(
        *block_partial(scores[..., split:], v[..., split:, :]),
        *block_partial(scores[..., :split], v[..., :split, :]),
    )
    for a, b in zip(merged, swapped, strict=True):
        assert_close(a, b)


def test_merge_rescales_to_the_new_maximum() -> None:
    # One key on each side: scores 0 and 1000. Without rescaling, exp(1000) overflows.
    v = torch.tensor([[[1.0, 0.0]], [[0.0, 1.0]]])
    a = block_partial(torch.tensor([[0.0]]), v[0])
    b = block_partial(torch.tensor([[1000.0]]), v[1])
    m, l, acc = merge_partials(*a, *b)
    assert m.item() == 1000.0
    assert_close(l, torch.tensor([1.0]))  # exp(0 - 1000) + exp(0)
    assert_close(acc, torch.tensor([[0.0, 1.0]]))


def test_rows_with_every_score_minus_infinity_stay_empty_not_nan() -> None:
    scores = torch.tensor([[NEG_INF, NEG_INF], [0.5, NEG_INF]])
    v = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    m, l, acc = block_partial(scores, v)
    assert torch.isneginf(m[0]) and l[0] == 0 and (acc[0] == 0).all()
    merged = merge_partials(m, l, acc, m, l, acc)
    assert not any(t.isnan().any() for t in merged)
    out, lse = finish_partial(*merged)
    assert (out[0] == 0).all() and torch.isneginf(lse[0])
    assert_close(out[1], v[0])


def test_merge_rejects_mismatched_shapes() -> None:
    m, l, acc = torch.zeros(3), torch.ones(3), torch.zeros(3, 2)
    with pytest.raises(ValueError, match="same shape"):
        merge_partials(m, l, acc, torch.zeros(4), torch.ones(4), torch.zeros(4, 2))
    with pytest.raises(ValueError, match="acc"):
        merge_partials(m, l, torch.zeros(2, 2), m, l, torch.zeros(2, 2))
    with pytest.raises(ValueError, match="do not fit"):
        block_partial(torch.zeros(3, 4), torch.zeros(5, 2))


SHAPES = [
    ((1, 1, 1, 4), 64, 64),  # one token
    ((2, 3, 64, 16), 16, 16),  # T a multiple of both blocks
    ((1, 2, 100, 8), 32, 16),  # T not divisible by either block
    ((2, 1, 77, 32), 64, 20),  # unequal blocks, ragged last tiles
    ((3, 50, 8), 7, 64),  # no head dimension; one key block
]


@pytest.mark.parametrize(("shape", "block_q", "block_k"), SHAPES)
@pytest.mark.parametrize("causal", [False, True])
def test_forward_equals_sdpa_and_stores_the_log_sum_exp(
    shape: tuple[int, ...], block_q: int, block_k: int, causal: bool
) -> None:
    q, k, v = _qkv(shape, seed=sum(shape) + block_q)
    out, lse = flash_attention_forward(q, k, v, is_causal=causal, block_q=block_q, block_k=block_k)
    assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=causal))
    assert_close(lse, torch.logsumexp(_scores(q, k, causal), dim=-1))


def test_forward_survives_large_scores() -> None:
    q, k, v = _qkv((1, 1, 40, 8), seed=5)
    q = q * 200  # scores of several thousand: exp would overflow without the running maximum
    out, _ = flash_attention_forward(q, k, v, is_causal=True, block_q=8, block_k=8)
    assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True))


def test_causal_with_more_queries_than_keys_matches_sdpa() -> None:
    g = torch.Generator().manual_seed(3)
    q = torch.randn(1, 2, 30, 8, generator=g)
    k, v = torch.randn(2, 1, 2, 12, 8, generator=g).unbind(0)
    out, _ = flash_attention_forward(q, k, v, is_causal=True, block_q=8, block_k=5)
    assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True))


@pytest.mark.parametrize(("shape", "block_q", "block_k"), SHAPES)
@pytest.mark.parametrize("causal", [False, True])
def test_gradients_equal_sdpa(
    shape: tuple[int, ...], block_q: int, block_k: int, causal: bool
) -> None:
    q, k, v = _qkv(shape, seed=sum(shape), grad=True)
    grad = torch.randn(shape, generator=torch.Generator().manual_seed(99))
    ours = torch.autograd.grad(
        flash_attention(q, k, v, is_causal=causal, block_q=block_q, block_k=block_k),
        (q, k, v),
        grad,
    )
    theirs = torch.autograd.grad(
        F.scaled_dot_product_attention(q, k, v, is_causal=causal), (q, k, v), grad
    )
    for name, a, b in zip("qkv", ours, theirs, strict=True):
        assert_close(a, b, msg=lambda m, name=name: f"d{name}: {m}")


def _backward_with_an_empty_row(causal: bool) -> tuple[torch.Tensor, ...]:
    """flash_attention_backward given a row that saw no key (lse -inf, output 0), as a caller
    that masks a whole row would pass it, with the gradients of explicit attention with that
    row hidden (helpers.attention returns 0 for it) as the reference."""
    from helpers.attention import scaled_dot_product_attention

    q, k, v = _qkv((1, 2, 12, 8), seed=21, grad=True)
    grad = torch.randn(1, 2, 12, 8, generator=torch.Generator().manual_seed(22))
    empty = 5
    visible = torch.ones(12, 12, dtype=torch.bool)
    visible[empty] = False
    if causal:
        visible &= torch.ones(12, 12, dtype=torch.bool).tril()
    reference = torch.autograd.grad(
        scaled_dot_product_attention(q, k, v, visible)[0], (q, k, v), grad
    )
    with torch.no_grad():
        out, lse = flash_attention_forward(q, k, v, is_causal=causal, block_q=4, block_k=4)
    out[..., empty, :], lse[..., empty] = 0.0, NEG_INF  # what a hidden row leaves behind
    ours = flash_attention_backward(
        grad, q.detach(), k.detach(), v.detach(), out, lse, is_causal=causal, block_q=4, block_k=4
    )
    return ours, reference


@pytest.mark.parametrize("causal", [False, True])
def test_backward_gives_a_row_that_saw_no_key_zero_gradients(causal: bool) -> None:
    ours, reference = _backward_with_an_empty_row(causal)
    assert reference[0][..., 5, :].abs().max() == 0  # the hidden row's dq is 0
    for name, a, b in zip("qkv", ours, reference, strict=True):
        assert_close(a, b, msg=lambda m, name=name: f"d{name}: {m}")


def test_backward_without_the_empty_row_guard_gives_nan(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("helpers.flash._empty_rows_to_inf", lambda lse: lse)
    ours, _ = _backward_with_an_empty_row(causal=False)
    assert not all(torch.isfinite(g).all() for g in ours)  # exp(score + inf): inf, then NaN


def test_gradcheck_in_float64() -> None:
    q, k, v = (t.double().detach().requires_grad_() for t in _qkv((1, 2, 9, 3), seed=7))
    assert torch.autograd.gradcheck(
        lambda q, k, v: flash_attention(q, k, v, is_causal=True, block_q=4, block_k=3),
        (q, k, v),
    )


def test_backward_saves_only_inputs_output_and_lse() -> None:
    q, k, v = _qkv((1, 2, 48, 8), seed=11, grad=True)
    out = flash_attention(q, k, v, is_causal=True, block_q=16, block_k=16)
    saved = out.grad_fn.saved_tensors
    assert [tuple(t.shape) for t in saved] == [(1, 2, 48, 8)] * 4 + [(1, 2, 48)]


@pytest.mark.parametrize("causal", [False, True])
def test_flop_counts_match_the_formula(causal: bool) -> None:
    n_head, T, d, bq, bk = 2, 96, 8, 32, 16
    q, k, v = _qkv((1, n_head, T, d), seed=1, grad=True)
    with FlopCounterMode(display=False) as fwd:
        out = flash_attention(q, k, v, is_causal=causal, block_q=bq, block_k=bk)
    with FlopCounterMode(display=False) as bwd:
        out.backward(torch.ones_like(out))
    pairs = attention_pairs(T, causal=True, blocks=(bq, bk)) if causal else T * T
    assert fwd.get_total_flops() == 4 * n_head * pairs * d
    # recomputed scores, dv, dp, dq, dk: five products per tile
    assert bwd.get_total_flops() == 10 * n_head * pairs * d


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"block_q": 0}, "block_q"),
        ({"block_k": 2.5}, "block_k"),
    ],
)
def test_bad_block_sizes_raise(kwargs: dict[str, object], match: str) -> None:
    q, k, v = _qkv((1, 4, 2), seed=0)
    with pytest.raises(ValueError, match=match):
        flash_attention_forward(q, k, v, **kwargs)  # type: ignore[arg-type]


def test_bad_tensors_raise() -> None:
    q, k, v = _qkv((1, 4, 2), seed=0)
    with pytest.raises(ValueError, match="do not fit"):
        flash_attention(q, k[..., :1], v)
    with pytest.raises(ValueError, match="floating-point"):
        flash_attention(q.long(), k, v)
    with pytest.raises(ValueError, match="at least one key"):
        flash_attention_forward(q, k[:, :0], v[:, :0])
    with pytest.raises(ValueError, match="do not fit"):
        flash_attention_backward(q, q, k, v[..., :1], q, q[..., 0])
