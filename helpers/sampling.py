"""Drawing the next token from a language model's logits: temperature, top-k, softmax, draw.

Defined in chapter 8, "Building and training a GPT" (``GPT.generate`` calls it at every step).
"""

from __future__ import annotations

import math
import numbers

import torch
import torch.nn.functional as F

from helpers.model_checks import is_real


def check_sampling(temperature: object, top_k: object, vocab_size: int) -> int | None:
    """Raise ``ValueError`` unless ``temperature`` is a finite number ``> 0`` and ``top_k`` is
    None or an integer (a NumPy integer too) in ``1..vocab_size``. Returns ``top_k`` as an int
    (or None)."""
    if not is_real(temperature) or not math.isfinite(temperature) or temperature <= 0:
        raise ValueError(
            f"temperature must be a finite number > 0 (1.0 samples the model's own "
            f"distribution), got {temperature!r}"
        )
    if top_k is None:
        return None
    if (
        isinstance(top_k, bool)
        or not isinstance(top_k, numbers.Integral)
        or not 1 <= top_k <= vocab_size
    ):
        raise ValueError(
            f"top_k must be in 1..{vocab_size} (an int, or None to keep every token), got {top_k!r}"
        )
    return int(top_k)


def sample_next(
    logits: torch.Tensor,
    temperature: float,
    top_k: int | None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Sample one token id per row from ``(B, vocab_size)`` logits: divide by ``temperature``,
    keep the ``top_k`` largest (all if None), softmax, draw. Returns ``(B, 1)`` ids.

    A temperature so small that ``logits / temperature`` overflows (``1e-45``, say) samples
    from the limit of a vanishing temperature: the most likely token (uniformly among ties),
    which is greedy decoding, as ``top_k=1`` gives.
    """
    scaled = logits / temperature
    if temperature < 1:  # only a division by less than 1 can overflow
        overflow = (scaled.isinf() & logits.isfinite()).any(dim=-1, keepdim=True)
        if overflow.any():
            best = logits == logits.max(dim=-1, keepdim=True).values
            limit = torch.zeros_like(scaled).masked_fill(~best, float("-inf"))
            scaled = torch.where(overflow, limit, scaled)
    if top_k is not None:
        kth = torch.topk(scaled, top_k).values[:, -1, None]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    probs = F.softmax(scaled, dim=-1)
    return torch.multinomial(probs, num_samples=1, generator=generator)
