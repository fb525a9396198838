"""Tests for helpers.gpt2: a Hugging Face GPT-2 checkpoint in the book's GPT, fully offline (a
small randomly initialised GPT2LMHeadModel, never a download)."""

from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")
from safetensors.torch import load_file, save_file  # noqa: E402

from helpers.gpt2 import config_from_hf, convert_state_dict, gpt_from_hf_state, load_gpt2  # noqa: E402
from helpers.model import GPT  # noqa: E402

pytestmark = pytest.mark.unit


def _hf_model(seed: int, **overrides: object) -> transformers.GPT2LMHeadModel:
    """A small random GPT-2, its weights drawn wider than GPT-2's 0.02 (so its logits, and its
    greedy choices, vary from token to token) and its biases and LayerNorm gains perturbed (so a
    mix-up among them shows)."""
    cfg = {
        "vocab_size": 101,
        "n_positions": 24,
        "n_embd": 32,
        "n_layer": 3,
        "n_head": 4,
        "bos_token_id": 0,
        "initializer_range": 0.3,
    } | overrides
    cfg["eos_token_id"] = 0
    torch.manual_seed(seed)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**cfg)).eval()
    with torch.no_grad():
        for _name, p in model.named_parameters():
            if p.dim() == 1:  # zeros and ones at initialisation: make them matter
                p.add_(0.05 * torch.randn_like(p))
    return model


@pytest.fixture(scope="module", params=[0, 1])
def saved(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    hf = _hf_model(request.param)
    path = tmp_path_factory.mktemp(f"gpt2-{request.param}")
    hf.save_pretrained(path)
    return hf, path


def test_config_is_gpt2s() -> None:
    c = config_from_hf(transformers.GPT2Config())
    assert (c.vocab_size, c.block_size, c.n_layer, c.n_head, c.n_embd) == (50257, 1024, 12, 12, 768)
    assert c.bias and c.mlp == "gelu_tanh" and c.norm_eps == 1e-5 and c.pos == "learned"


def test_same_logits_as_transformers(saved) -> None:
    hf, path = saved
    model = load_gpt2(path)
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, 101, (3, 24), generator=g)
    with torch.no_grad():
        expected = hf(idx).logits
        got, _ = model(idx)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert expected.std() > 0.1  # the comparison is not between near-constant logits


def test_same_greedy_tokens_as_transformers(saved) -> None:
    hf, path = saved
    model = load_gpt2(path)
    prompt = torch.tensor([[5, 17, 42, 3]])
    with torch.no_grad():
        expected = hf.generate(prompt, max_new_tokens=15, do_sample=False, pad_token_id=0)
    got = model.generate(prompt, max_new_tokens=15, top_k=1)
    assert got.tolist() == expected.tolist()
    assert len(set(got[0, 4:].tolist())) > 1


def test_loaded_from_a_state_dict_in_memory(saved) -> None:
    hf, _ = saved
    model = gpt_from_hf_state(hf.state_dict(), hf.config)
    idx = torch.arange(20)[None] % 101
    with torch.no_grad():
        torch.testing.assert_close(model(idx)[0], hf(idx).logits, rtol=1e-5, atol=1e-5)
    assert model.lm_head.weight is model.tok_emb.weight  # still tied


def test_matrices_are_transposed(saved) -> None:
    hf, path = saved
    model = load_gpt2(path)
    conv = hf.transformer.h[1].mlp.c_fc.weight  # Conv1D: (in, out)
    assert conv.shape == (32, 128)
    torch.testing.assert_close(model.blocks[1].mlp.c_fc.weight, conv.t())


def test_untransposed_conversion_would_fail() -> None:
    # Square c_proj matrices would load without a shape error if left untransposed: the
    # comparison with transformers is what catches it.
    hf = _hf_model(2)
    state = hf.state_dict()
    config = config_from_hf(hf.config)
    book = convert_state_dict(state, config)
    book["blocks.0.attn.c_proj.weight"] = book["blocks.0.attn.c_proj.weight"].t()
    model = GPT(config)
    model.load_state_dict(book)
    model.eval()
    idx = torch.arange(10)[None]
    with torch.no_grad():
        assert not torch.allclose(model(idx)[0], hf(idx).logits, atol=1e-4)


def test_a_gpt2model_checkpoint_without_prefix_and_with_mask_buffers() -> None:
    hf = _hf_model(3)
    state = {k.removeprefix("transformer."): v for k, v in hf.state_dict().items()}
    state.pop("lm_head.weight", None)
    for i in range(3):  # what the original "gpt2" checkpoint also stores
        state[f"h.{i}.attn.bias"] = torch.tril(torch.ones(1, 1, 24, 24))
        state[f"h.{i}.attn.masked_bias"] = torch.tensor(-1e4)
    model = gpt_from_hf_state(state, hf.config.to_dict())
    idx = torch.arange(12)[None]
    with torch.no_grad():
        torch.testing.assert_close(model(idx)[0], hf(idx).logits, rtol=1e-5, atol=1e-5)


def test_errors(tmp_path) -> None:
    hf = _hf_model(4)
    cfg = hf.config.to_dict()
    with pytest.raises(ValueError, match="activation_function"):
        config_from_hf(cfg | {"activation_function": "relu"})
    with pytest.raises(ValueError, match="n_inner"):
        config_from_hf(cfg | {"n_inner": 100})
    with pytest.raises(ValueError, match="scale_attn_by_inverse_layer_idx"):
        config_from_hf(cfg | {"scale_attn_by_inverse_layer_idx": True})
    with pytest.raises(ValueError, match="model_type"):
        config_from_hf(cfg | {"model_type": "llama"})
    state = hf.state_dict()
    config = config_from_hf(cfg)
    with pytest.raises(ValueError, match="no 'h.2.ln_1.bias'"):
        convert_state_dict({k: v for k, v in state.items() if "h.2.ln_1.bias" not in k}, config)
    with pytest.raises(ValueError, match="no place"):
        convert_state_dict(state | {"transformer.extra.weight": torch.zeros(1)}, config)
    with pytest.raises(ValueError, match="lm_head"):
        convert_state_dict(state | {"lm_head.weight": torch.zeros(101, 32)}, config)
    with pytest.raises(ValueError, match="shape"):
        convert_state_dict(state, config_from_hf(cfg | {"n_positions": 30}))
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_gpt2(tmp_path)
    # a save_pretrained directory whose safetensors lack a weight
    hf.save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    del weights["transformer.ln_f.weight"]
    save_file(weights, tmp_path / "model.safetensors")
    assert json.loads((tmp_path / "config.json").read_text())["n_layer"] == 3
    with pytest.raises(ValueError, match="ln_f.weight"):
        load_gpt2(tmp_path)


def _converted_matches_and_variant_misses(hf, **change) -> GPT:
    """Convert ``hf``; assert its logits match, and that the same weights in a GPT whose config
    differs by ``change`` miss the same tolerance (so the test could catch that difference)."""
    model = gpt_from_hf_state(hf.state_dict(), hf.config)
    variant = GPT(replace(model.config, **change)).eval()
    variant.load_state_dict(model.state_dict())
    idx = torch.arange(20)[None] % 101
    with torch.no_grad():
        expected = hf(idx).logits
        torch.testing.assert_close(model(idx)[0], expected, rtol=1e-5, atol=1e-5)
        assert not torch.allclose(variant(idx)[0], expected, rtol=1e-5, atol=1e-5)
    return model


def test_exact_gelu_would_fail() -> None:
    # GPT-2 uses the tanh GELU: the same weights with the exact GELU miss the tolerance.
    _converted_matches_and_variant_misses(_hf_model(5), mlp="gelu")


def test_layer_norm_epsilon_is_carried_over() -> None:
    hf = _hf_model(6, layer_norm_epsilon=0.5)  # large enough to change every output
    model = _converted_matches_and_variant_misses(hf, norm_eps=1e-5)
    assert model.config.norm_eps == 0.5


def test_gpt2s_tokenizer_fits_gpt2s_configuration() -> None:
    # the shipped vocabulary (helpers.bpe) has the size and end-of-text id of GPT-2's config
    from helpers.bpe import ENDOFTEXT, gpt2_tokenizer

    tok = gpt2_tokenizer()
    hf = transformers.GPT2Config()
    assert tok.vocab_size == hf.vocab_size == config_from_hf(hf).vocab_size == 50257
    assert tok.special_tokens[ENDOFTEXT] == hf.eos_token_id == hf.bos_token_id == 50256
