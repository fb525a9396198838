"""The bigram language model: the next token's scores are read off a table, row = current token.

Defined in chapter 7, "Tiny Shakespeare and a bigram model".

It is the baseline every later model is compared with. A token sees only itself, never the tokens
before it, so its best possible loss is the conditional entropy of the next token given the current
one, which the count table of the training text gives exactly.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from helpers.validation import check_non_negative_int, check_positive_int


class BigramLanguageModel(nn.Module):
    """Next-token logits looked up in a ``(vocab_size, vocab_size)`` table.

    Row ``i`` of ``token_embedding_table`` holds the logits of the token that follows token ``i``:
    ``softmax(table[i])`` is the model's distribution over the next token.

    Args:
        vocab_size: the number of distinct tokens.
    """

    def __init__(self, vocab_size: int) -> None:
        super().__init__()
        self.vocab_size = check_positive_int("vocab_size", vocab_size)
        self.token_embedding_table = nn.Embedding(vocab_size, vocab_size)

    def _check_ids(self, name: str, ids: torch.Tensor) -> None:
        if ids.dim() != 2:
            raise ValueError(f"{name} must be (B, T) token ids, got shape {tuple(ids.shape)}")
        if ids.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
            raise ValueError(f"{name} must hold integer token ids, got dtype {ids.dtype}")
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.vocab_size):
            raise ValueError(
                f"{name} has ids in {int(ids.min())}..{int(ids.max())}, "
                f"outside the vocabulary 0..{self.vocab_size - 1}"
            )

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Logits for the token after each position, and optionally the mean cross-entropy.

        Args:
            idx: ``(B, T)`` token ids.
            targets: optional ``(B, T)`` ids of the next tokens.

        Returns:
            ``(logits, loss)``: logits ``(B, T, vocab_size)`` (always this shape, with or without
            targets); ``loss`` is ``None`` without targets.

        Raises:
            ValueError: ``idx`` or ``targets`` is not ``(B, T)`` integer ids in the vocabulary, or
                their shapes differ.
        """
        self._check_ids("idx", idx)
        logits = self.token_embedding_table(idx.long())  # (B, T, vocab_size)
        if targets is None:
            return logits, None
        self._check_ids("targets", targets)
        if targets.shape != idx.shape:
            raise ValueError(
                f"targets must have the shape of idx {tuple(idx.shape)}, got {tuple(targets.shape)}"
            )
        B, T, vocab_size = logits.shape
        # cross_entropy wants the classes in dimension 1: flatten (B, T, vocab_size) to
        # (B * T, vocab_size).
        loss = F.cross_entropy(logits.reshape(B * T, vocab_size), targets.reshape(B * T).long())
        return logits, loss

    @torch.no_grad()
    def generate(
        self, idx: torch.Tensor, max_new_tokens: int, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """Append ``max_new_tokens`` sampled tokens to ``idx`` (``(B, T)``, ``T >= 1``); return it.

        Only the last token of the context matters to a bigram model, so each step looks up just
        that one. Pass a seeded ``torch.Generator`` for reproducible samples.
        """
        self._check_ids("idx", idx)
        if idx.shape[1] == 0:
            raise ValueError("idx must hold at least one token to continue from, got T=0")
        check_non_negative_int("max_new_tokens", max_new_tokens)
        idx = idx.long()
        for _ in range(max_new_tokens):
            logits, _ = self(idx[:, -1:])  # (B, 1, vocab_size)
            probs = F.softmax(logits[:, -1, :], dim=-1)  # (B, vocab_size)
            next_id = torch.multinomial(probs, num_samples=1, generator=generator)  # (B, 1)
            idx = torch.cat([idx, next_id], dim=1)
        return idx
