"""The book's GPT with each modern upgrade as a switch: RoPE, RMSNorm, QK-norm, the MLP's
non-linearity, and a key/value cache that survives a sliding window.

Defined in chapter 10, "From GPT-2 to a modern transformer".

``ModernGPT(ModernConfig(pos="learned", norm="layer", qk_norm=False, mlp="gelu"))`` is exactly
``helpers.model.GPT`` (same parameter names, same initialisation, same function); the defaults
of :class:`ModernConfig` switch every upgrade on. With rotary positions the model has no
position table, so it can read texts longer than ``block_size``: every token then attends to
itself and the ``block_size - 1`` tokens before it (a *sliding window*), and a
:class:`RollingKVCache` makes generation cost the same at every length.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from helpers.model import GPTConfig, check_sampling, sample_next
from helpers.multihead import KVCache
from helpers.norms import RMSNorm, make_norm
from helpers.positional import LearnedPositionalEmbedding
from helpers.rope import RotaryEmbedding
from helpers.validation import check_non_negative_int, check_positive_int

POS_KINDS = ("learned", "rope")
NORM_KINDS = ("layer", "rms")
MLP_KINDS = ("gelu", "relu2", "swiglu")


@dataclass
class ModernConfig(GPTConfig):
    """``GPTConfig`` plus the architectural switches; the defaults are all upgrades on.

    Attributes:
        pos: ``"learned"`` (GPT-2's position table, added to the tokens) or ``"rope"``
            (queries and keys rotated by their positions).
        norm: ``"layer"`` (LayerNorm) or ``"rms"`` (RMSNorm) in the blocks and before the head.
        qk_norm: RMSNorm on every head's queries and keys before the scores.
        mlp: ``"gelu"`` (GPT-2), ``"relu2"`` (squared ReLU) or ``"swiglu"`` (gated, with the
            hidden width cut to ``round(8 C / 3)`` so the parameter count stays about ``8 C^2``).
        rope_base: RoPE's frequency base.
    """

    pos: str = "rope"
    norm: str = "rms"
    qk_norm: bool = True
    mlp: str = "relu2"
    rope_base: float = 10000.0

    def __post_init__(self) -> None:
        super().__post_init__()
        for name, kinds in (("pos", POS_KINDS), ("norm", NORM_KINDS), ("mlp", MLP_KINDS)):
            if getattr(self, name) not in kinds:
                raise ValueError(f"{name} must be one of {kinds}, got {getattr(self, name)!r}")
        if self.pos == "rope" and (self.n_embd // self.n_head) % 2:
            raise ValueError(
                f"RoPE needs an even head_size, got n_embd // n_head = {self.n_embd // self.n_head}"
            )


GPT2_SWITCHES = dict(pos="learned", norm="layer", qk_norm=False, mlp="gelu")


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


@dataclass
class RollingKVCache(KVCache):
    """A key/value cache that keeps only the last ``window - 1`` tokens (with the next token
    itself, a full window), and counts every token it has seen (``seen``: the position of the
    next token). With RoPE the cached keys were rotated by their own positions, which never
    change, so they stay valid as the window slides."""

    window: int = 0
    seen: int = 0

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


class ModernAttention(nn.Module):
    """Causal multi-head self-attention with optional QK-norm and rotary positions.

    Parameter names follow ``helpers.multihead.MultiHeadAttention`` (``c_attn`` holds
    ``[W_q; W_k; W_v]``, ``c_proj`` is ``W^O``), so GPT-2 weights load unchanged.
    """

    def __init__(self, config: ModernConfig) -> None:
        super().__init__()
        C, n_head = config.n_embd, config.n_head
        self.n_embd, self.n_head, self.head_size = C, n_head, C // n_head
        self.window = config.block_size
        self.c_attn = nn.Linear(C, 3 * C, bias=config.bias)
        self.c_proj = nn.Linear(C, C, bias=config.bias)
        self.q_norm = RMSNorm(self.head_size) if config.qk_norm else None
        self.k_norm = RMSNorm(self.head_size) if config.qk_norm else None
        self.rotary = (
            RotaryEmbedding(self.head_size, config.block_size, config.rope_base)
            if config.pos == "rope"
            else None
        )
        self.last_weights: torch.Tensor | None = None

    def forward(
        self,
        x: torch.Tensor,
        kv_cache: KVCache | None = None,
        need_weights: bool = False,
        offset: int = 0,
    ) -> torch.Tensor:
        """``x``: ``(B, T, C)`` tokens at positions ``offset .. offset + T - 1`` (with a cache,
        the new tokens after the cached ones). Returns ``(B, T, C)``."""
        B, T, C = x.shape
        # (3, B, n_head, T, head_size): queries, keys and values, split into heads.
        qkv = self.c_attn(x).view(B, T, 3, self.n_head, self.head_size).permute(2, 0, 3, 1, 4)
        qk, v = qkv[:2], qkv[2]  # queries and keys are normalised and rotated together
        if self.q_norm is not None and self.k_norm is not None:
            gains = torch.stack([self.q_norm.weight, self.k_norm.weight])[:, None, None, None]
            qk = F.rms_norm(qk, (self.head_size,), eps=self.q_norm.eps) * gains
        if self.rotary is not None:
            qk = self.rotary(qk, offset)
        q, k = qk[0], qk[1]
        if kv_cache is not None:
            k, v = kv_cache.append(k, v)
        T_past = k.shape[-2] - T
        mask = None
        if T == 1 and T_past < self.window:
            pass  # one new token that may see every kept key: no mask at all
        elif T_past or T > self.window:
            mask = sliding_window_mask(T, T_past=T_past, window=self.window, device=x.device)
        if need_weights:
            scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_size)
            if mask is None:
                mask = sliding_window_mask(T, T_past=T_past, window=self.window, device=x.device)
            weights = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            self.last_weights = weights.detach()
            y = weights @ v
        else:
            self.last_weights = None
            causal = mask is None and T > 1
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class ModernMLP(nn.Module):
    """The position-wise MLP with a choice of non-linearity.

    ``gelu``: ``W_2 GELU(W_1 x)`` with a ``4 C`` hidden layer (GPT-2). ``relu2``: the same with
    ``ReLU(.)^2``. ``swiglu``: ``W_2 (SiLU(W_g x) * (W_u x))``, whose three matrices of hidden
    width ``round(8 C / 3)`` hold about as many weights as GPT-2's two of width ``4 C``.
    """

    def __init__(self, config: ModernConfig) -> None:
        super().__init__()
        C = config.n_embd
        self.kind = config.mlp
        hidden = round(8 * C / 3) if self.kind == "swiglu" else 4 * C
        n_in = 2 * hidden if self.kind == "swiglu" else hidden  # gate and up, stacked
        self.hidden = hidden
        self.c_fc = nn.Linear(C, n_in, bias=config.bias)
        self.c_proj = nn.Linear(hidden, C, bias=config.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.c_fc(x)
        if self.kind == "gelu":
            h = F.gelu(h)
        elif self.kind == "relu2":
            h = F.relu(h).square()
        else:
            gate, up = h.split(self.hidden, dim=-1)
            h = F.silu(gate) * up
        return self.c_proj(h)


class ModernBlock(nn.Module):
    """Pre-norm block: ``x + attn(norm(x))``, then ``x + mlp(norm(x))``."""

    def __init__(self, config: ModernConfig) -> None:
        super().__init__()
        self.ln_1 = make_norm(config.norm, config.n_embd)
        self.attn = ModernAttention(config)
        self.ln_2 = make_norm(config.norm, config.n_embd)
        self.mlp = ModernMLP(config)

    def forward(
        self,
        x: torch.Tensor,
        kv_cache: KVCache | None = None,
        need_weights: bool = False,
        offset: int = 0,
    ) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), kv_cache, need_weights, offset)
        return x + self.mlp(self.ln_2(x))


class ModernGPT(nn.Module):
    """A GPT whose architecture is chosen by a :class:`ModernConfig` (see the module docstring).

    Like ``helpers.model.GPT``: tied token embedding and LM head, GPT-2's initialisation
    (normal with std 0.02, output projections scaled by ``1 / sqrt(2 n_layer)``), and
    ``forward(idx, targets)`` returning ``(logits, loss)``.
    """

    def __init__(self, config: ModernConfig) -> None:
        super().__init__()
        if not isinstance(config, ModernConfig):
            raise ValueError(f"expected a ModernConfig, got {type(config).__name__}")
        if config.dropout:
            raise ValueError("ModernGPT has no dropout; use dropout=0.0")
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.n_embd)
        self.pos_emb = (
            LearnedPositionalEmbedding(config.block_size, config.n_embd)
            if config.pos == "learned"
            else None
        )
        self.blocks = nn.ModuleList(ModernBlock(config) for _ in range(config.n_layer))
        self.ln_f = make_norm(config.norm, config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.lm_head.weight = self.tok_emb.weight
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)
                if getattr(module, "bias", None) is not None:
                    nn.init.zeros_(module.bias)
        if self.pos_emb is not None:
            nn.init.normal_(self.pos_emb.weight, mean=0.0, std=0.02)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    def num_params(self, non_embedding: bool = True) -> int:
        """Parameter count; by default without the position table (as ``GPT.num_params``)."""
        n = sum(p.numel() for p in self.parameters())
        if non_embedding and self.pos_emb is not None:
            n -= self.pos_emb.weight.numel()
        return n

    def receptive_field(self) -> int:
        """How many tokens the last position's logits can depend on: each layer reaches
        ``block_size - 1`` tokens further back, so ``n_layer (block_size - 1) + 1``."""
        return self.config.n_layer * (self.config.block_size - 1) + 1

    def forward(
        self,
        idx: torch.Tensor,
        targets: torch.Tensor | None = None,
        *,
        kv_caches: list[RollingKVCache] | None = None,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Next-token logits ``(B, T, vocab_size)`` and the mean cross-entropy (or ``None``).

        With rotary positions ``T`` may exceed ``block_size``: each token then attends to
        itself and the ``block_size - 1`` tokens before it. ``kv_caches`` (one
        :class:`RollingKVCache` per layer) place ``idx`` after the tokens already seen.

        Raises:
            ValueError: on a bad shape, ids outside the vocabulary, a context longer than
                ``block_size`` with learned positions, or a wrong number of caches.
        """
        if not isinstance(idx, torch.Tensor) or idx.dim() != 2:
            raise ValueError(f"idx must be (B, T) token ids, got {getattr(idx, 'shape', idx)}")
        if idx.is_floating_point():
            raise ValueError(f"idx must hold integer token ids, got dtype {idx.dtype}")
        B, T = idx.shape
        if kv_caches is not None and len(kv_caches) != len(self.blocks):
            raise ValueError(f"need one cache per layer ({len(self.blocks)}), got {len(kv_caches)}")
        offset = kv_caches[0].seen if kv_caches else 0
        outside = (idx < 0) | (idx >= self.config.vocab_size)
        if outside.any():
            raise ValueError(
                f"token ids must be in 0..{self.config.vocab_size - 1}, got {int(idx[outside][0])}"
            )
        if targets is not None and targets.shape != idx.shape:
            raise ValueError(
                f"targets must have the shape of idx {tuple(idx.shape)}, got {tuple(targets.shape)}"
            )
        x = self.tok_emb(idx)
        if self.pos_emb is not None:
            x = x + self.pos_emb(T, offset)  # raises beyond block_size
        for i, block in enumerate(self.blocks):
            x = block(x, kv_caches[i] if kv_caches is not None else None, need_weights, offset)
        logits = self.lm_head(self.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(B * T, -1), targets.reshape(B * T))
        return logits, loss

    def new_caches(self) -> list[RollingKVCache]:
        """One empty :class:`RollingKVCache` per layer (``block_size - 1`` tokens each)."""
        return [RollingKVCache(window=self.config.block_size) for _ in self.blocks]

    @torch.no_grad()
    def generate(
        self,
        idx: torch.Tensor,
        max_new_tokens: int,
        *,
        temperature: float = 1.0,
        top_k: int | None = None,
        use_cache: bool = False,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Append ``max_new_tokens`` sampled tokens to ``idx`` (``(B, T)``).

        With rotary positions, without a cache every step reruns the last
        :meth:`receptive_field` tokens (everything the next token can depend on); with
        ``use_cache`` the prompt fills a rolling cache once and every step runs only the newest
        token. Both compute the same logits. With learned positions the context is cropped to
        ``block_size`` and a cache is rebuilt whenever the window slides (as ``GPT.generate``).
        """
        max_new_tokens = check_non_negative_int("max_new_tokens", max_new_tokens)
        check_sampling(temperature, top_k, self.config.vocab_size)
        was_training = self.training
        self.eval()
        rope = self.config.pos == "rope"
        context = self.receptive_field() if rope else self.config.block_size
        caches: list[RollingKVCache] | None = None
        for _ in range(max_new_tokens):
            if use_cache and caches is not None and (rope or idx.shape[1] <= context):
                logits, _ = self(idx[:, -1:], kv_caches=caches)
            else:
                caches = self.new_caches() if use_cache else None
                window = idx[:, -context:]
                if caches is not None:
                    for cache in caches:  # positions continue from where the window starts
                        cache.seen = idx.shape[1] - window.shape[1] if rope else 0
                logits, _ = self(window, kv_caches=caches)
            next_id = sample_next(logits[:, -1, :], temperature, top_k, generator)
            idx = torch.cat([idx, next_id], dim=1)
        self.train(was_training)
        return idx
