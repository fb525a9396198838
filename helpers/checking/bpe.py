"""The exercise checker of the BPE chapter: encoding with learned merges (``check_bpe_encode``).

Defined in the chapter "From characters to GPT-2".
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from helpers.bpe import BPETokenizer, merge, pre_tokenize
from helpers.checking._core import (
    CheckResult,
    _ChangedInput,
    _Mismatch,
    _Property,
    _run,
    _Session,
)

Pair = tuple[int, int]
Merges = dict[Pair, int]


def _reference(ids: list[int], merges: Merges) -> list[int]:
    ranks = {p: r for r, p in enumerate(merges)}
    while len(ids) >= 2:
        pair = min(zip(ids, ids[1:], strict=False), key=lambda p: ranks.get(p, len(ranks)))
        if pair not in merges:
            break
        ids = merge(ids, pair, merges[pair])
    return ids


# Plausible mistakes, each reproduced so that a hint names it only when the reader's output is
# exactly what that mistake gives on the same input.
def _newest_first(ids: list[int], merges: Merges) -> list[int]:
    for pair, new in reversed(merges.items()):
        ids = merge(ids, pair, new)
    return ids


def _one_pass(ids: list[int], merges: Merges) -> list[int]:
    """Only the lowest-ranked pair present is merged, once, and then the loop stops."""
    if len(ids) < 2:
        return ids
    ranks = {p: r for r, p in enumerate(merges)}
    pair = min(zip(ids, ids[1:], strict=False), key=lambda p: ranks.get(p, len(ranks)))
    return merge(ids, pair, merges[pair]) if pair in merges else ids


def _leftmost_first(ids: list[int], merges: Merges) -> list[int]:
    """Scan left to right and merge the first pair that has a merge, whatever its rank."""
    while True:
        for i in range(len(ids) - 1):
            pair = (ids[i], ids[i + 1])
            if pair in merges:
                ids = ids[:i] + [merges[pair]] + ids[i + 2 :]
                break
        else:
            return ids


def _most_frequent_first(ids: list[int], merges: Merges) -> list[int]:
    """Merge the pair that is most frequent in this sequence (training's rule, not encoding's)."""
    while True:
        counts: dict[Pair, int] = {}
        for p in zip(ids, ids[1:], strict=False):
            if p in merges:
                counts[p] = counts.get(p, 0) + 1
        if not counts:
            return ids
        pair = max(counts, key=lambda p: (counts[p], -list(merges).index(p)))
        ids = merge(ids, pair, merges[pair])


def _right_to_left(ids: list[int], merges: Merges) -> list[int]:
    """The lowest rank first, but each merge replaces occurrences from the right."""
    ranks = {p: r for r, p in enumerate(merges)}
    while len(ids) >= 2:
        pair = min(zip(ids, ids[1:], strict=False), key=lambda p: ranks.get(p, len(ranks)))
        if pair not in merges:
            return ids
        ids = merge(ids[::-1], pair[::-1], merges[pair])[::-1]
    return ids


_MISTAKES: list[tuple[Callable[[list[int], Merges], list[int]], str]] = [
    (
        _newest_first,
        "Your output is what applying the newest merges first gives: the merges dict is in the "
        "order they were learned, and the one learned first must be applied first.",
    ),
    (
        _one_pass,
        "You merge once and stop: repeat (merge the lowest-ranked pair present) until no pair of "
        "neighbours has a merge; a merged token can take part in a later merge.",
    ),
    (
        _leftmost_first,
        "You merge the leftmost pair that has a merge, whatever its rank: at each step choose, "
        "among all neighbouring pairs, the one whose merge was learned first.",
    ),
    (
        _most_frequent_first,
        "You merge the pair that is most frequent in the sequence, as training does; encoding "
        "instead follows the rank: the pair whose merge was learned first.",
    ),
    (
        _right_to_left,
        "Your merges replace occurrences from the right: scan left to right, so [a, a, a] with "
        "the merge (a, a) -> X becomes [X, a].",
    ),
]


def _diagnose(got: list[int], ids: list[int], merges: Merges) -> str | None:
    """The hint of the one known mistake whose output equals ``got`` on this input; ``None``
    when none does, or when several do (the input cannot tell which was made)."""
    hints = [hint for mistake, hint in _MISTAKES if got == mistake(list(ids), dict(merges))]
    return hints[0] if len(hints) == 1 else None


def _trained(seed: int) -> tuple[BPETokenizer, str]:
    """A tokenizer trained on a random text of a small alphabet (many merges, merges of
    merges), and a fresh text of the same alphabet."""
    rng = random.Random(seed)
    alphabet = "aab bca é\n"[: 6 + seed % 4]

    def text(n: int) -> str:
        return "".join(rng.choice(alphabet) for _ in range(n))

    return BPETokenizer.train(text(3000), 256 + 40 + 10 * seed), text(400)


def check_bpe_encode(fn: Callable[[list[int], dict[tuple[int, int], int]], Any]) -> CheckResult:
    """Check the reader's BPE encoder of one chunk (the chapter "From characters to GPT-2").

    The reader writes ``fn(ids, merges)``: ``ids`` is a list of token ids (a chunk's bytes),
    ``merges`` a dict ``(a, b) -> new_id`` in the order the merges were learned (their rank). It
    returns the ids after merging, again and again, the neighbouring pair whose merge was learned
    first, until no neighbouring pair has a merge. Each merge replaces the pair's occurrences
    left to right.

    Properties: a list of ints, the input left unchanged; no merges or fewer than two ids leave
    the ids as they are; the ids decode to the input's bytes; one merge replaces left to right;
    merges apply in rank order (a pair learned first wins over one learned later, and a merged
    token takes part in later merges); the same ids as the book's encoder on fresh texts and
    merges learned from random text.
    """

    tok_vocab: set[int] = set()  # the new ids of every merge the check has passed

    def call(s: _Session, ids: list[int], merges: Merges, what: str) -> list[int]:
        tok_vocab.update(merges.values())
        ids_copy, merges_copy = list(ids), dict(merges)
        out = s.call(fn, ids_copy, merges_copy, input=what)
        if isinstance(out, tuple):
            out = list(out)
        if not isinstance(out, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in out
        ):
            kind = type(out).__name__
            raise _Mismatch(
                "a list of int token ids",
                f"a {kind}" if not isinstance(out, list) else "a list holding non-int items",
                "Return a list of ints (if you used a tensor, call .tolist()).",
            )
        if ids_copy != ids:
            raise _ChangedInput(
                "ids and merges left unchanged",
                "your function changed the list ids it was given",
                "Build a new list (for example out = list(ids)) instead of editing ids in place.",
            )
        if list(merges_copy.items()) != list(merges.items()):
            raise _ChangedInput(
                "ids and merges left unchanged",
                "your function changed the merges dict it was given (added, removed or "
                "reordered entries)",
                "Leave merges as it is: the caller encodes every chunk with it. To mark a merge "
                "as used, keep a set of your own; to order them, build a new dict or list.",
            )
        return out

    def expect(s: _Session, ids: list[int], merges: Merges, what: str) -> None:
        got = call(s, ids, merges, what)
        want = _reference(list(ids), merges)
        if got != want:
            hint = _diagnose(got, ids, merges) or _foreign(got, ids)
            raise _Mismatch(str(want), str(got), hint)

    def _foreign(got: list[int], ids: list[int]) -> str | None:
        """A hint when the output holds ids that neither the input nor a merge has: numbers
        taken apart and glued together (a merge never makes a byte)."""
        known = set(ids) | set(tok_vocab)
        strangers = [i for i in got if i not in known]
        if not strangers:
            return None
        return (
            f"Your output holds {strangers[0]}, an id that neither the input nor a merge has: "
            "the ids were taken "
            "apart and glued together as text (joined digits, str.replace on the joined ids). "
            "That works only while no id's digits end or start another's ('169 97' contains "
            "'69 97') and every id has as many digits: work on the list of ints."
        )

    def shape(s: _Session) -> None:
        expect(s, [104, 105], {}, "ids [104, 105] ('hi'), no merges")
        expect(s, [], {(97, 98): 256}, "ids [] (an empty chunk), merges {(97, 98): 256}")
        expect(s, [97], {(97, 98): 256}, "ids [97] ('a'), merges {(97, 98): 256}")

    def left_to_right(s: _Session) -> None:
        expect(s, [97, 97, 97], {(97, 97): 256}, "ids [97, 97, 97] ('aaa'), merges {(97, 97): 256}")
        expect(
            s,
            [97, 98, 97, 98, 99],
            {(97, 98): 256},
            "ids [97, 98, 97, 98, 99] ('ababc'), merges {(97, 98): 256}",
        )

    def rank_order(s: _Session) -> None:
        expect(
            s,
            [97, 98, 99, 100],
            {(99, 100): 256, (97, 98): 257, (257, 256): 258},
            "ids [97, 98, 99, 100] ('abcd'), merges {(99, 100): 256, (97, 98): 257, "
            "(257, 256): 258}",
        )
        expect(
            s,
            [120, 97, 98, 97, 98, 97, 98],
            {(97, 98): 256, (256, 256): 257, (120, 97): 258},
            "ids [120, 97, 98, 97, 98, 97, 98] ('xababab'), merges {(97, 98): 256, "
            "(256, 256): 257, (120, 97): 258}",
        )
        expect(
            s,
            [195, 169, 97, 98, 99],
            {(98, 99): 1256, (97, 98): 1257, (69, 97): 1258},
            "ids [195, 169, 97, 98, 99] ('éabc'), merges {(98, 99): 1256, (97, 98): 1257, "
            "(69, 97): 1258} (new ids past 999)",
        )

    def learned(s: _Session) -> None:
        for seed in (1, 2, 3):
            tok, text = _trained(seed)
            merges = tok.merges
            for chunk in pre_tokenize(text)[:60]:
                ids = list(chunk.encode("utf-8"))
                what = (
                    f"the bytes of {chunk!r}, with {len(merges)} merges learned from random text "
                    f"(seed {seed})"
                )
                expect(s, ids, merges, what)

    def decodes(s: _Session) -> None:
        tok, text = _trained(4)
        for chunk in pre_tokenize(text)[:20]:
            ids = list(chunk.encode("utf-8"))
            got = call(s, ids, tok.merges, f"the bytes of {chunk!r}, {len(tok.merges)} merges")
            if any(i not in tok.vocab for i in got) or tok.decode_bytes(got) != bytes(ids):
                raise _Mismatch(
                    f"ids whose bytes are those of {chunk!r}", f"{got}", "Merges only regroup."
                )

    return _run(
        "check_bpe_encode",
        [
            _Property(
                "shape",
                "a list of ints; no merges or fewer than two ids leave the ids unchanged",
                "Loop while there are at least two ids and some neighbouring pair has a merge.",
                shape,
            ),
            _Property(
                "decodes",
                "the ids decode to the input's bytes",
                "Merges only regroup ids: never drop, add or reorder one.",
                decodes,
            ),
            _Property(
                "left_to_right",
                "a merge replaces its pair's occurrences left to right",
                "Use the chapter's merge(ids, pair, new_id), which scans left to right.",
                left_to_right,
            ),
            _Property(
                "rank_order",
                "the pair learned first is merged first, and merged tokens merge again",
                "Among the neighbouring pairs, pick min(pairs, key=rank), where the rank of a "
                "pair is its position in merges (a pair without a merge ranks last).",
                rank_order,
            ),
            _Property(
                "learned",
                "the same ids as the book's encoder with merges learned from random text",
                "Repeat: find the neighbouring pair of lowest rank; stop if it has no merge; "
                "else merge it everywhere.",
                learned,
            ),
        ],
    )
