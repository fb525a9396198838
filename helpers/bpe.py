"""Byte-level byte-pair encoding (BPE), the tokenizer of GPT-2: training, encoding, decoding.

Defined in the chapter "From characters to GPT-2".

Text is first cut into chunks by GPT-2's pre-tokenising regular expression (words with their
leading space, numbers, runs of punctuation, runs of white space), and each chunk becomes its
UTF-8 bytes: token ids ``0..255`` are the 256 byte values, so any string can be encoded. Training
repeatedly finds the most frequent pair of neighbouring tokens inside the chunks and makes it a
new token (a *merge*); encoding replays the merges in the order they were learned (their rank).

GPT-2's own vocabulary and merges (OpenAI's ``encoder.json`` and ``vocab.bpe``) ship with the
package in ``helpers/gpt2_vocab/``: :func:`gpt2_tokenizer` loads them, offline. A *special token*
such as GPT-2's ``<|endoftext|>`` (id 50256) is a token no merge makes: it is written into text
by the program (between documents), and :meth:`BPETokenizer.encode` turns its text into its id
only when asked to (``allowed_special``), as OpenAI's ``tiktoken`` does.
"""

from __future__ import annotations

import json
import operator
import os
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from importlib import resources
from itertools import pairwise
from pathlib import Path
from typing import Any, Literal

import regex
import torch

from helpers.validation import check_positive_int

#: GPT-2's pre-tokenising pattern (``encoder.py`` of OpenAI's ``gpt-2`` repository). ``\p{L}`` and
#: ``\p{N}`` are Unicode letters and numbers, which is why it needs the ``regex`` package.
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
_GPT2_RE = regex.compile(GPT2_PATTERN)

#: GPT-2's one special token: it separates documents in the training data (id 50256).
ENDOFTEXT = "<|endoftext|>"
#: The SHA-256 of the two files in ``helpers/gpt2_vocab/``: those of OpenAI's published
#: ``encoder.json`` and ``vocab.bpe`` (checked by the tests).
GPT2_FILES_SHA256 = {
    "encoder.json": "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
    "vocab.bpe": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
}

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


class _Chunks:
    """The distinct chunks of a text as lists of token ids, each with how often it occurs, and the
    count of every pair of neighbouring ids (weighted by those occurrences).

    ``incremental=True`` also keeps, for each pair, the chunks that hold it, so that a merge
    updates only those chunks' counts; ``incremental=False`` recounts every chunk after a merge.
    """

    def __init__(self, text: str, incremental: bool = True) -> None:
        chunk_counts = Counter(pre_tokenize(text))
        self.words = [list(_utf8(w)) for w in chunk_counts]
        self.freqs = list(chunk_counts.values())
        self.incremental = incremental
        self.counts: dict[Pair, int] = {}
        self.where: dict[Pair, set[int]] = {}  # pair -> the chunks that hold it
        for w, (ids, f) in enumerate(zip(self.words, self.freqs, strict=True)):
            count_pairs(ids, self.counts, f)
            if incremental:
                for pair in pairwise(ids):
                    self.where.setdefault(pair, set()).add(w)

    def merge(self, pair: Pair, new_id: int) -> None:
        """Replace ``pair`` by ``new_id`` in every chunk and bring the counts up to date."""
        if not self.incremental:
            self.words = [merge(ids, pair, new_id) for ids in self.words]
            self.counts = {}
            for ids, f in zip(self.words, self.freqs, strict=True):
                count_pairs(ids, self.counts, f)
            return
        for w in self.where.pop(pair, ()):
            old, f = self.words[w], self.freqs[w]
            new = merge(old, pair, new_id)
            self.words[w] = new
            count_pairs(old, self.counts, -f)  # remove the chunk's old pairs ...
            count_pairs(new, self.counts, f)  # ... and add its new ones
            for p in pairwise(new):
                self.where.setdefault(p, set()).add(w)
            for p in pairwise(old):
                if self.counts.get(p) == 0:
                    del self.counts[p]


def replay_merges(text: str, merges: Sequence[tuple[bytes, bytes]]) -> list[tuple[int, int]]:
    """Replay ``merges`` (pairs of tokens given as bytes, in the order learned) on the chunks of
    ``text``, as training would; for each step return ``(count, top)``: how often the merged pair
    occurred at that step, and how often the most frequent pair did.

    A BPE trainer that learned ``merges`` from ``text`` has ``count == top`` at every step. Two
    trainers that break ties between equally frequent pairs differently learn the merges in
    different orders, and both pass this check.

    Raises:
        ValueError: a merge uses a token that neither a byte nor an earlier merge is.
    """
    chunks = _Chunks(text)
    ids = {bytes([b]): b for b in range(256)}
    out = []
    for rank, (a, b) in enumerate(merges):
        if a not in ids or b not in ids:
            raise ValueError(f"merge {rank} ({a!r}, {b!r}) uses a token no earlier merge made")
        pair = (ids[a], ids[b])
        out.append((chunks.counts.get(pair, 0), max(chunks.counts.values(), default=0)))
        ids.setdefault(a + b, 256 + rank)
        chunks.merge(pair, 256 + rank)
    return out


AllowedSpecial = Literal["all"] | Collection[str]


class BPETokenizer:
    """A byte-level BPE tokenizer: GPT-2's pre-tokenisation, then merges applied in rank order.

    Args:
        merges: ``(a, b) -> new_id`` in the order the merges were learned (its rank).
        vocab: ``id -> bytes`` for every token; must hold the 256 single bytes.
        special_tokens: ``text -> id`` of tokens that no merge makes, such as GPT-2's
            ``<|endoftext|>``. Their ids join the vocabulary (they decode to their text);
            :meth:`encode` recognises their text only where ``allowed_special`` says so.

    Build one with :meth:`train`, from a Hugging Face vocabulary with :meth:`from_huggingface`,
    from OpenAI's files with :meth:`from_gpt2_files`, or GPT-2's own with :func:`gpt2_tokenizer`.
    """

    def __init__(
        self,
        merges: Mapping[Pair, int],
        vocab: Mapping[int, bytes],
        special_tokens: Mapping[str, int] | None = None,
    ) -> None:
        self.vocab: dict[int, bytes] = dict(vocab)
        self.merges: dict[Pair, int] = dict(merges)
        self.special_tokens: dict[str, int] = dict(special_tokens or {})
        for text, i in self.special_tokens.items():
            if not isinstance(text, str) or not text:
                raise ValueError(f"a special token is a non-empty string, got {text!r}")
            if i in self.vocab and self.vocab[i] != text.encode():
                raise ValueError(f"special token {text!r}: id {i} is already {self.vocab[i]!r}")
        special_ids = set(self.special_tokens.values())
        if len(special_ids) != len(self.special_tokens):
            raise ValueError("two special tokens have the same id")
        byte_id = {v: i for i, v in self.vocab.items() if len(v) == 1 and i not in special_ids}
        if len(byte_id) != 256:
            raise ValueError(f"the vocabulary must hold all 256 bytes, it holds {len(byte_id)}")
        self.byte_ids: list[int] = [byte_id[bytes([b])] for b in range(256)]
        for (a, b), new in self.merges.items():
            if a not in self.vocab or b not in self.vocab or new not in self.vocab:
                raise ValueError(f"merge ({a}, {b}) -> {new} uses an id outside the vocabulary")
            if {a, b, new} & special_ids:
                raise ValueError(f"merge ({a}, {b}) -> {new} uses a special token")
            if self.vocab[a] + self.vocab[b] != self.vocab[new]:
                raise ValueError(f"merge ({a}, {b}) -> {new}: token {new} is not {a} then {b}")
        self.vocab |= {i: text.encode() for text, i in self.special_tokens.items()}
        self.ranks: dict[Pair, int] = {pair: r for r, pair in enumerate(self.merges)}
        self._cache: dict[str, list[int]] = {}

    @property
    def vocab_size(self) -> int:
        """The number of tokens: 256 bytes, one per merge, and the special tokens."""
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
        chunks = _Chunks(text, incremental)
        vocab = {i: bytes([i]) for i in range(256)}
        merges: dict[Pair, int] = {}
        for new_id in range(256, vocab_size):
            if not chunks.counts:
                break
            pair = _best_pair(chunks.counts)
            merges[pair] = new_id
            vocab[new_id] = vocab[pair[0]] + vocab[pair[1]]
            chunks.merge(pair, new_id)
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

    def _encode_ordinary(self, text: str) -> list[int]:
        return [i for chunk in pre_tokenize(text) for i in self._encode_chunk(chunk)]

    def _special_set(self, names: AllowedSpecial, argument: str) -> set[str]:
        if names == "all":
            return set(self.special_tokens)
        if isinstance(names, str):
            raise ValueError(f"{argument} is 'all' or a collection of tokens, got {names!r}")
        unknown = sorted(set(names) - set(self.special_tokens))
        if unknown:
            raise ValueError(
                f"{argument} names {unknown[0]!r}, which is not one of this tokenizer's special "
                f"tokens {sorted(self.special_tokens)}"
            )
        return set(names)

    def encode(
        self,
        text: str,
        *,
        allowed_special: AllowedSpecial = (),
        disallowed_special: AllowedSpecial = "all",
    ) -> list[int]:
        """Token ids of ``text``: each chunk's bytes, merged in rank order.

        Special tokens follow OpenAI's ``tiktoken``: the text of a special token named in
        ``allowed_special`` (a collection of them, or ``"all"``) becomes its id, so
        ``encode("<|endoftext|>", allowed_special="all")`` is GPT-2's ``[50256]``. The text of
        one named in ``disallowed_special`` (by default every special token not allowed) raises
        a ``ValueError``, because a document that happens to contain ``<|endoftext|>`` should
        not silently end a document; with ``disallowed_special=()`` such text is encoded as
        ordinary text, byte by byte and merged. (Hugging Face's tokenizers always recognise
        their special tokens: they equal ``allowed_special="all"``.)

        Raises:
            TypeError: ``text`` is not a string.
            ValueError: ``text`` holds a lone surrogate (it has no UTF-8 encoding) or a
                disallowed special token; or an argument names an unknown special token.
        """
        if not isinstance(text, str):
            raise TypeError(f"encode takes a string, got {type(text).__name__}")
        if not self.special_tokens:  # nothing to look for (every trained tokenizer)
            return self._encode_ordinary(text)
        allowed = self._special_set(allowed_special, "allowed_special")
        disallowed = self._special_set(disallowed_special, "disallowed_special") - allowed
        for name in sorted(disallowed, key=text.find):
            at = text.find(name)
            if at >= 0:
                raise ValueError(
                    f"text holds the special token {name!r} at index {at}: pass "
                    f"allowed_special={{{name!r}}} (or 'all') to encode it as its id "
                    f"{self.special_tokens[name]}, or disallowed_special=() to encode it as "
                    "ordinary text"
                )
        if not allowed:
            return self._encode_ordinary(text)
        # the longest first, so that a special token that starts another does not cut it
        names = sorted(allowed, key=len, reverse=True)
        parts = regex.split("(" + "|".join(regex.escape(s) for s in names) + ")", text)
        out: list[int] = []
        for k, part in enumerate(parts):  # odd positions hold the special tokens found
            out += [self.special_tokens[part]] if k % 2 else self._encode_ordinary(part)
        return out

    def decode_bytes(self, ids: Iterable[int] | torch.Tensor) -> bytes:
        """The bytes of token ids (a list or a 1-D integer tensor), concatenated; a special
        token gives its text's bytes."""
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
        the ``ByteLevel`` pre-tokenizer and decoder (GPT-2's setup), holding this vocabulary,
        these merges and the special tokens (which it always recognises in text). Needs the
        ``tokenizers`` package."""
        from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

        to_char = bytes_to_unicode()
        special = {i: text for text, i in self.special_tokens.items()}
        as_str = {
            i: special[i] if i in special else "".join(to_char[b] for b in v)
            for i, v in self.vocab.items()
        }
        if len(set(as_str.values())) != len(as_str):
            raise ValueError("two token ids have the same bytes; Hugging Face needs them unique")
        vocab = {s: i for i, s in as_str.items()}
        merges = [(as_str[a], as_str[b]) for a, b in self.merges]
        tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        tok.decoder = decoders.ByteLevel()
        if special:
            tok.add_special_tokens(
                [AddedToken(s, special=True, normalized=False) for s in self.special_tokens]
            )
        return tok

    @classmethod
    def from_huggingface(
        cls, vocab: Mapping[str, int], merges: Iterable[tuple[str, str]]
    ) -> BPETokenizer:
        """Build one from a byte-level BPE vocabulary in Hugging Face's form (GPT-2's
        ``vocab.json`` and ``merges.txt``, which are OpenAI's ``encoder.json`` and
        ``vocab.bpe``: each byte written as one printable character, see
        :func:`bytes_to_unicode`). An entry that is neither a byte nor made by a merge is a
        special token, kept as it is written: in GPT-2's vocabulary, ``<|endoftext|>``.

        Raises:
            ValueError: a merge names a token the vocabulary lacks.
        """
        to_byte = {c: b for b, c in bytes_to_unicode().items()}
        merge_ids: dict[Pair, int] = {}
        for a, b in merges:
            try:
                merge_ids[(vocab[a], vocab[b])] = vocab[a + b]
            except KeyError as err:
                raise ValueError(
                    f"merge {a!r} {b!r}: {err.args[0]!r} is not in the vocabulary"
                ) from None
        made = set(merge_ids.values())
        ids: dict[int, bytes] = {}
        special: dict[str, int] = {}
        for s, i in vocab.items():  # the bytes, what the merges make of them, the rest
            if (len(s) == 1 or i in made) and all(c in to_byte for c in s):
                ids[i] = bytes(to_byte[c] for c in s)
            else:
                special[s] = i
        return cls(merge_ids, ids, special)

    @classmethod
    def from_gpt2_files(
        cls, encoder_json: str | os.PathLike[str], vocab_bpe: str | os.PathLike[str]
    ) -> BPETokenizer:
        """Build one from OpenAI's two files: ``encoder.json`` (token -> id, each byte written
        as one printable character) and ``vocab.bpe`` (a ``#version`` line, then one merge a
        line, its two tokens separated by a space, in rank order). Hugging Face publishes the
        same files as ``vocab.json`` and ``merges.txt``."""
        vocab = json.loads(Path(encoder_json).read_text(encoding="utf-8"))
        lines = Path(vocab_bpe).read_text(encoding="utf-8").split("\n")
        merges = []
        for n, line in enumerate(lines, 1):
            if not line or (n == 1 and line.startswith("#version")):
                continue
            pair = line.split(" ")
            if len(pair) != 2:
                raise ValueError(f"{vocab_bpe}, line {n}: expected two tokens, got {line!r}")
            merges.append((pair[0], pair[1]))
        return cls.from_huggingface(vocab, merges)


def gpt2_files() -> dict[str, Path]:
    """The paths of GPT-2's ``encoder.json`` and ``vocab.bpe`` shipped in ``helpers/gpt2_vocab/``
    (OpenAI's files, under OpenAI's modified MIT licence, which sits beside them)."""
    folder = Path(str(resources.files("helpers").joinpath("gpt2_vocab")))
    return {name: folder / name for name in GPT2_FILES_SHA256}


def gpt2_tokenizer() -> BPETokenizer:
    """GPT-2's tokenizer from the shipped files, without a network: 50,257 tokens (256 bytes,
    50,000 merges and ``<|endoftext|>``, id 50256). ``encode("Hello world")`` is
    ``[15496, 995]``."""
    files = gpt2_files()
    return BPETokenizer.from_gpt2_files(files["encoder.json"], files["vocab.bpe"])


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
