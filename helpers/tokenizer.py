"""A character-level tokenizer: every distinct character is one token.

Defined in chapter 7, "Tiny Shakespeare and a bigram model".
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Iterable, Sequence

import torch


class CharTokenizer:
    """Maps each character of a fixed vocabulary to an integer id and back.

    Args:
        chars: the vocabulary, one character per token id (ids follow this order).

    Build one from a corpus with :meth:`from_text` (sorted distinct characters).
    """

    def __init__(self, chars: Sequence[str]) -> None:
        chars = list(chars)
        if not chars:
            raise ValueError("the vocabulary is empty")
        bad = [c for c in chars if not isinstance(c, str) or len(c) != 1]
        if bad:
            raise ValueError(f"every vocabulary entry must be a single character, got {bad[0]!r}")
        if len(set(chars)) != len(chars):
            dupes = sorted(c for c, n in Counter(chars).items() if n > 1)
            raise ValueError(f"the vocabulary has duplicate characters: {dupes}")
        self.chars: list[str] = chars
        self.stoi: dict[str, int] = {c: i for i, c in enumerate(chars)}

    @classmethod
    def from_text(cls, text: str) -> CharTokenizer:
        """The tokenizer whose vocabulary is the sorted set of characters in ``text``."""
        return cls(sorted(set(text)))

    @property
    def vocab_size(self) -> int:
        """The number of tokens (distinct characters)."""
        return len(self.chars)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``.

        Raises:
            TypeError: ``text`` is not a string.
            ValueError: naming the first character that is not in the vocabulary.
        """
        if not isinstance(text, str):
            raise TypeError(f"encode takes a string, got {type(text).__name__}")
        try:
            return [self.stoi[c] for c in text]
        except KeyError as err:
            bad = err.args[0]
            where = text.index(bad)
            raise ValueError(
                f"character {bad!r} (U+{ord(bad):04X}) at index {where} is not in the "
                f"{self.vocab_size}-character vocabulary"
            ) from None

    def decode(self, ids: Iterable[int] | torch.Tensor) -> str:
        """The text of token ids (a list or a 1-D integer tensor).

        Raises:
            ValueError: a tensor that is not 1-D or not integer, an id that is not an integer, or
                an id outside ``0..vocab_size - 1``.
        """
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
            # Python and NumPy integers have __index__; floats, strings and bools are refused.
            if isinstance(item, bool) or not hasattr(item, "__index__"):
                raise ValueError(f"token ids must be integers, got {item!r}")
            i = operator.index(item)
            if not 0 <= i < self.vocab_size:
                raise ValueError(
                    f"token id {i} is outside the vocabulary (0..{self.vocab_size - 1})"
                )
            out.append(self.chars[i])
        return "".join(out)
