"""RMSNorm, LayerNorm's cheaper cousin, and QK-norm, which normalises queries and keys.

Defined in chapter 10, "From GPT-2 to a modern transformer".

LayerNorm (Ba et al., 2016) subtracts each token's mean and divides by its standard deviation,
then applies a learned gain. RMSNorm (Zhang and Sennrich, 2019) skips the mean: it divides by the
root mean square ``sqrt(mean(x^2) + eps)`` and applies the gain. QK-norm applies an RMSNorm to
every head's queries and keys before the dot product, so that the scores are bounded by the
gains (and the score scale): no attention logit can grow without limit during training.
``helpers.model.GPT`` builds its norms from ``GPTConfig.norm`` with PyTorch's ``nn.LayerNorm``
and ``nn.RMSNorm``, the same functions as the ones written out here.
"""

from __future__ import annotations

import torch
from torch import nn

from helpers.validation import check_positive_int


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor | None = None, eps: float | None = None
) -> torch.Tensor:
    """``x / sqrt(mean(x^2 over the last dim) + eps) * weight``.

    ``eps`` defaults to the machine epsilon of ``x``'s dtype, as in ``torch.nn.RMSNorm``.
    """
    if eps is None:
        eps = torch.finfo(x.dtype).eps
    y = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)
    return y if weight is None else y * weight


class RMSNorm(nn.Module):
    """Root-mean-square normalisation over the last dimension, with a learned gain.

    The same function as ``torch.nn.RMSNorm(size)``, written out.

    Args:
        size: the size of the last dimension (``n_embd`` in a block, ``head_size`` for QK-norm).
        eps: added to the mean square; ``None`` uses the dtype's machine epsilon.
    """

    def __init__(self, size: int, eps: float | None = None) -> None:
        super().__init__()
        self.size = check_positive_int("size", size, what="the normalised dimension")
        if eps is not None and not eps >= 0:
            raise ValueError(f"eps must be >= 0, got {eps!r}")
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(self.size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.size:
            raise ValueError(f"expected a last dimension of {self.size}, got {tuple(x.shape)}")
        return rms_norm(x, self.weight, self.eps)
