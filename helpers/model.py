"""A small GPT: token and position embeddings, pre-LayerNorm transformer blocks, an LM head.

Defined in chapter 8, "Building and training a GPT".

The shape names follow the book: ``B`` batch, ``T`` time (tokens), ``C`` channels (``n_embd``).
Attention is ``helpers.multihead.MultiHeadAttention`` (the layer Part I builds), here with
PyTorch's fused ``F.scaled_dot_product_attention`` for speed.
"""

from __future__ import annotations

import math
import pickle
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from helpers.multihead import KVCache, MultiHeadAttention
from helpers.positional import LearnedPositionalEmbedding
from helpers.tokenizer import CharTokenizer
from helpers.validation import check_non_negative_int, check_positive_int


@dataclass
class GPTConfig:
    """The model's size. The defaults are the model chapter 8 trains on a CPU: 4 layers of 4
    heads, ``n_embd`` 64, a context of 64 characters, the 65-character vocabulary of Tiny
    Shakespeare, no dropout and no biases (201,344 parameters without the position embeddings).
    ``bench/README.md`` reports how this size was chosen and what it reaches.

    Args:
        vocab_size: number of tokens.
        block_size: longest context, in tokens (the number of learned positions).
        n_layer: number of transformer blocks.
        n_head: attention heads per block; must divide ``n_embd``.
        n_embd: channels ``C`` of the residual stream.
        dropout: dropout probability on embeddings, attention weights and residual branches.
        bias: whether linear layers and LayerNorms have biases.
    """

    vocab_size: int = 65
    block_size: int = 64
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 64
    dropout: float = 0.0
    bias: bool = False

    def __post_init__(self) -> None:
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd"):
            check_positive_int(name, getattr(self, name))
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd={self.n_embd} is not divisible by n_head={self.n_head}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")


class FeedForward(nn.Module):
    """Position-wise MLP: each token thinks about what it gathered, independently of the others."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    """Communication (attention) then computation (feed-forward), each as a residual branch
    behind a LayerNorm (pre-LN: the residual stream itself is never normalised, which keeps
    gradients flowing through deep stacks)."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = MultiHeadAttention(
            config.n_embd, config.n_head, causal=True, dropout=config.dropout, bias=config.bias
        )
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = FeedForward(config)

    def forward(
        self, x: torch.Tensor, kv_cache: KVCache | None = None, need_weights: bool = False
    ) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), kv_cache=kv_cache, need_weights=need_weights)
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    """A decoder-only transformer language model (GPT-2 architecture, small)."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.n_embd)
        self.pos_emb = LearnedPositionalEmbedding(config.block_size, config.n_embd)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd, bias=config.bias)
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

    def num_params(self, non_embedding: bool = True) -> int:
        """Parameter count; by default without the position embeddings, nanoGPT's convention (the
        token embedding is shared with the LM head, so it stays in as a weight of the head).
        ``non_embedding=False`` counts every parameter once."""
        n = sum(p.numel() for p in self.parameters())
        return n - self.pos_emb.weight.numel() if non_embedding else n

    def _check_ids(self, idx: torch.Tensor, name: str = "idx") -> None:
        """Raise a clear ``ValueError`` unless ``idx`` is a ``(B, T)`` tensor of ids in the
        vocabulary."""
        if not isinstance(idx, torch.Tensor):
            raise ValueError(
                f"{name} must be a (B, T) tensor of token ids, got {type(idx).__name__}"
            )
        if idx.dim() != 2:
            hint = f" (for one sequence, use {name}[None])" if idx.dim() == 1 else ""
            raise ValueError(f"{name} must be (B, T) token ids, got shape {tuple(idx.shape)}{hint}")
        if idx.dtype.is_floating_point or idx.dtype.is_complex or idx.dtype == torch.bool:
            raise ValueError(f"{name} must hold integer token ids, got dtype {idx.dtype}")
        outside = (idx < 0) | (idx >= self.config.vocab_size)
        if outside.any():
            raise ValueError(
                f"token ids must be in 0..{self.config.vocab_size - 1}, got {int(idx[outside][0])}"
            )

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
            kv_caches: one :class:`KVCache` per layer for incremental decoding: ``idx`` then holds
                only the new tokens, placed after the cached ones.
            need_weights: keep each layer's attention weights in ``block.attn.last_weights``.

        Returns:
            ``(logits, loss)``: logits ``(B, T, vocab_size)``; loss ``None`` without targets.

        Raises:
            ValueError: on a context longer than ``block_size``, ids outside the vocabulary, or
                targets whose shape differs from ``idx``.
        """
        self._check_ids(idx)
        B, T = idx.shape
        offset = len(kv_caches[0]) if kv_caches else 0
        if offset + T > self.config.block_size:
            raise ValueError(
                f"context of {offset + T} tokens is longer than "
                f"block_size={self.config.block_size}; crop it to the last "
                f"{self.config.block_size} tokens (generate() does this)"
            )
        if targets is not None and targets.shape != idx.shape:
            raise ValueError(
                f"targets must have the shape of idx {tuple(idx.shape)}, got {tuple(targets.shape)}"
            )
        if kv_caches is not None and len(kv_caches) != len(self.blocks):
            raise ValueError(
                f"need one KVCache per layer ({len(self.blocks)}), got {len(kv_caches)}"
            )

        x = self.drop(self.tok_emb(idx) + self.pos_emb(T, offset))  # (B, T, C)
        for i, block in enumerate(self.blocks):
            x = block(x, kv_caches[i] if kv_caches is not None else None, need_weights)
        logits = self.lm_head(self.ln_f(x))  # (B, T, vocab_size)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(B * T, -1), targets.reshape(B * T))
        return logits, loss

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

        The context is cropped to the last ``block_size`` tokens, since the model has no position
        embedding beyond that. ``temperature`` divides the logits (below 1: safer, above 1: more
        varied); ``top_k`` keeps only the k most likely tokens. ``use_cache`` keeps each layer's
        keys and values so a step only processes the newest token. With learned absolute positions
        the cache stays valid only while the whole text fits in ``block_size``: once the window has
        to slide, every token's position changes, so the cache is rebuilt from the cropped window
        at each step (exactly what the uncached path computes).
        """
        self._check_ids(idx)
        check_non_negative_int("max_new_tokens", max_new_tokens)
        if idx.shape[1] == 0:
            raise ValueError("idx must hold at least one token to continue from, got T=0")
        check_sampling(temperature, top_k, self.config.vocab_size)
        was_training = self.training
        self.eval()
        block_size = self.config.block_size
        caches: list[KVCache] | None = None
        for _ in range(max_new_tokens):
            if use_cache and caches is not None and idx.shape[1] <= block_size:
                logits, _ = self(idx[:, -1:], kv_caches=caches)  # only the newest token
            else:
                context = idx[:, -block_size:]
                caches = [KVCache() for _ in self.blocks] if use_cache else None
                logits, _ = self(context, kv_caches=caches)
            next_id = sample_next(logits[:, -1, :], temperature, top_k, generator)
            idx = torch.cat([idx, next_id], dim=1)
        self.train(was_training)
        return idx


def check_sampling(temperature: float, top_k: int | None, vocab_size: int) -> None:
    """Raise ``ValueError`` unless ``temperature > 0`` and ``top_k`` is None or in
    ``1..vocab_size`` (shared by every model's ``generate``)."""
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
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
