"""Input checks of the GPT (``helpers.model``): its configuration, the token ids it reads and
the arguments of ``GPT.generate``, each failing early with a clear ``ValueError``.

Kept apart from the model so that ``helpers/model.py`` reads as the network alone. Used by
chapter 8, "Building and training a GPT", and every later chapter that builds a GPT.
"""

from __future__ import annotations

import math
import numbers
from typing import TYPE_CHECKING

import torch

from helpers.validation import check_non_negative_int, check_positive_int

if TYPE_CHECKING:
    from helpers.model import GPT, GPTConfig
    from helpers.multihead import KVCache

POSITIONS = ("learned", "rope", "none")
NORMS = ("layernorm", "rmsnorm")
MLPS = ("gelu", "gelu_tanh", "relu2", "swiglu")

# The most new tokens one call of GPT.generate makes: already minutes on a CPU (every new token
# is a forward pass of the model), while a slip such as 10**9 would run for weeks. A longer text
# is generated in pieces, each output the next prompt.
MAX_NEW_TOKENS = 100_000


def is_real(x: object) -> bool:
    """Whether ``x`` is a real number (a NumPy float too), and not a ``bool``."""
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def check_config(config: GPTConfig) -> None:
    """Raise ``ValueError`` unless every field of ``config`` has a valid value (the rules are
    documented on the fields of :class:`helpers.model.GPTConfig`)."""
    for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd"):
        check_positive_int(name, getattr(config, name))
    if config.n_embd % config.n_head:
        raise ValueError(f"n_embd={config.n_embd} is not divisible by n_head={config.n_head}")
    if not is_real(config.dropout) or not 0.0 <= config.dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {config.dropout!r}")
    if not isinstance(config.bias, bool):
        raise ValueError(f"bias must be True or False, got {config.bias!r}")
    for name, kinds in (("pos", POSITIONS), ("norm", NORMS), ("mlp", MLPS)):
        if getattr(config, name) not in kinds:
            raise ValueError(f"{name} must be one of {kinds}, got {getattr(config, name)!r}")
    if not is_real(config.norm_eps) or not 0 < config.norm_eps < 1:
        raise ValueError(f"norm_eps must be a number in (0, 1), got {config.norm_eps!r}")
    if not isinstance(config.qk_norm, bool):
        raise ValueError(f"qk_norm must be True or False, got {config.qk_norm!r}")
    scale = config.qk_scale
    if scale is not None and (not is_real(scale) or not math.isfinite(scale) or scale <= 0):
        raise ValueError(f"qk_scale must be None or a positive number, got {scale!r}")
    if config.pos == "rope" and (config.n_embd // config.n_head) % 2:
        raise ValueError(
            f"RoPE needs an even head_size, got n_embd // n_head = {config.n_embd // config.n_head}"
        )


def check_id_tensor(idx: object, name: str = "idx") -> torch.Tensor:
    """The checks that do not read the values: ``idx`` is a ``(B, T)`` integer tensor with
    ``T >= 1``. Returns it."""
    if not isinstance(idx, torch.Tensor):
        hint = ""
        if isinstance(idx, (list, tuple)):
            hint = "; for one sequence of ids write torch.tensor([ids])"
        raise ValueError(
            f"{name} must be a (B, T) tensor of token ids, got {type(idx).__name__}{hint}"
        )
    if idx.dim() >= 1 and idx.shape[-1] == 0:  # before the dtype: torch.tensor([[]]) is float
        raise ValueError(
            f"{name} is empty: it must hold at least one token, got T=0 (shape "
            f"{tuple(idx.shape)}); to start from nothing, start from one token, e.g. a newline"
        )
    if idx.dim() != 2:
        hint = f" (for one sequence, use {name}[None])" if idx.dim() == 1 else ""
        raise ValueError(f"{name} must be (B, T) token ids, got shape {tuple(idx.shape)}{hint}")
    if idx.dtype.is_floating_point or idx.dtype.is_complex or idx.dtype == torch.bool:
        raise ValueError(f"{name} must hold integer token ids, got dtype {idx.dtype}")
    return idx


def check_ids_in_vocab(idx: torch.Tensor, vocab_size: int) -> None:
    """Raise ``ValueError`` if an id of ``idx`` lies outside ``0 .. vocab_size - 1``. It reads
    the values, which on a GPU waits for the device."""
    outside = (idx < 0) | (idx >= vocab_size)
    if outside.any():
        raise ValueError(f"token ids must be in 0..{vocab_size - 1}, got {int(idx[outside][0])}")


def check_forward_inputs(
    model: GPT, idx: object, targets: object, kv_caches: list[KVCache] | None
) -> None:
    """The checks of ``GPT.forward``: ``(B, T)`` integer ids with ``T >= 1``, in the vocabulary
    (read only for CPU tensors, and not while ``torch.compile`` traces: on a GPU it would wait
    for the device), one cache per layer, a context (cached tokens plus new ones) of at most
    ``block_size`` tokens with learned positions, and ``targets`` of the shape of ``idx``."""
    idx = check_id_tensor(idx)
    if idx.device.type == "cpu" and not torch.compiler.is_compiling():
        check_ids_in_vocab(idx, model.config.vocab_size)
    n_layer = len(model.blocks)
    if kv_caches is not None and len(kv_caches) != n_layer:
        raise ValueError(f"need one KVCache per layer ({n_layer}), got {len(kv_caches)}")
    T = idx.shape[1] + (kv_caches[0].seen if kv_caches else 0)
    block_size = model.config.block_size
    if model.pos_emb is not None and T > block_size:
        raise ValueError(
            f"context of {T} tokens is longer than block_size={block_size}; crop it to the "
            f"last {block_size} tokens (generate() does this)"
        )
    if targets is not None and (
        not isinstance(targets, torch.Tensor) or targets.shape != idx.shape
    ):
        shape = tuple(targets.shape) if isinstance(targets, torch.Tensor) else type(targets)
        raise ValueError(f"targets must have the shape of idx {tuple(idx.shape)}, got {shape}")


def check_max_new_tokens(max_new_tokens: object) -> int:
    """Return ``max_new_tokens`` as an int if it is an integer (a NumPy integer too) in
    ``0 .. MAX_NEW_TOKENS``, else raise a ``ValueError`` that says how to generate more."""
    n = check_non_negative_int("max_new_tokens", max_new_tokens)
    if n > MAX_NEW_TOKENS:
        raise ValueError(
            f"max_new_tokens={n:,} is more than one call of generate() makes "
            f"({MAX_NEW_TOKENS:,}, already minutes on a CPU: every new token is a forward pass "
            "of the model); generate a longer text in pieces, passing each output back as the "
            "next prompt"
        )
    return n
