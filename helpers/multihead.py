"""Multi-head attention, in two equivalent forms, and weight copies between them and PyTorch.

Defined in chapter 5, "Multi-head and cross-attention"; the key/value cache is used in chapter 9,
"The cost of attention and fast generation".

``MultiHeadAttentionConcat`` is the form that is easiest to read: a list of independent
``helpers.attention.Head`` modules whose outputs are concatenated, then an output projection.

``MultiHeadAttention`` is the efficient form, the layer the GPT model uses: project once, split
into heads, attend, merge. Its fused input projection stores ``[W_q; W_k; W_v]`` stacked row-wise,
the same layout as ``nn.MultiheadAttention.in_proj_weight``, so weights copy across directly. It
supports self-attention (causal or not), cross-attention (keys and values from a second sequence)
and a key/value cache for fast generation.

``copy_concat_to_fused`` and ``copy_fused_to_torch`` move weights between the three, so that the
book (and the tests) can check that they compute the same function.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from helpers.attention import Head, scaled_dot_product_attention
from helpers.masking import causal_mask
from helpers.validation import check_positive_int


def _check_heads_divide(n_embd: int, n_head: int) -> tuple[int, int]:
    """Check both sizes are positive ints and that ``n_head`` divides ``n_embd``."""
    n_embd = check_positive_int("n_embd", n_embd, what="the token size C")
    n_head = check_positive_int("n_head", n_head, what="the number of heads")
    if n_embd % n_head != 0:
        raise ValueError(
            f"n_embd={n_embd} is not divisible by n_head={n_head}: every head gets "
            f"head_size = n_embd // n_head channels, so n_head must divide n_embd"
        )
    return n_embd, n_head


@dataclass
class KVCache:
    """Keys and values of the tokens seen so far, each ``(B, n_head, T_cached, head_size)``."""

    k: torch.Tensor | None = None
    v: torch.Tensor | None = None

    def __len__(self) -> int:
        return 0 if self.k is None else self.k.shape[-2]

    @property
    def seen(self) -> int:
        """How many tokens have passed through the cache: the position of the next token. Here
        every token is kept, so it is ``len(self)``."""
        return len(self)

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add the new tokens' keys and values; return all keys and values so far."""
        if k.shape != v.shape or k.dim() != 4:
            raise ValueError(
                "keys and values must both be (B, n_head, T_new, head_size), "
                f"got {tuple(k.shape)} and {tuple(v.shape)}"
            )
        if self.k is None or self.v is None:
            self.k, self.v = k, v
        elif k.shape[:2] != self.k.shape[:2] or k.shape[-1] != self.k.shape[-1]:
            raise ValueError(
                f"new keys {tuple(k.shape)} do not match the cached ones {tuple(self.k.shape)} in "
                "(B, n_head, head_size); use one KVCache per layer and per batch"
            )
        else:
            self.k = torch.cat([self.k, k], dim=-2)
            self.v = torch.cat([self.v, v], dim=-2)
        return self.k, self.v


@dataclass
class RollingKVCache(KVCache):
    """A key/value cache that keeps only the last ``window - 1`` tokens (with the next token
    itself, a full window of ``window`` keys), and counts every token it has seen (``seen``:
    the position of the next token). With rotary positions the cached keys were rotated by
    their own positions, which never change, so they stay valid as the window slides (used by
    ``helpers.model.GPT`` in chapter 10).
    """

    window: int = 0
    seen: int = 0  # type: ignore[assignment]

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add the new tokens; return the kept and the new keys and values (for this call's
        attention), and keep only the last ``window - 1`` of them for the next call."""
        k_all, v_all = super().append(k, v)
        self.seen += k.shape[-2]
        keep = self.window - 1
        if self.window and k_all.shape[-2] > keep:
            start = k_all.shape[-2] - keep
            self.k, self.v = k_all[..., start:, :], v_all[..., start:, :]
        return k_all, v_all


class MultiHeadAttention(nn.Module):
    """``n_head`` attention heads computed together, followed by an output projection.

    Args:
        n_embd: token size ``C``; must be divisible by ``n_head``.
        n_head: number of heads; each has ``head_size = n_embd // n_head``.
        causal: mask future keys (decoder self-attention). A causal layer refuses a ``context``:
            cross-attention lets every query see the whole context, so a causal mask has no
            meaning there, and ``context=x`` would silently drop the mask.
        dropout: dropout on the attention weights and on the output.
        bias: whether the projections have biases.
        use_sdpa: compute attention with PyTorch's fused ``F.scaled_dot_product_attention``
            (which returns the output only, not the weights) instead of the book's explicit
            version; ``need_weights=True`` in ``forward`` uses the explicit version anyway.
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
        n_embd, n_head = _check_heads_divide(n_embd, n_head)
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
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
                    f"context must have shape ({x.shape[0]}, T_ctx, {C}), "
                    f"got {tuple(context.shape)}"
                )
            if self.causal:
                raise ValueError(
                    "this layer is causal (causal=True), and a causal mask has no meaning for "
                    "cross-attention, where every query sees the whole context; build the "
                    "cross-attention layer with causal=False (and call a causal layer without "
                    "context: context=x would silently attend to the future)"
                )
            if kv_cache is not None:
                raise ValueError(
                    "a kv_cache is for self-attention; for cross-attention the context's keys and "
                    "values do not grow, so compute them once instead of appending them at every "
                    "call"
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
                mask = causal_mask(T_new, T_past=T_past, device=x.device)
            # A single new token may see every cached key: no mask needed.

        p = self.dropout if self.training else 0.0
        if self.use_sdpa and not need_weights:
            y = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=p, is_causal=is_causal
            )
            self.last_weights = None
        else:
            y, weights = scaled_dot_product_attention(q, k, v, mask, is_causal=is_causal)
            if p > 0:
                # Dropout on the weights, as F.scaled_dot_product_attention does.
                y = F.dropout(weights, p) @ v
            self.last_weights = weights.detach()
        y = y.transpose(1, 2).contiguous().view(x.shape[0], T_new, C)  # merge heads
        return self.resid_dropout(self.c_proj(y))


class MultiHeadAttentionConcat(nn.Module):
    """``n_head`` independent heads side by side, concatenated, then an output projection.

    The readable form of multi-head attention: ``proj(cat([head_1(x), ..., head_h(x)]))``. It
    computes the same function as ``MultiHeadAttention`` once the weights are shared (see
    ``copy_concat_to_fused``), but runs the heads one after the other.

    Args:
        n_embd: token size ``C``; must be divisible by ``n_head``.
        n_head: number of heads; each is a ``helpers.attention.Head`` with
            ``head_size = n_embd // n_head``.
        causal: mask future keys in every head (decoder self-attention).
        bias: whether the projections have biases.
    """

    def __init__(
        self, n_embd: int, n_head: int, *, causal: bool = True, bias: bool = False
    ) -> None:
        super().__init__()
        n_embd, n_head = _check_heads_divide(n_embd, n_head)
        self.n_embd, self.n_head, self.head_size = n_embd, n_head, n_embd // n_head
        self.causal = causal
        self.heads = nn.ModuleList(
            Head(n_embd, self.head_size, causal=causal, bias=bias) for _ in range(n_head)
        )
        self.proj = nn.Linear(n_embd, n_embd, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x``: ``(B, T, C)`` -> ``(B, T, C)``."""
        if x.dim() != 3 or x.shape[-1] != self.n_embd:
            raise ValueError(f"expected x of shape (B, T, {self.n_embd}), got {tuple(x.shape)}")
        return self.proj(torch.cat([head(x) for head in self.heads], dim=-1))

    @property
    def last_weights(self) -> torch.Tensor | None:
        """The heads' attention weights of the last call, stacked to ``(B, n_head, T, T)``."""
        weights = [head.last_weights for head in self.heads]
        if any(w is None for w in weights):
            return None
        return torch.stack(weights, dim=1)  # type: ignore[arg-type]


def _same_bias(name: str, a: torch.Tensor | None, b: torch.Tensor | None) -> None:
    if (a is None) != (b is None):
        has, lacks = ("source", "destination") if a is not None else ("destination", "source")
        raise ValueError(
            f"{name}: the {has} has a bias but the {lacks} does not; build both with the same bias="
        )


@torch.no_grad()
def copy_concat_to_fused(src: MultiHeadAttentionConcat, dst: MultiHeadAttention) -> None:
    """Copy a list-of-heads layer's weights into the fused layer, in place.

    Head ``h``'s query weights (``head_size`` rows) become rows ``h * head_size ..`` of the
    query block of ``dst.c_attn.weight``, and likewise for keys and values, so that splitting
    the fused projection into heads gives back exactly the heads of ``src``.

    Raises:
        ValueError: if the two layers differ in ``n_embd``, ``n_head`` or in having biases.
    """
    if (src.n_embd, src.n_head) != (dst.n_embd, dst.n_head):
        raise ValueError(
            f"shapes differ: source has n_embd={src.n_embd}, n_head={src.n_head}; "
            f"destination has n_embd={dst.n_embd}, n_head={dst.n_head}"
        )
    _same_bias("c_attn", src.heads[0].query.bias, dst.c_attn.bias)
    _same_bias("c_proj", src.proj.bias, dst.c_proj.bias)
    for block, name in enumerate(("query", "key", "value")):
        layers = [getattr(head, name) for head in src.heads]
        rows = slice(block * src.n_embd, (block + 1) * src.n_embd)
        dst.c_attn.weight[rows] = torch.cat([layer.weight for layer in layers], dim=0)
        if dst.c_attn.bias is not None:
            dst.c_attn.bias[rows] = torch.cat([layer.bias for layer in layers], dim=0)
    dst.c_proj.weight.copy_(src.proj.weight)
    if dst.c_proj.bias is not None:
        dst.c_proj.bias.copy_(src.proj.bias)


@torch.no_grad()
def copy_fused_to_torch(src: MultiHeadAttention, dst: nn.MultiheadAttention) -> None:
    """Copy the fused layer's weights into PyTorch's ``nn.MultiheadAttention``, in place.

    The layouts already agree: ``in_proj_weight`` is ``[W_q; W_k; W_v]`` like ``c_attn.weight``,
    and ``out_proj`` plays the role of ``c_proj``. Build ``dst`` with ``batch_first=True`` to
    feed it the book's ``(B, T, C)`` tensors.

    Raises:
        ValueError: if the sizes, the number of heads or the presence of biases differ, or if
            ``dst`` was built with separate key/value sizes (``kdim``/``vdim``).
    """
    if (dst.embed_dim, dst.num_heads) != (src.n_embd, src.n_head):
        raise ValueError(
            f"shapes differ: source has n_embd={src.n_embd}, n_head={src.n_head}; "
            f"destination has embed_dim={dst.embed_dim}, num_heads={dst.num_heads}"
        )
    if dst.in_proj_weight is None:
        raise ValueError(
            "the destination has separate q/k/v projections (kdim or vdim != embed_dim)"
        )
    if dst.bias_k is not None or dst.bias_v is not None:
        raise ValueError(
            "the destination has add_bias_kv=True, which the book's layer has no counterpart for"
        )
    _same_bias("in_proj", src.c_attn.bias, dst.in_proj_bias)
    _same_bias("out_proj", src.c_proj.bias, dst.out_proj.bias)
    dst.in_proj_weight.copy_(src.c_attn.weight)
    if dst.in_proj_bias is not None:
        dst.in_proj_bias.copy_(src.c_attn.bias)
    dst.out_proj.weight.copy_(src.c_proj.weight)
    if dst.out_proj.bias is not None:
        dst.out_proj.bias.copy_(src.c_proj.bias)
