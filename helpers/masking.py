"""Causal masks: which positions a token may attend to."""

from __future__ import annotations

import numbers

import torch


def _check_size(name: str, value: int) -> None:
    # numbers.Integral also admits NumPy integers such as np.int64; bool is an int but never a size.
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise ValueError(f"{name} must be a positive int (the number of tokens), got {value!r}")


def causal_mask(T: int, *, device: torch.device | str | None = None) -> torch.Tensor:
    """Boolean ``(T, T)`` mask that is ``True`` where query ``i`` may see key ``j`` (``j <= i``).

    This is the convention of ``F.scaled_dot_product_attention``'s boolean ``attn_mask``. (It is
    the opposite of ``nn.MultiheadAttention``'s boolean ``attn_mask``, where ``True`` means *hidden*:
    pass ``~causal_mask(T)`` there.)

    Raises:
        ValueError: if ``T`` is not a positive int.
    """
    _check_size("T", T)
    T = int(T)
    return torch.ones(T, T, dtype=torch.bool, device=device).tril()


def additive_causal_mask(T: int, *, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None) -> torch.Tensor:
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
