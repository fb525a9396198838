"""Sinusoidal encodings keep the promises of Vaswani et al. (2017); learned ones fail clearly."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.testing import assert_close

from helpers.positional import (
    LearnedPositionalEmbedding,
    sinusoidal_encoding,
    sinusoidal_shift_matrix,
)

SIZES = [(1, 2), (4, 2), (10, 6), (50, 16), (128, 64)]  # (T, d_model)


def reference(T: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """The paper's formula, one entry at a time, in float64."""
    pe = torch.zeros(T, d_model, dtype=torch.float64)
    for pos in range(T):
        for i in range(d_model // 2):
            angle = pos / base ** (2 * i / d_model)
            pe[pos, 2 * i] = math.sin(angle)
            pe[pos, 2 * i + 1] = math.cos(angle)
    return pe


@pytest.mark.parametrize("base", [10000.0, 1000.0, 2.5])
@pytest.mark.parametrize("T,d_model", SIZES)
def test_matches_double_loop(T: int, d_model: int, base: float) -> None:
    assert_close(
        sinusoidal_encoding(T, d_model, base, dtype=torch.float64), reference(T, d_model, base)
    )
    assert_close(sinusoidal_encoding(T, d_model, base), reference(T, d_model, base).float())


def test_known_values() -> None:
    pe = sinusoidal_encoding(3, 4)
    expected = torch.tensor(
        [
            [0.0, 1.0, 0.0, 1.0],
            [math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)],
            [math.sin(2), math.cos(2), math.sin(0.02), math.cos(0.02)],
        ]
    )
    assert_close(pe, expected)


def test_long_sequences_keep_float32_precision() -> None:
    pe = sinusoidal_encoding(5000, 8)
    assert_close(pe[4999], reference(5000, 8)[4999].float(), atol=1e-6, rtol=0)


def test_dtype_and_device() -> None:
    pe = sinusoidal_encoding(5, 8, dtype=torch.float16, device="cpu")
    assert pe.dtype == torch.float16 and pe.device.type == "cpu"


@pytest.mark.parametrize("T,d_model", SIZES[1:])
def test_pairs_on_the_unit_circle(T: int, d_model: int) -> None:
    """Each (sin, cos) pair has length 1 (which bounds every entry by 1), so every position has
    norm sqrt(d_model / 2); a layout that split sin and cos apart would fail this."""
    pe = sinusoidal_encoding(T, d_model, dtype=torch.float64)
    pair_norms = pe.view(T, d_model // 2, 2).norm(dim=-1)
    assert_close(pair_norms, torch.ones(T, d_model // 2, dtype=torch.float64))
    assert_close(pe.norm(dim=1), torch.full((T,), math.sqrt(d_model / 2), dtype=torch.float64))


@pytest.mark.parametrize("T,d_model", [(128, 16), (512, 64), (2048, 128)])
def test_positions_are_distinct(T: int, d_model: int) -> None:
    pe = sinusoidal_encoding(T, d_model, dtype=torch.float64)
    dist = torch.cdist(pe, pe)
    dist.fill_diagonal_(float("inf"))
    assert dist.min() > 0.1


@pytest.mark.parametrize("T,d_model", [(64, 16), (128, 64)])
def test_dot_product_depends_only_on_offset(T: int, d_model: int) -> None:
    pe = sinusoidal_encoding(T, d_model, dtype=torch.float64)
    gram = pe @ pe.T
    omega = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    for k in range(-T + 1, T):
        expected = torch.cos(k * omega).sum()  # sum_i cos(k omega_i): no pos anywhere
        assert_close(gram.diagonal(k), expected.expand(T - abs(k)))


def test_dot_product_falls_with_distance() -> None:
    pe = sinusoidal_encoding(1024, 64, dtype=torch.float64)
    sim = pe[0] @ pe.T / 32  # cosine similarity to position 0
    assert_close(sim[0], torch.tensor(1.0, dtype=torch.float64))
    assert (sim[1:] < 1 - 1e-6).all()
    assert (sim[1:6].diff() < 0).all()  # strictly falling over the first offsets...
    bands = [(1, 4), (4, 16), (16, 64), (64, 256), (256, 1024)]  # ...and band by band after that
    means = torch.stack([sim[a:b].mean() for a, b in bands])
    maxima = torch.stack([sim[a:b].max() for a, b in bands])
    assert (means.diff() < 0).all() and (maxima.diff() < 0).all()


@pytest.mark.parametrize("base", [10000.0, 1000.0])
@pytest.mark.parametrize("k", [0, 1, 2, 5, 17])
def test_shift_is_a_fixed_rotation(k: int, base: float) -> None:
    T, d = 60, 16
    pe = sinusoidal_encoding(T + k, d, base, dtype=torch.float64)
    M = sinusoidal_shift_matrix(k, d, base, dtype=torch.float64)
    assert_close(pe[k:], pe[:T] @ M.T)  # every position, one matrix
    assert_close(M @ M.T, torch.eye(d, dtype=torch.float64))  # a rotation: orthogonal...
    assert_close(torch.linalg.det(M), torch.tensor(1.0, dtype=torch.float64))  # ...with det 1
    off_block = M.clone()
    for i in range(0, d, 2):
        off_block[i : i + 2, i : i + 2] = 0
    assert off_block.abs().max() == 0  # block diagonal: frequencies never mix


def test_shift_matrices_compose() -> None:
    M = lambda k: sinusoidal_shift_matrix(k, 12, dtype=torch.float64)  # noqa: E731
    assert_close(M(3) @ M(4), M(7))
    assert_close(M(-5), M(5).T)
    assert_close(M(0), torch.eye(12, dtype=torch.float64))


@pytest.mark.parametrize(
    "args,match",
    [
        ((4, 7), "d_model must be even, got 7"),
        ((4, 0), "d_model must be a positive int.*, got 0"),
        ((0, 8), "T must be a positive int.*, got 0"),
        ((-3, 8), "T must be a positive int.*, got -3"),
        ((4.0, 8), "T must be a positive int.*, got 4.0"),
        ((True, 8), "T must be a positive int.*, got True"),
        ((4, 8, 1.0), "base must be a finite number > 1"),
        ((4, 8, -10.0), "base must be a finite number > 1"),
        ((4, 8, float("inf")), "base must be a finite number > 1"),
    ],
)
def test_sinusoidal_errors(args: tuple, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        sinusoidal_encoding(*args)


def test_numpy_sizes_are_accepted() -> None:
    assert_close(sinusoidal_encoding(np.int64(5), np.int64(4)), sinusoidal_encoding(5, 4))


def test_shift_matrix_errors() -> None:
    with pytest.raises(ValueError, match="k must be an int"):
        sinusoidal_shift_matrix(1.5, 8)
    with pytest.raises(ValueError, match="d_model must be even, got 5"):
        sinusoidal_shift_matrix(1, 5)


def test_learned_positions_lookup() -> None:
    torch.manual_seed(0)
    emb = LearnedPositionalEmbedding(8, 4)
    assert_close(emb(8), emb.weight)
    assert_close(emb(3, offset=5), emb.weight[5:8])


def test_learned_positions_fail_clearly_past_block_size() -> None:
    emb = LearnedPositionalEmbedding(8, 4)
    with pytest.raises(
        ValueError, match=r"positions up to 8 requested, but this model only has block_size=8"
    ):
        emb(9)
    with pytest.raises(
        ValueError, match=r"positions up to 9 requested.*crop the context to the last 8 tokens"
    ):
        emb(2, offset=8)
    with pytest.raises(ValueError, match="T must be a positive int"):
        emb(0)
    with pytest.raises(ValueError, match="offset must be an int >= 0"):
        emb(2, offset=-1)
    with pytest.raises(ValueError, match="block_size must be a positive int"):
        LearnedPositionalEmbedding(0, 4)
    with pytest.raises(ValueError, match="n_embd must be a positive int"):
        LearnedPositionalEmbedding(8, 4.0)
