"""The exercise checkers of chapter 9: attention over a key/value cache
(``check_cached_attention``) and the positions of new tokens (``check_cached_positions``).

Defined in chapter 9, "The cost of attention and fast generation".
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from helpers.checking._core import (
    FAR_BELOW_TEXT,
    CheckResult,
    _causal_sdpa,
    _differ,
    _expect_close,
    _expect_gradients,
    _far_below_scores,
    _Mismatch,
    _mistake_hint,
    _Property,
    _randn,
    _ReaderRaised,
    _run,
    _Session,
    _shape,
    _tensor_out,
    _variant,
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
    attention over the whole sequence at once. Some inputs are float64 (to float64 precision),
    bfloat16, or views of a cache allocated in advance (not contiguous), and in one every score
    is -1e10.
    """
    # (B, n_head, T_past, T_new, head_size)
    # Each property has its own seeds; T_past + T_new reaches 2105, beyond the chapter's 2048;
    # "zero q" makes every score exactly 0 (uniform weights over the visible keys), "large"
    # gives scores of a few hundred, where exp overflows float32.
    fresh = [(2, 2, 0, 1, 8), (2, 2, 0, 5, 8), (1, 1, 0, 3, 4)]
    cached = [(2, 3, 5, 1, 8), (2, 2, 6, 3, 8), (1, 1, 2100, 5, 4), (2, 2, 1, 2, 8)]
    # "below -1e9": every score about -1e10 (a finite fill value such as -1e9 would outweigh the
    # visible keys); "buffer": k and v are the first T rows of a cache allocated in advance for
    # more, so they are not contiguous; float64 (to float64 precision) and bfloat16 inputs.
    special = {
        (1, 1, 0, 3, 4): "zero q",
        (2, 2, 6, 3, 8): "large",
        (2, 2, 1, 2, 8): "below -1e9",
        (2, 3, 5, 1, 8): "buffer",
        (2, 2, 0, 1, 8): "float64",
        (2, 2, 0, 5, 8): "bfloat16",
    }

    def full(
        B: int, nh: int, T: int, hs: int, seed: int, kind: str = ""
    ) -> tuple[torch.Tensor, ...]:
        x = _randn(3, B, nh, T, hs, seed=seed)
        scale = 8.0 if kind == "large" else 2.0
        q, k, v = x[0] * (0.0 if kind == "zero q" else scale), x[1] * scale, x[2]
        if kind == "below -1e9":  # every score about -1e10, on every rounding path
            q, k = _far_below_scores((B, nh), T, hs, seed)
        elif kind == "buffer":  # the first T rows of buffers allocated for T + 7
            k = torch.cat([k, torch.zeros(B, nh, 7, hs)], dim=-2)[..., :T, :]
            v = torch.cat([v, torch.zeros(B, nh, 7, hs)], dim=-2)[..., :T, :]
        elif kind in ("float64", "bfloat16"):
            q, k, v = (_variant(t, kind) for t in (q, k, v))
        return q, k, v

    def mistakes(
        q_new: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> list[tuple[str, Callable[[], Any]]]:
        T_new, T = q_new.shape[-2], k.shape[-2]
        q, k, v = q_new.double(), k.double(), v.double()
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        return [
            (
                "Your output matches masking the hidden scores with a finite number such as "
                "-1e9: when every visible score is below it, the hidden keys outweigh them. Fill "
                "with float('-inf'), which is below every score.",
                lambda: (
                    scores.masked_fill(~causal_mask(T_new, T_past=T - T_new), -1e9).softmax(-1) @ v
                    if scores.max() < -1e9
                    else None
                ),
            ),
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
            "below -1e9": f", {FAR_BELOW_TEXT}",
            "buffer": ", k and v the first rows of buffers allocated for 7 more tokens (not "
            "contiguous)",
            "float64": ", float64",
            "bfloat16": ", bfloat16",
        }[kind]
        what = (
            f"q_new of shape {_shape((B, nh, T_new, hs))} (T_new = {T_new}), k and v of shape "
            f"{_shape((B, nh, T_past + T_new, hs))} (T_past = {T_past}), seed {seed}{note}"
        )
        out = s.call(fn, q[..., T_past:, :], k, v, input=what)
        expected = _causal_sdpa(q, k, v, is_causal=True)[..., T_past:, :]
        out = _tensor_out(out, (B, nh, T_new, hs), dtype=q.dtype)
        return out, expected, (q[..., T_past:, :], k, v)

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
                dtype=out.dtype,
            )

    def with_cache(s: _Session) -> None:
        for seed, case in enumerate(cached, start=20):
            out, expected, inputs = run_case(s, case, seed)
            _expect_close(
                out,
                expected,
                "the last T_new rows of causal attention over all T_past + T_new",
                mistakes=mistakes(*inputs),
                dtype=out.dtype,
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


def check_cached_positions(fn: Callable[[Any, torch.Tensor, int], torch.Tensor]) -> CheckResult:
    """Check the reader's embedding of new tokens during cached generation (chapter 9, "The
    cost of attention and fast generation").

    The reader writes ``fn(model, idx_new, T_past)``: ``model`` is a ``helpers.model.GPT`` with
    learned positions, ``idx_new`` the ``(B, T_new)`` ids of the newest tokens and ``T_past``
    the number of tokens already in the key/value cache; it returns the ``(B, T_new, n_embd)``
    input of the first block: the token embeddings plus the position embeddings of positions
    ``T_past .. T_past + T_new - 1`` (``model.tok_emb(idx_new) + model.pos_emb(T_new,
    T_past)``, or the rows of ``model.pos_emb.weight``).

    Properties: the output has shape ``(B, T_new, n_embd)``; with nothing cached it is the
    prompt's embedding, positions ``0 .. T_new - 1``; with ``T_past`` tokens cached, new token
    ``i`` gets position ``T_past + i``, up to the last position ``block_size - 1`` (one call with
    gradients on, which must reach both embedding tables), and a position past it raises an
    error, as the model does (not a slice with fewer rows, not a wrap-around); generating token
    by token with a cache, with these embeddings, gives the logits of the model run on the whole
    sequence. The model is given in training mode (with dropout 0) and must be left in it.
    """
    from helpers.model import GPT, GPTConfig

    def make_model(seed: int) -> GPT:
        torch.manual_seed(seed)
        config = GPTConfig(vocab_size=11, block_size=600, n_layer=2, n_head=2, n_embd=16)
        return GPT(config).train()  # dropout 0: the same output in either mode

    def ids(B: int, T: int, seed: int) -> torch.Tensor:
        return torch.randint(11, (B, T), generator=torch.Generator().manual_seed(seed))

    def reference(model: Any, idx: torch.Tensor, T_past: int) -> torch.Tensor:
        return model.tok_emb(idx) + model.pos_emb.weight[T_past : T_past + idx.shape[1]]

    def mistakes(model: Any, idx: torch.Tensor, T_past: int) -> list[tuple[str, Any]]:
        T_new = idx.shape[1]
        tok, pos = model.tok_emb(idx), model.pos_emb.weight
        return [
            (
                "Your embeddings match positions 0..T_new-1, as if nothing were cached: new "
                "token i is at position T_past + i.",
                lambda: tok + pos[:T_new],
            ),
            (
                "Your embeddings match positions T_past + 1 + i, one too far: the cache holds "
                "positions 0..T_past - 1, so the first new token is at position T_past.",
                lambda: tok + pos[T_past + 1 : T_past + 1 + T_new],
            ),
            (
                "Your embeddings match the token embeddings alone: add the position "
                "embeddings of positions T_past .. T_past + T_new - 1.",
                lambda: tok,
            ),
            (
                "Your embeddings match every new token at position T_past: new token i is at "
                "position T_past + i.",
                lambda: tok + pos[T_past : T_past + 1],
            ),
        ]

    def describe(B: int, T_new: int, T_past: int, seed: int) -> str:
        return (
            f"a GPT with block_size 600 and n_embd 16 (seed {seed}), idx_new of shape "
            f"{_shape((B, T_new))}, T_past = {T_past}"
        )

    def call(s: _Session, model: Any, idx: torch.Tensor, T_past: int, what: str) -> Any:
        out = s.call(fn, model, idx, T_past, input=what)
        return _tensor_out(out, (*idx.shape, 16), dtype=model.tok_emb.weight.dtype)

    def shape(s: _Session) -> None:
        for B, T_new, T_past, seed in ((2, 5, 0, 1), (1, 1, 7, 2), (3, 2, 4, 3)):
            model = make_model(seed)
            call(s, model, ids(B, T_new, seed), T_past, describe(B, T_new, T_past, seed))

    def prompt(s: _Session) -> None:
        for B, T_new, seed in ((2, 6, 11), (1, 70, 12)):
            model, idx = make_model(seed), ids(B, T_new, seed)
            out = call(s, model, idx, 0, describe(B, T_new, 0, seed))
            _expect_close(
                out,
                reference(model, idx, 0),
                "tok_emb(idx_new) + the position embeddings of positions 0..T_new-1",
                mistakes=mistakes(model, idx, 0),
            )

    def past_the_end(s: _Session, B: int, T_new: int, T_past: int, seed: int) -> None:
        """Positions past block_size - 1 do not exist: the model raises, and so must the
        function (an error, not a silently wrong embedding)."""
        model, idx = make_model(seed), ids(B, T_new, seed)
        last = T_past + T_new - 1
        try:
            out = s.call(fn, model, idx, T_past, input=describe(B, T_new, T_past, seed))
        except _ReaderRaised:
            return  # any exception: the model's own is a ValueError
        expected = (
            f"an error: position {last} is past the model's last position, 599 (block_size 600), "
            "where model.pos_emb and the model itself raise"
        )
        if isinstance(out, torch.Tensor) and out.dim() == 3 and out.shape[1] < T_new:
            raise _Mismatch(
                expected,
                f"a tensor of shape {_shape(out.shape)}: {out.shape[1]} rows for {T_new} new "
                "tokens",
                "Your function slices pos_emb.weight past its end, which returns fewer rows "
                "without an error: positions past block_size - 1 do not exist. Use "
                "model.pos_emb(T_new, T_past), which raises, or check T_past + T_new <= "
                "block_size yourself.",
            )
        wrapped = (
            model.tok_emb(idx)
            + model.pos_emb.weight[torch.arange(T_past, T_past + T_new) % model.config.block_size]
        )
        hint = None
        if (
            isinstance(out, torch.Tensor)
            and out.shape == wrapped.shape
            and torch.allclose(out.double(), wrapped.double(), atol=1e-5)
        ):
            hint = (
                "Your embeddings wrap the positions past block_size - 1 around to 0 (% "
                "block_size): the model has no such positions and raises there; so must your "
                "function (model.pos_emb(T_new, T_past) does)."
            )
        got = (
            f"a tensor of shape {_shape(out.shape)}"
            if isinstance(out, torch.Tensor)
            else (f"an object of type {type(out).__name__}")
        )
        raise _Mismatch(
            expected,
            f"{got}, without an error",
            hint
            or "Positions past block_size - 1 do not exist: raise an error there, as "
            "model.pos_emb(T_new, T_past) does, rather than return embeddings.",
        )

    def offset(s: _Session) -> None:
        cases = ((2, 1, 5, 21), (1, 3, 598, 22), (2, 1, 599, 23), (1, 4, 520, 24))
        for number, (B, T_new, T_past, seed) in enumerate(cases):
            if T_past + T_new > 600:
                past_the_end(s, B, T_new, T_past, seed)
                continue
            model, idx = make_model(seed), ids(B, T_new, seed)
            with torch.enable_grad():
                out = call(s, model, idx, T_past, describe(B, T_new, T_past, seed))
                theirs = s.passed[0]  # the copy of the model the function was given
                expected = reference(theirs, idx, T_past)
                _expect_close(
                    out,
                    expected,
                    f"tok_emb(idx_new) + the position embeddings of positions {T_past}.."
                    f"{T_past + T_new - 1}",
                    mistakes=mistakes(theirs, idx, T_past),
                )
                if number == 0:  # the first call with gradients on
                    tables = [
                        ("the token embeddings", theirs.tok_emb.weight),
                        ("the position embeddings", theirs.pos_emb.weight),
                    ]
                    _expect_gradients(out, expected, tables)

    def generation(s: _Session) -> None:
        seed, B, T, prefill = 31, 2, 12, 4
        model, idx = make_model(seed), ids(B, T, seed)
        full = model(idx)[0]  # (B, T, vocab): the model run on the whole sequence
        caches = model.new_caches()
        start = 0
        for stop in [prefill, *range(prefill + 1, T + 1)]:
            what = (
                f"generation with a cache, tokens {start}..{stop - 1} of a sequence of {T} "
                f"(idx_new of shape {_shape((B, stop - start))}, T_past = {start}, seed {seed})"
            )
            emb = x = call(s, model, idx[:, start:stop], start, what)
            for block, cache in zip(model.blocks, caches, strict=True):
                x = block(x, cache, False, start)
            logits = model.lm_head(model.ln_f(x))
            problem = _differ(logits, full[:, start:stop], atol=1e-4)
            if problem is not None:
                raise _Mismatch(
                    f"the logits of tokens {start}..{stop - 1} of the model run on all {T} tokens",
                    problem,
                    _mistake_hint(emb, mistakes(model, idx[:, start:stop], start), None),
                )
            start = stop

    return _run(
        "check_cached_positions",
        [
            _Property(
                "shape",
                "output shape (B, T_new, n_embd)",
                "Return one tensor: the embeddings of the new tokens, (B, T_new, n_embd).",
                shape,
            ),
            _Property(
                "prompt",
                "with nothing cached, positions 0..T_new-1",
                "With T_past = 0 the new tokens are the prompt: token embeddings plus the "
                "position embeddings of positions 0..T_new-1.",
                prompt,
            ),
            _Property(
                "offset",
                "with T_past cached, new token i is at position T_past + i",
                "New token i is at position T_past + i: model.pos_emb(T_new, T_past), or rows "
                "T_past .. T_past + T_new - 1 of model.pos_emb.weight.",
                offset,
            ),
            _Property(
                "generation",
                "cached generation gives the logits of the whole sequence",
                "Every step's new tokens must get the positions they have in the whole sequence.",
                generation,
            ),
        ],
    )
