"""Multi-head attention in its efficient form: project once, split into heads, attend, merge.

``MultiHeadAttention`` is the layer the GPT model uses. Its fused input projection stores
``[W_q; W_k; W_v]`` stacked row-wise, the same layout as ``nn.MultiheadAttention.in_proj_weight``,
so weights copy across directly. It supports self-attention (causal or not), cross-attention
(keys and values from a second sequence) and a key/value cache for fast generation.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from helpers.attention import scaled_dot_product_attention


@dataclass
class KVCache:
    """Keys and values of the tokens seen so far, each ``(B, n_head, T_cached, head_size)``."""

    k: torch.Tensor | None = None
    v: torch.Tensor | None = None

    def __len__(self) -> int:
        return 0 if self.k is None else self.k.shape[-2]

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add the new tokens' keys and values; return all keys and values so far."""
        if self.k is None or self.v is None:
            self.k, self.v = k, v
        else:
            self.k = torch.cat([self.k, k], dim=-2)
            self.v = torch.cat([self.v, v], dim=-2)
        return self.k, self.v


class MultiHeadAttention(nn.Module):
    """``n_head`` attention heads computed together, followed by an output projection.

    Args:
        n_embd: token size ``C``; must be divisible by ``n_head``.
        n_head: number of heads; each has ``head_size = n_embd // n_head``.
        causal: mask future keys (decoder self-attention).
        dropout: dropout on the attention weights and on the output.
        bias: whether the projections have biases.
        use_sdpa: compute attention with PyTorch's fused ``F.scaled_dot_product_attention``
            (fast, does not materialise the weights) instead of the book's explicit version.
    """

    def __init__(
        self,
        n_embd: int,
        n_head: int,
        *,
        causal: bool = True,
        dropout: float = 0.0,
        bias: bool = False,
        use_sdpa: bool = True,
    ) -> None:
        super().__init__()
        if n_embd <= 0 or n_head <= 0:
            raise ValueError(f"n_embd and n_head must be positive, got {n_embd} and {n_head}")
        if n_embd % n_head != 0:
            raise ValueError(f"n_embd={n_embd} is not divisible by n_head={n_head}")
        self.n_embd, self.n_head, self.head_size = n_embd, n_head, n_embd // n_head
        self.causal, self.dropout, self.use_sdpa = causal, dropout, use_sdpa
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=bias)  # [W_q; W_k; W_v]
        self.c_proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.resid_dropout = nn.Dropout(dropout)
        self.last_weights: torch.Tensor | None = None  # (B, n_head, T_q, T_k) when computed

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        return x.view(B, T, self.n_head, self.head_size).transpose(1, 2)  # (B, nh, T, hs)

    def forward(
        self,
        x: torch.Tensor,
        context: torch.Tensor | None = None,
        *,
        kv_cache: KVCache | None = None,
        need_weights: bool = False,
    ) -> torch.Tensor:
        """Attend from ``x`` to itself, or to ``context`` (cross-attention).

        Args:
            x: ``(B, T, C)`` tokens that produce the queries.
            context: optional ``(B, T_ctx, C)`` tokens that produce keys and values.
            kv_cache: keys/values of earlier tokens; this call's are appended to it. With a cache,
                ``x`` holds only the new tokens and each attends to every cached token plus the
                new ones up to itself.
            need_weights: use the explicit computation and keep the weights in ``last_weights``.

        Returns:
            ``(B, T, C)``.
        """
        if x.dim() != 3 or x.shape[-1] != self.n_embd:
            raise ValueError(f"expected x of shape (B, T, {self.n_embd}), got {tuple(x.shape)}")
        W, b = self.c_attn.weight, self.c_attn.bias
        C = self.n_embd
        if context is None:
            q, k, v = self.c_attn(x).split(C, dim=2)
        else:
            if context.dim() != 3 or context.shape[0] != x.shape[0] or context.shape[-1] != C:
                raise ValueError(
                    f"context must have shape ({x.shape[0]}, T_ctx, {C}), got {tuple(context.shape)}"
                )
            q = F.linear(x, W[:C], None if b is None else b[:C])
            k, v = F.linear(context, W[C:], None if b is None else b[C:]).split(C, dim=2)
        q, k, v = self._split_heads(q), self._split_heads(k), self._split_heads(v)

        T_new = q.shape[-2]
        T_past = 0
        if kv_cache is not None:
            T_past = len(kv_cache)
            k, v = kv_cache.append(k, v)
        mask = None
        is_causal = False
        if self.causal and context is None:
            if T_past == 0:
                is_causal = True
            elif T_new > 1:
                # New query i sits at position T_past + i and may see keys 0..T_past + i.
                T_k = k.shape[-2]
                mask = torch.ones(T_new, T_k, dtype=torch.bool, device=x.device).tril(diagonal=T_past)
            # A single new token may see every cached key: no mask needed.

        p = self.dropout if self.training else 0.0
        if self.use_sdpa and not need_weights:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, is_causal=is_causal)
            self.last_weights = None
        else:
            y, weights = scaled_dot_product_attention(q, k, v, mask, is_causal=is_causal)
            if p > 0:
                # Dropout on the weights, as F.scaled_dot_product_attention does.
                y = F.dropout(weights, p) @ v
            self.last_weights = weights.detach()
        y = y.transpose(1, 2).contiguous().view(x.shape[0], T_new, C)  # merge heads
        return self.resid_dropout(self.c_proj(y))
