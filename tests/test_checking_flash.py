"""check_merge_partials accepts right merges, rejects the plausible wrong ones with the hint that
names the mistake, and never raises."""

from __future__ import annotations

import io
from collections.abc import Callable
from contextlib import redirect_stdout
from typing import Any

import pytest
import torch

from helpers.checking import NOT_IMPLEMENTED_MESSAGE, CheckResult
from helpers.checking.flash_attention import check_merge_partials
from helpers.flash import merge_partials

Tensor = torch.Tensor
NEG_INF = float("-inf")


def _check(fn: Callable[..., Any]) -> CheckResult:
    with redirect_stdout(io.StringIO()):
        return check_merge_partials(fn)


def merge_logaddexp(m_a, l_a, acc_a, m_b, l_b, acc_b):  # type: ignore[no-untyped-def]
    """Independent answer: merge in log space, then back to the new maximum."""
    m = torch.maximum(m_a, m_b)
    log_l = torch.logaddexp(m_a + l_a.log(), m_b + l_b.log())  # log of the sum relative to 0
    safe = torch.where(m == NEG_INF, 0.0, m)
    l = torch.where(m == NEG_INF, 0.0, torch.exp(log_l - safe))
    wa = torch.nan_to_num(torch.exp(m_a - safe), nan=0.0)[..., None]
    wb = torch.nan_to_num(torch.exp(m_b - safe), nan=0.0)[..., None]
    return m, l, wa * acc_a + wb * acc_b


def merge_stacked(m_a, l_a, acc_a, m_b, l_b, acc_b):  # type: ignore[no-untyped-def]
    """Independent answer: stack both sides and reduce, masking empty rows with nan_to_num."""
    ms = torch.stack([m_a, m_b])
    m = ms.max(dim=0).values
    w = torch.exp(ms - m).nan_to_num(nan=0.0)  # -inf - -inf = nan -> weight 0
    l = (w * torch.stack([l_a, l_b])).sum(dim=0)
    acc = (w[..., None] * torch.stack([acc_a, acc_b])).sum(dim=0)
    return [m, l, acc]  # a list is fine too


RIGHT: dict[str, Callable[..., Any]] = {
    "book": merge_partials,
    "logaddexp": merge_logaddexp,
    "stacked": merge_stacked,
}


def _factors(m_a: Tensor, m_b: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    m = torch.maximum(m_a, m_b)
    safe = torch.where(m == NEG_INF, 0.0, m)
    return m, torch.exp(m_a - safe), torch.exp(m_b - safe)


def no_rescale_l(m_a, l_a, acc_a, m_b, l_b, acc_b):  # type: ignore[no-untyped-def]
    m, x, y = _factors(m_a, m_b)
    return m, l_a + l_b, x[..., None] * acc_a + y[..., None] * acc_b


def no_rescale_acc(m_a, l_a, acc_a, m_b, l_b, acc_b):  # type: ignore[no-untyped-def]
    m, x, y = _factors(m_a, m_b)
    return m, x * l_a + y * l_b, acc_a + acc_b


def no_rescale_either(m_a, l_a, acc_a, m_b, l_b, acc_b):  # type: ignore[no-untyped-def]
    return torch.maximum(m_a, m_b), l_a + l_b, acc_a + acc_b


def new_maximum_only(m_a, l_a, acc_a, m_b, l_b, acc_b):  # type: ignore[no-untyped-def]
    x = torch.exp(m_a - torch.where(m_b == NEG_INF, 0.0, m_b))
    return m_b, x * l_a + l_b, x[..., None] * acc_a + acc_b


def old_side_only(m_a, l_a, acc_a, m_b, l_b, acc_b):  # type: ignore[no-untyped-def]
    m, x, _ = _factors(m_a, m_b)
    return m, x * l_a + l_b, x[..., None] * acc_a + acc_b


def nan_for_empty_rows(m_a, l_a, acc_a, m_b, l_b, acc_b):  # type: ignore[no-untyped-def]
    m = torch.maximum(m_a, m_b)
    x, y = torch.exp(m_a - m), torch.exp(m_b - m)
    return m, x * l_a + y * l_b, x[..., None] * acc_a + y[..., None] * acc_b


def normalised_output(m_a, l_a, acc_a, m_b, l_b, acc_b):  # type: ignore[no-untyped-def]
    m, l, acc = merge_partials(m_a, l_a, acc_a, m_b, l_b, acc_b)
    return m, l, acc / l.clamp_min(1e-30)[..., None]  # acc / l instead of acc


def min_not_max(m_a, l_a, acc_a, m_b, l_b, acc_b):  # type: ignore[no-untyped-def]
    m = torch.minimum(m_a, m_b)
    x, y = torch.exp(m_a - m), torch.exp(m_b - m)
    return m, x * l_a + y * l_b, x[..., None] * acc_a + y[..., None] * acc_b


def inverted_factors(m_a, l_a, acc_a, m_b, l_b, acc_b):  # type: ignore[no-untyped-def]
    m, x, y = _factors(m_a, m_b)
    return m, l_a / x + l_b / y, acc_a / x[..., None] + acc_b / y[..., None]


def clamped_empty_rows(m_a, l_a, acc_a, m_b, l_b, acc_b):  # type: ignore[no-untyped-def]
    # Avoids nan by clamping the maxima to -1e9: empty rows then get m = -1e9, not -inf.
    m = torch.maximum(m_a, m_b).clamp_min(-1e9)
    x, y = torch.exp(m_a - m), torch.exp(m_b - m)
    return m, x * l_a + y * l_b, x[..., None] * acc_a + y[..., None] * acc_b


def only_first_batch_row(m_a, l_a, acc_a, m_b, l_b, acc_b):  # type: ignore[no-untyped-def]
    # Indexes [0] instead of broadcasting: right for one row, wrong shape otherwise.
    m, l, acc = merge_partials(m_a, l_a, acc_a, m_b, l_b, acc_b)
    return m[0], l[0], acc[0]


def returns_output_only(m_a, l_a, acc_a, m_b, l_b, acc_b):  # type: ignore[no-untyped-def]
    m, l, acc = merge_partials(m_a, l_a, acc_a, m_b, l_b, acc_b)
    return acc / l[..., None]


def cached_by_shape() -> Callable[..., Any]:
    """Remembers its first answer for each shape of inputs: right once, then stale."""
    cache: dict[tuple[Any, ...], Any] = {}

    def merge(*args: Tensor) -> Any:
        key = tuple(tuple(a.shape) for a in args)
        if key not in cache:
            cache[key] = merge_partials(*args)
        return cache[key]

    return merge


def merge_in_float64(m_a, l_a, acc_a, m_b, l_b, acc_b):  # type: ignore[no-untyped-def]
    """Computes in float64 "for precision" and returns float64 for a float32 input."""
    return merge_partials(*(t.double() for t in (m_a, l_a, acc_a, m_b, l_b, acc_b)))


def merge_in_float32(m_a, l_a, acc_a, m_b, l_b, acc_b):  # type: ignore[no-untyped-def]
    """Forces float32: right for float32 input, float32 for float64 or bfloat16 input."""
    return merge_partials(*(t.float() for t in (m_a, l_a, acc_a, m_b, l_b, acc_b)))


def merge_in_float32_cast_back(m_a, l_a, acc_a, m_b, l_b, acc_b):  # type: ignore[no-untyped-def]
    """Computes in float32 and casts back: the input's dtype, float32's precision."""
    out = merge_partials(*(t.float() for t in (m_a, l_a, acc_a, m_b, l_b, acc_b)))
    return tuple(t.to(m_a.dtype) for t in out)


WRONG: dict[str, tuple[Callable[..., Any], str, str | None]] = {
    # name: (function, property that must fail, a phrase its hint must contain)
    "no_rescale_l": (no_rescale_l, "two_halves", "rescale the sums too"),
    "no_rescale_acc": (no_rescale_acc, "two_halves", "rescale the outputs"),
    "no_rescale_either": (no_rescale_either, "two_halves", "Your l and acc are l_a + l_b"),
    "new_maximum_only": (new_maximum_only, "maximum", "Your m is m_b"),
    "old_side_only": (old_side_only, "two_halves", "rescale only side a"),
    "nan_for_empty_rows": (nan_for_empty_rows, "empty_rows", "exp(-inf - (-inf)) is nan"),
    "normalised_output": (normalised_output, "two_halves", None),
    "min_not_max": (min_not_max, "maximum", None),
    "inverted_factors": (inverted_factors, "two_halves", None),
    "clamped_empty_rows": (clamped_empty_rows, "empty_rows", None),
    "only_first_batch_row": (only_first_batch_row, "shapes", None),
    "returns_output_only": (returns_output_only, "shapes", "Return the three tensors"),
    # A factory: a fresh cache per run.
    "cached_by_shape": (cached_by_shape, "folding", "an earlier input of the same shape"),
    "float64_for_float32": (merge_in_float64, "shapes", "returns float64 for a float32 input"),
    "float32_forced": (merge_in_float32, "two_halves", "returns float32 for a float64 input"),
    "float32_cast_back": (
        merge_in_float32_cast_back,
        "two_halves",
        "right only to about float32 precision",
    ),
}

SPECIFIC_HINTS = [hint for _, _, hint in WRONG.values() if hint is not None]


@pytest.mark.parametrize("name", list(RIGHT))
def test_right_answers_pass(name: str) -> None:
    result = _check(RIGHT[name])
    assert result, result.report
    assert result.failed is None and len(result.passed) == len(result.properties) == 5


@pytest.mark.parametrize("name", list(WRONG))
def test_wrong_answers_fail_on_their_property_with_their_hint(name: str) -> None:
    fn, key, hint = WRONG[name]
    result = _check(fn() if fn is cached_by_shape else fn)
    assert not result
    assert result.failed_key == key, result.report
    if hint is not None:
        assert hint in " ".join(result.report.split()), result.report
    else:  # a mistake with no hint of its own must not be given another mistake's hint
        assert not any(h in result.report for h in SPECIFIC_HINTS), result.report
    assert "Traceback" not in result.report


def test_every_property_is_the_first_failure_of_some_mistake() -> None:
    keys = set(_check(merge_partials).property_keys)
    assert keys == {key for _, key, _ in WRONG.values()}


def test_global_random_state_is_left_alone() -> None:
    torch.manual_seed(123)
    before = torch.rand(3)
    torch.manual_seed(123)
    _check(merge_partials)
    assert torch.equal(torch.rand(3), before)


def test_stub_and_errors_get_a_report_not_an_exception() -> None:
    def stub(*args: Tensor) -> Any:
        raise NotImplementedError

    def crashes(m_a, l_a, acc_a, m_b, l_b, acc_b):  # type: ignore[no-untyped-def]
        return torch.cat([m_a, acc_a])  # shape error

    def nan_everywhere(m_a, l_a, acc_a, m_b, l_b, acc_b):  # type: ignore[no-untyped-def]
        return m_a * float("nan"), l_a * float("nan"), acc_a * float("nan")

    assert _check(stub).report == NOT_IMPLEMENTED_MESSAGE
    crashed = _check(crashes)
    assert crashed.failed_key == "shapes" and "raised" in crashed.report
    nan = _check(nan_everywhere)
    assert nan.failed_key == "maximum" and "nan" in nan.report


def test_report_is_the_same_on_every_run() -> None:
    first, second = _check(no_rescale_acc), _check(no_rescale_acc)
    assert first.report == second.report
    assert "input:" in first.report and "expected:" in first.report
