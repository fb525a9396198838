"""The character tokenizer: vocabulary, round trips and the errors a learner will meet."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helpers.tokenizer import CharTokenizer

TEXT = "First Citizen:\nBefore we proceed any further, hear me speak.\n"


@pytest.fixture
def tok() -> CharTokenizer:
    return CharTokenizer.from_text(TEXT)


def test_vocabulary_is_sorted_distinct_characters(tok: CharTokenizer) -> None:
    assert tok.chars == sorted(set(TEXT))
    assert tok.vocab_size == len(set(TEXT)) == 27
    assert tok.chars[0] == "\n" and tok.chars[1] == " "  # sorted by code point


def test_ids_follow_the_vocabulary_order() -> None:
    tok = CharTokenizer(["b", "a", "c"])
    assert tok.encode("abcab") == [1, 0, 2, 1, 0]
    assert tok.decode([2, 2, 0]) == "ccb"


def test_round_trip(tok: CharTokenizer) -> None:
    ids = tok.encode(TEXT)
    assert len(ids) == len(TEXT)
    assert all(0 <= i < tok.vocab_size for i in ids)
    assert tok.decode(ids) == TEXT
    assert tok.decode(torch.tensor(ids)) == TEXT
    assert tok.decode(np.array(ids)) == TEXT  # NumPy integers are integers too
    assert tok.encode("") == [] and tok.decode([]) == ""


def test_out_of_vocabulary_error_names_the_character(tok: CharTokenizer) -> None:
    with pytest.raises(
        ValueError,
        match=r"character 'x' \(U\+0078\) at index 3 is not in the 27-character vocabulary",
    ):
        tok.encode("Firx")
    with pytest.raises(ValueError, match=r"'é' \(U\+00E9\) at index 4"):
        tok.encode("hear\u00e9")


def test_encode_refuses_non_strings(tok: CharTokenizer) -> None:
    with pytest.raises(TypeError, match="encode takes a string, got list"):
        tok.encode(["F", "i"])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        ([0, 27], r"token id 27 is outside the vocabulary \(0\.\.26\)"),
        ([-1], r"token id -1 is outside the vocabulary"),
        ([1.0], r"token ids must be integers, got 1\.0"),
        (["a"], r"token ids must be integers, got 'a'"),
        ([True], r"token ids must be integers, got True"),
        (torch.tensor([[1, 2]]), r"1-D sequence of ids, got shape \(1, 2\)"),
        (torch.tensor([1.0, 2.0]), r"integer token ids, got a torch.float32 tensor"),
    ],
)
def test_decode_errors(tok: CharTokenizer, ids: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        tok.decode(ids)  # type: ignore[arg-type]


def test_duplicate_vocabulary_is_refused() -> None:
    with pytest.raises(ValueError, match=r"duplicate characters: \['a', 'b'\]"):
        CharTokenizer(["a", "b", "c", "a", "b"])


@pytest.mark.parametrize(
    ("chars", "message"),
    [
        ([], "the vocabulary is empty"),
        (["a", "bc"], "single character, got 'bc'"),
        (["a", 1], "got 1"),
    ],
)
def test_bad_vocabulary_is_refused(chars: list, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CharTokenizer(chars)
