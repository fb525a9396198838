"""A small GPT: token and position embeddings, pre-norm transformer blocks, an LM head.

Defined in chapter 8, "Building and training a GPT"; the switches of :class:`GPTConfig` beyond
the model's size (rotary positions, RMSNorm, QK-norm, other MLPs) in chapter 10, "From GPT-2 to
a modern transformer". Top to bottom: configuration, attention, MLP, block, model. Shapes: ``B``
batch, ``T`` time (tokens), ``C`` channels (``n_embd``). Beside it: input checks
(``helpers.model_checks``), sampling (``helpers.sampling``), the sliding window
(``helpers.sliding_window``), aligned random draws (``helpers.position_draws``), checkpoints.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F
from torch import nn

from helpers import model_checks as checks
from helpers.attention import scaled_dot_product_attention
from helpers.checkpoint import load_checkpoint, save_checkpoint
from helpers.model_checks import MLPS, NORMS, POSITIONS
from helpers.multihead import KVCache, RollingKVCache
from helpers.position_draws import PositionDraws
from helpers.positional import LearnedPositionalEmbedding
from helpers.rope import RotaryEmbedding
from helpers.sampling import check_sampling, sample_next
from helpers.sliding_window import attention_mask, sliding_window_mask

__all__ = [
    "GPT", "MLPS", "NORMS", "POSITIONS", "SIZE_FIELDS", "Block", "CausalSelfAttention",
    "FeedForward", "GPTConfig", "check_sampling", "load_checkpoint", "make_norm", "sample_next",
    "save_checkpoint", "sliding_window_mask",
]  # fmt: skip

# The fields of a model's size (the rest choose its architecture).
SIZE_FIELDS = ("vocab_size", "block_size", "n_layer", "n_head", "n_embd", "dropout", "bias")


@dataclass
class GPTConfig:
    """The model's size and architecture. The defaults are the model chapter 8 trains on a CPU:
    4 layers of 4 heads, ``n_embd`` 64, a context of 64 characters, the 65-character vocabulary
    of Tiny Shakespeare, learned positions, LayerNorm, a GELU MLP, no dropout and no biases
    (201,344 parameters without the position embeddings; ``bench/README.md`` reports how this
    size was chosen). Chapter 10 switches the architecture's parts one at a time; every
    combination is the same :class:`GPT`, built and initialised by the same code. Every model
    keeps GPT-2's tied weights (the LM head is the token embedding's matrix), its initialisation
    (normal, std 0.02; output projections scaled by ``1 / sqrt(2 n_layer)``), pre-norm blocks
    and a final norm before the head.

    GPT-2 (124 M) is ``GPTConfig(vocab_size=50257, block_size=1024, n_layer=12, n_head=12,
    n_embd=768, bias=True, mlp="gelu_tanh")`` (``helpers.gpt2`` loads its released weights).
    A field out of range raises a clear ``ValueError``.
    """

    vocab_size: int = 65  #: number of tokens
    #: Longest context, in tokens. With learned positions, the number of position vectors; with
    #: ``"rope"`` or ``"none"`` longer texts are allowed and every token attends to itself and
    #: the ``block_size - 1`` tokens before it (a sliding window).
    block_size: int = 64
    n_layer: int = 4  #: number of transformer blocks
    n_head: int = 4  #: attention heads per block; must divide ``n_embd``
    n_embd: int = 64  #: channels ``C`` of the residual stream
    dropout: float = 0.0  #: dropout on embeddings, attention weights and residual branches
    bias: bool = False  #: biases in linear layers (not the tied LM head) and LayerNorms
    #: ``"learned"`` (GPT-2's table of position vectors, added to the tokens), ``"rope"``
    #: (queries and keys rotated by their positions) or ``"none"`` (no position information
    #: except what the causal mask implies).
    pos: str = "learned"
    norm: str = "layernorm"  #: ``"layernorm"`` or ``"rmsnorm"``, in the blocks and before the head
    norm_eps: float = 1e-5  #: the ``eps`` of every norm (added to the variance or mean square)
    #: ``"gelu"`` (exact GELU, ``4 C`` hidden), ``"gelu_tanh"`` (GPT-2's tanh approximation),
    #: ``"relu2"`` (squared ReLU) or ``"swiglu"`` (gated SiLU, hidden width ``round(8 C / 3)``
    #: so the three matrices hold about as many weights as two of ``4 C``).
    mlp: str = "gelu"
    qk_norm: bool = False  #: RMSNorm (learned gains) on every head's queries and keys
    #: The factor that multiplies the scores; ``None`` is ``1 / sqrt(head_size)``. With
    #: ``qk_norm`` the scores start bounded by ``qk_scale * head_size``, so some implementations
    #: use a larger scale than ``1 / sqrt(head_size)`` there (modded-nanoGPT), others do not.
    qk_scale: float | None = None
    rope_base: float = 10000.0  #: RoPE's frequency base

    def __post_init__(self) -> None:
        checks.check_config(self)  # a clear ValueError for each field out of range

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


def make_norm(config: GPTConfig) -> nn.Module:
    """The norm ``config`` asks for over ``n_embd`` channels: ``nn.RMSNorm`` or ``nn.LayerNorm``
    (with ``config.bias``), both with ``config.norm_eps``."""
    if config.norm == "rmsnorm":
        return nn.RMSNorm(config.n_embd, eps=config.norm_eps)
    return nn.LayerNorm(config.n_embd, eps=config.norm_eps, bias=config.bias)


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention, chapter 5's ``helpers.multihead.MultiHeadAttention``
    (same parameters) with PyTorch's fused kernel, plus QK-norm, a score scale, rotary positions
    and a sliding window of ``block_size`` keys. ``forward(x, kv_cache, need_weights, offset)``:
    ``x`` ``(B, T, C)`` holds the tokens at positions ``offset ..`` (RoPE rotates by these),
    after the cached ones; ``need_weights`` keeps the weights in ``last_weights``."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        C = config.n_embd
        self.n_embd, self.n_head, self.head_size = C, config.n_head, config.head_size
        self.c_attn = nn.Linear(C, 3 * C, bias=config.bias)  # [W_q; W_k; W_v], stacked
        self.c_proj = nn.Linear(C, C, bias=config.bias)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.dropout = config.dropout  # on the attention weights
        self.window = config.block_size
        self.scale = config.qk_scale
        hs, qk_norm, rope = self.head_size, config.qk_norm, config.pos == "rope"
        self.q_norm = nn.RMSNorm(hs, eps=config.norm_eps) if qk_norm else None
        self.k_norm = nn.RMSNorm(hs, eps=config.norm_eps) if qk_norm else None
        self.rotary = RotaryEmbedding(hs, config.block_size, config.rope_base) if rope else None
        self.last_weights: torch.Tensor | None = None

    def forward(
        self,
        x: torch.Tensor,
        kv_cache: KVCache | None = None,
        need_weights: bool = False,
        offset: int = 0,
    ) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, self.head_size).transpose(1, 2)  # (B, n_head, T, hs)
        k = k.view(B, T, self.n_head, self.head_size).transpose(1, 2)
        v = v.view(B, T, self.n_head, self.head_size).transpose(1, 2)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.rotary is not None:
            q, k = self.rotary(q, offset), self.rotary(k, offset)
        T_past = 0
        if kv_cache is not None:
            T_past = len(kv_cache)
            k, v = kv_cache.append(k, v)  # (B, n_head, T_past + T, hs)
        mask, is_causal = attention_mask(T, T_past, self.window, x.device)

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
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # merge the heads
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
        else:  # no table, but its random draws: shared weights start equal for one seed
            self.pos_draws = PositionDraws(config.block_size, config.n_embd)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = make_norm(config)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        # Weight tying: the same matrix maps tokens to vectors and vectors back to token scores.
        self.lm_head.weight = self.tok_emb.weight
        self.apply(self._init_weights)
        # GPT-2 initialisation: each block adds two output projections to the residual stream;
        # scaled by 1/sqrt(2 * n_layer), the stream's variance does not grow with depth.
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding, LearnedPositionalEmbedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, PositionDraws):  # the draws of a position table it stands for
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
        if self.pos_emb is not None:
            return self.config.block_size
        return self.config.n_layer * (self.config.block_size - 1) + 1

    def new_caches(self, seen: int = 0) -> list[KVCache]:
        """One empty key/value cache per layer: a ``helpers.multihead.KVCache`` with learned
        positions, else a ``RollingKVCache`` that keeps the last ``block_size - 1`` tokens (the
        window besides the newest token) and whose first token sits at position ``seen``."""
        if self.pos_emb is not None:
            if seen:
                raise ValueError(f"a cache of learned positions starts at 0, got seen={seen}")
            return [KVCache() for _ in self.blocks]
        return [RollingKVCache(window=self.config.block_size, seen=seen) for _ in self.blocks]

    def check_ids(self, idx: object, name: str = "idx") -> torch.Tensor:
        """Return ``idx`` if it is a ``(B, T)`` integer tensor with ``T >= 1`` and ids in the
        vocabulary, else raise a clear ``ValueError``. Reading the ids waits for a GPU, so
        :meth:`forward` checks the range for CPU tensors only, :meth:`generate` for the prompt."""
        idx = checks.check_id_tensor(idx, name)
        checks.check_ids_in_vocab(idx, self.config.vocab_size)
        return idx

    def forward(
        self,
        idx: torch.Tensor,
        targets: torch.Tensor | None = None,
        *,
        kv_caches: list[KVCache] | None = None,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Next-token logits ``(B, T, vocab_size)`` for every position of the ``(B, T)`` ids
        ``idx``, and the mean cross-entropy against ``targets`` (``None`` without them).

        ``kv_caches`` (one per layer, :meth:`new_caches`) is for incremental decoding: ``idx``
        then holds only the new tokens, placed after the ones already seen. ``need_weights``
        keeps each layer's attention weights in ``block.attn.last_weights``. Bad ids, a context
        longer than ``block_size`` with learned positions, targets of another shape or a wrong
        number of caches raise a ``ValueError`` (see ``helpers.model_checks``).
        """
        checks.check_forward_inputs(self, idx, targets, kv_caches)
        x = self._hidden(idx, kv_caches, need_weights)
        logits = self.lm_head(self.ln_f(x))  # (B, T, vocab_size)
        loss = None
        if targets is not None:
            B, T = idx.shape
            loss = F.cross_entropy(logits.view(B * T, -1), targets.reshape(B * T))
        return logits, loss

    def _hidden(
        self, idx: torch.Tensor, kv_caches: list[KVCache] | None = None, need_weights: bool = False
    ) -> torch.Tensor:
        """The residual stream ``(B, T, C)`` after the last block."""
        B, T = idx.shape
        offset = kv_caches[0].seen if kv_caches else 0  # the position of idx's first token
        x = self.tok_emb(idx)  # (B, T, C)
        if self.pos_emb is not None:
            x = x + self.pos_emb(T, offset)
        x = self.drop(x)
        for i, block in enumerate(self.blocks):
            x = block(x, None if kv_caches is None else kv_caches[i], need_weights, offset)
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
        """Append ``max_new_tokens`` (at most 100,000) sampled tokens to ``idx`` ``(B, T)`` and
        return it. ``temperature`` divides the logits (below 1: safer, above 1: more varied);
        ``top_k`` keeps only the k most likely tokens (``helpers.sampling.sample_next``).

        Each step runs the last :meth:`receptive_field` tokens (with learned positions the last
        ``block_size``: there is no position vector beyond) and computes the last position's
        logits only. ``use_cache`` keeps each layer's keys and values, so a step runs only the
        newest token: with learned positions while the text fits in ``block_size`` (once the
        window slides, every position changes and each step reruns the window, as without a
        cache); with ``"rope"`` or ``"none"`` always (a rolling cache of the window's keys).
        """
        self.check_ids(idx)
        max_new_tokens = checks.check_max_new_tokens(max_new_tokens)
        top_k = check_sampling(temperature, top_k, self.config.vocab_size)
        was_training = self.training
        self.eval()
        learned = self.pos_emb is not None
        context = self.receptive_field()
        caches: list[KVCache] | None = None
        for _ in range(max_new_tokens):
            if caches is not None and (not learned or idx.shape[1] <= context):
                x = self._hidden(idx[:, -1:], caches)  # only the newest token
            else:  # (re)start from the last `context` tokens
                window = idx[:, -context:]
                fits = not learned or idx.shape[1] < context  # the next step can use a cache
                keep = use_cache and fits
                caches = self.new_caches(idx.shape[1] - window.shape[1]) if keep else None
                x = self._hidden(window, caches)
            logits = self.lm_head(self.ln_f(x[:, -1, :]))  # (B, vocab_size): the last position
            next_id = sample_next(logits, temperature, top_k, generator)
            idx = torch.cat([idx, next_id], dim=1)
        self.train(was_training)
        return idx
