"""check_bpe_encode accepts right encoders, rejects plausible wrong ones with the hint that names
the mistake, and never raises."""

from __future__ import annotations

import io
from collections.abc import Callable
from contextlib import redirect_stdout
from typing import Any

import pytest

from helpers.bpe import BPETokenizer, merge
from helpers.checking import NOT_IMPLEMENTED_MESSAGE, CheckResult, check_bpe_encode

pytestmark = pytest.mark.unit

Merges = dict[tuple[int, int], int]


def _check(fn: Callable[..., Any]) -> CheckResult:
    with redirect_stdout(io.StringIO()):
        return check_bpe_encode(fn)


def lowest_rank_loop(ids: list[int], merges: Merges) -> list[int]:
    """The chapter's answer: merge the lowest-ranked pair present until none has a merge."""
    ranks = {p: r for r, p in enumerate(merges)}
    while len(ids) >= 2:
        pair = min(zip(ids, ids[1:], strict=False), key=lambda p: ranks.get(p, float("inf")))
        if pair not in merges:
            break
        ids = merge(ids, pair, merges[pair])
    return ids


def every_merge_in_order(ids: list[int], merges: Merges) -> list[int]:
    """Independent answer: one pass over the merges in rank order (slower, the same result)."""
    for pair, new in merges.items():
        ids = merge(ids, pair, new)
    return ids


def through_the_helper(ids: list[int], merges: Merges) -> tuple[int, ...]:
    """Independent answer: the book's tokenizer on these bytes (returns a tuple: accepted)."""
    vocab = {i: bytes([i]) for i in range(256)}
    for (a, b), new in merges.items():
        vocab[new] = vocab[a] + vocab[b]
    return tuple(BPETokenizer(merges, vocab)._encode_chunk(bytes(ids).decode("utf-8")))


@pytest.mark.parametrize("fn", [lowest_rank_loop, every_merge_in_order, through_the_helper])
def test_right_answers_pass(fn: Callable[..., Any]) -> None:
    result = _check(fn)
    assert result, result.report
    assert result.n_calls > 50


def newest_first(ids, merges):  # type: ignore[no-untyped-def]
    for pair, new in reversed(merges.items()):
        ids = merge(ids, pair, new)
    return ids


def stops_after_one_merge(ids, merges):  # type: ignore[no-untyped-def]
    ranks = {p: r for r, p in enumerate(merges)}
    pairs = [p for p in zip(ids, ids[1:], strict=False) if p in merges]
    if not pairs:
        return ids
    pair = min(pairs, key=ranks.__getitem__)
    return merge(ids, pair, merges[pair])


def leftmost_first(ids, merges):  # type: ignore[no-untyped-def]
    i = 0
    while i < len(ids) - 1:
        pair = (ids[i], ids[i + 1])
        if pair in merges:
            ids = ids[:i] + [merges[pair]] + ids[i + 2 :]
            i = 0
        else:
            i += 1
    return ids


def most_frequent_first(ids, merges):  # type: ignore[no-untyped-def]
    order = list(merges)
    while True:
        counts: dict = {}
        for p in zip(ids, ids[1:], strict=False):
            if p in merges:
                counts[p] = counts.get(p, 0) + 1
        if not counts:
            return ids
        pair = max(counts, key=lambda p: (counts[p], -order.index(p)))
        ids = merge(ids, pair, merges[pair])


def right_to_left(ids, merges):  # type: ignore[no-untyped-def]
    for pair, new in merges.items():
        ids = merge(ids[::-1], pair[::-1], new)[::-1]
    return ids


def drops_unmerged(ids, merges):  # type: ignore[no-untyped-def]
    out = lowest_rank_loop(ids, merges)
    return [i for i in out if i >= 256] or out


def edits_in_place(ids, merges):  # type: ignore[no-untyped-def]
    out = lowest_rank_loop(list(ids), merges)
    ids[:] = out
    return ids


def returns_a_string(ids, merges):  # type: ignore[no-untyped-def]
    return str(lowest_rank_loop(ids, merges))


def raises(ids, merges):  # type: ignore[no-untyped-def]
    return [merges[(ids[0], ids[1])]]


def joins_digits_with_spaces(ids, merges):  # type: ignore[no-untyped-def]
    """Every merge in rank order, by string replacement on the joined ids: '169 97' contains
    '69 97', so a merge of (69, 97) also fires inside 169."""
    text = " ".join(map(str, ids))
    for (a, b), new in merges.items():
        text = text.replace(f"{a} {b}", str(new))
    return [int(t) for t in text.split()]


def three_digits_per_id(ids, merges):  # type: ignore[no-untyped-def]
    """Ids written with three digits each and glued: right while every id is below 1000."""
    text = "".join(f"{i:03d}" for i in ids)
    for (a, b), new in merges.items():
        text = text.replace(f"{a:03d}{b:03d}", f"{new:03d}")
    return [int(text[i : i + 3]) for i in range(0, len(text), 3)]


def pops_used_merges(ids, merges):  # type: ignore[no-untyped-def]
    """Removes each merge once applied, from the caller's dict."""
    ids = list(ids)
    while len(ids) >= 2:
        ranks = {p: r for r, p in enumerate(merges)}
        pair = min(zip(ids, ids[1:], strict=False), key=lambda p: ranks.get(p, len(ranks)))
        if pair not in merges:
            break
        ids = merge(ids, pair, merges.pop(pair))
    return ids


WRONG = {
    "newest_first": (newest_first, "rank_order", "newest merges first"),
    "one_merge": (stops_after_one_merge, "rank_order", "merge once and stop"),
    "leftmost": (leftmost_first, "rank_order", "leftmost pair"),
    "most_frequent": (most_frequent_first, "learned", "most frequent"),
    "right_to_left": (right_to_left, "left_to_right", "from the right"),
    "drops": (drops_unmerged, "decodes", "regroup"),
    "in_place": (edits_in_place, "decodes", "in place"),
    "string": (returns_a_string, "shape", ".tolist()"),
    "raises": (raises, "shape", None),
    "joins_digits_with_spaces": (joins_digits_with_spaces, "rank_order", "glued together as text"),
    "three_digits_per_id": (three_digits_per_id, "rank_order", "glued together as text"),
    "pops_used_merges": (pops_used_merges, "decodes", "Leave merges as it is"),
}


@pytest.mark.parametrize("name", list(WRONG))
def test_wrong_answers_fail_with_their_hint(name: str) -> None:
    fn, key, fragment = WRONG[name]
    result = _check(fn)
    assert not result
    assert result.failed_key == key, result.report
    if fragment is not None:
        assert fragment in " ".join(result.report.split()), result.report
    assert "Traceback" not in result.report


def test_raising_function_is_reported_not_raised() -> None:
    result = _check(raises)
    assert "your function raised KeyError" in result.report


def test_not_implemented() -> None:
    def stub(ids, merges):  # type: ignore[no-untyped-def]
        raise NotImplementedError

    result = _check(stub)
    assert result.not_implemented and result.report == NOT_IMPLEMENTED_MESSAGE


def test_report_is_the_same_on_every_run() -> None:
    assert _check(leftmost_first).report == _check(leftmost_first).report
