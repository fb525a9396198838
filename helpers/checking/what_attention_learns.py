"""The exercise checkers of chapter 13: a head's prefix-matching score
(``check_prefix_matching``) and a head ablated through a forward hook (``check_ablate_head``).

Defined in chapter 13, "What attention learns".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from helpers.checking._core import (
    CheckResult,
    _expect_close,
    _expect_gradients,
    _Mismatch,
    _num,
    _Property,
    _randn,
    _run,
    _Session,
    _shape,
    _tensor_out,
)

# --------------------------------------------------------------------------------------------
# The prefix-matching score.
# --------------------------------------------------------------------------------------------


def _targets(tokens: torch.Tensor) -> torch.Tensor:
    """``(B, T, T)``: key ``j + 1`` is a target of query ``i`` when ``tokens[j] == tokens[i]``
    for some ``j < i``."""
    T = tokens.shape[1]
    match = (tokens[:, :, None] == tokens[:, None, :]) & torch.ones(T, T, dtype=torch.bool).tril(-1)
    target = torch.zeros_like(match)
    target[:, :, 1:] = match[:, :, :-1]
    return target


def _reference_score(weights: torch.Tensor, tokens: torch.Tensor, *, per_sequence: bool = False,
                     every_query: bool = False, key_shift: int = 1,
                     reduce: str = "sum") -> torch.Tensor:  # fmt: skip
    """The right score (default arguments) and some of the mistakes the hints name."""
    T = tokens.shape[1]
    match = (tokens[:, :, None] == tokens[:, None, :]) & torch.ones(T, T, dtype=torch.bool).tril(-1)
    target = torch.zeros_like(match)
    if key_shift == 1:
        target[:, :, 1:] = match[:, :, :-1]
    else:
        target = match
    has = target.any(dim=-1)
    w = weights.double()
    if reduce == "sum":
        per_query = (w * target[:, None]).sum(-1)
    else:
        per_query = (w * target[:, None]).amax(-1)
    if every_query:
        return per_query.mean(dim=(0, 2))
    if per_sequence:
        return ((per_query * has[:, None]).sum(-1) / has.sum(-1)[:, None]).mean(0)
    return (per_query * has[:, None]).sum(dim=(0, 2)) / has.sum()


def _causal_weights(B: int, H: int, T: int, seed: int) -> torch.Tensor:
    """Random attention weights: a softmax of random scores over each query's causal window."""
    scores = _randn(B, H, T, T, seed=seed, scale=2.0)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    return scores.masked_fill(~mask, float("-inf")).softmax(-1)


def _tokens(B: int, T: int, vocab: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(vocab, (B, T), generator=g)


def check_prefix_matching(
    prefix_matching_score: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
) -> CheckResult:
    """Check the reader's prefix-matching score (chapter 13, "What attention learns").

    The reader writes ``prefix_matching_score(weights, tokens)``: ``weights`` ``(B, H, T, T)``
    are attention weights, ``tokens`` ``(B, T)`` the ids they were computed on. For query ``i``
    the targets are the keys ``j + 1`` for every ``j < i`` with ``tokens[j] == tokens[i]``; the
    query's score is its total weight on them; the result ``(H,)`` averages the query scores
    over every query (of the whole batch) that has at least one target.

    Properties: one float per head, of the weights' dtype; a head that puts all its weight on
    targets scores 1 and one that never does scores 0; uniform causal attention scores the mean
    of ``(number of targets) / (i + 1)``, with repeated tokens and several earlier copies;
    random weights on a batch of sequences with different numbers of targets give the average
    over all their queries with a target.
    """

    def call(s: _Session, w: torch.Tensor, tokens: torch.Tensor, what: str) -> torch.Tensor:
        out = s.call(prefix_matching_score, w, tokens, input=what)
        return _tensor_out(out, (w.shape[1],), "the scores", dtype=w.dtype)

    def mistakes(w: torch.Tensor, tokens: torch.Tensor) -> list[tuple[str, Callable[[], Any]]]:
        return [
            (
                "Your score matches the weight on the earlier copies themselves (key j): the "
                "target is the token after each earlier copy, key j + 1.",
                lambda: _reference_score(w, tokens, key_shift=0),
            ),
            (
                "Your score matches averaging over every query, also those with no earlier copy "
                "of their token: count only the queries that have at least one target.",
                lambda: _reference_score(w, tokens, every_query=True),
            ),
            (
                "Your score matches averaging each sequence first, then the sequences: average "
                "over all the queries with a target in the batch at once (sequences with more of "
                "them weigh more).",
                lambda: _reference_score(w, tokens, per_sequence=True),
            ),
            (
                "Your score matches taking the largest weight on one target: a query with "
                "several earlier copies has several targets; add up its weight on all of them.",
                lambda: _reference_score(w, tokens, reduce="max"),
            ),
        ]

    def shape(s: _Session) -> None:
        for seed, (B, H, T, V, kind) in enumerate(
            [
                (2, 3, 9, 4, torch.float32),
                (1, 1, 5, 2, torch.float32),
                (3, 2, 12, 5, torch.float64),
            ],
            start=1,
        ):
            w = _causal_weights(B, H, T, seed).to(kind)
            tokens = _tokens(B, T, V, seed)
            dtype = ", float64" if kind == torch.float64 else ""
            what = (
                f"weights {_shape(w.shape)} (random, causal), tokens {_shape(tokens.shape)} "
                f"in [0, {V}), seed {seed}{dtype}"
            )
            call(s, w, tokens, what)

    def extremes(s: _Session) -> None:
        # Two sequences; tokens repeat several times (no two equal neighbours). Head 0 puts all of
        # every query's weight on the target after the *earliest* copy (key 0 when none), head 1
        # on the query itself (never a target here).
        tokens = torch.tensor([[0, 1, 2, 0, 1, 3, 0, 2, 1, 0], [4, 5, 4, 6, 5, 4, 7, 6, 4, 5]])
        B, T = tokens.shape
        w = torch.zeros(B, 2, T, T)
        for b in range(B):
            for i in range(T):
                earlier = [j for j in range(i) if tokens[b, j] == tokens[b, i]]
                w[b, 0, i, earlier[0] + 1 if earlier else 0] = 1.0
                w[b, 1, i, i] = 1.0
        what = (
            f"tokens {tokens.tolist()}; head 0 puts all of each query's weight on the token "
            "after the earliest earlier copy, head 1 on the query itself"
        )
        got = call(s, w, tokens, what)
        _expect_close(
            got, torch.tensor([1.0, 0.0]), "[1, 0]: all weight on targets, then none",
            mistakes=mistakes(w, tokens), atol=1e-6,
        )  # fmt: skip

    def uniform(s: _Session) -> None:
        for seed, (B, T, V) in enumerate([(1, 8, 2), (2, 16, 3), (1, 40, 6)], start=20):
            tokens = _tokens(B, T, V, seed)
            w = torch.tril(torch.ones(T, T)) / torch.arange(1, T + 1)[:, None]
            w = w.expand(B, 1, T, T).clone()
            what = (
                f"uniform causal weights (row i is 1 / (i + 1)), tokens {_shape(tokens.shape)} in "
                f"[0, {V}) (many earlier copies), seed {seed}"
            )
            got = call(s, w, tokens, what)
            _expect_close(
                got, _reference_score(w, tokens).float(),
                "the mean over queries with a target of (number of targets) / (i + 1)",
                mistakes=mistakes(w, tokens),
            )  # fmt: skip

    def batch(s: _Session) -> None:
        for seed, (B, H, T, V) in enumerate([(3, 2, 10, 3), (4, 4, 24, 8)], start=30):
            tokens = _tokens(B, T, V, seed)
            tokens[0] = torch.arange(T) % V  # a periodic sequence: many queries with a target
            w = _causal_weights(B, H, T, seed)
            what = (
                f"random causal weights {_shape(w.shape)}, tokens in [0, {V}) whose sequences have "
                f"different numbers of queries with a target, seed {seed}"
            )
            got = call(s, w, tokens, what)
            _expect_close(
                got, _reference_score(w, tokens).float(),
                "the mean over all the batch's queries with a target",
                mistakes=mistakes(w, tokens),
            )  # fmt: skip

    return _run(
        "check_prefix_matching",
        [
            _Property(
                "shape",
                "one score per head, of the weights' dtype",
                "Return a tensor of shape (H,): sum over keys, average over queries and batch.",
                shape,
            ),
            _Property(
                "extremes",
                "all weight on targets scores 1, none scores 0",
                "The targets of query i are the keys j + 1 after every j < i with "
                "tokens[j] == tokens[i]; average only over queries that have one.",
                extremes,
            ),
            _Property(
                "uniform",
                "uniform attention scores the mean of (number of targets) / (i + 1)",
                "Add up a query's weight on all its targets (one per earlier copy).",
                uniform,
            ),
            _Property(
                "batch",
                "a batch averages over all its queries with a target",
                "Average over every query with a target in the whole batch at once.",
                batch,
            ),
        ],
    )


# --------------------------------------------------------------------------------------------
# Ablating a head through a forward pre-hook.
# --------------------------------------------------------------------------------------------


def _layers() -> list[tuple[str, nn.Module, int, tuple[int, int]]]:
    """(description, layer, head, (B, T)) cases: the book's MultiHeadAttention and the GPT's
    CausalSelfAttention, first, middle and last heads."""
    from helpers.model import CausalSelfAttention, GPTConfig
    from helpers.multihead import MultiHeadAttention

    torch.manual_seed(11)
    return [
        ("MultiHeadAttention(12, 3), head 1", MultiHeadAttention(12, 3), 1, (2, 5)),
        ("MultiHeadAttention(8, 4), head 0", MultiHeadAttention(8, 4), 0, (1, 7)),
        ("MultiHeadAttention(16, 2), head 1 (the last)", MultiHeadAttention(16, 2), 1, (3, 4)),
        (
            "the GPT's CausalSelfAttention (n_embd 24, 4 heads), head 2",
            CausalSelfAttention(GPTConfig(vocab_size=5, block_size=8, n_head=4, n_embd=24)),
            2,
            (2, 8),
        ),
        ("MultiHeadAttention(6, 6), head 5 (head_size 1)", MultiHeadAttention(6, 6), 5, (1, 3)),
    ]


def _projection_input(layer: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """What ``layer.c_proj`` receives on ``x`` (after any pre-hook), and the layer's output."""
    seen: list[torch.Tensor] = []
    handle = layer.c_proj.register_forward_hook(lambda _m, a, _o: seen.append(a[0].detach()))
    try:
        out = layer(x)
    finally:
        handle.remove()
    return seen[0], out


def check_ablate_head(ablate_head: Callable[[nn.Module, int], Any]) -> CheckResult:
    """Check the reader's head ablation (chapter 13, "What attention learns").

    The reader writes ``ablate_head(layer, head)``: it registers a forward pre-hook on
    ``layer.c_proj`` that sets channels ``head * head_size`` to ``(head + 1) * head_size - 1`` of
    the projection's input to zero, and returns the hook's handle.

    Properties: while the hook is on, those channels reach ``c_proj`` as zeros; every other
    channel reaches it unchanged; ``handle.remove()`` gives back the layer's own output, and no
    weight changed; gradients flow through the ablated layer to the other heads as before.
    Layers: chapter 5's ``MultiHeadAttention`` and the GPT's ``CausalSelfAttention``, with the
    first, a middle and the last head.
    """

    def ablated(s: _Session, desc: str, layer: nn.Module, head: int,
                x: torch.Tensor) -> tuple[nn.Module, Any]:  # fmt: skip
        called[0] = f"ablate_head(layer, {head}) on {desc}"
        handle = s.call(ablate_head, layer, head, input=called[0])
        return s.passed[0], handle  # the copy of the layer the reader's function was given

    called = [""]  # the latest call of the reader's function, for the reports of its hook

    def hooked(s: _Session, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``, which runs the reader's hook: bounded in time, and an exception in
        it reported as the reader's."""
        what = f"{called[0]}, then the layer's forward on x (which runs your hook)"
        return s.run(fn, *args, input=what, doer="your hook")

    def zeroed(s: _Session) -> None:
        for seed, (desc, layer, head, (B, T)) in enumerate(_layers(), start=1):
            x = _randn(B, T, layer.n_embd, seed=seed)
            theirs, _ = ablated(s, desc, layer, head, x)
            y, _ = hooked(s, _projection_input, theirs, x)
            hs = layer.head_size
            part = y[..., head * hs : (head + 1) * hs]
            if part.abs().max() != 0:
                raise _Mismatch(
                    f"channels {head * hs}..{(head + 1) * hs - 1} of c_proj's input all 0",
                    f"largest of them {_num(part.abs().max().item())}",
                    hint_zero(y, hs, head),
                )

    def others(s: _Session) -> None:
        for seed, (desc, layer, head, (B, T)) in enumerate(_layers(), start=11):
            x = _randn(B, T, layer.n_embd, seed=seed)
            want, _ = _projection_input(layer, x)
            theirs, _ = ablated(s, desc, layer, head, x)
            y, _ = hooked(s, _projection_input, theirs, x)
            hs = layer.head_size
            keep = torch.ones(layer.n_embd, dtype=torch.bool)
            keep[head * hs : (head + 1) * hs] = False
            _expect_close(
                y[..., keep], want[..., keep], "the other heads' channels as without the hook",
                atol=1e-6,
            )  # fmt: skip

    def removed(s: _Session) -> None:
        for seed, (desc, layer, head, (B, T)) in enumerate(_layers(), start=21):
            x = _randn(B, T, layer.n_embd, seed=seed)
            _, want = _projection_input(layer, x)
            theirs, handle = ablated(s, desc, layer, head, x)
            if not callable(getattr(handle, "remove", None)):
                raise _Mismatch(
                    "the handle that register_forward_pre_hook returns",
                    f"an object of type {type(handle).__name__}, without a remove() method",
                    "Return what layer.c_proj.register_forward_pre_hook(hook) returns: its "
                    "remove() takes the hook off again.",
                )
            s.run(handle.remove, input=f"{called[0]}, then handle.remove()", doer="handle.remove()")
            _, out = hooked(s, _projection_input, theirs, x)
            _expect_close(
                out, want, "after handle.remove(), the layer's own output", atol=1e-6,
                hint="After handle.remove() no hook of yours may be left: register exactly one "
                "hook, and return its handle.",
            )  # fmt: skip

    def gradients(s: _Session) -> None:
        for seed, (desc, layer, head, (B, T)) in enumerate(_layers()[:4], start=31):
            with torch.enable_grad():
                x = _randn(B, T, layer.n_embd, seed=seed).requires_grad_(True)
                theirs, _ = ablated(s, desc, layer, head, x)
                out = hooked(s, theirs, x)
                reference = _reference_ablated(layer, head, x)
                _expect_gradients(out, reference, [("x", x)])

    def hint_zero(y: torch.Tensor, hs: int, head: int) -> str:
        n_head = y.shape[-1] // hs
        zero = (y == 0).all(dim=tuple(range(y.dim() - 1)))  # (C,): channels that are all zero
        if not zero.any():
            return (
                "Nothing reached c_proj as zero: the hook must return the changed input (a "
                "tuple holding the new tensor) or change it in place; a hook on the layer's "
                "output or a forward hook on c_proj runs too late."
            )
        if n_head > 1 and torch.equal(zero.nonzero().flatten(), torch.arange(head, y.shape[-1],
                                                                              n_head)):  # fmt: skip
            return (
                "You zeroed every n_head-th channel: head h holds the consecutive channels "
                "h*head_size..(h+1)*head_size - 1."
            )
        return f"Head h holds channels h*head_size..(h+1)*head_size - 1 (here {hs} per head)."

    return _run(
        "check_ablate_head",
        [
            _Property(
                "zeroed",
                "the head's channels reach c_proj as zeros",
                "Set channels head*head_size..(head+1)*head_size - 1 of c_proj's input to 0.",
                zeroed,
            ),
            _Property(
                "others",
                "the other heads reach c_proj unchanged",
                "Change only the head's own channels.",
                others,
            ),
            _Property(
                "removed",
                "handle.remove() restores the layer, and no weight changes",
                "Return the handle of the one hook you registered.",
                removed,
            ),
            _Property(
                "gradients",
                "gradients flow through the other heads",
                "Build the hook's output from its input with differentiable operations.",
                gradients,
            ),
        ],
        repeat=False,  # each call returns a new handle: there is no output to compare
    )


def _reference_ablated(layer: nn.Module, head: int, x: torch.Tensor) -> torch.Tensor:
    hs = layer.head_size

    def hook(_m: nn.Module, args: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor]:
        y = args[0].clone()
        y[..., head * hs : (head + 1) * hs] = 0.0
        return (y,)

    handle = layer.c_proj.register_forward_pre_hook(hook)
    try:
        return layer(x)
    finally:
        handle.remove()
