"""Attention without the T x T matrix: the online softmax and tiled (flash) attention.

Defined in chapter 9's section "Tiled attention: the online softmax".

A *partial result* summarises the softmax-weighted average of one query row over some of the
keys, as three numbers per row:

* ``m``: the largest score seen so far (``-inf`` when no key has been seen or all are masked);
* ``l``: the sum of ``exp(score - m)`` over those keys;
* ``acc``: the sum of ``exp(score - m) * value`` over those keys (a vector of ``head_size``).

``merge_partials`` combines two partial results over disjoint sets of keys into the partial
result over their union: the *online softmax* of Milakov and Gimelshein (2018) for ``m`` and
``l``, carried over to ``acc`` as memory-efficient attention (Rabe and Staats, 2021) and
FlashAttention (Dao et al., 2022) do;
``finish_partial`` turns a partial result into the attention output ``acc / l`` and the
log-sum-exp ``m + log l``. ``flash_attention_forward`` walks over tiles of queries and keys in
plain PyTorch and stores only the output and the log-sum-exp per query; ``FlashAttention``
(used through ``flash_attention``) is a ``torch.autograd.Function`` whose backward pass
recomputes each tile's weights from the saved log-sum-exp, as FlashAttention-2 does
(Dao, 2023).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from helpers.validation import check_positive_int

NEG_INF = float("-inf")


def _safe_max(m: torch.Tensor) -> torch.Tensor:
    """``m`` with ``-inf`` replaced by 0: subtracting it from ``-inf`` scores gives ``-inf``
    (weight 0) instead of ``-inf - (-inf) = nan``."""
    return torch.where(torch.isneginf(m), torch.zeros_like(m), m)


def _empty_rows_to_inf(lse: torch.Tensor) -> torch.Tensor:
    """``lse`` with ``-inf`` (a query that saw no key) replaced by ``+inf``: the backward pass's
    recomputed weights ``exp(score - lse)`` of such a row are then 0, whether its scores are
    finite or ``-inf``, instead of ``exp(score + inf) = inf``, which turns into NaN."""
    return torch.where(torch.isneginf(lse), torch.full_like(lse, math.inf), lse)


def block_partial(
    scores: torch.Tensor, v: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The partial result ``(m, l, acc)`` of one block of keys.

    Args:
        scores: ``(..., T_q, T_k)`` scaled scores of the queries against the block's keys;
            masked entries are ``-inf``.
        v: ``(..., T_k, head_size)`` the block's values.

    Returns:
        ``m`` and ``l`` of shape ``(..., T_q)`` and ``acc`` of shape ``(..., T_q, head_size)``.
        A row whose scores are all ``-inf`` gives ``m = -inf``, ``l = 0`` and ``acc = 0``.

    Raises:
        ValueError: if the shapes do not fit together.
    """
    if scores.dim() < 2 or v.dim() < 2 or scores.shape[-1] != v.shape[-2]:
        raise ValueError(
            f"scores (..., T_q, T_k) and v (..., T_k, head_size) do not fit: "
            f"{tuple(scores.shape)} and {tuple(v.shape)}"
        )
    m = scores.amax(dim=-1)
    p = torch.exp(scores - _safe_max(m)[..., None])
    return m, p.sum(dim=-1), p @ v


def merge_partials(
    m_a: torch.Tensor,
    l_a: torch.Tensor,
    acc_a: torch.Tensor,
    m_b: torch.Tensor,
    l_b: torch.Tensor,
    acc_b: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Merge the partial results of two disjoint sets of keys into that of their union.

    Each side's sums were taken relative to its own maximum; both are rescaled to the new
    maximum ``m = max(m_a, m_b)`` by the factors ``exp(m_a - m)`` and ``exp(m_b - m)``. Rows
    where both sides are empty (``m_a = m_b = -inf``) stay empty (``m = -inf``, ``l = 0``,
    ``acc = 0``), never ``nan``.

    Raises:
        ValueError: if the shapes of the two sides differ or ``acc`` does not extend ``m``.
    """
    for name, (x, y) in {"m": (m_a, m_b), "l": (l_a, l_b), "acc": (acc_a, acc_b)}.items():
        if x.shape != y.shape:
            raise ValueError(
                f"{name}_a and {name}_b must have the same shape: "
                f"{tuple(x.shape)} and {tuple(y.shape)}"
            )
    if l_a.shape != m_a.shape or acc_a.shape[:-1] != m_a.shape:
        raise ValueError(
            f"m and l must be (..., T_q) and acc (..., T_q, head_size): got m "
            f"{tuple(m_a.shape)}, l {tuple(l_a.shape)}, acc {tuple(acc_a.shape)}"
        )
    m = torch.maximum(m_a, m_b)
    safe = _safe_max(m)
    alpha, beta = torch.exp(m_a - safe), torch.exp(m_b - safe)
    return m, alpha * l_a + beta * l_b, alpha[..., None] * acc_a + beta[..., None] * acc_b


def finish_partial(
    m: torch.Tensor, l: torch.Tensor, acc: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The attention output ``acc / l`` and the log-sum-exp ``m + log l`` of a partial result.

    A row that saw no key (``l = 0``) gets the output 0 and the log-sum-exp ``-inf``.
    """
    out = acc / torch.where(l > 0, l, torch.ones_like(l))[..., None]
    return out, m + torch.log(l)


def _check_qkv(q: Any, k: Any, v: Any, block_q: Any, block_k: Any) -> tuple[int, int]:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or not t.is_floating_point() or t.dim() < 2:
            raise ValueError(f"{name} must be a floating-point tensor (..., T, head_size)")
    if k.shape != v.shape or q.shape[:-2] != k.shape[:-2] or q.shape[-1] != k.shape[-1]:
        raise ValueError(
            "q (..., T_q, head_size), k and v (..., T_k, head_size) do not fit: "
            f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    if k.shape[-2] == 0:
        raise ValueError("k and v need at least one key")
    return (
        check_positive_int("block_q", block_q, what="the query block size"),
        check_positive_int("block_k", block_k, what="the key block size"),
    )


def _key_stop(start: int, rows: int, T_k: int, is_causal: bool) -> int:
    """One past the last key that a query block ``start .. start + rows - 1`` may see."""
    return min(start + rows, T_k) if is_causal else T_k


def _above_diagonal(i: int, rows: int, j: int, cols: int, device: torch.device) -> torch.Tensor:
    """``(rows, cols)`` mask of the tile at queries ``i..``, keys ``j..``: True where the key
    comes after the query (causal attention hides it)."""
    queries = torch.arange(i, i + rows, device=device)[:, None]
    return torch.arange(j, j + cols, device=device) > queries


def flash_attention_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    is_causal: bool = False,
    block_q: int = 64,
    block_k: int = 64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention computed tile by tile, without ever holding more than one tile of scores.

    The outer loop takes the queries in blocks of ``block_q``; for each, the inner loop walks
    over the keys in blocks of ``block_k``, merging each block's partial result into a running
    one. With ``is_causal`` (query ``i`` sees keys ``0..i``, as in
    ``F.scaled_dot_product_attention``), key blocks entirely after a query block's last query
    are skipped and the block that the diagonal cuts is masked.

    Args:
        q: ``(..., T_q, head_size)``; k, v: ``(..., T_k, head_size)``.

    Returns:
        ``(out, lse)``: the output ``(..., T_q, head_size)``, equal to
        ``F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)``, and the log-sum-exp
        of each query's scaled scores ``(..., T_q)``: all the backward pass needs.

    Raises:
        ValueError: on tensors that do not fit or block sizes that are not positive ints.
    """
    block_q, block_k = _check_qkv(q, k, v, block_q, block_k)
    T_q, T_k = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1])
    out = torch.empty_like(q)
    lse = torch.empty(q.shape[:-1], dtype=q.dtype, device=q.device)
    for i in range(0, T_q, block_q):
        rows = min(block_q, T_q - i)
        qi = q[..., i : i + rows, :]
        m = torch.full(q.shape[:-2] + (rows,), NEG_INF, dtype=q.dtype, device=q.device)
        l = torch.zeros_like(m)
        acc = torch.zeros_like(qi)
        for j in range(0, _key_stop(i, rows, T_k, is_causal), block_k):
            cols = min(block_k, T_k - j)
            scores = qi @ k[..., j : j + cols, :].transpose(-2, -1) * scale
            if is_causal and j + cols > i + 1:  # the diagonal cuts this tile
                scores = scores.masked_fill(_above_diagonal(i, rows, j, cols, q.device), NEG_INF)
            m, l, acc = merge_partials(m, l, acc, *block_partial(scores, v[..., j : j + cols, :]))
        out[..., i : i + rows, :], lse[..., i : i + rows] = finish_partial(m, l, acc)
    return out, lse


def flash_attention_backward(
    grad_out: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    *,
    is_causal: bool = False,
    block_q: int = 64,
    block_k: int = 64,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients ``(dq, dk, dv)`` of tiled attention, recomputing each tile's weights.

    No ``T x T`` matrix was saved: the weights of a tile are recomputed from the scores and the
    saved log-sum-exp, ``P = exp(q k^T * scale - lse)``. With ``D = rowsum(grad_out * out)``
    (one number per query), the softmax backward of a tile is ``dS = P * (grad_out v^T - D)``.
    The outer loop runs over key blocks (each accumulates its ``dk`` and ``dv``), the inner
    over query blocks (each adds its share to ``dq``).

    A query whose ``lse`` is ``-inf`` saw no key (``flash_attention`` never produces one, since
    a causal query always sees key 0; a caller that masks a whole row does): its output is 0
    whatever ``q``, ``k`` and ``v`` are, so its weights and gradients are taken as 0.
    """
    block_q, block_k = _check_qkv(q, k, v, block_q, block_k)
    T_q, T_k = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1])
    D = (grad_out * out).sum(dim=-1)  # (..., T_q)
    lse = _empty_rows_to_inf(lse)  # a query that saw no key: weights 0, gradients 0
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for j in range(0, T_k, block_k):
        cols = min(block_k, T_k - j)
        kj, vj = k[..., j : j + cols, :], v[..., j : j + cols, :]
        first = j if is_causal else 0  # causal: queries before key j see none of this block
        for i in range(first - first % block_q, T_q, block_q):
            rows = min(block_q, T_q - i)
            qi, doi = q[..., i : i + rows, :], grad_out[..., i : i + rows, :]
            scores = qi @ kj.transpose(-2, -1) * scale  # recomputed, never stored
            if is_causal and j + cols > i + 1:
                scores = scores.masked_fill(_above_diagonal(i, rows, j, cols, q.device), NEG_INF)
            p = torch.exp(scores - lse[..., i : i + rows, None])
            dv[..., j : j + cols, :] += p.transpose(-2, -1) @ doi
            ds = p * (doi @ vj.transpose(-2, -1) - D[..., i : i + rows, None])
            dq[..., i : i + rows, :] += ds @ kj * scale
            dk[..., j : j + cols, :] += ds.transpose(-2, -1) @ qi * scale
    return dq, dk, dv


class FlashAttention(torch.autograd.Function):
    """Tiled attention as an autograd function that saves only ``q, k, v``, ``out`` and
    ``lse`` and recomputes the weights in its backward pass. Call it through
    ``flash_attention``."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        is_causal: bool,
        block_q: int,
        block_k: int,
    ) -> torch.Tensor:
        out, lse = flash_attention_forward(
            q, k, v, is_causal=is_causal, block_q=block_q, block_k=block_k
        )
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.options = {"is_causal": is_causal, "block_q": block_q, "block_k": block_k}
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = flash_attention_backward(grad_out, q, k, v, out, lse, **ctx.options)
        return dq, dk, dv, None, None, None


def flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    is_causal: bool = False,
    block_q: int = 64,
    block_k: int = 64,
) -> torch.Tensor:
    """Tiled attention with a recomputing backward pass; the same output and gradients as
    ``F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)``.

    Raises:
        ValueError: on tensors that do not fit or block sizes that are not positive ints.
    """
    _check_qkv(q, k, v, block_q, block_k)
    return FlashAttention.apply(q, k, v, bool(is_causal), block_q, block_k)
