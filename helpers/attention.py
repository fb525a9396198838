"""Scaled dot-product attention written out, and a single attention head.

Defined in chapter 3, "Queries, keys and values".

``softmax(q @ k.T / sqrt(d_k)) @ v`` (Vaswani et al., 2017), returning the weights too so the
book can plot them. The causal mask comes from :mod:`helpers.masking` (chapter 2); input checks
use :mod:`helpers.validation`.
"""

from __future__ import annotations

import math
import warnings

import torch
import torch.nn.functional as F
from torch import nn

from helpers.masking import causal_mask
from helpers.validation import check_positive_int


def _check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """Raise ``ValueError`` unless ``q``, ``k``, ``v`` fit together as attention inputs."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            hint = f"; convert it with torch.from_numpy({name})" if hasattr(t, "__array__") else ""
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}{hint}")
        if not t.is_floating_point():
            raise ValueError(
                f"{name} must be a floating-point tensor (attention takes a softmax of its "
                f"scores), got dtype {t.dtype}; convert it with {name}.float()"
            )
    if not q.dtype == k.dtype == v.dtype:
        raise ValueError(
            f"q, k and v must have one dtype, got {q.dtype}, {k.dtype} and {v.dtype}; convert "
            "them with .to(q.dtype)"
        )
    if q.dim() < 2 or k.dim() < 2 or v.dim() < 2:
        raise ValueError(
            f"q, k, v need at least 2 dims (T, d), got {q.dim()}, {k.dim()}, {v.dim()}"
        )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            "queries and keys must have the same size d_k, "
            f"got q {tuple(q.shape)} and k {tuple(k.shape)}"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            "keys and values must have the same length T_k, "
            f"got k {tuple(k.shape)} and v {tuple(v.shape)}"
        )
    try:
        torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError as err:
        raise ValueError(
            f"the leading (batch, head) dims of q {tuple(q.shape)}, k {tuple(k.shape)} and "
            f"v {tuple(v.shape)} do not broadcast"
        ) from err


def _check_mask(mask: torch.Tensor, scores: torch.Tensor) -> None:
    """Raise ``ValueError`` unless ``mask`` is a boolean or float mask for ``scores``; warn when
    a float mask holds only 0s and 1s (it would be added to the scores, not mask them)."""
    if not isinstance(mask, torch.Tensor):
        raise ValueError(f"mask must be a torch.Tensor, got {type(mask).__name__}")
    scores_shape = scores.shape
    expected = f"the scores' shape {tuple(scores_shape)} = (..., T_q, T_k)"
    try:
        broadcast = torch.broadcast_shapes(mask.shape, scores_shape)
    except RuntimeError as err:
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not broadcast to {expected}"
        ) from err
    if broadcast != scores_shape:  # the mask would silently add batch dimensions
        raise ValueError(f"mask of shape {tuple(mask.shape)} does not broadcast to {expected}")
    if mask.dtype != torch.bool and not mask.is_floating_point():
        raise ValueError(
            "mask must be boolean (True = may attend) or float (0 / -inf added to the scores), "
            f"got dtype {mask.dtype}; a 0/1 integer mask would be added to the scores, "
            "not mask them"
        )
    if mask.is_floating_point() and torch.promote_types(mask.dtype, scores.dtype) != scores.dtype:
        raise ValueError(
            f"a float mask of dtype {mask.dtype} would turn the {scores.dtype} scores into "
            f"{mask.dtype}; build it with the dtype of q ({scores.dtype})"
        )
    if mask.is_floating_point() and ((mask == 0) | (mask == 1)).all() and (mask == 1).any():
        warnings.warn(
            "the float mask holds only 0s and 1s: a float mask is added to the scores (0 keeps "
            "a key, -inf hides it), so its 1s hide nothing; for a mask of visible keys pass a "
            "boolean one, mask.bool()",
            UserWarning,
            stacklevel=3,
        )


def _check_dropout(name: str, p: float) -> float:
    """Return ``p`` as a float if it is a probability in ``[0, 1)``, else raise ``ValueError``."""
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p < 1.0:
        raise ValueError(f"{name} must be a probability in [0, 1), got {p!r}")
    return float(p)


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    is_causal: bool = False,
    scale: float | None = None,
    dropout_p: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of queries ``q`` over keys ``k`` and values ``v``.

    Args:
        q: ``(..., T_q, d_k)`` queries.
        k: ``(..., T_k, d_k)`` keys.
        v: ``(..., T_k, d_v)`` values.
        mask: optional mask broadcastable to ``(..., T_q, T_k)``: boolean (``True`` = may
            attend, as in ``F.scaled_dot_product_attention``) or additive float (``0``/``-inf``,
            added to the scores; a float mask of only 0s and 1s gets a ``UserWarning``, since
            its 1s hide nothing).
        is_causal: hide keys after each query (needs ``T_q == T_k``). May be combined with
            ``mask``: a key is then visible only if both allow it.
        scale: factor applied to the scores; ``None`` means ``1 / sqrt(d_k)`` with
            ``d_k = q.shape[-1]``, the head size (as in ``F.scaled_dot_product_attention``).
        dropout_p: probability of zeroing each attention weight (the survivors are scaled by
            ``1 / (1 - dropout_p)``), applied whenever it is positive, as in
            ``F.scaled_dot_product_attention``; pass ``0.0`` at evaluation time.

    Returns:
        ``(out, weights)``: ``out`` is ``(..., T_q, d_v)``; ``weights`` is ``(..., T_q, T_k)``,
        the weights that multiplied ``v``. Without dropout every row sums to 1 (a row with
        every key masked is all zeros rather than NaN).

    Raises:
        ValueError: on inputs that are not tensors, integer tensors, ``q``, ``k``, ``v`` of
            different dtypes, mismatched shapes, a mask that does not broadcast, a mask that is
            neither boolean nor floating point (or a float mask that would change the scores'
            dtype), ``is_causal`` with ``T_q != T_k``, or a ``dropout_p`` outside ``[0, 1)``.
    """
    _check_qkv(q, k, v)
    dropout_p = _check_dropout("dropout_p", dropout_p)
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])

    # The softmax input, omega / sqrt(d_k) by default, where omega = q . k are the scores. The
    # unscaled scores are not kept in a variable of their own: that would keep one more
    # (T_q, T_k) matrix alive until the function returns.
    logits = (q @ k.transpose(-2, -1)) * scale  # (..., T_q, T_k)
    if is_causal:
        T_q, T_k = q.shape[-2], k.shape[-2]
        if T_q != T_k:
            raise ValueError(f"is_causal needs as many queries as keys, got T_q={T_q}, T_k={T_k}")
        logits = logits.masked_fill(~causal_mask(T_q, device=logits.device), float("-inf"))
    if mask is not None:
        _check_mask(mask, logits)
        if mask.dtype == torch.bool:
            logits = logits.masked_fill(~mask, float("-inf"))
        else:
            logits = logits + mask
    # A query whose keys are all masked has a row of -inf, and its softmax would be 0/0 = NaN.
    # Such a row gets zeros instead: softmax a row of 0s (so no NaN, not even in the gradient),
    # then zero it.
    empty = torch.isneginf(logits).all(dim=-1, keepdim=True)  # (..., T_q, 1)
    weights = torch.softmax(logits.masked_fill(empty, 0.0), dim=-1).masked_fill(empty, 0.0)
    if dropout_p > 0:
        weights = F.dropout(weights, p=dropout_p, training=True)
    return weights @ v, weights


class Head(nn.Module):
    """One head of self-attention: project ``x`` to queries, keys and values, then attend.

    Args:
        n_embd: size ``C`` of each input token vector.
        head_size: size ``d_k`` of each query, key and value.
        causal: if ``True`` (a decoder), token ``t`` only sees tokens ``0..t``.
        bias: whether the projections have a bias. The default, no bias, follows Karpathy's
            lecture; GPT-2's attention projections do have biases (pass ``bias=True``).
        block_size: the longest sequence the head accepts. When given (and ``causal``), the
            ``(block_size, block_size)`` causal mask is built once and registered as a
            (non-persistent) buffer, so it follows the module in ``.to(device)``, as in the
            lecture's ``tril`` buffer. When ``None`` (the default) sequences of any length are
            accepted and the mask is built for each call: ``T * T`` booleans, cheap at the
            book's sizes.
        dropout: probability of dropping each attention weight during training (``0.0``: none).
            Off in ``eval()`` mode.

    Raises:
        ValueError: if ``n_embd``, ``head_size`` or ``block_size`` is not a positive int, or
            ``dropout`` is not in ``[0, 1)``.
    """

    def __init__(
        self,
        n_embd: int,
        head_size: int,
        *,
        causal: bool = True,
        bias: bool = False,
        block_size: int | None = None,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        n_embd = check_positive_int("n_embd", n_embd, what="the size of each token vector")
        head_size = check_positive_int("head_size", head_size, what="the size of q, k and v")
        if block_size is not None:
            block_size = check_positive_int("block_size", block_size, what="the longest context")
        self.query = nn.Linear(n_embd, head_size, bias=bias)
        self.key = nn.Linear(n_embd, head_size, bias=bias)
        self.value = nn.Linear(n_embd, head_size, bias=bias)
        self.causal = causal
        self.block_size = block_size
        self.dropout = _check_dropout("dropout", dropout)
        self.mask: torch.Tensor | None
        if causal and block_size is not None:
            self.register_buffer("mask", causal_mask(block_size), persistent=False)
        else:
            self.mask = None
        self.last_weights: torch.Tensor | None = None  # (B, T, T), kept for plotting

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x``: ``(B, T, C)`` -> ``(B, T, head_size)``."""
        if x.dim() != 3 or x.shape[-1] != self.query.in_features:
            raise ValueError(
                f"expected x of shape (B, T, {self.query.in_features}), got {tuple(x.shape)}"
            )
        T = x.shape[1]
        if self.block_size is not None and T > self.block_size:
            raise ValueError(f"sequence of {T} tokens is longer than block_size={self.block_size}")
        q, k, v = self.query(x), self.key(x), self.value(x)
        dropout_p = self.dropout if self.training else 0.0
        if self.mask is not None:  # the registered buffer, cut to this sequence's length
            mask = self.mask[:T, :T]
            out, weights = scaled_dot_product_attention(q, k, v, mask, dropout_p=dropout_p)
        else:
            out, weights = scaled_dot_product_attention(
                q, k, v, is_causal=self.causal, dropout_p=dropout_p
            )
        self.last_weights = weights.detach()
        return out
