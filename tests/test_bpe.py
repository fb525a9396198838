"""Tests for helpers.bpe: the byte-level BPE tokenizer of GPT-2."""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.bpe import (
    GPT2_PATTERN,
    BPETokenizer,
    bytes_to_unicode,
    count_pairs,
    merge,
    pre_tokenize,
)

pytestmark = pytest.mark.unit

SAMPLE = (
    "First Citizen:\nBefore we proceed any further, hear me speak.\n\n"
    "All:\nSpeak, speak.\n\nFirst Citizen:\nYou are all resolved rather to die than to famish?\n\n"
    "All:\nResolved. resolved.\n\nFirst Citizen:\nFirst, you know Caius Marcius is chief "
    "enemy to the people.\n\nAll:\nWe know't, we know't.\n"
) * 3


_TRAINED: dict[int, BPETokenizer] = {}


def _trained(vocab_size: int) -> BPETokenizer:
    """``SAMPLE``'s tokenizer, trained once per size (the property tests reuse it)."""
    if vocab_size not in _TRAINED:
        _TRAINED[vocab_size] = BPETokenizer.train(SAMPLE, vocab_size)
    return _TRAINED[vocab_size]


@pytest.fixture
def tok() -> BPETokenizer:
    return _trained(300)


def test_pre_tokenize_gpt2_chunks() -> None:
    assert pre_tokenize("Hello world's 123!!  ok\n") == [
        "Hello",
        " world",
        "'s",
        " 123",
        "!!",
        " ",
        " ok",
        "\n",
    ]
    assert "(?!\\S)" in GPT2_PATTERN


@given(st.text())
def test_pre_tokenize_joins_back(text: str) -> None:
    assert "".join(pre_tokenize(text)) == text


def test_count_pairs_counts_overlaps_and_weights() -> None:
    assert count_pairs([1, 1, 1, 2]) == {(1, 1): 2, (1, 2): 1}
    counts = count_pairs([1, 2], weight=3)
    assert count_pairs([1, 2, 1], counts, weight=-1) == {(1, 2): 2, (2, 1): -1}


def test_merge_left_to_right() -> None:
    assert merge([1, 1, 1], (1, 1), 9) == [9, 1]
    assert merge([1, 2, 3, 1, 2], (1, 2), 9) == [9, 3, 9]
    assert merge([2, 1], (1, 2), 9) == [2, 1]


def test_first_merge_is_the_most_frequent_pair() -> None:
    # "aaabdaaabac" (one chunk): "aa" occurs four times (overlapping), "ab" twice
    tok = BPETokenizer.train("aaabdaaabac", 257)
    assert tok.merges == {(97, 97): 256}
    assert tok.vocab[256] == b"aa"


def test_ties_go_to_the_smallest_pair() -> None:
    tok = BPETokenizer.train("ba\nab", 257)  # (97, 98) and (98, 97) once each
    assert list(tok.merges) == [(97, 98)]


def test_merges_never_cross_chunks() -> None:
    tok = BPETokenizer.train("a b a b a b", 300)
    assert all(b" " not in v[1:] for v in tok.vocab.values())  # a space only starts a token


def test_incremental_training_equals_naive_recount() -> None:
    fast = BPETokenizer.train(SAMPLE, 400, incremental=True)
    slow = BPETokenizer.train(SAMPLE, 400, incremental=False)
    assert list(fast.merges.items()) == list(slow.merges.items())
    assert len(fast.merges) > 50


@settings(max_examples=40, deadline=None)
@given(st.text(alphabet="ab c\n", max_size=60), st.integers(256, 300))
def test_incremental_equals_naive_on_random_text(text: str, vocab_size: int) -> None:
    fast = BPETokenizer.train(text, vocab_size)
    slow = BPETokenizer.train(text, vocab_size, incremental=False)
    assert list(fast.merges.items()) == list(slow.merges.items())


def test_training_stops_when_no_pair_is_left() -> None:
    tok = BPETokenizer.train("ab", 1000)
    assert tok.vocab_size == 257
    assert tok.encode("ab") == [256]


def test_encoding_applies_merges_in_rank_order() -> None:
    vocab = {i: bytes([i]) for i in range(256)}
    vocab |= {256: b"bc", 257: b"ab"}
    tok = BPETokenizer({(98, 99): 256, (97, 98): 257}, vocab)
    assert tok.encode("abc") == [97, 256]  # "bc" was learned first, so it wins over "ab"
    tok2 = BPETokenizer({(97, 98): 256, (98, 99): 257}, {**vocab, 256: b"ab", 257: b"bc"})
    assert tok2.encode("abc") == [256, 99]


def test_encode_shortens_and_decodes(tok: BPETokenizer) -> None:
    ids = tok.encode(SAMPLE)
    assert len(ids) < 0.6 * len(SAMPLE.encode())
    assert tok.decode(ids) == SAMPLE
    assert tok.decode(torch.tensor(ids)) == SAMPLE


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_decode_encode_identity_on_any_unicode(text: str) -> None:
    tok = _trained(300)
    assert tok.decode(tok.encode(text)) == text


@pytest.mark.parametrize(
    "text", ["naïve café", "日本語のテキスト", "emoji 🙂🚀!", "\x00\t\r\n", "Ω≈ç√"]
)
def test_text_outside_the_training_alphabet(tok: BPETokenizer, text: str) -> None:
    ids = tok.encode(text)
    assert len(ids) >= 1
    assert tok.decode(ids) == text


def test_decode_of_a_cut_character_uses_the_replacement_character(tok: BPETokenizer) -> None:
    ids = tok.encode("é")
    assert ids == [0xC3, 0xA9]
    assert tok.decode(ids[:1]) == "\ufffd"


def test_bytes_to_unicode_is_gpt2s_table() -> None:
    table = bytes_to_unicode()
    assert len(set(table.values())) == 256
    assert table[ord(" ")] == "Ġ" and table[ord("\n")] == "Ċ" and table[ord("A")] == "A"


def _hf_vocab_and_merges(hf) -> tuple[dict[str, int], list[tuple[str, str]]]:
    model = json.loads(hf.to_str())["model"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    return model["vocab"], merges


_HF: dict[int, object] = {}


def _hf(vocab_size: int):  # noqa: ANN202 (a tokenizers.Tokenizer)
    if vocab_size not in _HF:
        _HF[vocab_size] = _trained(vocab_size).to_huggingface()
    return _HF[vocab_size]


@settings(max_examples=100, deadline=None)
@given(st.text())
def test_same_ids_as_huggingface_tokenizers(text: str) -> None:
    tok = _trained(350)
    hf = _hf(350)
    assert hf.encode(text).ids == tok.encode(text)
    assert hf.decode(tok.encode(text)) == text


def test_same_ids_as_huggingface_on_training_text(tok: BPETokenizer) -> None:
    hf = tok.to_huggingface()
    assert hf.encode(SAMPLE).ids == tok.encode(SAMPLE)


def test_round_trip_through_huggingface_form(tok: BPETokenizer) -> None:
    vocab, merges = _hf_vocab_and_merges(tok.to_huggingface())
    back = BPETokenizer.from_huggingface(vocab, merges)
    assert back.merges == tok.merges and back.vocab == tok.vocab


def test_from_huggingface_with_a_byte_order_unlike_ours() -> None:
    # GPT-2's vocab.json numbers the bytes in bytes_to_unicode's printable-first order
    table = bytes_to_unicode()
    order = sorted(range(256), key=lambda b: ord(table[b]))
    vocab = {table[b]: i for i, b in enumerate(order)}
    vocab["Ġt"] = 256
    vocab["<|endoftext|>"] = 257  # a special token: no merge makes it, so it is left out
    tok = BPETokenizer.from_huggingface(vocab, [("Ġ", "t")])
    assert tok.vocab_size == 257
    assert tok.encode(" t!") == [256, vocab["!"]]
    assert tok.decode([256, vocab["!"]]) == " t!"


def test_errors(tok: BPETokenizer) -> None:
    with pytest.raises(ValueError, match="at least 256"):
        BPETokenizer.train("abc", 100)
    with pytest.raises(ValueError, match="positive int"):
        BPETokenizer.train("abc", 256.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="string"):
        tok.encode(b"abc")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="surrogate"):
        tok.encode("a\ud800b")
    with pytest.raises(ValueError, match="not in the vocabulary"):
        tok.decode([tok.vocab_size + 5])
    with pytest.raises(ValueError, match="integers"):
        tok.decode([1.0])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="1-D"):
        tok.decode(torch.zeros(2, 2, dtype=torch.long))
    vocab = {i: bytes([i]) for i in range(256)}
    with pytest.raises(ValueError, match="is not"):
        BPETokenizer({(97, 98): 256}, {**vocab, 256: b"ba"})
    with pytest.raises(ValueError, match="256 bytes"):
        BPETokenizer({}, {i: bytes([i]) for i in range(255)})


def test_bytes_to_unicode_matches_tokenizers_byte_level() -> None:
    # every byte that valid UTF-8 can hold, through tokenizers' own ByteLevel mapping
    from tokenizers import pre_tokenizers

    table = bytes_to_unicode()
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    chars = [chr(c) for c in range(0x800)] + ["\u0800", "\uffff", "\U00010000", "\U0010ffff"]
    chars += [chr(0x1000 * k) for k in range(1, 16) if not 0xD8 <= k * 0x10 <= 0xDF]
    chars += [chr(0x40000 * k) for k in range(1, 5)]
    seen = set()
    for c in chars:
        ((got, _),) = byte_level.pre_tokenize_str(c)
        assert got == "".join(table[b] for b in c.encode()), repr(c)
        seen |= set(c.encode())
    assert len(seen) == 256 - 13  # all but C0, C1 and F5..FF, which UTF-8 never uses
    assert set(pre_tokenizers.ByteLevel.alphabet()) == set(table.values())
