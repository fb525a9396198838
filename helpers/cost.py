"""What a GPT costs: its parameters and FLOPs, computed from its configuration.

Defined in chapter 9, "The cost of attention and fast generation".

The counting functions follow the model in ``helpers.model`` exactly (pre-LayerNorm blocks, a
4x MLP, tied token embedding and LM head, learned positions). FLOPs count the multiply-adds of
matrix products, 2 FLOPs each, the way ``torch.utils.flop_counter.FlopCounterMode`` counts them;
LayerNorm, softmax, GELU and bias additions are left out (they are a few percent at most).
Attention is counted densely, all ``T x T`` query-key pairs: that is what an explicit
implementation (``q @ k.T``, mask, softmax, ``@ v``) computes before the causal mask throws
half of it away. (Tools to measure time and memory are in ``helpers.measure``.)
"""

from __future__ import annotations

from helpers.model import GPTConfig


def _check_config(config: GPTConfig) -> None:
    if not isinstance(config, GPTConfig):
        raise ValueError(f"expected a GPTConfig, got {type(config).__name__}")


def param_count(config: GPTConfig, *, non_embedding: bool = False) -> int:
    """Number of parameters of ``helpers.model.GPT(config)``, from the configuration alone.

    Per block: ``12 C^2`` weights (``3 C^2`` for queries/keys/values, ``C^2`` for the attention
    output, ``8 C^2`` for the 4x MLP) plus ``2 C`` LayerNorm gains, and with ``bias=True`` another
    ``11 C`` biases (``3C + C + 4C + C`` in the linear layers, ``2C`` in the LayerNorms). Outside
    the blocks: the token embedding ``V C`` (shared with the LM head, so counted once), the
    position embedding ``block_size * C`` and the final LayerNorm.

    Args:
        config: the model's configuration.
        non_embedding: leave out the position embedding, as ``GPT.num_params()`` does by default.

    Returns:
        The exact count ``GPT(config).num_params(non_embedding)`` would give.
    """
    _check_config(config)
    C, L, V = config.n_embd, config.n_layer, config.vocab_size
    ln = 2 * C if config.bias else C  # LayerNorm gain (and bias)
    per_block = 12 * C * C + 2 * ln + (9 * C if config.bias else 0)
    total = V * C + L * per_block + ln
    if not non_embedding:
        total += config.block_size * C
    return total


def flops_breakdown(config: GPTConfig, T: int, *, batch_size: int = 1) -> dict[str, int]:
    """Matrix-product FLOPs of one forward pass over ``batch_size`` sequences of ``T`` tokens.

    Per layer and per token: ``2 * 3C^2`` for the query/key/value projection, ``2 * C^2`` for the
    output projection, ``2 * 8C^2`` for the MLP; per layer and per sequence ``2 T^2 C`` for the
    scores ``Q K^T`` and ``2 T^2 C`` for the weighted sum of values (summed over heads,
    ``n_head * head_size = C``); and ``2 C V`` per token for the LM head.

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
    B, C, L, V = batch_size, config.n_embd, config.n_layer, config.vocab_size
    return {
        "qkv": 2 * B * T * 3 * C * C * L,
        "attn_scores": 2 * B * T * T * C * L,
        "attn_values": 2 * B * T * T * C * L,
        "attn_out": 2 * B * T * C * C * L,
        "mlp": 2 * B * T * 8 * C * C * L,
        "lm_head": 2 * B * T * C * V,
    }


def forward_flops(config: GPTConfig, T: int, *, batch_size: int = 1) -> int:
    """Total matrix-product FLOPs of a forward pass: ``B (2 T N_mm + 4 L T^2 C)``, where
    ``N_mm = 12 L C^2 + V C`` are the weights used in matrix products (see ``flops_breakdown``)."""
    return sum(flops_breakdown(config, T, batch_size=batch_size).values())


def flops_per_new_token(config: GPTConfig, T: int, *, use_cache: bool) -> int:
    """FLOPs to get the next-token logits when the context already holds ``T`` tokens.

    Without a cache the model reruns the whole context (``forward_flops(config, T)``, as
    ``GPT.generate`` does). With a key/value cache only the newest token goes through the model:
    ``2 N_mm`` for its projections, MLPs and LM head, plus ``4 L T C`` for its one query row
    against the ``T`` cached keys and values.

    Raises:
        ValueError: if ``T`` is not in ``1..block_size``.
    """
    _check_config(config)
    if not 1 <= T <= config.block_size:
        raise ValueError(f"T must be in 1..block_size={config.block_size}, got {T}")
    if not use_cache:
        return forward_flops(config, T)
    C, L, V = config.n_embd, config.n_layer, config.vocab_size
    return 2 * (12 * L * C * C + V * C) + 4 * L * T * C
