"""Scaled dot-product attention written out, and a single attention head.

``softmax(q @ k.T / sqrt(d_k)) @ v`` (Vaswani et al., 2017), returning the weights too so the
book can plot them.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from helpers.masking import causal_mask
from helpers.softmax import stable_softmax


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    is_causal: bool = False,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of queries ``q`` over keys ``k`` and values ``v``.

    Args:
        q: ``(..., T_q, d_k)`` queries.
        k: ``(..., T_k, d_k)`` keys.
        v: ``(..., T_k, d_v)`` values.
        mask: optional mask broadcastable to ``(..., T_q, T_k)``: boolean (``True`` = may attend,
            as in ``F.scaled_dot_product_attention``) or additive float (``0`` / ``-inf``).
        is_causal: hide keys after each query (needs ``T_q == T_k``). May be combined with
            ``mask``: a key is then visible only if both allow it.
        scale: factor applied to the scores; ``None`` means ``1 / sqrt(d_k)`` with
            ``d_k = q.shape[-1]``, the head size (as in ``F.scaled_dot_product_attention``).

    Returns:
        ``(out, weights)``: ``out`` is ``(..., T_q, d_v)``; ``weights`` is ``(..., T_q, T_k)`` and
        every row sums to 1 (a row with every key masked is all zeros rather than NaN).

    Raises:
        ValueError: on mismatched shapes, a mask that does not broadcast, a mask that is neither
            boolean nor floating point, or ``is_causal`` with ``T_q != T_k``.
    """
    if q.dim() < 2 or k.dim() < 2 or v.dim() < 2:
        raise ValueError(
            f"q, k, v need at least 2 dims (T, d), got {q.dim()}, {k.dim()}, {v.dim()}"
        )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"queries and keys must have the same size d_k, got q {tuple(q.shape)} and k {tuple(k.shape)}"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"keys and values must have the same length T_k, got k {tuple(k.shape)} and v {tuple(v.shape)}"
        )
    try:
        torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError as err:
        raise ValueError(
            f"the leading (batch, head) dims of q {tuple(q.shape)}, k {tuple(k.shape)} and "
            f"v {tuple(v.shape)} do not broadcast"
        ) from err
    T_q, T_k = q.shape[-2], k.shape[-2]
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    scores = q @ k.transpose(-2, -1) * scale  # (..., T_q, T_k)

    if is_causal:
        if T_q != T_k:
            raise ValueError(f"is_causal needs as many queries as keys, got T_q={T_q}, T_k={T_k}")
        scores = scores.masked_fill(~causal_mask(T_q, device=scores.device), float("-inf"))
    if mask is not None:
        expected = f"the scores' shape {tuple(scores.shape)} = (..., T_q, T_k)"
        try:
            broadcast = torch.broadcast_shapes(mask.shape, scores.shape)
        except RuntimeError as err:
            raise ValueError(
                f"mask of shape {tuple(mask.shape)} does not broadcast to {expected}"
            ) from err
        if broadcast != scores.shape:  # the mask would silently add batch dimensions
            raise ValueError(f"mask of shape {tuple(mask.shape)} does not broadcast to {expected}")
        if mask.dtype != torch.bool and not mask.is_floating_point():
            raise ValueError(
                f"mask must be boolean (True = may attend) or float (0 / -inf added to the scores), "
                f"got dtype {mask.dtype}; a 0/1 integer mask would be added to the scores, not mask them"
            )
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))
        else:
            scores = scores + mask

    weights = stable_softmax(scores, dim=-1)
    return weights @ v, weights


class Head(nn.Module):
    """One head of self-attention: project ``x`` to queries, keys and values, then attend.

    Args:
        n_embd: size ``C`` of each input token vector.
        head_size: size ``d_k`` of each query, key and value.
        causal: if ``True`` (a decoder), token ``t`` only sees tokens ``0..t``.
        bias: whether the projections have a bias (GPT-style heads have none).
    """

    def __init__(
        self, n_embd: int, head_size: int, *, causal: bool = True, bias: bool = False
    ) -> None:
        super().__init__()
        if n_embd <= 0 or head_size <= 0:
            raise ValueError(f"n_embd and head_size must be positive, got {n_embd} and {head_size}")
        self.query = nn.Linear(n_embd, head_size, bias=bias)
        self.key = nn.Linear(n_embd, head_size, bias=bias)
        self.value = nn.Linear(n_embd, head_size, bias=bias)
        self.causal = causal
        self.last_weights: torch.Tensor | None = None  # (B, T, T), kept for plotting

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x``: ``(B, T, C)`` -> ``(B, T, head_size)``."""
        if x.dim() != 3 or x.shape[-1] != self.query.in_features:
            raise ValueError(
                f"expected x of shape (B, T, {self.query.in_features}), got {tuple(x.shape)}"
            )
        q, k, v = self.query(x), self.key(x), self.value(x)
        out, weights = scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        self.last_weights = weights.detach()
        return out
