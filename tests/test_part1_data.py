"""helpers.part1_data: the stored head equals what the shipped model computes."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch
from torch.testing import assert_close

from helpers.circuits import attention_patterns, previous_token_score
from helpers.data import load_tinyshakespeare
from helpers.export import load_gpt
from helpers.part1_data import load_previous_token_head

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "book" / "explorer" / "gpt_shakespeare.js"


def _tool():
    spec = importlib.util.spec_from_file_location(
        "export_previous_token_head", ROOT / "tools" / "export_previous_token_head.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_stored_head_equals_the_shipped_model() -> None:
    text, weights, block, head = load_previous_token_head()
    assert (block, head) == (0, 2)  # the head chapter 13 finds
    model, tokenizer = load_gpt(MODEL)
    with torch.no_grad():
        patterns = attention_patterns(model, torch.tensor([tokenizer.encode(text)]))
    recomputed = patterns[block][0, head]
    assert_close(weights, recomputed, atol=1e-3, rtol=0)
    # the head is the previous-token head of chapter 13, here too
    assert previous_token_score(recomputed[None, None]).item() > 0.8


def test_stored_text_is_a_validation_line() -> None:
    text = load_previous_token_head().text
    corpus = load_tinyshakespeare()
    validation = corpus[int(0.9 * len(corpus)) :]
    assert f"\n{text}\n" in validation and f"\n{text}\n" not in corpus[: int(0.9 * len(corpus))]
    assert 24 <= len(text) <= 32
    assert text == _tool().validation_line(corpus)


def test_loader_rejects_malformed_files(tmp_path: Path) -> None:
    good = {
        "text": "abc",
        "weights": [[1, 0, 0], [0.5, 0.5, 0], [0.2, 0.3, 0.5]],
        "block": 1,
        "head": 3,
    }
    bad = {
        "not square": {"text": "abc", "weights": [[1, 0], [0.5, 0.5]]},
        "future": {"text": "ab", "weights": [[0.5, 0.5], [0.5, 0.5]]},
        "sum": {"text": "ab", "weights": [[1, 0], [0.4, 0.4]]},
    }
    path = tmp_path / "head.json"
    path.write_text(json.dumps(good))
    text, weights, block, head = load_previous_token_head(path)
    assert text == "abc" and weights[2, 1].item() == pytest.approx(0.3)
    assert (block, head) == (1, 3)
    for payload in bad.values():
        path.write_text(json.dumps(payload))
        with pytest.raises(ValueError):
            load_previous_token_head(path)


def test_tool_rejects_bad_lengths() -> None:
    tool = _tool()
    with pytest.raises(ValueError):
        tool.validation_line("short\n" * 20, min_len=24, max_len=32)
    with pytest.raises(ValueError):
        tool.validation_line("x", min_len=5, max_len=4)
