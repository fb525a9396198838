"""Causal masks: which positions a token may attend to.

Defined in chapter 2, "Causal masking".
"""

from __future__ import annotations

import torch

from helpers.validation import check_non_negative_int, check_positive_int


def causal_mask(
    T: int, *, T_past: int = 0, device: torch.device | str | None = None
) -> torch.Tensor:
    """Boolean mask that is ``True`` where a query may see a key: ``(T, T_past + T)``.

    With ``T_past = 0`` (the default) this is the square ``(T, T)`` mask with ``True`` where
    query ``i`` may see key ``j`` (``j <= i``). With ``T_past > 0`` the ``T`` queries are the
    *newest* tokens, sitting after ``T_past`` earlier (for example cached) keys: query ``i`` is at
    position ``T_past + i`` and sees keys ``0 .. T_past + i``. This rectangular form is what a
    KV cache needs when several new tokens are processed at once.

    This is the convention of ``F.scaled_dot_product_attention``'s boolean ``attn_mask``. (It
    is the opposite of ``nn.MultiheadAttention``'s boolean ``attn_mask``, where ``True`` means
    *hidden*: pass ``~causal_mask(T)`` there.)

    Raises:
        ValueError: if ``T`` is not a positive int or ``T_past`` is not an int ``>= 0``.
    """
    T = check_positive_int("T", T, what="the number of tokens")
    T_past = check_non_negative_int("T_past", T_past)
    return torch.ones(T, T_past + T, dtype=torch.bool, device=device).tril(diagonal=T_past)


def additive_causal_mask(
    T: int, *, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None
) -> torch.Tensor:
    """Float ``(T, T)`` mask: ``0`` where attention is allowed, ``-inf`` where it is not.

    Added to the scores before the softmax, ``-inf`` becomes a weight of exactly zero.

    Raises:
        ValueError: if ``T`` is not a positive int.
    """
    allowed = causal_mask(T, device=device)
    return torch.zeros(T, T, dtype=dtype, device=device).masked_fill(~allowed, float("-inf"))


def apply_causal_mask(scores: torch.Tensor) -> torch.Tensor:
    """Return ``scores`` with every future position (key after query) set to ``-inf``.

    Raises:
        ValueError: if the last two dimensions of ``scores`` are not square ``(T, T)``.
    """
    if scores.dim() < 2 or scores.shape[-1] != scores.shape[-2]:
        raise ValueError(
            f"a causal mask needs square (..., T, T) scores, got shape {tuple(scores.shape)}; "
            "for queries and keys of different lengths pass an explicit mask instead"
        )
    T = scores.shape[-1]
    return scores.masked_fill(~causal_mask(T, device=scores.device), float("-inf"))
