"""The checkers of chapter 13's exercises: a head's prefix-matching score, and a head ablated
through a forward pre-hook.

For each: right answers (the book's way and unusual ones) are accepted; wrong answers, from the
common pitfalls to those that only fail on an edge case (several earlier copies of a token, a
batch whose sequences differ, float64, the last head, gradients), are rejected on the property
named, with a hint that names what the answer did; a stub gets the friendly message; the report
is the same text on every run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
import torch

import helpers.checking._core as core
from helpers.checking import (
    CheckResult,
    check_ablate_head,
    check_prefix_matching,
)
from helpers.circuits import ablate_head as ablate_book
from helpers.circuits import prefix_matching_score as prefix_book

Tensor = torch.Tensor
NEUTRAL = "<neutral>"


# The prefix-matching score ---------------------------------------------------------------------


def _targets(tokens: Tensor, shift: int = 1, include_self: bool = False) -> Tensor:
    T = tokens.shape[1]
    earlier = torch.ones(T, T, dtype=torch.bool).tril(0 if include_self else -1)
    match = (tokens[:, :, None] == tokens[:, None, :]) & earlier
    if shift == 0:
        return match
    target = torch.zeros_like(match)
    target[:, :, 1:] = match[:, :, :-1]
    return target


def prefix_loops(weights: Tensor, tokens: Tensor) -> Tensor:
    """Unusual but right: plain loops over sequences, queries and earlier positions."""
    B, H, T, _ = weights.shape
    total = torch.zeros(H, dtype=weights.dtype)
    n = 0
    for b in range(B):
        for i in range(T):
            keys = sorted({j + 1 for j in range(i) if tokens[b, j] == tokens[b, i]})
            if keys:
                total = total + weights[b, :, i, keys].sum(-1)
                n += 1
    return total / n


def prefix_masked_mean(weights: Tensor, tokens: Tensor) -> Tensor:
    """Unusual but right: the query scores of the queries with a target, selected by a mask."""
    target = _targets(tokens)
    per_query = (weights * target[:, None].to(weights.dtype)).sum(-1)  # (B, H, T)
    has = target.any(-1)  # (B, T)
    return per_query.permute(1, 0, 2)[:, has].mean(-1)


def _score(weights: Tensor, target: Tensor, *, every: bool = False) -> Tensor:
    per_query = (weights * target[:, None].to(weights.dtype)).sum(-1)
    if every:
        return per_query.mean(dim=(0, 2))
    has = target.any(-1)
    return (per_query * has[:, None]).sum(dim=(0, 2)) / has.sum()


def prefix_no_shift(w: Tensor, t: Tensor) -> Tensor:
    return _score(w, _targets(t, shift=0))


def prefix_every_query(w: Tensor, t: Tensor) -> Tensor:
    return _score(w, _targets(t), every=True)


def prefix_per_sequence(w: Tensor, t: Tensor) -> Tensor:
    return torch.stack([_score(w[b : b + 1], _targets(t[b : b + 1])) for b in range(len(t))]).mean(
        0
    )


def prefix_max(w: Tensor, t: Tensor) -> Tensor:
    target = _targets(t)
    per_query = (w * target[:, None].to(w.dtype)).amax(-1)
    has = target.any(-1)
    return (per_query * has[:, None]).sum(dim=(0, 2)) / has.sum()


def prefix_most_recent(w: Tensor, t: Tensor) -> Tensor:
    """Only the latest earlier copy counts."""
    B, T = t.shape
    target = torch.zeros(B, T, T, dtype=torch.bool)
    for b in range(B):
        for i in range(T):
            earlier = [j for j in range(i) if t[b, j] == t[b, i]]
            if earlier:
                target[b, i, earlier[-1] + 1] = True
    return _score(w, target)


def prefix_self_included(w: Tensor, t: Tensor) -> Tensor:
    """j <= i: the query counts as its own earlier copy (its target i + 1 is in the future)."""
    target = _targets(t, include_self=True)
    return _score(w, target)


def prefix_per_head_batch(w: Tensor, t: Tensor) -> Tensor:
    """Returns a score per sequence and head, (B, H)."""
    target = _targets(t)
    per_query = (w * target[:, None].to(w.dtype)).sum(-1)
    has = target.any(-1)
    return (per_query * has[:, None]).sum(-1) / has.sum(-1)[:, None]


def prefix_float32(w: Tensor, t: Tensor) -> Tensor:
    return prefix_book(w.float(), t)


def prefix_divide_by_T(w: Tensor, t: Tensor) -> Tensor:
    target = _targets(t)
    per_query = (w * target[:, None].to(w.dtype)).sum(-1)
    return per_query.sum(dim=(0, 2)) / (t.shape[0] * t.shape[1])


def prefix_in_place(w: Tensor, t: Tensor) -> Tensor:
    w.mul_(_targets(t)[:, None].to(w.dtype))
    has = _targets(t).any(-1)
    return (w.sum(-1) * has[:, None]).sum(dim=(0, 2)) / has.sum()


PREFIX_RIGHT = {"book": prefix_book, "loops": prefix_loops, "masked_mean": prefix_masked_mean}
PREFIX_WRONG: dict[str, tuple[Callable[..., Any], str, str]] = {
    "per_head_batch": (prefix_per_head_batch, "shape", "shape"),
    "float32": (prefix_float32, "shape", "float32"),
    "no_shift": (prefix_no_shift, "extremes", "key j + 1"),
    "every_query": (prefix_every_query, "extremes", "also those with no earlier copy"),
    # dividing by B * T is averaging over every query: the same hint
    "divide_by_T": (prefix_divide_by_T, "extremes", "also those with no earlier copy"),
    "most_recent": (prefix_most_recent, "extremes", NEUTRAL),
    # j <= i gives every query but the last a (future, zero-weight) target: every query counts
    "self_included": (prefix_self_included, "extremes", "also those with no earlier copy"),
    "in_place": (prefix_in_place, "shape", "in place"),
    "max": (prefix_max, "uniform", "largest weight on one target"),
    "per_sequence": (prefix_per_sequence, "batch", "each sequence first"),
}


# Ablating a head -----------------------------------------------------------------------------


def _hook_factory(fill: Callable[[Tensor, int, int], None]) -> Callable[..., Any]:
    def ablate(layer: torch.nn.Module, head: int) -> Any:
        hs = layer.head_size

        def hook(_m: torch.nn.Module, args: tuple[Tensor, ...]) -> tuple[Tensor]:
            y = args[0].clone()
            fill(y, head, hs)
            return (y,)

        return layer.c_proj.register_forward_pre_hook(hook)

    return ablate


def ablate_in_place(layer: torch.nn.Module, head: int) -> Any:
    """Edits the input in place: right numbers, but backward() needs the attention's output."""
    hs = layer.head_size

    def hook(_m: torch.nn.Module, args: tuple[Tensor, ...]) -> None:
        args[0][..., head * hs : (head + 1) * hs] = 0.0

    return layer.c_proj.register_forward_pre_hook(hook)


def ablate_masked_fill(layer: torch.nn.Module, head: int) -> Any:
    """Unusual but right: masked_fill over the head's channels, no clone."""
    hs = layer.head_size
    mask = torch.zeros(layer.n_embd, dtype=torch.bool)
    mask[head * hs : (head + 1) * hs] = True
    return layer.c_proj.register_forward_pre_hook(lambda _m, args: args[0].masked_fill(mask, 0.0))


def ablate_mask(layer: torch.nn.Module, head: int) -> Any:
    """Unusual but right: multiply by a 0/1 mask over the channels."""
    keep = torch.ones(layer.n_embd)
    keep[head * layer.head_size : (head + 1) * layer.head_size] = 0.0
    return layer.c_proj.register_forward_pre_hook(lambda _m, args: (args[0] * keep,))


def _zero(a: int, b: int) -> Callable[[Tensor, int, int], None]:
    def fill(y: Tensor, h: int, hs: int) -> None:
        y[..., (h + a) * hs : (h + b) * hs] = 0.0

    return fill


def ablate_nothing_returned(layer: torch.nn.Module, head: int) -> Any:
    hs = layer.head_size

    def hook(_m: torch.nn.Module, args: tuple[Tensor, ...]) -> None:
        y = args[0].clone()
        y[..., head * hs : (head + 1) * hs] = 0.0  # changes a copy, then drops it

    return layer.c_proj.register_forward_pre_hook(hook)


def ablate_output(layer: torch.nn.Module, head: int) -> Any:
    """A forward hook zeroing the head's channels of c_proj's output: too late."""
    hs = layer.head_size

    def hook(_m: torch.nn.Module, _args: Any, out: Tensor) -> Tensor:
        out = out.clone()
        out[..., head * hs : (head + 1) * hs] = 0.0
        return out

    return layer.c_proj.register_forward_hook(hook)


def ablate_interleaved(layer: torch.nn.Module, head: int) -> Any:
    n = layer.n_head

    def hook(_m: torch.nn.Module, args: tuple[Tensor, ...]) -> tuple[Tensor]:
        y = args[0].clone()
        y[..., head::n] = 0.0
        return (y,)

    return layer.c_proj.register_forward_pre_hook(hook)


def ablate_weights(layer: torch.nn.Module, head: int) -> Any:
    """Zeroes the head's columns of c_proj's weight: a permanent change."""
    hs = layer.head_size
    with torch.no_grad():
        layer.c_proj.weight[:, head * hs : (head + 1) * hs] = 0.0
    return layer.c_proj.register_forward_pre_hook(lambda _m, args: None)


def ablate_no_handle(layer: torch.nn.Module, head: int) -> Any:
    _hook_factory(_zero(0, 1))(layer, head)


def ablate_twice(layer: torch.nn.Module, head: int) -> Any:
    _hook_factory(_zero(0, 1))(layer, head)
    return _hook_factory(_zero(0, 1))(layer, head)


def ablate_detached(layer: torch.nn.Module, head: int) -> Any:
    hs = layer.head_size

    def hook(_m: torch.nn.Module, args: tuple[Tensor, ...]) -> tuple[Tensor]:
        y = args[0].detach().clone()
        y[..., head * hs : (head + 1) * hs] = 0.0
        return (y,)

    return layer.c_proj.register_forward_pre_hook(hook)


ABLATE_RIGHT = {"book": ablate_book, "masked_fill": ablate_masked_fill, "mask": ablate_mask}
ABLATE_WRONG: dict[str, tuple[Callable[..., Any], str, str]] = {
    "next_head": (_hook_factory(_zero(1, 2)), "zeroed", NEUTRAL),
    "nothing_returned": (ablate_nothing_returned, "zeroed", "must return the changed input"),
    "output_hook": (ablate_output, "zeroed", "must return the changed input"),
    "interleaved": (ablate_interleaved, "zeroed", "every n_head-th channel"),
    "weights": (ablate_weights, "zeroed", "changed the c_proj.weight"),
    "to_the_end": (_hook_factory(lambda y, h, hs: y[..., h * hs :].zero_()), "others", NEUTRAL),
    "every_head": (_hook_factory(lambda y, h, hs: y.zero_()), "others", NEUTRAL),
    "no_handle": (ablate_no_handle, "removed", "register_forward_pre_hook(hook) returns"),
    "twice": (ablate_twice, "removed", "register exactly one"),
    "detached": (ablate_detached, "gradients", "no gradient reaches x"),
    "in_place": (ablate_in_place, "gradients", "in-place operation"),
}


CHECKERS: dict[str, tuple[Callable[..., CheckResult], dict[str, Any], dict[str, Any]]] = {
    "prefix_matching": (check_prefix_matching, PREFIX_RIGHT, PREFIX_WRONG),
    "ablate_head": (check_ablate_head, ABLATE_RIGHT, ABLATE_WRONG),
}


# The generic tests (a report for every answer, a hint that names the mistake, a bounded
# time) run on these checkers from tests/test_checking_new_exercises.py, which imports CHECKERS.


@pytest.mark.parametrize("path", ["default", "avx2"])
def test_right_answers_pass_on_another_rounding_path(path: str) -> None:
    """The right answers hold under another CPU kernel set (run in a fresh interpreter, since
    the capability is read when torch starts)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = dict(os.environ, ATEN_CPU_CAPABILITY=path, OMP_NUM_THREADS="1")
    if path == "avx2":
        env["MKL_CBWR"] = "COMPATIBLE"
    code = (
        "import sys; sys.path.insert(0, 'tests')\n"
        "import test_checking_what_attention_learns as t\n"
        "for checker, right, _ in t.CHECKERS.values():\n"
        "    for fn in right.values():\n"
        "        assert checker(fn)\n"
    )
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


def ablate_hook_raises(layer: torch.nn.Module, head: int) -> Any:
    hs = layer.head_size

    def hook(_m: torch.nn.Module, args: tuple[Tensor, ...]) -> Any:
        args[..., head * hs : (head + 1) * hs] = 0  # indexes the tuple of inputs: TypeError
        return args

    return layer.c_proj.register_forward_pre_hook(hook)


# "Never" for a check whose calls are stopped after 0.5 s; without the stop, the test fails
# after this long (on every call of the hook) rather than hanging for good.
_AGES = 30.0


def ablate_hook_never_returns(layer: torch.nn.Module, head: int) -> Any:
    hs = layer.head_size

    def hook(_m: torch.nn.Module, args: tuple[Tensor, ...]) -> tuple[Tensor]:
        y, h, start = args[0].clone(), head, time.monotonic()
        while h <= head and time.monotonic() - start < _AGES:  # meant h += 1 in the loop
            y[..., h * hs : (h + 1) * hs] = 0.0
        return (y,)

    return layer.c_proj.register_forward_pre_hook(hook)


class _SlowHandle:
    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def remove(self) -> None:
        start = time.monotonic()
        while time.monotonic() - start < _AGES:  # waits for something that never happens
            pass
        self.handle.remove()


def ablate_remove_never_returns(layer: torch.nn.Module, head: int) -> Any:
    return _SlowHandle(ablate_book(layer, head))


def test_a_hook_that_raises_is_reported_with_its_line(capsys: pytest.CaptureFixture[str]) -> None:
    """The reader's hook runs inside the layer's forward, outside the reader's function: an
    exception there is still the reader's, with the reader's own line."""
    result = check_ablate_head(ablate_hook_raises)
    out = capsys.readouterr().out
    assert result.kind == "raised" and result.failed_key == "zeroed", out
    assert out.startswith("Your function raised an exception.\n"), out
    assert "your hook raised TypeError" in out, out
    assert "  at:       line " in out and "args[..., head * hs" in out, out
    assert "could not use" not in out


@pytest.mark.parametrize(
    ("answer", "key", "doer"),
    [
        (ablate_hook_never_returns, "zeroed", "your hook"),
        (ablate_remove_never_returns, "removed", "handle.remove()"),
    ],
)
def test_a_hook_or_remove_that_never_returns_is_stopped(
    answer: Callable[..., Any],
    key: str,
    doer: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The hook and handle.remove() are the reader's code too: each call of them is stopped
    after CALL_TIME_LIMIT, as the reader's function is (a small limit here, to be quick)."""
    monkeypatch.setattr(core, "CALL_TIME_LIMIT", 0.5)
    result = check_ablate_head(answer)
    out = capsys.readouterr().out
    assert result.kind == "timeout" and result.failed_key == key, out
    assert out.startswith("Your function did not finish in time.\n"), out
    assert f"{doer} did not finish within 0.5 s" in out, out
