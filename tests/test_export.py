"""Tests of helpers.export: a GPT survives the round trip to the page's file and back."""

from __future__ import annotations

import json
import urllib.error
from pathlib import Path

import pytest
import torch

from helpers import export
from helpers.export import GLOBAL_NAME, export_gpt, load_gpt, read_export, shipped_checkpoint
from helpers.model import GPT, GPTConfig
from helpers.tokenizer import CharTokenizer

CHARS = "\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def small_model(seed: int = 0) -> tuple[GPT, CharTokenizer]:
    torch.manual_seed(seed)
    tok = CharTokenizer(CHARS)
    model = GPT(GPTConfig(vocab_size=tok.vocab_size, block_size=16, n_layer=2, n_head=2, n_embd=16))
    # Larger weights than the 0.02 init, so the logits are not all near zero (a stricter test).
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return model.eval(), tok


@pytest.fixture
def exported(tmp_path: Path) -> tuple[GPT, CharTokenizer, Path]:
    model, tok = small_model()
    path = export_gpt(model, tok, tmp_path / "m.js", description="test model")
    return model, tok, path


def test_file_is_a_script_assigning_one_global(exported) -> None:
    _, _, path = exported
    text = path.read_text()
    assert f"globalThis.{GLOBAL_NAME} = {{" in text
    assert text.rstrip().endswith("};")
    assert text.isascii()
    payload = read_export(path)
    assert payload["config"]["n_embd"] == 16
    assert payload["chars"] == CHARS
    assert payload["description"] == "test model"
    assert "lm_head.weight" not in [t["name"] for t in payload["tensors"]]  # tied: stored once


def test_round_trip_float16_logits_within_rounding(exported) -> None:
    model, tok, path = exported
    loaded, loaded_tok = load_gpt(path)
    assert loaded_tok.chars == tok.chars
    assert loaded.config == model.config
    assert not loaded.training
    assert loaded.lm_head.weight is loaded.tok_emb.weight
    idx = torch.tensor([tok.encode("First Citizen:\nB")])
    with torch.no_grad():
        want, _ = model(idx)
        got, _ = loaded(idx)
    # Every weight is rounded to float16 (relative error <= 2**-11); through two layers these
    # logits (of size ~4) moved by 3e-3 when this test was written. A float32 export gives 0.
    err = (got - want).abs().max().item()
    assert 0 < err < 1e-2, err
    # The loaded weights are exactly the float16 rounding of the originals.
    for name, p in model.state_dict().items():
        torch.testing.assert_close(
            loaded.state_dict()[name], p.half().float(), rtol=0, atol=0, msg=name
        )


def test_round_trip_float32_is_exact(tmp_path: Path) -> None:
    model, tok = small_model(1)
    loaded, _ = load_gpt(export_gpt(model, tok, tmp_path / "m.js", dtype="float32"))
    idx = torch.tensor([tok.encode("To be or not")])
    with torch.no_grad():
        torch.testing.assert_close(loaded(idx)[0], model(idx)[0], rtol=0, atol=0)


def test_default_model_file_is_under_one_megabyte(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = GPT(GPTConfig())
    path = export_gpt(model, CharTokenizer(CHARS), tmp_path / "m.js")
    assert path.stat().st_size < 1_000_000, path.stat().st_size


def test_export_refuses_bad_input(tmp_path: Path) -> None:
    model, tok = small_model()
    with pytest.raises(ValueError, match="dtype"):
        export_gpt(model, tok, tmp_path / "m.js", dtype="int8")
    with pytest.raises(ValueError, match="tokenizer has 3 tokens"):
        export_gpt(model, CharTokenizer("abc"), tmp_path / "m.js")
    with torch.no_grad():
        model.ln_f.weight[0] = 1e6  # float16 holds at most 65504
    with pytest.raises(ValueError, match="ln_f.weight.*float32"):
        export_gpt(model, tok, tmp_path / "m.js")


def corrupt(path: Path, edit) -> Path:
    text = path.read_text()
    prefix, _, body = text.partition(f"{GLOBAL_NAME} = ")
    payload = json.loads(body.rstrip().removesuffix(";"))
    edit(payload)
    path.write_text(prefix + f"{GLOBAL_NAME} = " + json.dumps(payload) + ";\n")
    return path


def flip_one_weight(p: dict) -> None:
    data = list(p["data"])
    data[100] = "A" if data[100] != "A" else "B"
    p["data"] = "".join(data)


@pytest.mark.parametrize(
    "edit, message",
    [
        (flip_one_weight, "SHA-256"),
        (lambda p: p.update(data=p["data"][:-8]), "SHA-256|base64|Incorrect padding"),
        (lambda p: p.update(chars=p["chars"][:-1]), "vocab|characters|tok_emb"),
        (lambda p: p["config"].update(n_embd=32), "does not fit"),
        (lambda p: p["tensors"].pop(), "missing"),
        (lambda p: p.update(version=99), "version"),
        (lambda p: p.update(format="other"), "not a file written by export_gpt"),
        (lambda p: p.pop("config"), "corrupt"),
    ],
)
def test_load_refuses_corrupt_files(exported, edit, message: str) -> None:
    _, _, path = exported
    with pytest.raises(ValueError, match=message):
        load_gpt(corrupt(path, edit))


def test_load_refuses_truncated_and_foreign_files(exported, tmp_path: Path) -> None:
    _, _, path = exported
    text = path.read_text()
    path.write_text(text[: len(text) // 2])
    with pytest.raises(ValueError, match="does not parse"):
        load_gpt(path)
    other = tmp_path / "other.js"
    other.write_text("console.log('hello');\n")
    with pytest.raises(ValueError, match="not a file written by export_gpt"):
        load_gpt(other)
    with pytest.raises(FileNotFoundError):
        load_gpt(tmp_path / "missing.js")


def test_the_books_model_file_loads_and_is_small() -> None:
    """book/explorer/gpt_shakespeare.js, the explorer page's model, is a working checkpoint."""
    path = Path(__file__).resolve().parents[1] / "book" / "explorer" / "gpt_shakespeare.js"
    assert path.stat().st_size < 1_000_000, path.stat().st_size
    model, tok = load_gpt(path)
    assert model.config == GPTConfig(vocab_size=tok.vocab_size)  # the book's configuration
    assert tok.chars == sorted(tok.chars) and "\n" in tok.chars  # Tiny Shakespeare's characters
    with torch.no_grad():
        logits, _ = model(torch.tensor([tok.encode("ROMEO:\nBut, soft! what light")]))
    # A trained model: the letter after "ligh" is far more likely than uniform (1/65).
    probs = torch.softmax(logits[0, -2], dim=-1)  # after "...ligh"
    assert probs[tok.stoi["t"]] > 0.5, probs[tok.stoi["t"]].item()


@pytest.mark.parametrize("switch", [{"pos": "rope"}, {"norm": "rmsnorm"}, {"mlp": "relu2"}])
def test_only_chapter_8s_architecture_is_exported(tmp_path, switch: dict) -> None:
    model = GPT(GPTConfig(vocab_size=3, block_size=4, n_layer=1, n_head=2, n_embd=8, **switch))
    with pytest.raises(ValueError, match="only chapter 8's architecture can be exported"):
        export_gpt(model, CharTokenizer("abc"), tmp_path / "m.js")


def test_export_stores_the_size_fields_only(tmp_path) -> None:
    model = GPT(GPTConfig(vocab_size=3, block_size=4, n_layer=1, n_head=2, n_embd=8))
    path = export_gpt(model, CharTokenizer("abc"), tmp_path / "m.js")
    config = read_export(path)["config"]
    assert list(config) == ["vocab_size", "block_size", "n_layer", "n_head", "n_embd", "dropout",
                            "bias"]  # fmt: skip


def test_the_shipped_model_re_exports_to_the_same_bytes(tmp_path) -> None:
    """The file format is stable: loading the book's exported model and exporting it again
    writes the same file, byte for byte."""
    shipped = Path(__file__).resolve().parents[1] / "book" / "explorer" / "gpt_shakespeare.js"
    model, tokenizer = load_gpt(shipped)
    again = export_gpt(model, tokenizer, tmp_path / "again.js")
    assert again.read_bytes() == shipped.read_bytes()


# shipped_checkpoint: the checkout's file first, else a verified download, cached (no network)
def _no_network(url: str, timeout: float) -> bytes:
    raise AssertionError(f"tried to download {url}")


@pytest.fixture
def no_checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working folder outside any checkout, with the package itself outside one too."""
    outside = tmp_path / "outside"
    outside.mkdir()
    monkeypatch.setattr(export, "_PACKAGE_DIR", outside)
    monkeypatch.setattr(export, "_fetch", _no_network)
    return outside


def test_shipped_checkpoint_in_this_checkout_is_the_book_file() -> None:
    path = shipped_checkpoint(Path(__file__).parent)
    assert path == Path(__file__).resolve().parents[1] / "book" / "explorer" / "gpt_shakespeare.js"
    model, tok = load_gpt(path)
    assert tok.vocab_size == 65 and model.config.n_layer == 4


def test_shipped_checkpoint_found_from_a_subfolder(no_checkout: Path, exported) -> None:
    _, _, source = exported
    book = no_checkout / "repo" / "book"
    (book / "explorer").mkdir(parents=True)
    (book / "part2").mkdir()
    target = book / "explorer" / "gpt_shakespeare.js"
    target.write_bytes(source.read_bytes())
    assert shipped_checkpoint(book / "part2", cache_dir=no_checkout / "cache") == target


def test_shipped_checkpoint_downloads_once_and_verifies(
    no_checkout: Path, exported, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, _, source = exported
    calls = []

    def fake_fetch(url: str, timeout: float) -> bytes:
        calls.append((url, timeout))
        return source.read_bytes()

    monkeypatch.setattr(export, "_fetch", fake_fetch)
    cache = no_checkout / "cache"
    cache.mkdir()
    (cache / "gpt_shakespeare.js").write_text("a run's own copy, not the shipped model")
    path = shipped_checkpoint(no_checkout, cache_dir=cache, url="https://example.org/m.js")
    assert path == cache / "shipped" / "gpt_shakespeare.js"
    assert calls == [("https://example.org/m.js", 60.0)]
    loaded, _ = load_gpt(path)
    x = torch.randint(0, 65, (2, 16))
    with torch.no_grad():
        assert (loaded(x)[0] - model(x)[0]).abs().max() < 0.05  # float16 weights
    # the second call reads the cached copy and does not download again
    monkeypatch.setattr(export, "_fetch", _no_network)
    assert shipped_checkpoint(no_checkout, cache_dir=cache) == path
    assert sorted(p.name for p in path.parent.iterdir()) == ["gpt_shakespeare.js"]


def test_shipped_checkpoint_refuses_a_corrupt_download(
    no_checkout: Path, exported, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, _, source = exported
    truncated = source.read_bytes()[:-5000]
    monkeypatch.setattr(export, "_fetch", lambda url, timeout: truncated)
    cache = no_checkout / "cache"
    with pytest.raises(ValueError, match="not a valid model file"):
        shipped_checkpoint(no_checkout, cache_dir=cache)
    assert list((cache / "shipped").iterdir()) == []  # nothing kept, no partial file


def test_shipped_checkpoint_offline_and_bad_arguments(
    no_checkout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = no_checkout / "cache"
    with pytest.raises(FileNotFoundError, match="downloading is off"):
        shipped_checkpoint(no_checkout, cache_dir=cache, download=False)

    def offline(url: str, timeout: float) -> bytes:
        raise urllib.error.URLError("no network")

    monkeypatch.setattr(export, "_fetch", offline)
    with pytest.raises(OSError, match="Could not download"):
        shipped_checkpoint(no_checkout, cache_dir=cache)
    assert not (cache / "shipped" / "gpt_shakespeare.js").exists()
    with pytest.raises(ValueError, match="timeout"):
        shipped_checkpoint(no_checkout, cache_dir=cache, timeout=0)
