"""``helpers.attention.scaled_dot_product_attention`` on inputs a learner may pass by mistake:
NumPy arrays, integer tensors, mixed dtypes, and a float mask of 0s and 1s."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
import torch

from helpers.attention import scaled_dot_product_attention
from helpers.masking import causal_mask


def qkv(dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    return tuple(torch.randn(2, 5, 4, generator=g, dtype=dtype) for _ in range(3))


def test_numpy_arrays_are_refused_with_the_conversion() -> None:
    q, k, v = qkv()
    with pytest.raises(
        ValueError, match=re.escape("q must be a torch.Tensor, got ndarray; convert it with")
    ):
        scaled_dot_product_attention(q.numpy(), k, v)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="v must be a torch.Tensor, got list"):
        scaled_dot_product_attention(q, k, v.tolist())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="mask must be a torch.Tensor, got ndarray"):
        mask = np.tril(np.ones((5, 5), dtype=bool))
        scaled_dot_product_attention(q, k, v, mask)  # type: ignore[arg-type]


@pytest.mark.parametrize("dtype", [torch.long, torch.int32, torch.bool])
def test_integer_tensors_are_refused(dtype: torch.dtype) -> None:
    q, k, v = qkv()
    with pytest.raises(
        ValueError, match=re.escape("k must be a floating-point tensor (attention takes a")
    ) as err:
        scaled_dot_product_attention(q, k.to(dtype), v)
    assert f"got dtype {dtype}; convert it with k.float()" in str(err.value)


def test_mixed_float_dtypes_are_refused() -> None:
    q, k, v = qkv()
    with pytest.raises(
        ValueError,
        match=re.escape("q, k and v must have one dtype, got torch.float64, torch.float32 and"),
    ):
        scaled_dot_product_attention(q.double(), k, v)


def test_a_float_mask_must_not_change_the_scores_dtype() -> None:
    q, k, v = qkv()
    additive = torch.zeros(5, 5, dtype=torch.float64).masked_fill(~causal_mask(5), float("-inf"))
    with pytest.raises(ValueError, match="a float mask of dtype torch.float64 would turn the"):
        scaled_dot_product_attention(q, k, v, additive)
    # float32 masks on float64 inputs are fine, as in PyTorch: the scores stay float64
    out, _ = scaled_dot_product_attention(*qkv(torch.float64), additive.float())
    assert out.dtype == torch.float64


def test_a_float_mask_of_zeros_and_ones_warns_and_is_still_added() -> None:
    q, k, v = qkv()
    ones = causal_mask(5).float()
    with pytest.warns(UserWarning, match=re.escape("the float mask holds only 0s and 1s")):
        _, weights = scaled_dot_product_attention(q, k, v, ones)
    assert (weights.triu(1) > 0).any()  # documented: the 1s were added, nothing was hidden
    _, plain = scaled_dot_product_attention(q, k, v)
    assert not torch.allclose(weights, plain)


@pytest.mark.parametrize(
    "mask",
    [
        causal_mask(5),  # boolean
        torch.zeros(5, 5).masked_fill(~causal_mask(5), float("-inf")),  # 0 / -inf
        torch.zeros(5, 5),  # adds nothing
        torch.full((5, 5), 0.5),  # a bias
    ],
)
def test_other_masks_do_not_warn(mask: torch.Tensor) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scaled_dot_product_attention(*qkv(), mask)
