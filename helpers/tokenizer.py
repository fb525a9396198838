"""A character-level tokenizer: every distinct character is one token."""

from __future__ import annotations

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
        if any(not isinstance(c, str) or len(c) != 1 for c in chars):
            raise ValueError("every vocabulary entry must be a single character")
        if len(set(chars)) != len(chars):
            raise ValueError("the vocabulary has duplicate characters")
        self.chars: list[str] = chars
        self.stoi: dict[str, int] = {c: i for i, c in enumerate(chars)}

    @classmethod
    def from_text(cls, text: str) -> CharTokenizer:
        """The tokenizer whose vocabulary is the sorted set of characters in ``text``."""
        return cls(sorted(set(text)))

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``.

        Raises:
            ValueError: naming the first character that is not in the vocabulary.
        """
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
        """The text of token ids (a list or a 1-D tensor)."""
        if isinstance(ids, torch.Tensor):
            if ids.dim() != 1:
                raise ValueError(f"decode takes a 1-D sequence of ids, got shape {tuple(ids.shape)}")
            ids = ids.tolist()
        out = []
        for i in ids:
            if not 0 <= i < self.vocab_size:
                raise ValueError(f"token id {i} is outside the vocabulary (0..{self.vocab_size - 1})")
            out.append(self.chars[i])
        return "".join(out)
