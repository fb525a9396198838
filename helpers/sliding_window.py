"""Which keys a query may see in the GPT's attention: causal, after cached tokens, and in a
sliding window of ``block_size`` keys.

Used by ``helpers.model.CausalSelfAttention`` (chapter 10, "From GPT-2 to a modern
transformer"). With rotary positions or none, a text may be longer than ``block_size``: each
token then attends to itself and the ``block_size - 1`` tokens before it, and a
``helpers.multihead.RollingKVCache`` keeps only those keys during generation.
"""

from __future__ import annotations

import torch

from helpers.masking import causal_mask
from helpers.validation import check_non_negative_int, check_positive_int


def sliding_window_mask(
    T: int, *, T_past: int = 0, window: int, device: torch.device | str | None = None
) -> torch.Tensor:
    """Boolean ``(T, T_past + T)`` mask, ``True`` where query ``i`` (at position ``T_past + i``)
    may see key ``j``: ``T_past + i - window < j <= T_past + i``, i.e. itself and the
    ``window - 1`` keys before it. With ``window >= T_past + T`` it is the causal mask."""
    T = check_positive_int("T", T, what="the number of queries")
    T_past = check_non_negative_int("T_past", T_past)
    window = check_positive_int("window", window, what="keys a query may see")
    q_pos = torch.arange(T_past, T_past + T, device=device)[:, None]
    k_pos = torch.arange(T_past + T, device=device)[None, :]
    return (k_pos <= q_pos) & (k_pos > q_pos - window)


def attention_mask(
    T: int, T_past: int, window: int, device: torch.device | str | None = None
) -> tuple[torch.Tensor | None, bool]:
    """The mask for ``T`` new queries after ``T_past`` kept keys, each query seeing at most
    ``window`` keys (itself included), in the form ``F.scaled_dot_product_attention`` takes:
    ``(attn_mask, is_causal)``.

    The cheapest form that is exact: a sliding-window mask only when some query would see more
    than ``window`` keys; ``is_causal`` when nothing is cached; the causal mask shifted by
    ``T_past`` for several new tokens after cached ones; no mask for a single new token (it may
    see every kept key).
    """
    if T_past + T > window:
        return sliding_window_mask(T, T_past=T_past, window=window, device=device), False
    if T_past == 0:
        return None, True
    if T > 1:  # new query i sits at position T_past + i and may see keys 0..T_past + i
        return causal_mask(T, T_past=T_past, device=device), False
    return None, False
