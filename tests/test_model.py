"""The GPT model: shapes, causality, clear errors, it learns, checkpoints, and sampling."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from helpers.model import (
    GPT,
    CausalSelfAttention,
    FeedForward,
    GPTConfig,
    load_checkpoint,
    save_checkpoint,
    sliding_window_mask,
)
from helpers.multihead import KVCache, MultiHeadAttention
from helpers.tokenizer import CharTokenizer

SMALL = GPTConfig(vocab_size=29, block_size=16, n_layer=2, n_head=4, n_embd=32)
VOCAB = CharTokenizer("abcdefghijklmnopqrstuvwxyz .,")  # 29 characters


def make_model(seed: int, config: GPTConfig = SMALL) -> GPT:
    torch.manual_seed(seed)
    return GPT(config).eval()


def random_ids(seed: int, B: int, T: int, vocab_size: int = SMALL.vocab_size) -> torch.Tensor:
    return torch.randint(vocab_size, (B, T), generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------------------- configuration


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"vocab_size": 0}, "vocab_size must be a positive int, got 0"),
        ({"block_size": -1}, "block_size must be a positive int, got -1"),
        ({"n_layer": 0}, "n_layer must be a positive int, got 0"),
        ({"n_head": 0}, "n_head must be a positive int, got 0"),
        ({"n_embd": 0}, "n_embd must be a positive int, got 0"),
        ({"n_embd": 64.0}, "n_embd must be a positive int, got 64.0"),
        ({"n_embd": 30, "n_head": 4}, "n_embd=30 is not divisible by n_head=4"),
        ({"dropout": 1.0}, r"dropout must be in \[0, 1\), got 1.0"),
        ({"dropout": -0.1}, r"dropout must be in \[0, 1\), got -0.1"),
        ({"pos": "alibi"}, r"pos must be one of \('learned', 'rope', 'none'\), got 'alibi'"),
        ({"norm": "rms"}, r"norm must be one of \('layernorm', 'rmsnorm'\), got 'rms'"),
        ({"mlp": "geglu"}, "mlp must be one of"),
        ({"norm_eps": 0.0}, r"norm_eps must be a number in \(0, 1\), got 0.0"),
        ({"qk_scale": -1.0}, "qk_scale must be None or a positive number, got -1.0"),
        ({"qk_norm": 1}, "qk_norm must be True or False, got 1"),
        ({"bias": "yes"}, "bias must be True or False, got 'yes'"),
        ({"n_embd": 6, "n_head": 2, "pos": "rope"}, "RoPE needs an even head_size"),
    ],
)
def test_config_rejects_bad_values(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        GPTConfig(**kwargs)


def test_default_config_builds_the_book_model() -> None:
    config = GPTConfig()
    model = GPT(config)
    assert config.vocab_size == 65
    # Per layer: 4 C^2 (attention) + 8 C^2 (feed-forward) + 2 C (LayerNorm gains); plus the tied
    # token embedding / LM head, the final LayerNorm and the position embeddings.
    C, L = config.n_embd, config.n_layer
    expected = L * (12 * C * C + 2 * C) + config.vocab_size * C + C + config.block_size * C
    assert model.num_params(non_embedding=False) == expected
    assert model.num_params() == expected - config.block_size * C


# ---------------------------------------------------------------------------- forward


@pytest.mark.parametrize(("B", "T"), [(1, 1), (3, 7), (2, 16)])
def test_output_shapes(B: int, T: int) -> None:
    model = make_model(0)
    idx = random_ids(1, B, T)
    logits, loss = model(idx)
    assert logits.shape == (B, T, SMALL.vocab_size)
    assert loss is None
    logits2, loss = model(idx, random_ids(2, B, T))
    assert_close(logits2, logits)
    assert loss is not None and loss.shape == ()


def test_loss_is_the_mean_cross_entropy() -> None:
    model = make_model(0)
    idx, targets = random_ids(1, 3, 9), random_ids(2, 3, 9)
    logits, loss = model(idx, targets)
    expected = F.cross_entropy(logits.reshape(-1, SMALL.vocab_size), targets.reshape(-1))
    assert_close(loss, expected)


def test_initial_loss_is_close_to_uniform_guessing() -> None:
    """GPT-2 initialisation makes the first logits small: the loss starts near ln(vocab_size)."""
    model = make_model(0)
    _, loss = model(random_ids(1, 8, 16), random_ids(2, 8, 16))
    assert abs(loss.item() - math.log(SMALL.vocab_size)) < 0.1


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_future_tokens_do_not_change_past_logits(seed: int) -> None:
    model = make_model(seed)
    idx = random_ids(seed, 2, 16)
    t = 9  # change every token after position t
    changed = idx.clone()
    changed[:, t + 1 :] = (
        changed[:, t + 1 :] + 1 + random_ids(seed + 10, 2, 6) % 28
    ) % SMALL.vocab_size
    assert (changed[:, t + 1 :] != idx[:, t + 1 :]).all()
    before, _ = model(idx)
    after, _ = model(changed)
    assert_close(after[:, : t + 1], before[:, : t + 1])
    # ...and the changed tokens do change the logits from position t + 1 on.
    assert (after[:, t + 1 :] - before[:, t + 1 :]).abs().amax() > 1e-3


def test_past_tokens_do_change_later_logits() -> None:
    """The converse: without attention to the past, position 10 would ignore position 0."""
    model = make_model(0)
    idx = random_ids(3, 1, 12)
    changed = idx.clone()
    changed[0, 0] = (idx[0, 0] + 1) % SMALL.vocab_size
    before, _ = model(idx)
    after, _ = model(changed)
    assert (after[0, 10] - before[0, 10]).abs().amax() > 1e-4


def test_context_longer_than_block_size_raises() -> None:
    model = make_model(0)
    with pytest.raises(
        ValueError, match=r"context of 17 tokens is longer than block_size=16; crop it"
    ):
        model(random_ids(0, 1, 17))


@pytest.mark.parametrize("bad", [-1, SMALL.vocab_size, 1000])
def test_ids_outside_the_vocabulary_raise(bad: int) -> None:
    model = make_model(0)
    idx = random_ids(0, 2, 5)
    idx[1, 3] = bad
    with pytest.raises(
        ValueError, match=re.escape(f"token ids must be in 0..{SMALL.vocab_size - 1}, got {bad}")
    ):
        model(idx)


def test_idx_must_be_two_dimensional() -> None:
    with pytest.raises(ValueError, match=r"idx must be \(B, T\) token ids, got shape \(5,\)"):
        make_model(0)(torch.zeros(5, dtype=torch.long))


def test_generate_explains_a_one_dimensional_prompt() -> None:
    with pytest.raises(ValueError, match=r"got shape \(2,\) \(for one sequence, use idx\[None\]\)"):
        make_model(0).generate(torch.tensor([1, 2]), 5)


def test_float_ids_get_a_clear_error() -> None:
    with pytest.raises(
        ValueError, match="idx must hold integer token ids, got dtype torch.float32"
    ):
        make_model(0)(torch.tensor([[1.0, 2.0]]))
    with pytest.raises(ValueError, match="integer token ids"):
        make_model(0).generate(torch.tensor([[1.0, 2.0]]), 3)


def test_targets_must_match_idx() -> None:
    with pytest.raises(
        ValueError, match=r"targets must have the shape of idx \(2, 5\), got \(2, 4\)"
    ):
        make_model(0)(random_ids(0, 2, 5), random_ids(0, 2, 4))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fused_attention_equals_the_explicit_path(seed: int) -> None:
    """need_weights=True runs the book's explicit softmax(QK^T/sqrt(d))V; the default runs
    F.scaled_dot_product_attention. Same model, same logits."""
    model = make_model(seed)
    idx = random_ids(seed, 3, 16)
    fused, _ = model(idx)
    assert all(block.attn.last_weights is None for block in model.blocks)
    explicit, _ = model(idx, need_weights=True)
    assert_close(explicit, fused, atol=1e-5, rtol=1e-5)
    for block in model.blocks:
        w = block.attn.last_weights
        assert w is not None and w.shape == (3, SMALL.n_head, 16, 16)
        assert_close(w.sum(-1), torch.ones(3, SMALL.n_head, 16))
        assert (w.triu(diagonal=1) == 0).all()  # causal: no weight on future keys


def test_weights_are_tied_and_initialised_like_gpt2() -> None:
    config = GPTConfig(vocab_size=65, block_size=32, n_layer=8, n_head=4, n_embd=128)
    model = make_model(0, config)
    assert model.lm_head.weight is model.tok_emb.weight
    std_proj = 0.02 / math.sqrt(2 * config.n_layer)
    for block in model.blocks:
        assert abs(block.attn.c_proj.weight.std().item() - std_proj) < 0.1 * std_proj
        assert abs(block.mlp.c_proj.weight.std().item() - std_proj) < 0.1 * std_proj
        assert abs(block.mlp.c_fc.weight.std().item() - 0.02) < 0.002
    assert abs(model.tok_emb.weight.std().item() - 0.02) < 0.002


def test_feed_forward_acts_on_each_position_alone() -> None:
    torch.manual_seed(0)
    ff = FeedForward(SMALL).eval()
    x = torch.randn(2, 7, SMALL.n_embd)
    out = ff(x)
    for t in range(7):
        assert_close(ff(x[:, t : t + 1]), out[:, t : t + 1])


# ---------------------------------------------------------------------------- learning


def test_overfits_one_batch() -> None:
    torch.manual_seed(0)
    model = GPT(SMALL)
    idx, targets = random_ids(5, 4, 16), random_ids(6, 4, 16)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    _, first = model(idx, targets)
    for _ in range(150):
        _, loss = model(idx, targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    # Random targets: memorising them is the only way down. From ln(29) ~ 3.37 to well below 1.
    assert first.item() > 3.2
    assert loss.item() < 0.5


def test_dropout_is_active_in_training_and_off_in_eval() -> None:
    config = GPTConfig(vocab_size=29, block_size=16, n_layer=2, n_head=4, n_embd=32, dropout=0.3)
    model = make_model(0, config)
    idx = random_ids(0, 2, 16)
    assert_close(model(idx)[0], model(idx)[0])  # eval: deterministic
    model.train()
    assert not torch.equal(model(idx)[0], model(idx)[0])


# ---------------------------------------------------------------------------- generation


def test_generate_appends_tokens_and_crops_the_context() -> None:
    model = make_model(0)
    start = random_ids(0, 2, 3)
    out = model.generate(start, 40, generator=torch.Generator().manual_seed(0))
    assert out.shape == (2, 43)  # 43 > block_size: the context had to be cropped
    assert torch.equal(out[:, :3], start)
    assert 0 <= out.min() and out.max() < SMALL.vocab_size


def test_generate_uses_only_the_last_block_size_tokens() -> None:
    """Two prompts that differ only before the last block_size tokens sample the same next token."""
    model = make_model(1)
    long_a = random_ids(1, 1, 40)
    long_b = long_a.clone()
    long_b[0, :24] = random_ids(2, 1, 24)
    a = model.generate(long_a, 1, generator=torch.Generator().manual_seed(7))
    b = model.generate(long_b, 1, generator=torch.Generator().manual_seed(7))
    assert torch.equal(a[:, -1], b[:, -1])
    # A prompt longer than block_size on its own would raise in forward:
    with pytest.raises(ValueError, match="longer than block_size"):
        model(long_a)


def test_top_k_one_is_greedy_decoding() -> None:
    model = make_model(2)
    idx = random_ids(3, 2, 5)
    out = model.generate(idx, 12, top_k=1, generator=torch.Generator().manual_seed(0))
    greedy = idx
    for _ in range(12):
        logits, _ = model(greedy[:, -SMALL.block_size :])
        greedy = torch.cat([greedy, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(out, greedy)


def test_low_temperature_approaches_greedy_and_top_k_restricts_the_choice() -> None:
    model = make_model(3)
    idx = random_ids(4, 64, 4)
    logits, _ = model(idx)
    top3 = logits[:, -1].topk(3).indices
    out = model.generate(
        idx, 1, top_k=3, temperature=2.0, generator=torch.Generator().manual_seed(0)
    )
    assert (out[:, -1:] == top3).any(dim=1).all()
    cold = model.generate(idx, 1, temperature=1e-4, generator=torch.Generator().manual_seed(0))
    assert torch.equal(cold[:, -1], logits[:, -1].argmax(-1))


def test_generate_restores_training_mode() -> None:
    model = make_model(0).train()
    model.generate(random_ids(0, 1, 2), 2)
    assert model.training


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_new_tokens": -1}, "max_new_tokens must be an int >= 0, got -1"),
        ({"max_new_tokens": 2.5}, "max_new_tokens must be an int >= 0, got 2.5"),
        ({"top_k": 2.0}, r"top_k must be in 1\.\.29 .*, got 2.0"),
        ({"temperature": 0.0}, r"temperature must be a finite number > 0 .*, got 0\.0"),
        ({"temperature": float("nan")}, r"temperature must be a finite number > 0 .*, got nan"),
        ({"temperature": float("inf")}, r"temperature must be a finite number > 0 .*, got inf"),
        ({"temperature": "1"}, r"temperature must be a finite number > 0 .*, got '1'"),
        ({"temperature": True}, r"temperature must be a finite number > 0 .*, got True"),
        ({"top_k": 0}, r"top_k must be in 1\.\.29 .*, got 0"),
        ({"top_k": 30}, r"top_k must be in 1\.\.29 .*, got 30"),
    ],
)
def test_generate_rejects_bad_arguments(kwargs: dict, message: str) -> None:
    kwargs = {"max_new_tokens": 3, **kwargs}
    with pytest.raises(ValueError, match=message):
        make_model(0).generate(random_ids(0, 1, 2), **kwargs)


# ---------------------------------------------------------------------------- checkpoints


@pytest.mark.parametrize("seed", [0, 1])
def test_checkpoint_round_trip_gives_identical_logits(tmp_path, seed: int) -> None:
    model = make_model(seed)
    path = tmp_path / "gpt.pt"
    save_checkpoint(path, model, VOCAB)
    loaded, tokenizer = load_checkpoint(path)
    assert loaded.config == model.config
    assert tokenizer.chars == VOCAB.chars
    assert loaded.lm_head.weight is loaded.tok_emb.weight  # tying survives the round trip
    idx = random_ids(seed, 2, 16)
    assert torch.equal(loaded.eval()(idx)[0], model(idx)[0])


def test_checkpoint_refuses_a_mismatched_tokenizer(tmp_path) -> None:
    with pytest.raises(ValueError, match="tokenizer has 3 tokens but the model expects 29"):
        save_checkpoint(tmp_path / "x.pt", make_model(0), CharTokenizer("abc"))


@pytest.mark.parametrize(
    "corrupt",
    [
        lambda good: good[: len(good) // 2],  # truncated download
        lambda good: b"not a checkpoint at all",
        lambda good: b"",
    ],
    ids=["truncated", "garbage", "empty"],
)
def test_corrupt_checkpoint_raises_a_clear_error(tmp_path, corrupt) -> None:
    good = tmp_path / "good.pt"
    save_checkpoint(good, make_model(0), VOCAB)
    bad = tmp_path / "bad.pt"
    bad.write_bytes(corrupt(good.read_bytes()))
    with pytest.raises(ValueError, match=r"bad\.pt is not a checkpoint written by save_checkpoint"):
        load_checkpoint(bad)


def test_checkpoint_of_something_else_raises_a_clear_error(tmp_path) -> None:
    path = tmp_path / "other.pt"
    torch.save({"weights": torch.zeros(3)}, path)
    with pytest.raises(
        ValueError, match=r"other\.pt is not a checkpoint written by save_checkpoint.*config"
    ):
        load_checkpoint(path)


def test_missing_checkpoint_raises_file_not_found(tmp_path) -> None:
    with pytest.raises(FileNotFoundError):
        load_checkpoint(tmp_path / "nowhere.pt")


# ---------------------------------------------------------------------------- input validation


@pytest.mark.parametrize("pos", ["learned", "rope", "none"])
@pytest.mark.parametrize(
    ("idx", "message"),
    [
        ([[1, 2]], r"got list; for one sequence of ids write torch\.tensor\(\[ids\]\)"),
        (torch.tensor([[True, False]]), "integer token ids, got dtype torch.bool"),
        (torch.zeros(1, 0, dtype=torch.long), "at least one token, got T=0"),
        (torch.tensor([[1, 29]]), r"token ids must be in 0\.\.28, got 29"),
        (torch.tensor([[-1, 2]]), r"token ids must be in 0\.\.28, got -1"),
    ],
)
def test_every_architecture_rejects_bad_ids_alike(pos: str, idx: object, message: str) -> None:
    model = make_model(0, GPTConfig(**{**SMALL.__dict__, "pos": pos}))
    with pytest.raises(ValueError, match=message):
        model(idx)
    with pytest.raises(ValueError, match=message):
        model.generate(idx, 2)


# ---------------------------------------------------------------------------- GPT-2's switches


def test_config_repr_shows_the_size_and_the_changed_switches() -> None:
    assert repr(GPTConfig()) == (
        "GPTConfig(vocab_size=65, block_size=64, n_layer=4, n_head=4, n_embd=64, dropout=0.0, "
        "bias=False)"
    )
    assert repr(GPTConfig(pos="rope", qk_scale=0.5)).endswith(
        "bias=False, pos='rope', qk_scale=0.5)"
    )


def test_gpt2_size_has_gpt2s_parameter_count() -> None:
    cfg = GPTConfig(
        vocab_size=50257, block_size=1024, n_layer=12, n_head=12, n_embd=768,
        bias=True, mlp="gelu_tanh",
    )  # fmt: skip
    with torch.device("meta"):
        model = GPT(cfg)
    # GPT-2 small: 124,439,808 parameters, the tied embedding counted once.
    assert model.num_params(non_embedding=False) == 124_439_808
    assert model.blocks[0].ln_1.bias is not None and model.blocks[0].ln_1.eps == 1e-5
    assert model.blocks[0].attn.c_attn.bias is not None
    assert model.blocks[0].mlp.c_fc.bias is not None and model.lm_head.bias is None


def test_gelu_tanh_is_the_tanh_approximation() -> None:
    torch.manual_seed(0)
    mlp = FeedForward(GPTConfig(n_embd=8, n_head=2, mlp="gelu_tanh", bias=True))
    x = torch.randn(3, 8)
    h = mlp.c_fc(x)
    h = 0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h**3)))
    assert_close(mlp(x), mlp.c_proj(h))
    exact = FeedForward(GPTConfig(n_embd=8, n_head=2, bias=True))
    exact.load_state_dict(mlp.state_dict())
    assert not torch.equal(exact(x), mlp(x))  # the two GELUs differ


def test_hugging_face_gpt2_weights_map_onto_gpt() -> None:
    """With the switches GPT-2 needs, a Hugging Face GPT-2 maps onto GPT by renaming and
    transposing its Conv1D weights, and computes the same logits."""
    transformers = pytest.importorskip("transformers")
    hf_cfg = transformers.GPT2Config(
        vocab_size=29, n_positions=16, n_embd=32, n_layer=2, n_head=4,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    )  # fmt: skip
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(hf_cfg).eval()
    with torch.no_grad():  # non-trivial LayerNorm parameters
        for name, p in hf.named_parameters():
            if ".ln_" in name or name.startswith("transformer.ln_f"):
                p.normal_(1.0 if name.endswith("weight") else 0.0, 0.1)
    ours = GPT(
        GPTConfig(vocab_size=29, block_size=16, n_layer=2, n_head=4, n_embd=32, bias=True,
                  mlp="gelu_tanh")
    ).eval()  # fmt: skip
    src = hf.state_dict()
    state = {"tok_emb.weight": src["transformer.wte.weight"]}
    state["pos_emb.weight"] = src["transformer.wpe.weight"]
    for name in ours.state_dict():
        if name.startswith("blocks."):
            hf_name = "transformer.h." + name.removeprefix("blocks.")
            t = src[hf_name]
            conv1d = hf_name.endswith(".weight") and ("attn.c_" in hf_name or "mlp.c_" in hf_name)
            state[name] = t.t() if conv1d else t
    state["ln_f.weight"], state["ln_f.bias"] = (
        src["transformer.ln_f.weight"],
        src["transformer.ln_f.bias"],
    )
    state["lm_head.weight"] = state["tok_emb.weight"]
    ours.load_state_dict(state)
    idx = random_ids(0, 2, 16)
    assert_close(ours(idx)[0], hf(idx).logits, atol=1e-5, rtol=1e-4)


# ---------------------------------------------------------------------------- other switches

SWITCH_SETS = [
    {},
    {"pos": "rope"},
    {"pos": "none"},
    {"norm": "rmsnorm"},
    {"qk_norm": True},
    {"qk_norm": True, "qk_scale": 1.0},
    {"mlp": "relu2"},
    {"mlp": "swiglu"},
    {"pos": "rope", "norm": "rmsnorm", "qk_norm": True, "mlp": "relu2"},
]


@pytest.mark.parametrize("switches", SWITCH_SETS)
def test_every_architecture_is_causal_and_about_the_same_size(switches: dict) -> None:
    cfg = GPTConfig(**{**SMALL.__dict__, **switches})
    model = make_model(0, cfg)
    idx = random_ids(0, 1, 16)
    changed = idx.clone()
    changed[0, 9] = (idx[0, 9] + 1) % cfg.vocab_size
    a, b = model(idx)[0], model(changed)[0]
    assert_close(a[:, :9], b[:, :9])  # the past does not see the future
    assert not torch.allclose(a[:, 9:], b[:, 9:])
    C, L = cfg.n_embd, cfg.n_layer
    per_block = (model.num_params() - cfg.vocab_size * C - C) / L  # embedding, final gain
    assert abs(per_block - 12 * C * C) <= 0.02 * 12 * C * C


@pytest.mark.parametrize("switches", SWITCH_SETS)
def test_every_architecture_initialises_like_gpt2(switches: dict) -> None:
    model = make_model(0, GPTConfig(**{**SMALL.__dict__, "n_embd": 256, **switches}))
    for name, p in model.named_parameters():
        if p.dim() == 2:
            expected = 0.02 / math.sqrt(2 * 2) if name.endswith("c_proj.weight") else 0.02
            assert abs(p.std().item() - expected) < 0.1 * expected, name
        else:
            assert torch.all(p == 1.0), name  # gains start at one, there are no biases


@pytest.mark.parametrize("switches", [s for s in SWITCH_SETS[1:] if s.get("mlp") != "swiglu"])
def test_shared_weights_start_equal_under_the_same_seed(switches: dict) -> None:
    """An ablation compares the switch alone: every weight a variant shares with the default
    model starts with the same values for the same seed (SwiGLU's wider first matrix draws
    more random numbers, so the weights after it differ)."""
    base = make_model(3).state_dict()
    other = make_model(3, GPTConfig(**{**SMALL.__dict__, **switches})).state_dict()
    shared = [k for k in other if k in base and other[k].shape == base[k].shape]
    assert len(shared) >= len(other) - 2 * SMALL.n_layer - 1  # all but the swapped MLP/norms
    for name in shared:
        assert torch.equal(other[name], base[name]), name


def test_qk_norm_is_applied_with_its_gains_and_the_scale() -> None:
    from helpers.norms import rms_norm

    cfg = GPTConfig(**{**SMALL.__dict__, "qk_norm": True, "qk_scale": 0.7, "norm_eps": 1e-6})
    attn = make_model(0, cfg).blocks[0].attn
    with torch.no_grad():
        attn.q_norm.weight.uniform_(0.5, 1.5)
        attn.k_norm.weight.uniform_(0.5, 1.5)
    x = torch.randn(2, 16, 32, generator=torch.Generator().manual_seed(0))
    q, k, v = (t.view(2, 16, 4, 8).transpose(1, 2) for t in attn.c_attn(x).split(32, dim=-1))
    q, k = rms_norm(q, attn.q_norm.weight, 1e-6), rms_norm(k, attn.k_norm.weight, 1e-6)
    scores = (q @ k.transpose(-2, -1) * 0.7).masked_fill(
        ~torch.ones(16, 16, dtype=torch.bool).tril(), float("-inf")
    )
    y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(2, 16, 32)
    assert_close(attn(x), attn.c_proj(y))
    assert_close(attn(x, need_weights=True), attn.c_proj(y))


def test_rope_attention_is_rotation_after_qk_norm() -> None:
    from helpers.rope import apply_rope

    cfg = GPTConfig(**{**SMALL.__dict__, "pos": "rope", "qk_norm": True})
    attn = make_model(0, cfg).blocks[0].attn
    x = torch.randn(2, 8, 32, generator=torch.Generator().manual_seed(1))
    q, k, v = (t.view(2, 8, 4, 8).transpose(1, 2) for t in attn.c_attn(x).split(32, dim=-1))
    pos = torch.arange(3, 11)
    q, k = apply_rope(attn.q_norm(q), pos), apply_rope(attn.k_norm(k), pos)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert_close(attn(x, offset=3), attn.c_proj(y.transpose(1, 2).reshape(2, 8, 32)))


def test_sliding_window_mask() -> None:
    m = sliding_window_mask(4, T_past=2, window=3)
    expected = torch.tensor(
        [[1, 1, 1, 0, 0, 0], [0, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 0], [0, 0, 0, 1, 1, 1]]
    ).bool()
    assert torch.equal(m, expected)


@pytest.mark.parametrize("pos", ["rope", "none"])
def test_rolling_cache_equals_sliding_window_far_beyond_block_size(pos: str) -> None:
    cfg = GPTConfig(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=16, pos=pos)
    model = make_model(0, cfg)
    idx = torch.randint(11, (2, 60), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        full, _ = model(idx)  # every token sees itself and the 7 before it, in every layer
        window = torch.stack(  # the last position's logits from its receptive field alone
            [model(idx[:, max(0, t - 14) : t + 1])[0][:, -1] for t in range(50, 60)], dim=1
        )
        caches = model.new_caches()
        prefill, _ = model(idx[:, :5], kv_caches=caches)
        steps = [model(idx[:, t : t + 1], kv_caches=caches)[0] for t in range(5, 60)]
    assert_close(torch.cat([prefill, *steps], dim=1), full, atol=1e-5, rtol=1e-4)
    if pos == "none":  # without positions the receptive field alone gives the same logits
        assert_close(window, full[:, 50:], atol=1e-5, rtol=1e-4)
    assert len(caches[0]) == 7 and caches[0].seen == 60  # block_size - 1 kept


def test_generate_cached_equals_uncached_beyond_block_size() -> None:
    cfg = GPTConfig(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=16, pos="rope")
    model = make_model(0, cfg)
    prompt = torch.randint(11, (1, 3), generator=torch.Generator().manual_seed(0))
    outs = [
        model.generate(prompt, 40, use_cache=c, top_k=4, generator=torch.Generator().manual_seed(1))
        for c in (False, True)
    ]
    assert torch.equal(outs[0], outs[1])
    assert outs[0].shape == (1, 43)


def test_dropout_works_with_every_switch() -> None:
    cfg = GPTConfig(**{**SMALL.__dict__, "pos": "rope", "mlp": "swiglu", "dropout": 0.5})
    model = make_model(0, cfg).train()
    idx = random_ids(0, 2, 16)
    assert not torch.equal(model(idx)[0], model(idx)[0])
    model.eval()
    assert torch.equal(model(idx)[0], model(idx)[0])


# ---------------------------------------------------------------------------- the attention layer


@pytest.mark.parametrize("bias", [False, True])
def test_attention_is_its_own_layer_and_computes_multihead_attention(bias: bool) -> None:
    """With no option switched on, the GPT's attention is chapter 5's multi-head attention: the
    same parameters (a state_dict loads across) and the same outputs, with and without a cache."""
    assert not issubclass(CausalSelfAttention, MultiHeadAttention)
    cfg = GPTConfig(**{**SMALL.__dict__, "bias": bias})
    attn = make_model(0, cfg).blocks[1].attn
    reference = MultiHeadAttention(cfg.n_embd, cfg.n_head, bias=bias).eval()
    reference.load_state_dict(attn.state_dict())  # strict: the same names and shapes
    x = torch.randn(2, 11, cfg.n_embd, generator=torch.Generator().manual_seed(1))
    assert_close(attn(x), reference(x))
    assert_close(attn(x, need_weights=True), reference(x, need_weights=True))
    assert_close(attn.last_weights, reference.last_weights)
    ours, theirs = KVCache(), KVCache()
    for start, stop in ((0, 4), (4, 5), (5, 11)):
        assert_close(attn(x[:, start:stop], ours), reference(x[:, start:stop], kv_cache=theirs))


# ---------------------------------------------------------------------------- generate's edge cases


@pytest.mark.parametrize("top_k", ["5", 5.0, np.float64(5.0)])
def test_top_k_that_is_not_an_int_is_named_with_its_type(top_k: object) -> None:
    with pytest.raises(ValueError, match=re.escape(f"got {top_k!r}")) as err:
        make_model(0).generate(random_ids(0, 1, 2), 3, top_k=top_k)
    assert not str(err.value).endswith("got 5")  # '5' and 5.0 do not print as a bare 5


def test_numpy_integers_are_accepted_like_ints() -> None:
    model, idx = make_model(0), random_ids(0, 2, 3)
    expected = model.generate(idx, 6, top_k=5, generator=torch.Generator().manual_seed(2))
    got = model.generate(
        idx, np.int64(6), top_k=np.int64(5), generator=torch.Generator().manual_seed(2)
    )
    assert torch.equal(got, expected)
    with pytest.raises(ValueError, match=r"top_k must be in 1\.\.29 .*, got np\.int64\(30\)"):
        model.generate(idx, 6, top_k=np.int64(30))


@pytest.mark.parametrize(
    ("idx", "shape"),
    [
        (torch.tensor([[]]), "(1, 0)"),  # a float tensor: the emptiness is what to report
        (torch.zeros(1, 0, dtype=torch.long), "(1, 0)"),
        (torch.tensor([]), "(0,)"),
    ],
)
def test_an_empty_prompt_is_reported_as_empty(idx: torch.Tensor, shape: str) -> None:
    message = f"idx is empty: it must hold at least one token, got T=0 (shape {shape})"
    with pytest.raises(ValueError, match=re.escape(message)):
        make_model(0).generate(idx, 3)
    with pytest.raises(ValueError, match=re.escape(message)):
        make_model(0)(idx)


@pytest.mark.parametrize("temperature", [1e-45, 1e-40, 5e-324])
def test_a_vanishing_temperature_decodes_greedily(temperature: float) -> None:
    """Dividing the logits by 1e-45 overflows float32: the limit, greedy decoding, is used."""
    model, idx = make_model(1), random_ids(1, 3, 4)
    greedy = model.generate(idx, 10, top_k=1)
    cold = model.generate(idx, 10, temperature=temperature, generator=torch.Generator())
    assert torch.equal(cold, greedy)
    cold_top = model.generate(idx, 10, temperature=temperature, top_k=3, use_cache=True)
    assert torch.equal(cold_top, greedy)


def test_max_new_tokens_is_capped_with_a_clear_message() -> None:
    with pytest.raises(
        ValueError,
        match=r"max_new_tokens=1,000,000,000 is more than one call of generate\(\) makes "
        r"\(100,000, .*generate a longer text in pieces",
    ):
        make_model(0).generate(random_ids(0, 1, 2), 10**9)
