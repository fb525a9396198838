"""The exercise checker of chapter 9: attention over a key/value cache (``check_cached_attention``).

Defined in chapter 9, "The cost of attention and fast generation".
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from helpers.checking._core import (
    CheckResult,
    _causal_sdpa,
    _differ,
    _expect_close,
    _Mismatch,
    _mistake_hint,
    _Property,
    _randn,
    _run,
    _Session,
    _shape,
    _tensor_out,
)
from helpers.masking import causal_mask


def check_cached_attention(
    fn: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
) -> CheckResult:
    """Check the reader's attention with a KV cache (chapter 9, "The cost of attention and fast
    generation").

    The reader writes ``fn(q_new, k, v)``: ``q_new`` is ``(B, n_head, T_new, head_size)``, the
    queries of the newest ``T_new`` tokens; ``k`` and ``v`` are ``(B, n_head, T_past + T_new,
    head_size)``, the keys and values of every token so far (the cached ones first). It returns
    the new tokens' causal attention output ``(B, n_head, T_new, head_size)``: new token ``i``
    sits at position ``T_past + i`` and sees keys ``0 .. T_past + i``.

    Properties: the output has shape ``(B, n_head, T_new, head_size)``; with nothing cached
    (``T_past = 0``) it is ordinary causal attention, for ``T_new = 1`` and ``T_new > 1``; with
    ``T_past > 0`` it equals the last ``T_new`` rows of full causal attention, for ``T_new = 1``
    and ``T_new > 1``; generating token by token with a growing cache gives the same outputs as
    attention over the whole sequence at once.
    """
    # (B, n_head, T_past, T_new, head_size)
    # Each property has its own seeds; T_past + T_new reaches 45, beyond the chapter's sizes;
    # "zero q" makes every score exactly 0 (uniform weights over the visible keys), "large"
    # gives scores of a few hundred, where exp overflows float32.
    fresh = [(2, 2, 0, 1, 8), (2, 2, 0, 5, 8), (1, 1, 0, 3, 4)]
    cached = [(1, 3, 5, 1, 8), (2, 2, 6, 3, 8), (1, 1, 40, 5, 4), (2, 2, 1, 2, 8)]
    special = {(1, 1, 0, 3, 4): "zero q", (2, 2, 6, 3, 8): "large"}

    def full(
        B: int, nh: int, T: int, hs: int, seed: int, kind: str = ""
    ) -> tuple[torch.Tensor, ...]:
        x = _randn(3, B, nh, T, hs, seed=seed)
        scale = 8.0 if kind == "large" else 2.0
        q = x[0] * (0.0 if kind == "zero q" else scale)
        return q, x[1] * scale, x[2]

    def mistakes(
        q_new: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> list[tuple[str, Callable[[], Any]]]:
        T_new, T = q_new.shape[-2], k.shape[-2]
        q, k, v = q_new.double(), k.double(), v.double()
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        return [
            (
                "Your output matches a mask aligned as if T_past were 0 (is_causal=True, or "
                "tril of a (T_new, T) matrix from the top left): new token i is at position "
                "T_past + i, with T_past = k.shape[-2] - q_new.shape[-2], and sees keys "
                "0..T_past + i (causal_mask(T_new, T_past=T_past)).",
                lambda: _causal_sdpa(q, k, v, is_causal=True),
            ),
            (
                "Your output matches attention over the new tokens only: the cached keys and "
                "values (the first T_past of k and v) are part of what the new tokens see.",
                lambda: _causal_sdpa(q, k[..., -T_new:, :], v[..., -T_new:, :], is_causal=True),
            ),
            (
                "Your output matches attention without a mask: with several new tokens, new "
                "token i may not see the new tokens after it.",
                lambda: scores.softmax(dim=-1) @ v,
            ),
            (
                "Your output matches no scaling: divide the scores by sqrt(head_size).",
                lambda: (
                    (q @ k.transpose(-2, -1))
                    .masked_fill(~causal_mask(T_new, T_past=T - T_new), -math.inf)
                    .softmax(dim=-1)
                    @ v
                ),
            ),
            (
                "Your output matches masking the hidden scores with 0: a score of 0 still gets a "
                "weight; use -inf.",
                lambda: (
                    scores.masked_fill(~causal_mask(T_new, T_past=T - T_new), 0.0).softmax(-1) @ v
                ),
            ),
        ]

    def run_case(s: _Session, case: tuple[int, ...], seed: int) -> tuple[Any, ...]:
        B, nh, T_past, T_new, hs = case
        kind = special.get(case, "")
        q, k, v = full(B, nh, T_past + T_new, hs, seed, kind)
        note = {
            "": "",
            "zero q": ", q_new all zeros (every score 0)",
            "large": ", q and k scaled by 8 (scores of a few hundred)",
        }[kind]
        what = (
            f"q_new of shape {_shape((B, nh, T_new, hs))} (T_new = {T_new}), k and v of shape "
            f"{_shape((B, nh, T_past + T_new, hs))} (T_past = {T_past}), seed {seed}{note}"
        )
        out = s.call(fn, q[..., T_past:, :], k, v, input=what)
        expected = _causal_sdpa(q, k, v, is_causal=True)[..., T_past:, :]
        return _tensor_out(out, (B, nh, T_new, hs)), expected, (q[..., T_past:, :], k, v)

    def shape(s: _Session) -> None:
        for seed, case in enumerate([*fresh, *cached], start=1):
            run_case(s, case, seed)

    def no_cache(s: _Session) -> None:
        for seed, case in enumerate(fresh, start=10):
            out, expected, inputs = run_case(s, case, seed)
            _expect_close(
                out,
                expected,
                "causal attention over the new tokens",
                mistakes=mistakes(*inputs),
            )

    def with_cache(s: _Session) -> None:
        for seed, case in enumerate(cached, start=20):
            out, expected, inputs = run_case(s, case, seed)
            _expect_close(
                out,
                expected,
                "the last T_new rows of causal attention over all T_past + T_new",
                mistakes=mistakes(*inputs),
            )

    def generation(s: _Session) -> None:
        B, nh, T, hs = 2, 2, 8, 8
        for prefill, seed in ((0, 30), (3, 31)):
            q, k, v = full(B, nh, T, hs, seed)
            uncached = _causal_sdpa(q, k, v, is_causal=True)
            steps = []
            if prefill:
                what = f"prefill: the first {prefill} tokens at once (seed {seed})"
                out = s.call(
                    fn, q[..., :prefill, :], k[..., :prefill, :], v[..., :prefill, :], input=what
                )
                steps.append(_tensor_out(out, (B, nh, prefill, hs)))
            for t in range(prefill, T):
                what = (
                    f"generation step for token {t}: q_new of token {t}, k and v of tokens 0..{t} "
                    f"(B = {B}, n_head = {nh}, head_size = {hs}, prefill {prefill}, seed {seed})"
                )
                out = s.call(
                    fn, q[..., t : t + 1, :], k[..., : t + 1, :], v[..., : t + 1, :], input=what
                )
                steps.append(_tensor_out(out, (B, nh, 1, hs)))
                problem = _differ(steps[-1], uncached[..., t : t + 1, :])
                if problem is not None:
                    raise _Mismatch(
                        f"the output of token {t} in attention over the whole sequence",
                        problem,
                        _mistake_hint(
                            steps[-1],
                            mistakes(q[..., t : t + 1, :], k[..., : t + 1, :], v[..., : t + 1, :]),
                            None,
                        ),
                    )
            _expect_close(torch.cat(steps, dim=-2), uncached, "the uncached outputs")

    offset_hint = (
        "New token i is at position T_past + i, where T_past = k.shape[-2] - q_new.shape[-2]: "
        "it may see keys 0..T_past + i."
    )
    return _run(
        "check_cached_attention",
        [
            _Property(
                "shape",
                "output shape (B, n_head, T_new, head_size)",
                "One output row per new query: (T_new, T_past + T_new) weights @ v.",
                shape,
            ),
            _Property(
                "no_cache",
                "with T_past = 0 it is ordinary causal attention",
                "With nothing cached, the output is causal attention over the T_new tokens.",
                no_cache,
            ),
            _Property(
                "with_cache",
                "with T_past > 0, new token i sits at position T_past + i",
                offset_hint,
                with_cache,
            ),
            _Property(
                "generation",
                "cached token-by-token generation equals uncached attention",
                offset_hint,
                generation,
            ),
        ],
    )
