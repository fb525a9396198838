"""RoPE rotates pairs of dimensions by position-proportional angles, so scores depend only on
offsets; the rotation is chapter 6's shift matrix."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from helpers.positional import sinusoidal_encoding, sinusoidal_shift_matrix
from helpers.rope import RotaryEmbedding, apply_rope, rope_angles, rope_frequencies


def reference(x: torch.Tensor, positions: list[int], base: float = 10000.0) -> torch.Tensor:
    """The convention, one pair at a time, in float64."""
    out = x.double().clone()
    head_size = x.shape[-1]
    for t, pos in enumerate(positions):
        for i in range(head_size // 2):
            a = pos * base ** (-2 * i / head_size)
            x0, x1 = x[..., t, 2 * i].double(), x[..., t, 2 * i + 1].double()
            out[..., t, 2 * i] = x0 * math.cos(a) - x1 * math.sin(a)
            out[..., t, 2 * i + 1] = x0 * math.sin(a) + x1 * math.cos(a)
    return out


@pytest.mark.parametrize("head_size", [2, 8, 16])
def test_matches_pair_by_pair_rotation(head_size: int) -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 5, head_size, generator=g, dtype=torch.float64)
    positions = [0, 1, 7, 100, 3000]
    got = apply_rope(x, torch.tensor(positions))
    assert_close(got, reference(x, positions))


def test_position_zero_is_identity_and_norms_are_kept() -> None:
    x = torch.randn(4, 6, 16)
    assert_close(apply_rope(x, torch.zeros(6, dtype=torch.long)), x)
    rotated = apply_rope(x, torch.arange(6) * 37)
    assert_close(rotated.norm(dim=-1), x.norm(dim=-1))
    assert not torch.allclose(rotated, x)


def test_scores_depend_only_on_offset() -> None:
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(2, 10, 16, generator=g, dtype=torch.float64).unbind(0)
    pos = torch.arange(10)
    scores = apply_rope(q, pos) @ apply_rope(k, pos).T
    shifted = apply_rope(q, pos + 1234) @ apply_rope(k, pos + 1234).T
    assert_close(shifted, scores)
    # Without the rotation of both, a shift does change the scores.
    assert not torch.allclose(apply_rope(q, pos + 5) @ apply_rope(k, pos).T, scores)


def test_rotation_is_chapter_6_shift_of_the_encoding() -> None:
    """RoPE's rotation by k steps, applied to the (sin, cos) pairs of chapter 6's encoding,
    is the inverse of chapter 6's M_k in that layout (M_k turns the pairs the other way)."""
    d, k = 16, 5
    pe = sinusoidal_encoding(20, d, dtype=torch.float64)
    M = sinusoidal_shift_matrix(k, d, dtype=torch.float64)
    swapped = pe.view(20, d // 2, 2).flip(-1).reshape(20, d)  # (cos, sin) pairs
    rotated = apply_rope(swapped[:-k], torch.full((20 - k,), k))
    assert_close(rotated, swapped[k:])
    assert_close((pe[:-k] @ M.T), pe[k:])


def test_rotary_embedding_matches_function_inside_and_beyond_block() -> None:
    rot = RotaryEmbedding(8, block_size=16)
    x = torch.randn(2, 4, 6, 8)
    assert_close(rot(x, offset=3), apply_rope(x, torch.arange(3, 9)))
    assert_close(rot(x, offset=500), apply_rope(x, torch.arange(500, 506)))


def test_rotary_embedding_extends_its_tables_once_not_every_step() -> None:
    rot = RotaryEmbedding(8, block_size=16)
    x = torch.randn(1, 1, 1, 8)
    rot(x, offset=16)  # the first position past the table: it grows to twice its length
    table = rot.cos2
    assert table.shape == (32, 8)
    for pos in range(17, 32):  # decode steps inside the grown table reuse it
        assert_close(rot(x, offset=pos), apply_rope(x, torch.tensor([pos])))
        assert rot.cos2 is table
    rot(x, offset=100)
    assert rot.cos2.shape == (101, 8)
    assert_close(rot(x, offset=-3), apply_rope(x, torch.tensor([-3])))  # negative: on demand


def test_frequencies_and_angles() -> None:
    f = rope_frequencies(8)
    assert_close(f, torch.tensor([1.0, 10000**-0.25, 10000**-0.5, 10000**-0.75], dtype=f.dtype))
    assert rope_angles(torch.arange(3), 8).shape == (3, 4)


@pytest.mark.parametrize(
    "call",
    [
        lambda: apply_rope(torch.randn(4, 7), torch.arange(4)),  # odd head_size
        lambda: apply_rope(torch.randn(4, 8), torch.arange(5)),  # wrong number of positions
        lambda: apply_rope(torch.randn(4, 8), torch.arange(4.0)),  # float positions
        lambda: rope_frequencies(8, base=1.0),
        lambda: RotaryEmbedding(0, 16),
    ],
)
def test_bad_input_raises_value_error(call) -> None:  # noqa: ANN001
    with pytest.raises(ValueError):
        call()
