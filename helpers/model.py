"""A small GPT: token and position embeddings, pre-norm transformer blocks, an LM head.

Defined in chapter 8, "Building and training a GPT"; the switches of :class:`GPTConfig` beyond
the model's size (rotary positions, RMSNorm, QK-norm, other MLPs) in chapter 10, "From GPT-2 to
a modern transformer".

The shape names follow the book: ``B`` batch, ``T`` time (tokens), ``C`` channels (``n_embd``).
Attention is ``helpers.multihead.MultiHeadAttention`` (the layer Part I builds), here with
PyTorch's fused ``F.scaled_dot_product_attention`` for speed. One class, :class:`GPT`, builds
every architecture the book trains: chapter 8's model is the all-defaults configuration.
"""

from __future__ import annotations

import math
import numbers
import pickle
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from helpers.attention import scaled_dot_product_attention
from helpers.masking import causal_mask
from helpers.multihead import KVCache, MultiHeadAttention, RollingKVCache
from helpers.positional import LearnedPositionalEmbedding
from helpers.rope import RotaryEmbedding
from helpers.tokenizer import CharTokenizer
from helpers.validation import check_non_negative_int, check_positive_int

# The fields of a model's size (the rest choose its architecture).
SIZE_FIELDS = ("vocab_size", "block_size", "n_layer", "n_head", "n_embd", "dropout", "bias")
POSITIONS = ("learned", "rope", "none")
NORMS = ("layernorm", "rmsnorm")
MLPS = ("gelu", "gelu_tanh", "relu2", "swiglu")


@dataclass
class GPTConfig:
    """The model's size and architecture. The defaults are the model chapter 8 trains on a CPU:
    4 layers of 4 heads, ``n_embd`` 64, a context of 64 characters, the 65-character vocabulary
    of Tiny Shakespeare, learned positions, LayerNorm, a GELU MLP, no dropout and no biases
    (201,344 parameters without the position embeddings). ``bench/README.md`` reports how this
    size was chosen and what it reaches. Chapter 10 switches the architecture's parts one at a
    time; every combination is the same :class:`GPT`, built and initialised by the same code.

    Every model keeps GPT-2's tied weights (the LM head is the token embedding's matrix), its
    initialisation (normal, std 0.02; output projections scaled by ``1 / sqrt(2 n_layer)``),
    pre-norm blocks and a final norm before the head.

    GPT-2 itself (the 124 M model) is ``GPTConfig(vocab_size=50257, block_size=1024,
    n_layer=12, n_head=12, n_embd=768, bias=True, mlp="gelu_tanh")``: biases in every linear
    layer and norm, LayerNorm with ``norm_eps`` 1e-5, learned positions up to 1024, the
    tanh-approximate GELU, dropout 0 for inference. The parameter names follow GPT-2's roles
    (``c_attn``, ``c_proj``, ``c_fc``, ``ln_1``, ``ln_2``, ``ln_f``), but a released GPT-2
    checkpoint does not load as it is: its names differ (``wte``, ``wpe``, ``h.0``) and its
    ``Conv1D`` layers store each weight transposed relative to ``nn.Linear``.

    Args:
        vocab_size: number of tokens.
        block_size: longest context, in tokens. With learned positions, the number of position
            vectors; with ``"rope"`` or ``"none"`` longer texts are allowed and every token
            attends to itself and the ``block_size - 1`` tokens before it (a sliding window).
        n_layer: number of transformer blocks.
        n_head: attention heads per block; must divide ``n_embd``.
        n_embd: channels ``C`` of the residual stream.
        dropout: dropout probability on embeddings, attention weights and residual branches.
        bias: whether linear layers (except the tied LM head) and LayerNorms have biases.
        pos: ``"learned"`` (GPT-2's table of position vectors, added to the tokens), ``"rope"``
            (queries and keys rotated by their positions) or ``"none"`` (no position
            information except what the causal mask implies).
        norm: ``"layernorm"`` or ``"rmsnorm"``, in the blocks and before the head.
        norm_eps: the ``eps`` of every norm (added to the variance or the mean square).
        mlp: ``"gelu"`` (exact GELU, 4 C hidden), ``"gelu_tanh"`` (GPT-2's tanh approximation),
            ``"relu2"`` (squared ReLU) or ``"swiglu"`` (gated SiLU, with the hidden width cut to
            ``round(8 C / 3)`` so the three matrices hold about as many weights as two of
            ``4 C``).
        qk_norm: RMSNorm (with learned per-channel gains) on every head's queries and keys
            before the scores.
        qk_scale: the factor that multiplies the scores; ``None`` is ``1 / sqrt(head_size)``.
            With ``qk_norm`` the scores start bounded by ``qk_scale * head_size``, so a larger
            scale than ``1 / sqrt(head_size)`` is usual there.
        rope_base: RoPE's frequency base.
    """

    vocab_size: int = 65
    block_size: int = 64
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 64
    dropout: float = 0.0
    bias: bool = False
    pos: str = "learned"
    norm: str = "layernorm"
    norm_eps: float = 1e-5
    mlp: str = "gelu"
    qk_norm: bool = False
    qk_scale: float | None = None
    rope_base: float = 10000.0

    def __post_init__(self) -> None:
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd"):
            check_positive_int(name, getattr(self, name))
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd={self.n_embd} is not divisible by n_head={self.n_head}")
        if not _is_real(self.dropout) or not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout!r}")
        if not isinstance(self.bias, bool):
            raise ValueError(f"bias must be True or False, got {self.bias!r}")
        for name, kinds in (("pos", POSITIONS), ("norm", NORMS), ("mlp", MLPS)):
            if getattr(self, name) not in kinds:
                raise ValueError(f"{name} must be one of {kinds}, got {getattr(self, name)!r}")
        if not _is_real(self.norm_eps) or not 0 < self.norm_eps < 1:
            raise ValueError(f"norm_eps must be a number in (0, 1), got {self.norm_eps!r}")
        if not isinstance(self.qk_norm, bool):
            raise ValueError(f"qk_norm must be True or False, got {self.qk_norm!r}")
        if self.qk_scale is not None and (
            not _is_real(self.qk_scale) or not math.isfinite(self.qk_scale) or self.qk_scale <= 0
        ):
            raise ValueError(f"qk_scale must be None or a positive number, got {self.qk_scale!r}")
        if self.pos == "rope" and (self.n_embd // self.n_head) % 2:
            raise ValueError(
                f"RoPE needs an even head_size, got n_embd // n_head = {self.n_embd // self.n_head}"
            )

    def __repr__(self) -> str:
        """The size fields always, an architecture switch only where it differs from its
        default: ``GPTConfig()`` prints as chapter 8's model, ``GPTConfig(pos="rope")`` shows
        what changed."""
        shown = [
            f"{f.name}={getattr(self, f.name)!r}"
            for f in fields(self)
            if f.name in SIZE_FIELDS or getattr(self, f.name) != f.default
        ]
        return f"GPTConfig({', '.join(shown)})"

    @property
    def head_size(self) -> int:
        """Channels per head, ``n_embd // n_head``."""
        return self.n_embd // self.n_head


def _is_real(x: object) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def make_norm(config: GPTConfig, size: int | None = None) -> nn.Module:
    """The norm ``config`` asks for (``nn.LayerNorm`` or ``nn.RMSNorm``) over ``size`` channels
    (default ``n_embd``), with ``config.norm_eps`` and, for LayerNorm, ``config.bias``."""
    size = config.n_embd if size is None else size
    if config.norm == "rmsnorm":
        return nn.RMSNorm(size, eps=config.norm_eps)
    return nn.LayerNorm(size, eps=config.norm_eps, bias=config.bias)


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


class CausalSelfAttention(MultiHeadAttention):
    """The GPT's attention: ``helpers.multihead.MultiHeadAttention`` (causal self-attention,
    same parameters) plus the options of :class:`GPTConfig`: QK-norm, a score scale, rotary
    positions, and a sliding window of ``block_size`` keys for texts longer than that.

    ``forward(x, kv_cache, need_weights, offset)``: ``x`` holds the tokens at positions
    ``offset .. offset + T - 1`` (RoPE rotates by these); with a cache, the new tokens after
    the cached ones.
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__(
            config.n_embd, config.n_head, causal=True, dropout=config.dropout, bias=config.bias
        )
        self.window = config.block_size
        self.scale = config.qk_scale
        self.q_norm = nn.RMSNorm(self.head_size, eps=config.norm_eps) if config.qk_norm else None
        self.k_norm = nn.RMSNorm(self.head_size, eps=config.norm_eps) if config.qk_norm else None
        self.rotary = (
            RotaryEmbedding(self.head_size, config.block_size, config.rope_base)
            if config.pos == "rope"
            else None
        )

    def forward(  # type: ignore[override]
        self,
        x: torch.Tensor,
        kv_cache: KVCache | None = None,
        need_weights: bool = False,
        offset: int = 0,
    ) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = self._split_heads(q), self._split_heads(k), self._split_heads(v)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.rotary is not None:
            q, k = self.rotary(q, offset), self.rotary(k, offset)
        T_past = 0
        if kv_cache is not None:
            T_past = len(kv_cache)
            k, v = kv_cache.append(k, v)
        mask = None
        is_causal = False
        if T_past + T > self.window and not (T == 1 and T_past < self.window):
            mask = sliding_window_mask(T, T_past=T_past, window=self.window, device=x.device)
        elif T_past == 0:
            is_causal = True
        elif T > 1:
            # New query i sits at position T_past + i and may see keys 0..T_past + i.
            mask = causal_mask(T, T_past=T_past, device=x.device)
        # A single new token that may see every kept key needs no mask.

        p = self.dropout if self.training else 0.0
        if need_weights:
            y, weights = scaled_dot_product_attention(
                q, k, v, mask, is_causal=is_causal, scale=self.scale
            )
            if p > 0:
                y = F.dropout(weights, p) @ v
            self.last_weights = weights.detach()
        else:
            y = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=p, is_causal=is_causal, scale=self.scale
            )
            self.last_weights = None
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # merge heads
        return self.resid_dropout(self.c_proj(y))


class FeedForward(nn.Module):
    """Position-wise MLP: each token thinks about what it gathered, independently of the others.

    ``c_proj(act(c_fc(x)))`` with a ``4 C`` hidden layer and ``act`` GELU (exact or tanh),
    or squared ReLU; for ``"swiglu"``, ``c_fc`` computes the gate and the up projection stacked
    (``hidden = round(8 C / 3)`` each) and ``act`` is ``SiLU(gate) * up``.
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        C = config.n_embd
        self.kind = config.mlp
        self.hidden = round(8 * C / 3) if self.kind == "swiglu" else 4 * C
        n_out = 2 * self.hidden if self.kind == "swiglu" else self.hidden
        self.c_fc = nn.Linear(C, n_out, bias=config.bias)
        if self.kind in ("gelu", "gelu_tanh"):
            self.gelu = nn.GELU(approximate="tanh" if self.kind == "gelu_tanh" else "none")
        self.c_proj = nn.Linear(self.hidden, C, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.c_fc(x)
        if self.kind == "relu2":
            h = F.relu(h).square()
        elif self.kind == "swiglu":
            gate, up = h.split(self.hidden, dim=-1)
            h = F.silu(gate) * up
        else:
            h = self.gelu(h)
        return self.dropout(self.c_proj(h))


class Block(nn.Module):
    """Communication (attention) then computation (feed-forward), each as a residual branch
    behind a norm (pre-norm: the residual stream itself is never normalised, which keeps
    gradients flowing through deep stacks)."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = make_norm(config)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = make_norm(config)
        self.mlp = FeedForward(config)

    def forward(
        self,
        x: torch.Tensor,
        kv_cache: KVCache | None = None,
        need_weights: bool = False,
        offset: int = 0,
    ) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), kv_cache, need_weights, offset)
        x = x + self.mlp(self.ln_2(x))
        return x


class _PositionDraws(nn.Module):
    """Takes the position table's place in a model without one: it draws the random numbers
    that creating and initialising the table would draw, and holds no parameter. So with the
    same seed, every weight that two architectures share starts equal (an ablation then
    compares the switch alone, not two initialisations)."""

    def __init__(self, block_size: int, n_embd: int) -> None:
        super().__init__()
        self.shape = (block_size, n_embd)
        torch.empty(self.shape).normal_()  # as nn.Embedding's own initialisation

    def draw(self) -> None:
        torch.empty(self.shape).normal_(mean=0.0, std=0.02)  # as GPT._init_weights


class GPT(nn.Module):
    """A decoder-only transformer language model: GPT-2's architecture, with the parts that
    :class:`GPTConfig` lets a later chapter switch (positions, norm, MLP, QK-norm)."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        if not isinstance(config, GPTConfig):
            raise ValueError(f"expected a GPTConfig, got {type(config).__name__}")
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.n_embd)
        self.pos_emb: LearnedPositionalEmbedding | None = None
        if config.pos == "learned":
            self.pos_emb = LearnedPositionalEmbedding(config.block_size, config.n_embd)
        else:
            self.pos_draws = _PositionDraws(config.block_size, config.n_embd)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = make_norm(config)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        # Weight tying: the same matrix maps tokens to vectors and vectors back to token scores.
        self.lm_head.weight = self.tok_emb.weight
        self.apply(self._init_weights)
        # GPT-2 initialisation: every block adds its output projections to the residual stream,
        # so scale them by 1/sqrt(2 * n_layer): the stream's variance then does not grow with
        # depth.
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        elif isinstance(module, LearnedPositionalEmbedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        elif isinstance(module, _PositionDraws):
            module.draw()

    def num_params(self, non_embedding: bool = True) -> int:
        """Parameter count; by default without the position embeddings, nanoGPT's convention (the
        token embedding is shared with the LM head, so it stays in as a weight of the head).
        ``non_embedding=False`` counts every parameter once."""
        n = sum(p.numel() for p in self.parameters())
        if non_embedding and self.pos_emb is not None:
            n -= self.pos_emb.weight.numel()
        return n

    def receptive_field(self) -> int:
        """How many tokens the last position's logits can depend on: ``block_size`` with
        learned positions; otherwise each layer's window reaches ``block_size - 1`` tokens
        further back, so ``n_layer (block_size - 1) + 1``."""
        if self.config.pos == "learned":
            return self.config.block_size
        return self.config.n_layer * (self.config.block_size - 1) + 1

    def new_caches(self) -> list[KVCache]:
        """One empty key/value cache per layer: a :class:`helpers.multihead.KVCache` with
        learned positions, else a :class:`helpers.multihead.RollingKVCache` that keeps the last
        ``block_size - 1`` tokens (the window's keys besides the newest token's own)."""
        if self.config.pos == "learned":
            return [KVCache() for _ in self.blocks]
        return [RollingKVCache(window=self.config.block_size) for _ in self.blocks]

    def check_ids(self, idx: object, name: str = "idx") -> torch.Tensor:
        """Raise a clear ``ValueError`` unless ``idx`` is a ``(B, T)`` integer tensor with
        ``T >= 1`` and ids in the vocabulary; return it. The range check reads the values, which
        on a GPU waits for the device, so :meth:`forward` makes it only for CPU tensors (and not
        while ``torch.compile`` traces); :meth:`generate` makes it once for the prompt."""
        _check_id_tensor(idx, name)
        assert isinstance(idx, torch.Tensor)
        outside = (idx < 0) | (idx >= self.config.vocab_size)
        if outside.any():
            raise ValueError(
                f"token ids must be in 0..{self.config.vocab_size - 1}, got {int(idx[outside][0])}"
            )
        return idx

    def forward(
        self,
        idx: torch.Tensor,
        targets: torch.Tensor | None = None,
        *,
        kv_caches: list[KVCache] | None = None,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Next-token logits for every position.

        Args:
            idx: ``(B, T)`` token ids.
            targets: optional ``(B, T)`` next-token ids; the mean cross-entropy is returned.
            kv_caches: one cache per layer (:meth:`new_caches`) for incremental decoding:
                ``idx`` then holds only the new tokens, placed after the ones already seen.
            need_weights: keep each layer's attention weights in ``block.attn.last_weights``.

        Returns:
            ``(logits, loss)``: logits ``(B, T, vocab_size)``; loss ``None`` without targets.

        Raises:
            ValueError: on ids that are not a ``(B, T)`` integer tensor with ``T >= 1``, ids
                outside the vocabulary (checked for CPU tensors), a context longer than
                ``block_size`` with learned positions, targets whose shape differs from
                ``idx``, or a wrong number of caches.
        """
        x = self._hidden(idx, targets, kv_caches, need_weights)
        logits = self.lm_head(self.ln_f(x))  # (B, T, vocab_size)
        loss = None
        if targets is not None:
            B, T = idx.shape
            loss = F.cross_entropy(logits.view(B * T, -1), targets.reshape(B * T))
        return logits, loss

    def _hidden(
        self,
        idx: torch.Tensor,
        targets: torch.Tensor | None,
        kv_caches: list[KVCache] | None,
        need_weights: bool,
    ) -> torch.Tensor:
        """Validate the inputs and run the blocks: the residual stream ``(B, T, C)``."""
        _check_id_tensor(idx, "idx")
        if idx.device.type == "cpu" and not torch.compiler.is_compiling():
            self.check_ids(idx)
        B, T = idx.shape
        if kv_caches is not None and len(kv_caches) != len(self.blocks):
            raise ValueError(
                f"need one KVCache per layer ({len(self.blocks)}), got {len(kv_caches)}"
            )
        offset = kv_caches[0].seen if kv_caches else 0
        if self.pos_emb is not None and offset + T > self.config.block_size:
            raise ValueError(
                f"context of {offset + T} tokens is longer than "
                f"block_size={self.config.block_size}; crop it to the last "
                f"{self.config.block_size} tokens (generate() does this)"
            )
        if targets is not None and (
            not isinstance(targets, torch.Tensor) or targets.shape != idx.shape
        ):
            shape = tuple(targets.shape) if isinstance(targets, torch.Tensor) else type(targets)
            raise ValueError(f"targets must have the shape of idx {tuple(idx.shape)}, got {shape}")
        x = self.tok_emb(idx)
        if self.pos_emb is not None:
            x = x + self.pos_emb(T, offset)
        x = self.drop(x)  # (B, T, C)
        for i, block in enumerate(self.blocks):
            cache = kv_caches[i] if kv_caches is not None else None
            x = block(x, cache, need_weights, offset)
        return x

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
        """Append ``max_new_tokens`` sampled tokens to ``idx`` (``(B, T)``) and return it.

        ``temperature`` divides the logits (below 1: safer, above 1: more varied); ``top_k``
        keeps only the k most likely tokens. Only the last position's logits are computed.

        With learned positions the context is cropped to the last ``block_size`` tokens, since
        the model has no position vector beyond that. ``use_cache`` keeps each layer's keys and
        values so a step only processes the newest token; the cache stays valid only while the
        whole text fits in ``block_size``: once the window has to slide, every token's position
        changes, so the cache is rebuilt from the cropped window at each step (exactly what the
        uncached path computes).

        With ``"rope"`` or ``"none"`` positions, without a cache every step reruns the last
        :meth:`receptive_field` tokens (everything the next token can depend on); with
        ``use_cache`` the prompt fills a rolling cache once and every step runs only the newest
        token, whose keys keep their positions as the window slides.
        """
        self.check_ids(idx)
        check_non_negative_int("max_new_tokens", max_new_tokens)
        check_sampling(temperature, top_k, self.config.vocab_size)
        was_training = self.training
        self.eval()
        learned = self.config.pos == "learned"
        context = self.receptive_field()
        caches: list[KVCache] | None = None
        for _ in range(max_new_tokens):
            if use_cache and caches is not None and (not learned or idx.shape[1] <= context):
                logits = self._last_logits(idx[:, -1:], caches)  # only the newest token
            else:
                window = idx[:, -context:]
                caches = self.new_caches() if use_cache else None
                if caches is not None and not learned:
                    for cache in caches:  # positions continue from where the window starts
                        assert isinstance(cache, RollingKVCache)
                        cache.seen = idx.shape[1] - window.shape[1]
                logits = self._last_logits(window, caches)
            next_id = sample_next(logits, temperature, top_k, generator)
            idx = torch.cat([idx, next_id], dim=1)
        self.train(was_training)
        return idx

    def _last_logits(self, idx: torch.Tensor, caches: list[KVCache] | None) -> torch.Tensor:
        """The logits ``(B, vocab_size)`` of the last position only."""
        x = self._hidden(idx, None, caches, False)
        return self.lm_head(self.ln_f(x[:, -1, :]))


def _check_id_tensor(idx: object, name: str) -> None:
    """The checks that do not read the values: a ``(B, T)`` integer tensor with ``T >= 1``."""
    if not isinstance(idx, torch.Tensor):
        hint = ""
        if isinstance(idx, (list, tuple)):
            hint = "; for one sequence of ids write torch.tensor([ids])"
        raise ValueError(
            f"{name} must be a (B, T) tensor of token ids, got {type(idx).__name__}{hint}"
        )
    if idx.dim() != 2:
        hint = f" (for one sequence, use {name}[None])" if idx.dim() == 1 else ""
        raise ValueError(f"{name} must be (B, T) token ids, got shape {tuple(idx.shape)}{hint}")
    if idx.dtype.is_floating_point or idx.dtype.is_complex or idx.dtype == torch.bool:
        raise ValueError(f"{name} must hold integer token ids, got dtype {idx.dtype}")
    if idx.shape[1] == 0:
        raise ValueError(f"{name} must hold at least one token, got T=0")


def check_sampling(temperature: float, top_k: int | None, vocab_size: int) -> None:
    """Raise ``ValueError`` unless ``temperature`` is a finite number ``> 0`` and ``top_k`` is
    None or an int in ``1..vocab_size`` (used by ``GPT.generate``)."""
    if not _is_real(temperature) or not math.isfinite(temperature) or temperature <= 0:
        raise ValueError(
            f"temperature must be a finite number > 0 (1.0 samples the model's own "
            f"distribution), got {temperature!r}"
        )
    if top_k is not None and (
        isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= vocab_size
    ):
        raise ValueError(f"top_k must be in 1..{vocab_size}, got {top_k}")


def sample_next(
    logits: torch.Tensor,
    temperature: float,
    top_k: int | None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Sample one token id per row from ``(B, vocab_size)`` logits: divide by ``temperature``,
    keep the ``top_k`` largest (all if None), softmax, draw. Returns ``(B, 1)`` ids."""
    logits = logits / temperature
    if top_k is not None:
        kth = torch.topk(logits, top_k).values[:, -1, None]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = F.softmax(logits, dim=-1)
    return torch.multinomial(probs, num_samples=1, generator=generator)


def save_checkpoint(path: str | Path, model: GPT, tokenizer: CharTokenizer) -> None:
    """Save the weights, the configuration and the vocabulary: everything needed to sample."""
    if tokenizer.vocab_size != model.config.vocab_size:
        raise ValueError(
            f"tokenizer has {tokenizer.vocab_size} tokens but the model expects "
            f"{model.config.vocab_size}"
        )
    torch.save(
        {
            "config": asdict(model.config),
            "state_dict": model.state_dict(),
            "chars": tokenizer.chars,
        },
        path,
    )


def load_checkpoint(
    path: str | Path, *, map_location: str | torch.device = "cpu"
) -> tuple[GPT, CharTokenizer]:
    """Rebuild a model and its tokenizer from :func:`save_checkpoint`'s file."""
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
        model = GPT(GPTConfig(**ckpt["config"]))
        model.load_state_dict(ckpt["state_dict"])
        tokenizer = CharTokenizer(ckpt["chars"])
    except FileNotFoundError:
        raise
    except (
        KeyError,
        TypeError,
        ValueError,
        RuntimeError,
        EOFError,
        OSError,
        pickle.UnpicklingError,
    ) as err:
        raise ValueError(
            f"{path} is not a checkpoint written by save_checkpoint ({type(err).__name__}: {err})"
        ) from err
    return model, tokenizer
