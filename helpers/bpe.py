"""Byte-level byte-pair encoding (BPE), the tokenizer of GPT-2: training, encoding, decoding.

Defined in the chapter "From characters to GPT-2".

Text is first cut into chunks by GPT-2's pre-tokenising regular expression (words with their
leading space, numbers, runs of punctuation, runs of white space), and each chunk becomes its
UTF-8 bytes: token ids ``0..255`` are the 256 byte values, so any string can be encoded. Training
repeatedly finds the most frequent pair of neighbouring tokens inside the chunks and makes it a
new token (a *merge*); encoding replays the merges in the order they were learned (their rank).
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from itertools import pairwise
from typing import Any

import regex
import torch

from helpers.validation import check_positive_int

#: GPT-2's pre-tokenising pattern (``encoder.py`` of OpenAI's ``gpt-2`` repository). ``\p{L}`` and
#: ``\p{N}`` are Unicode letters and numbers, which is why it needs the ``regex`` package.
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
_GPT2_RE = regex.compile(GPT2_PATTERN)

Pair = tuple[int, int]


def pre_tokenize(text: str) -> list[str]:
    """Cut ``text`` into GPT-2's chunks; joined together they give ``text`` back. Merges never
    cross a chunk boundary, so no token spans, say, the end of one word and the next word."""
    if not isinstance(text, str):
        raise TypeError(f"pre_tokenize takes a string, got {type(text).__name__}")
    return _GPT2_RE.findall(text)


def _utf8(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ValueError(
            f"text holds a lone surrogate {text[err.start]!r} at index {err.start}, which has no "
            "UTF-8 encoding"
        ) from None


def count_pairs(ids: Sequence[int], counts: dict[Pair, int] | None = None, weight: int = 1) -> dict:
    """Add ``weight`` to ``counts[(a, b)]`` for every pair of neighbours ``a, b`` in ``ids``
    (overlapping pairs count: ``[1, 1, 1]`` holds ``(1, 1)`` twice). Returns ``counts``."""
    counts = {} if counts is None else counts
    for pair in pairwise(ids):
        counts[pair] = counts.get(pair, 0) + weight
    return counts


def merge(ids: Sequence[int], pair: Pair, new_id: int) -> list[int]:
    """Replace every occurrence of ``pair`` in ``ids`` by ``new_id``, scanning left to right (so
    ``[1, 1, 1]`` with the pair ``(1, 1)`` becomes ``[new_id, 1]``)."""
    out: list[int] = []
    i, n = 0, len(ids)
    a, b = pair
    while i < n:
        if i + 1 < n and ids[i] == a and ids[i + 1] == b:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def _best_pair(counts: Mapping[Pair, int]) -> Pair:
    """The most frequent pair; among equally frequent pairs, the smallest ``(a, b)``."""
    return min(counts, key=lambda p: (-counts[p], p))


class BPETokenizer:
    """A byte-level BPE tokenizer: GPT-2's pre-tokenisation, then merges applied in rank order.

    Args:
        merges: ``(a, b) -> new_id`` in the order the merges were learned (its rank).
        vocab: ``id -> bytes`` for every token; must hold the 256 single bytes.

    Build one with :meth:`train`, or from a Hugging Face vocabulary with
    :meth:`from_huggingface`.
    """

    def __init__(self, merges: Mapping[Pair, int], vocab: Mapping[int, bytes]) -> None:
        self.vocab: dict[int, bytes] = dict(vocab)
        self.merges: dict[Pair, int] = dict(merges)
        byte_id = {v: i for i, v in self.vocab.items() if len(v) == 1}
        if len(byte_id) != 256:
            raise ValueError(f"the vocabulary must hold all 256 bytes, it holds {len(byte_id)}")
        self.byte_ids: list[int] = [byte_id[bytes([b])] for b in range(256)]
        for (a, b), new in self.merges.items():
            if a not in self.vocab or b not in self.vocab or new not in self.vocab:
                raise ValueError(f"merge ({a}, {b}) -> {new} uses an id outside the vocabulary")
            if self.vocab[a] + self.vocab[b] != self.vocab[new]:
                raise ValueError(f"merge ({a}, {b}) -> {new}: token {new} is not {a} then {b}")
        self.ranks: dict[Pair, int] = {pair: r for r, pair in enumerate(self.merges)}
        self._cache: dict[str, list[int]] = {}

    @property
    def vocab_size(self) -> int:
        """The number of tokens: 256 bytes plus one per merge."""
        return len(self.vocab)

    @classmethod
    def train(cls, text: str, vocab_size: int, *, incremental: bool = True) -> BPETokenizer:
        """Learn ``vocab_size - 256`` merges from ``text``.

        Each step merges the most frequent pair of neighbouring tokens (ties: the smallest pair
        of ids). The counts are kept per distinct chunk, weighted by how often the chunk occurs.
        ``incremental=True`` updates the counts after a merge only for the chunks that held the
        merged pair; ``incremental=False`` recounts every chunk at every step (slower, same
        merges). Training stops early when no pair is left (every chunk is one token).
        """
        if not isinstance(text, str):
            raise TypeError(f"train takes a string, got {type(text).__name__}")
        check_positive_int("vocab_size", vocab_size)
        if vocab_size < 256:
            raise ValueError(f"vocab_size must be at least 256 (the bytes), got {vocab_size}")
        chunk_counts = Counter(pre_tokenize(text))
        words = [list(_utf8(w)) for w in chunk_counts]
        freqs = list(chunk_counts.values())
        vocab = {i: bytes([i]) for i in range(256)}
        merges: dict[Pair, int] = {}

        counts: dict[Pair, int] = {}
        where: dict[Pair, set[int]] = {}  # pair -> the chunks that hold it (incremental only)
        for w, (ids, f) in enumerate(zip(words, freqs, strict=True)):
            count_pairs(ids, counts, f)
            if incremental:
                for pair in pairwise(ids):
                    where.setdefault(pair, set()).add(w)

        for new_id in range(256, vocab_size):
            if not counts:
                break
            pair = _best_pair(counts)
            merges[pair] = new_id
            vocab[new_id] = vocab[pair[0]] + vocab[pair[1]]
            if not incremental:
                words = [merge(ids, pair, new_id) for ids in words]
                counts = {}
                for ids, f in zip(words, freqs, strict=True):
                    count_pairs(ids, counts, f)
                continue
            for w in where.pop(pair):
                old, f = words[w], freqs[w]
                new = merge(old, pair, new_id)
                words[w] = new
                count_pairs(old, counts, -f)  # remove the chunk's old pairs ...
                count_pairs(new, counts, f)  # ... and add its new ones
                for p in pairwise(new):
                    where.setdefault(p, set()).add(w)
                for p in pairwise(old):
                    if counts.get(p) == 0:
                        del counts[p]
        return cls(merges, vocab)

    def _encode_chunk(self, chunk: str) -> list[int]:
        cached = self._cache.get(chunk)
        if cached is not None:
            return cached
        ids = [self.byte_ids[b] for b in _utf8(chunk)]
        while len(ids) >= 2:
            # the learned pair of lowest rank (learned first) among the neighbours
            pair = min(pairwise(ids), key=lambda p: self.ranks.get(p, len(self.ranks)))
            if pair not in self.merges:
                break
            ids = merge(ids, pair, self.merges[pair])
        if len(self._cache) < 100_000:
            self._cache[chunk] = ids
        return ids

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``: each chunk's bytes, merged in rank order.

        Raises:
            TypeError: ``text`` is not a string.
            ValueError: ``text`` holds a lone surrogate (it has no UTF-8 encoding).
        """
        if not isinstance(text, str):
            raise TypeError(f"encode takes a string, got {type(text).__name__}")
        return [i for chunk in pre_tokenize(text) for i in self._encode_chunk(chunk)]

    def decode_bytes(self, ids: Iterable[int] | torch.Tensor) -> bytes:
        """The bytes of token ids (a list or a 1-D integer tensor), concatenated."""
        if isinstance(ids, torch.Tensor):
            if ids.dim() != 1:
                raise ValueError(
                    f"decode takes a 1-D sequence of ids, got shape {tuple(ids.shape)}"
                )
            if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
                raise ValueError(f"decode takes integer token ids, got a {ids.dtype} tensor")
            ids = ids.tolist()
        out = []
        for item in ids:
            if isinstance(item, bool) or not hasattr(item, "__index__"):
                raise ValueError(f"token ids must be integers, got {item!r}")
            i = operator.index(item)
            if i not in self.vocab:
                raise ValueError(f"token id {i} is not in the vocabulary of {self.vocab_size}")
            out.append(self.vocab[i])
        return b"".join(out)

    def decode(self, ids: Iterable[int] | torch.Tensor) -> str:
        """The text of token ids. A sequence cut inside a multi-byte character (which a sampled
        sequence can be) decodes with U+FFFD, the replacement character, in its place."""
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    def to_huggingface(self) -> Any:
        """The same tokenizer as a Hugging Face ``tokenizers.Tokenizer``: a ``BPE`` model with
        the ``ByteLevel`` pre-tokenizer and decoder (GPT-2's setup), holding this vocabulary and
        these merges. Needs the ``tokenizers`` package."""
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers

        to_char = bytes_to_unicode()
        as_str = {i: "".join(to_char[b] for b in v) for i, v in self.vocab.items()}
        if len(set(as_str.values())) != len(as_str):
            raise ValueError("two token ids have the same bytes; Hugging Face needs them unique")
        vocab = {s: i for i, s in as_str.items()}
        merges = [(as_str[a], as_str[b]) for a, b in self.merges]
        tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        tok.decoder = decoders.ByteLevel()
        return tok

    @classmethod
    def from_huggingface(
        cls, vocab: Mapping[str, int], merges: Iterable[tuple[str, str]]
    ) -> BPETokenizer:
        """Build one from a byte-level BPE vocabulary in Hugging Face's form (GPT-2's
        ``vocab.json`` and ``merges.txt``: each byte written as one printable character, see
        :func:`bytes_to_unicode`). Special tokens such as ``<|endoftext|>`` are left out."""
        to_byte = {c: b for b, c in bytes_to_unicode().items()}
        merge_ids = {(vocab[a], vocab[b]): vocab[a + b] for a, b in merges}
        made = set(merge_ids.values())
        ids: dict[int, bytes] = {}
        for s, i in vocab.items():  # the bytes, and what the merges make of them
            if (len(s) == 1 or i in made) and all(c in to_byte for c in s):
                ids[i] = bytes(to_byte[c] for c in s)
        return cls(merge_ids, ids)


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's table from the 256 bytes to 256 printable characters: printable Latin-1 bytes map
    to themselves, the others (control characters, the space) to characters from U+0100 on, so a
    space is written ``Ġ``. Hugging Face stores byte-level vocabularies in this form."""
    keep = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    table = {b: chr(b) for b in keep}
    n = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + n)
            n += 1
    return dict(sorted(table.items()))
