"""What a GPT costs: its parameters and FLOPs, computed from its configuration.

Defined in chapter 9, "The cost of attention and fast generation".

The counting functions follow the model in ``helpers.model`` exactly (pre-LayerNorm blocks, a
4x MLP, tied token embedding and LM head, learned positions). FLOPs count the multiply-adds of
matrix products, 2 FLOPs each, the way ``torch.utils.flop_counter.FlopCounterMode`` counts them;
LayerNorm, softmax, GELU and bias additions are left out (they are a few percent at most).

Attention is counted densely by default, all ``T x T`` query-key pairs: that is what an
explicit implementation (``q @ k.T``, mask, softmax, ``@ v``) computes before the causal mask
throws about half of it away. A causal-aware kernel skips work above the diagonal:
``causal=True`` counts only the ``T (T + 1) / 2`` visible pairs (the causal half that Kaplan et
al. count), and ``causal=True, blocks=(q_block, kv_block)`` counts what a tiled kernel computes
when it skips the key blocks that lie wholly above the diagonal but computes (and masks) the rest
of the block that the diagonal cuts; PyTorch's CPU flash-attention kernel works that way
(``aten/src/ATen/native/cpu/FlashAttentionKernel.cpp``). See :func:`attention_pairs`.
(Tools to measure time and memory are in ``helpers.measure``.)
"""

from __future__ import annotations

from dataclasses import fields

from helpers.model import SIZE_FIELDS, GPTConfig
from helpers.validation import check_positive_int


def _check_config(config: GPTConfig) -> None:
    """The counts below follow chapter 8's architecture (learned positions, LayerNorm, a 4x
    GELU MLP, no QK-norm); refuse a configuration that switches any of it."""
    if not isinstance(config, GPTConfig):
        raise ValueError(f"expected a GPTConfig, got {type(config).__name__}")
    default = GPTConfig()
    changed = {
        f.name: getattr(config, f.name)
        for f in fields(config)
        if f.name not in SIZE_FIELDS + ("norm_eps",)
        and getattr(config, f.name) != getattr(default, f.name)
    }
    if changed.get("mlp") == "gelu_tanh":
        del changed["mlp"]  # the same weights and matrix products as the exact GELU
    if changed:
        raise ValueError(f"the counts follow chapter 8's architecture; this config sets {changed}")


def attention_pairs(T: int, *, causal: bool = False, blocks: tuple[int, int] | None = None) -> int:
    """Number of query-key pairs whose score an attention implementation computes, per head and
    per sequence of ``T`` tokens (each pair costs ``2 head_size`` FLOPs for the score and as
    many for the weighted value).

    - ``causal=False``: all ``T * T`` pairs, what the explicit implementation computes (the
      causal mask then discards the pairs above the diagonal).
    - ``causal=True``: only the ``T (T + 1) / 2`` pairs on or below the diagonal, an ideal
      causal kernel (the count of Kaplan et al., 2020, up to the diagonal).
    - ``causal=True, blocks=(q_block, kv_block)``: a tiled causal kernel. Queries are taken in
      blocks of ``q_block``; for the block starting at query ``m`` the loop over keys stops at
      the block's last query, ``min(m + q_block, T)``, but it proceeds in whole key blocks of
      ``kv_block`` (the last one cut at ``T``), so the key block that the diagonal crosses is
      computed in full and masked. ``blocks=(1, 1)`` gives the ideal count; blocks of ``T`` or
      more give the dense one.

    Raises:
        ValueError: if ``T`` or a block size is not a positive int, or ``blocks`` is given
            without ``causal=True``.
    """
    T = check_positive_int("T", T, what="the sequence length")
    if blocks is not None and not causal:
        raise ValueError("blocks describe a causal kernel: pass causal=True with them")
    if not causal:
        return T * T
    if blocks is None:
        return T * (T + 1) // 2
    if not (isinstance(blocks, tuple) and len(blocks) == 2):
        raise ValueError(f"blocks must be a pair (q_block, kv_block), got {blocks!r}")
    q_block = check_positive_int("q_block", blocks[0], what="the query block size")
    kv_block = check_positive_int("kv_block", blocks[1], what="the key block size")
    pairs = 0
    for m in range(0, T, q_block):
        rows = min(q_block, T - m)
        last_key = min(m + rows, T)  # keys 0..last_key - 1 are visible to some query here
        n_kv_blocks = -(-last_key // kv_block)  # key blocks the loop enters
        pairs += rows * min(n_kv_blocks * kv_block, T)
    return pairs


def cpu_kernel_blocks(T: int) -> tuple[int, int]:
    """``(q_block, kv_block)`` of PyTorch's CPU flash-attention kernel for float32 at length ``T``.

    By our reading of ``aten/src/ATen/native/cpu/FlashAttentionKernel.cpp`` (PyTorch 2.x): query
    blocks of 256 from 768 tokens on, of 64 from 192, of 32 below; key blocks of 512. Pass the
    result as ``attention_pairs(T, causal=True, blocks=cpu_kernel_blocks(T))`` to count the
    pairs that kernel computes. This is a model of the kernel, not a measurement: chapter 9
    compares it with the kernel's timings.

    Raises:
        ValueError: if ``T`` is not a positive int.
    """
    T = check_positive_int("T", T, what="the sequence length")
    return (256 if T >= 768 else 64 if T >= 192 else 32), 512


def param_count(config: GPTConfig, *, non_embedding: bool = False) -> int:
    """Number of parameters of ``helpers.model.GPT(config)``, from the configuration alone.

    Per block: ``12 C^2`` weights (``3 C^2`` for queries/keys/values, ``C^2`` for the attention
    output, ``8 C^2`` for the 4x MLP) plus ``2 C`` LayerNorm gains, and with ``bias=True`` another
    ``11 C`` biases (``3C + C + 4C + C`` in the linear layers, ``2C`` in the LayerNorms). Outside
    the blocks: the token embedding ``vocab_size * C`` (shared with the LM head, so counted
    once), the position embedding ``block_size * C`` and the final LayerNorm.

    Args:
        config: the model's configuration.
        non_embedding: leave out the position embedding, as ``GPT.num_params()`` does by default.

    Returns:
        The exact count ``GPT(config).num_params(non_embedding)`` would give.
    """
    _check_config(config)
    C, L, vocab_size = config.n_embd, config.n_layer, config.vocab_size
    ln = 2 * C if config.bias else C  # LayerNorm gain (and bias)
    per_block = 12 * C * C + 2 * ln + (9 * C if config.bias else 0)
    total = vocab_size * C + L * per_block + ln
    if not non_embedding:
        total += config.block_size * C
    return total


def flops_breakdown(
    config: GPTConfig,
    T: int,
    *,
    batch_size: int = 1,
    causal: bool = False,
    blocks: tuple[int, int] | None = None,
) -> dict[str, int]:
    """Matrix-product FLOPs of one forward pass over ``batch_size`` sequences of ``T`` tokens.

    Per layer and per token: ``2 * 3C^2`` for the query/key/value projection, ``2 * C^2`` for the
    output projection, ``2 * 8C^2`` for the MLP; and ``2 C vocab_size`` per token for the LM
    head. Per layer and per sequence, ``2 P C`` for the scores ``Q K^T`` and ``2 P C`` for the
    weighted sum of values (summed over heads, ``n_head * head_size = C``), where ``P`` is the
    number of query-key pairs computed, :func:`attention_pairs` ``(T, causal=..., blocks=...)``:
    ``T^2`` by default (the explicit implementation), about ``T^2 / 2`` for a causal kernel.

    Returns:
        A dict with keys ``"qkv"``, ``"attn_scores"``, ``"attn_values"``, ``"attn_out"``,
        ``"mlp"`` and ``"lm_head"``; ``sum(d.values())`` is ``forward_flops(config, T)``.

    Raises:
        ValueError: if ``T`` is not in ``1..block_size`` or ``batch_size < 1``.
    """
    _check_config(config)
    if not 1 <= T <= config.block_size:
        raise ValueError(f"T must be in 1..block_size={config.block_size}, got {T}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    pairs = attention_pairs(T, causal=causal, blocks=blocks)
    B, C, L, vocab_size = batch_size, config.n_embd, config.n_layer, config.vocab_size
    return {
        "qkv": 2 * B * T * 3 * C * C * L,
        "attn_scores": 2 * B * pairs * C * L,
        "attn_values": 2 * B * pairs * C * L,
        "attn_out": 2 * B * T * C * C * L,
        "mlp": 2 * B * T * 8 * C * C * L,
        "lm_head": 2 * B * T * C * vocab_size,
    }


def forward_flops(
    config: GPTConfig,
    T: int,
    *,
    batch_size: int = 1,
    causal: bool = False,
    blocks: tuple[int, int] | None = None,
) -> int:
    """Total matrix-product FLOPs of a forward pass: ``B (2 T N_mm + 4 L P C)``, where
    ``N_mm = 12 L C^2 + vocab_size C`` are the weights used in matrix products and ``P`` the
    query-key pairs computed (``T^2`` dense; see ``flops_breakdown`` and ``attention_pairs``)."""
    parts = flops_breakdown(config, T, batch_size=batch_size, causal=causal, blocks=blocks)
    return sum(parts.values())


def flops_per_new_token(config: GPTConfig, T: int, *, use_cache: bool) -> int:
    """FLOPs of one decode step: the next-token logits for a context of ``T`` tokens, the newest
    one included (with a cache, the other ``T - 1`` are already cached).

    Without a cache the model reruns the whole context (``forward_flops(config, T)``: a forward
    pass with dense attention, as chapter 9 times it; ``GPT.generate`` computes the LM head for
    the newest position only, ``2 (T - 1) C vocab_size`` FLOPs fewer). With a key/value cache
    only the newest token goes through the model: ``2 N_mm`` for its projections, MLPs and LM
    head, plus ``4 L T C`` for its one query row against the ``T`` keys and values, its own
    included (all visible: no mask, nothing to skip). The ratio of the two is exactly ``T``.

    Raises:
        ValueError: if ``T`` is not in ``1..block_size``.
    """
    _check_config(config)
    if not 1 <= T <= config.block_size:
        raise ValueError(f"T must be in 1..block_size={config.block_size}, got {T}")
    if not use_cache:
        return forward_flops(config, T)
    C, L, vocab_size = config.n_embd, config.n_layer, config.vocab_size
    return 2 * (12 * L * C * C + vocab_size * C) + 4 * L * T * C
