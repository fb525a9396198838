"""The checkers of three exercises: the bigram loss over all B*T positions, a LayerNorm written by
hand, and the positions of new tokens during cached generation.

For each: right answers (the book's way and unusual ones) are accepted; wrong answers, from the
common pitfalls to those that only fail on an edge case (T equal to vocab_size, logits of
+-1000, a constant vector, the last position of the context, a gradient), are rejected on the
property named, with a hint that names what the answer did; a stub gets the friendly message;
the report is the same text on every run.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from test_checking import assert_header
from test_checking_what_attention_learns import CHECKERS as CHAPTER_13_CHECKERS

from helpers.checking import (
    NOT_IMPLEMENTED_MESSAGE,
    CheckResult,
    check_bigram_loss,
    check_cached_positions,
    check_layer_norm,
)

Tensor = torch.Tensor
NEUTRAL = "<neutral>"
NAN = "Your function returned nan or inf on this input"
GRAD = "cut the path of the gradient"


# The bigram loss -----------------------------------------------------------------------------


def loss_book(logits: Tensor, targets: Tensor) -> Tensor:
    B, T, V = logits.shape
    return F.cross_entropy(logits.view(B * T, V), targets.view(B * T))


def loss_transposed(logits: Tensor, targets: Tensor) -> Tensor:
    """Unusual but right: the classes moved to dimension 1, (B, vocab_size, T)."""
    return F.cross_entropy(logits.transpose(1, 2), targets)


def loss_by_hand(logits: Tensor, targets: Tensor) -> Tensor:
    """Unusual but right: log_softmax, pick each target's entry, average."""
    return -logits.log_softmax(dim=-1).gather(-1, targets[..., None]).mean()


def loss_no_max(logits: Tensor, targets: Tensor) -> Tensor:
    p = logits.exp() / logits.exp().sum(dim=-1, keepdim=True)
    return -p.gather(-1, targets[..., None]).log().mean()


def loss_log_of_softmax(logits: Tensor, targets: Tensor) -> Tensor:
    """A stable softmax, then log: a probability that rounds to 0 gives log(0) = -inf."""
    p = torch.softmax(logits, dim=-1)
    return -p.gather(-1, targets[..., None]).log().mean()


def loss_per_sequence_sum(logits: Tensor, targets: Tensor) -> Tensor:
    """Sums over time, averages over the batch."""
    ce = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
    return ce.sum(dim=1).mean()


LOSS_RIGHT = {"book": loss_book, "transposed": loss_transposed, "by_hand": loss_by_hand}

LOSS_WRONG: dict[str, tuple[Callable[..., Any], str, str]] = {
    "no_reshape": (lambda lg, t: F.cross_entropy(lg, t), "shape", "reads dimension 1"),
    "sum": (
        lambda lg, t: F.cross_entropy(lg.reshape(-1, lg.shape[-1]), t.reshape(-1), reduction="sum"),
        "uniform",
        "the sum over the positions",
    ),
    "per_position": (
        lambda lg, t: F.cross_entropy(
            lg.reshape(-1, lg.shape[-1]), t.reshape(-1), reduction="none"
        ),
        "shape",
        "reduction='none'",
    ),
    "wrong_reshape_order": (
        lambda lg, t: F.cross_entropy(lg.reshape(lg.shape[-1], -1).T, t.reshape(-1)),
        "matches",
        "reshaped to (vocab_size, B * T)",
    ),
    "targets_transposed": (
        lambda lg, t: F.cross_entropy(lg.reshape(-1, lg.shape[-1]), t.T.reshape(-1)),
        "matches",
        "targets.T",
    ),
    "softmax_first": (
        lambda lg, t: F.cross_entropy(lg.softmax(-1).reshape(-1, lg.shape[-1]), t.reshape(-1)),
        "matches",
        "softmax applied before",
    ),
    "nll_on_logits": (
        lambda lg, t: F.nll_loss(lg.reshape(-1, lg.shape[-1]), t.reshape(-1)),
        "uniform",
        "nll_loss on the raw logits",
    ),
    "no_max_subtracted": (loss_no_max, "matches", NAN),
    "log_of_softmax": (loss_log_of_softmax, "matches", "softmax then log"),
    # float32 "to be safe": float64 logits give a float32 loss.
    "float32_for_float64": (
        lambda lg, t: F.cross_entropy(lg.float().reshape(-1, lg.shape[-1]), t.reshape(-1)),
        "matches",
        "returns float32 for a float64 input",
    ),
    "per_sequence_sum": (loss_per_sequence_sum, "uniform", NEUTRAL),
    "through_numpy": (
        lambda lg, t: torch.from_numpy(loss_book(lg, t).detach().numpy()),
        "matches",
        GRAD,
    ),
}


# LayerNorm -----------------------------------------------------------------------------------


def ln_book(x: Tensor, weight: Tensor, bias: Tensor, eps: float = 1e-5) -> Tensor:
    mean = x.mean(dim=-1, keepdim=True)
    var = x.var(dim=-1, keepdim=True, unbiased=False)
    return (x - mean) / torch.sqrt(var + eps) * weight + bias


def ln_rsqrt(x: Tensor, weight: Tensor, bias: Tensor, eps: float = 1e-5) -> Tensor:
    """Unusual but right: centred first, rsqrt of the mean square, in float64."""
    xc = x.double() - x.double().mean(dim=-1, keepdim=True)
    out = xc * torch.rsqrt(xc.pow(2).mean(dim=-1, keepdim=True) + eps)
    return (out * weight.double() + bias.double()).to(x.dtype)


def ln_torch(x: Tensor, weight: Tensor, bias: Tensor, eps: float = 1e-5) -> Tensor:
    return F.layer_norm(x, x.shape[-1:], weight, bias, eps)


def _ln(
    x: Tensor, w: Tensor, b: Tensor, *, var: Tensor, eps: float, outside: bool = False
) -> Tensor:
    xc = x - x.mean(dim=-1, keepdim=True)
    return xc / (var.sqrt() + eps if outside else torch.sqrt(var + eps)) * w + b


def _biased(x: Tensor, dim: int = -1) -> Tensor:
    return x.var(dim=dim, keepdim=True, unbiased=False)


def ln_naive_variance(x: Tensor, weight: Tensor, bias: Tensor, eps: float = 1e-5) -> Tensor:
    """E[x^2] - E[x]^2: loses every digit when the mean is large."""
    mean = x.mean(dim=-1, keepdim=True)
    var = (x * x).mean(dim=-1, keepdim=True) - mean * mean
    return (x - mean) / torch.sqrt(var + eps) * weight + bias


LN_RIGHT = {"book": ln_book, "rsqrt_float64": ln_rsqrt, "torch": ln_torch}

LN_WRONG: dict[str, tuple[Callable[..., Any], str, str]] = {
    "unbiased_variance": (
        lambda x, w, b, eps=1e-5: _ln(x, w, b, var=x.var(-1, keepdim=True), eps=eps),
        "standardised",
        "unbiased variance",
    ),
    "over_dim_0": (
        lambda x, w, b, eps=1e-5: (
            (x - x.mean(0, keepdim=True)) / torch.sqrt(_biased(x, 0) + eps) * w + b
        ),
        "standardised",
        "over dimension 0",
    ),
    "over_the_whole_tensor": (
        lambda x, w, b, eps=1e-5: (x - x.mean()) / torch.sqrt(x.var(unbiased=False) + eps) * w + b,
        "standardised",
        "over the whole tensor",
    ),
    "eps_outside_sqrt": (
        lambda x, w, b, eps=1e-5: _ln(x, w, b, var=_biased(x), eps=eps, outside=True),
        "matches",
        "added to the standard deviation",
    ),
    "no_eps": (
        lambda x, w, b, eps=1e-5: _ln(x, w, b, var=_biased(x), eps=0.0),
        "constant",
        "without eps",
    ),
    "ignores_eps_argument": (
        lambda x, w, b, eps=1e-5: _ln(x, w, b, var=_biased(x), eps=1e-5),
        "matches",
        "ignores eps passed in",
    ),
    "weight_and_bias_swapped": (
        lambda x, w, b, eps=1e-5: _ln(x, b, w, var=_biased(x), eps=eps),
        "standardised",
        "weight and bias swapped",
    ),
    "forgets_bias": (
        lambda x, w, b, eps=1e-5: _ln(x, w, 0.0, var=_biased(x), eps=eps),
        "constant",
        NEUTRAL,
    ),
    "naive_variance": (ln_naive_variance, "matches", NEUTRAL),
    "no_grad": (torch.no_grad()(ln_book), "matches", GRAD),
    # A default that differs from the one specified: invisible unless the variance is tiny.
    "default_eps_1e-6": (
        lambda x, w, b, eps=1e-6: _ln(x, w, b, var=_biased(x), eps=eps),
        "matches",
        "eps = 1e-06 when no eps is passed",
    ),
    # eps as a floor for the variance: the same as adding it while the variance is large.
    "eps_as_a_floor": (
        lambda x, w, b, eps=1e-5: (
            (x - x.mean(-1, keepdim=True)) / _biased(x).clamp(min=eps).sqrt() * w + b
        ),
        "matches",
        "eps used as a floor",
    ),
    # Computed in float32 "for stability" and not cast back: bfloat16 comes back as float32.
    "float32_for_bfloat16": (
        lambda x, w, b, eps=1e-5: F.layer_norm(x.float(), x.shape[-1:], w.float(), b.float(), eps),
        "shape",
        "returns float32 for a bfloat16 input",
    ),
    "normalises_in_place": (
        lambda x, w, b, eps=1e-5: ln_book(x.sub_(x.mean(-1, keepdim=True)), w, b, eps),
        "shape",
        "in place",
    ),
    # Flattens with view: a non-contiguous x (a transposed view, as inside a model) breaks it.
    "flattened_by_view": (
        lambda x, w, b, eps=1e-5: ln_book(x.view(-1, x.shape[-1]), w, b, eps).view(x.shape),
        "matches",
        "view() needs a contiguous tensor",
    ),
}


# Positions during cached generation ----------------------------------------------------------


def pos_book(model: Any, idx_new: Tensor, T_past: int) -> Tensor:
    return model.tok_emb(idx_new) + model.pos_emb(idx_new.shape[1], T_past)


def pos_rows(model: Any, idx_new: Tensor, T_past: int) -> Tensor:
    """Unusual but right: an nn.functional.embedding lookup of the positions."""
    positions = torch.arange(T_past, T_past + idx_new.shape[1])
    return model.tok_emb(idx_new) + F.embedding(positions, model.pos_emb.weight)


def _positions(model: Any, idx_new: Tensor, first: int) -> Tensor:
    return model.tok_emb(idx_new) + model.pos_emb.weight[first : first + idx_new.shape[1]]


POS_RIGHT = {"book": pos_book, "embedding_lookup": pos_rows}

POS_WRONG: dict[str, tuple[Callable[..., Any], str, str]] = {
    "forgets_offset": (lambda m, i, T_past: _positions(m, i, 0), "offset", "as if nothing"),
    "one_too_far": (lambda m, i, T_past: _positions(m, i, T_past + 1), "prompt", "one too far"),
    "no_positions": (lambda m, i, T_past: m.tok_emb(i), "prompt", "token embeddings alone"),
    "one_position_for_all": (
        lambda m, i, T_past: m.tok_emb(i) + m.pos_emb.weight[T_past],
        "prompt",
        "every new token at position T_past",
    ),
    # Counts the cached tokens from 1: right for a prompt, one short afterwards.
    "one_short": (
        lambda m, i, T_past: _positions(m, i, max(T_past - 1, 0)),
        "offset",
        NEUTRAL,
    ),
    # Clamps the position to a context of 512 (the chapter's generation model's block_size).
    "clamps_to_512": (
        lambda m, i, T_past: _positions(m, i, min(T_past, 512 - i.shape[1])),
        "offset",
        NEUTRAL,
    ),
    "detached_positions": (
        lambda m, i, T_past: m.tok_emb(i) + m.pos_emb(i.shape[1], T_past).detach(),
        "offset",
        GRAD,
    ),
    # Right on every position the offset property uses; one too far in the middle of generation.
    "wrong_mid_sequence": (
        lambda m, i, T_past: _positions(m, i, T_past + (T_past in (6, 7, 8))),
        "generation",
        "one too far",
    ),
    # Positions past the last one wrapped around to 0, where the model raises.
    "wraps_past_block_size": (
        lambda m, i, T_past: (
            m.tok_emb(i)
            + m.pos_emb.weight[
                torch.arange(T_past, T_past + i.shape[1]) % m.pos_emb.weight.shape[0]
            ]
        ),
        "offset",
        "wrap the positions past block_size - 1",
    ),
    "switches_to_eval": (
        lambda m, i, T_past: (m.eval(), pos_book(m, i, T_past))[1],
        "shape",
        "Leave the module's mode",
    ),
    "edits_the_model": (
        lambda m, i, T_past: (m.pos_emb.weight.data.mul_(1.0001), pos_book(m, i, T_past))[1],
        "shape",
        "in place",
    ),
}


CHECKERS: dict[str, tuple[Callable[..., CheckResult], dict[str, Any], dict[str, Any]]] = {
    "bigram_loss": (check_bigram_loss, LOSS_RIGHT, LOSS_WRONG),
    "layer_norm": (check_layer_norm, LN_RIGHT, LN_WRONG),
    "cached_positions": (check_cached_positions, POS_RIGHT, POS_WRONG),
    **CHAPTER_13_CHECKERS,  # chapter 13's checkers share the generic tests below
}


def _hint(report: str) -> str:
    lines = report.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("  hint:"))
    hint = [lines[start][len("  hint:") :].strip()]
    for line in lines[start + 1 :]:
        if not line.startswith("            "):
            break
        hint.append(line.strip())
    return " ".join(hint)


@pytest.mark.parametrize(
    ("name", "label"), [(n, label) for n, c in CHECKERS.items() for label in c[1]]
)
def test_accepts_right_answers(name: str, label: str, capsys: pytest.CaptureFixture[str]) -> None:
    checker, right, _ = CHECKERS[name]
    result = checker(right[label])
    out = capsys.readouterr().out
    assert result, out
    assert out.startswith(f"All {len(result.properties)} properties hold: ")


@pytest.mark.parametrize(
    ("name", "label"), [(n, label) for n, c in CHECKERS.items() for label in c[2]]
)
def test_rejects_each_mistake_with_its_hint(
    name: str, label: str, capsys: pytest.CaptureFixture[str]
) -> None:
    checker, _, wrong = CHECKERS[name]
    fn, key, fragment = wrong[label]
    result = checker(fn)
    out = capsys.readouterr().out
    assert not result, f"{label!r} was accepted:\n{out}"
    assert result.failed_key == key, f"{label!r} failed on {result.failed_key!r}:\n{out}"
    assert_header(result, out)
    hint = _hint(out)
    if fragment == NEUTRAL:
        assert not (hint.startswith("Your ") and " match" in hint.split(":")[0]), out
    else:
        assert fragment in hint or fragment in out, f"{fragment!r} not in:\n{out}"
    assert max(len(line) for line in out.splitlines()) <= 100
    assert "Traceback" not in out


@pytest.mark.parametrize("name", list(CHECKERS))
def test_every_property_fails_for_some_mistake(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    checker, right, wrong = CHECKERS[name]
    result = checker(next(iter(right.values())))
    capsys.readouterr()
    assert {key for _, key, _ in wrong.values()} == set(result.property_keys)
    assert len(wrong) >= 8 and len(right) >= 2


@pytest.mark.parametrize("name", list(CHECKERS))
def test_stub_and_reports(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    checker, right, wrong = CHECKERS[name]

    def stub(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    result = checker(stub)
    assert capsys.readouterr().out == NOT_IMPLEMENTED_MESSAGE + "\n"
    assert not result and result.not_implemented
    for answer in (next(iter(right.values())), next(iter(wrong.values()))[0]):
        first = checker(answer)
        torch.manual_seed(123)
        assert checker(answer).report == first.report
    capsys.readouterr()


def test_docstrings_state_the_signature() -> None:
    for checker, _, _ in CHECKERS.values():
        assert "The reader writes ``" in (checker.__doc__ or "")


def test_bigram_loss_uniform_value(capsys: pytest.CaptureFixture[str]) -> None:
    """The uniform property's number is ln(vocab_size), which the report prints."""
    result = check_bigram_loss(LOSS_WRONG["sum"][0])
    out = capsys.readouterr().out
    assert f"ln(65) = {math.log(65):.4f}" in out and not result
