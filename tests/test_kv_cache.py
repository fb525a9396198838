"""The key/value cache (chapter 9): cached decoding gives the same logits and tokens as recomputing.

This file is the one home of the cache's equivalence tests: one layer, the whole GPT, and
``GPT.generate`` with and without the cache (greedy and sampled, inside and past block_size).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.testing import assert_close

from helpers.model import GPT, GPTConfig
from helpers.multihead import KVCache, MultiHeadAttention

CONFIG = GPTConfig(vocab_size=31, block_size=24, n_layer=2, n_head=4, n_embd=32)


@pytest.fixture
def model() -> GPT:
    """A freshly initialised GPT in eval mode (the cache's equivalence holds for any weights)."""
    torch.manual_seed(0)
    return GPT(CONFIG).eval()


@pytest.mark.parametrize("use_sdpa", [True, False])
def test_one_layer_token_by_token_equals_full_pass(use_sdpa: bool) -> None:
    torch.manual_seed(0)
    layer = MultiHeadAttention(32, 4, causal=True, use_sdpa=use_sdpa).eval()
    x = torch.randn(2, 11, 32)
    full = layer(x)
    cache = KVCache()
    steps = []
    for t in range(x.shape[1]):
        steps.append(layer(x[:, t : t + 1], kv_cache=cache))
        assert len(cache) == t + 1
        assert cache.k.shape == cache.v.shape == (2, 4, t + 1, 8)
    assert_close(torch.cat(steps, dim=1), full)


@pytest.mark.parametrize("chunks", [(4, 3, 4), (1, 9, 1), (10, 1)])
def test_one_layer_in_chunks_equals_full_pass(chunks: tuple[int, ...]) -> None:
    """Several new tokens at once after a non-empty cache need the offset causal mask."""
    torch.manual_seed(3)
    layer = MultiHeadAttention(32, 4, causal=True).eval()
    x = torch.randn(1, sum(chunks), 32)
    cache, outs, start = KVCache(), [], 0
    for size in chunks:
        outs.append(layer(x[:, start : start + size], kv_cache=cache))
        start += size
    assert len(cache) == sum(chunks)
    assert_close(torch.cat(outs, dim=1), layer(x))


@pytest.mark.parametrize("prompt_len", [1, 17])
def test_gpt_cached_logits_equal_uncached_step_by_step(model: GPT, prompt_len: int) -> None:
    g = torch.Generator().manual_seed(prompt_len)
    idx = torch.randint(CONFIG.vocab_size, (2, CONFIG.block_size), generator=g)
    caches = [KVCache() for _ in model.blocks]
    with torch.no_grad():
        logits, _ = model(idx[:, :prompt_len], kv_caches=caches)  # prefill
        assert_close(logits, model(idx[:, :prompt_len])[0])
        for t in range(prompt_len, CONFIG.block_size):
            step, _ = model(idx[:, t : t + 1], kv_caches=caches)
            assert all(len(c) == t + 1 for c in caches)
            full, _ = model(idx[:, : t + 1])
            assert_close(step[:, -1], full[:, -1])


def test_gpt_refuses_to_grow_the_cache_past_block_size(model: GPT) -> None:
    caches = [KVCache() for _ in model.blocks]
    idx = torch.zeros(1, CONFIG.block_size, dtype=torch.long)
    with torch.no_grad():
        model(idx, kv_caches=caches)
        with pytest.raises(ValueError, match="context of 25 tokens is longer than block_size=24"):
            model(idx[:, :1], kv_caches=caches)
        with pytest.raises(ValueError, match=r"need one KVCache per layer \(2\), got 1"):
            model(idx[:, :1], kv_caches=[KVCache()])


def record_last_logits(model: GPT) -> tuple[list[torch.Tensor], torch.utils.hooks.RemovableHandle]:
    """Collect the logits of every step generate() makes (it computes the last position's only,
    so the LM head's output is ``(B, vocab_size)``)."""
    seen: list[torch.Tensor] = []
    handle = model.lm_head.register_forward_hook(lambda _m, _args, out: seen.append(out.clone()))
    return seen, handle


@pytest.mark.parametrize("prompt_len", [3, 20, 24, 30])
def test_generate_logits_equal_with_and_without_cache_past_block_size(
    model: GPT, prompt_len: int
) -> None:
    """40 new tokens cross block_size=24 (or start at or beyond it): the cache must be rebuilt."""
    prompt = torch.randint(
        CONFIG.vocab_size, (2, prompt_len), generator=torch.Generator().manual_seed(prompt_len)
    )
    runs = {}
    for use_cache in (False, True):
        seen, handle = record_last_logits(model)
        out = model.generate(prompt, 40, top_k=1, use_cache=use_cache)  # greedy: no randomness
        handle.remove()
        runs[use_cache] = (out, seen)
    assert torch.equal(runs[False][0], runs[True][0])
    assert len(runs[False][1]) == len(runs[True][1]) == 40
    assert runs[True][1][0].shape == (2, CONFIG.vocab_size)  # the last position only
    for uncached, cached in zip(runs[False][1], runs[True][1], strict=False):
        assert_close(cached, uncached)


@pytest.mark.parametrize(("temperature", "top_k"), [(1.0, None), (0.7, 5)])
def test_sampled_tokens_identical_under_the_same_seed(
    model: GPT, temperature: float, top_k: int | None
) -> None:
    prompt = torch.randint(CONFIG.vocab_size, (3, 6), generator=torch.Generator().manual_seed(1))
    outs = [
        model.generate(
            prompt,
            50,
            temperature=temperature,
            top_k=top_k,
            use_cache=use_cache,
            generator=torch.Generator().manual_seed(100),
        )
        for use_cache in (False, True)
    ]
    assert outs[0].shape == (3, 56)
    assert torch.equal(outs[0], outs[1])
    assert torch.equal(outs[0][:, :6], prompt)


def test_generate_uses_the_cache_while_the_text_fits(model: GPT) -> None:
    """With a cache, each step after the prefill feeds one token; past block_size the window is
    rebuilt."""
    lengths: list[int] = []
    handle = model.tok_emb.register_forward_pre_hook(
        lambda _m, args: lengths.append(args[0].shape[1])
    )
    model.generate(torch.zeros(1, 20, dtype=torch.long), 8, use_cache=True)
    handle.remove()
    # prefill 20, then 1 token per step until the text holds 24 tokens, then full windows of 24.
    assert lengths == [20, 1, 1, 1, 1, 24, 24, 24]


def test_generate_restores_training_mode_and_checks_arguments(model: GPT) -> None:
    model.train()
    model.generate(torch.zeros(1, 2, dtype=torch.long), 3, use_cache=True)
    assert model.training
    with pytest.raises(ValueError, match="top_k must be in 1..31"):
        model.generate(torch.zeros(1, 2, dtype=torch.long), 3, top_k=0, use_cache=True)


def generation_work(
    model: GPT, prompt: torch.Tensor, n: int, use_cache: bool, monkeypatch: pytest.MonkeyPatch
) -> tuple[int, int, int]:
    """What ``generate`` computes: the FLOPs of its linear layers (2 per multiply-add), the
    (query, key) pairs its attention scores, and the keys and values it appends to caches."""
    flops, pairs, appended = [0], [0], [0]
    sdpa, append = F.scaled_dot_product_attention, KVCache.append

    def count_linear(layer: nn.Module, args: tuple[torch.Tensor, ...], _out: object) -> None:
        flops[0] += 2 * args[0].numel() * layer.out_features

    def counting_sdpa(q: torch.Tensor, k: torch.Tensor, *args: object, **kwargs: object):
        pairs[0] += q.shape[:-1].numel() * k.shape[-2]
        return sdpa(q, k, *args, **kwargs)

    def counting_append(self: KVCache, k: torch.Tensor, v: torch.Tensor):
        appended[0] += k.shape[-2]
        return append(self, k, v)

    hooks = [
        m.register_forward_hook(count_linear) for m in model.modules() if isinstance(m, nn.Linear)
    ]
    monkeypatch.setattr(F, "scaled_dot_product_attention", counting_sdpa)
    monkeypatch.setattr(KVCache, "append", counting_append)
    model.generate(prompt, n, top_k=1, use_cache=use_cache)
    monkeypatch.undo()
    for hook in hooks:
        hook.remove()
    return flops[0], pairs[0], appended[0]


def test_the_cache_never_costs_more_than_recomputing_past_block_size(
    model: GPT, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With learned positions, once the text is longer than block_size every step re-embeds the
    whole window (each token's position changed): a step with use_cache does exactly the work of
    a step without, and keeps no cache that the next step could not use."""
    prompt = torch.zeros(1, CONFIG.block_size, dtype=torch.long)  # every step slides the window
    cached = generation_work(model, prompt, 10, True, monkeypatch)
    uncached = generation_work(model, prompt, 10, False, monkeypatch)
    assert cached[:2] == uncached[:2]
    assert uncached[0] > 0 and uncached[1] == 10 * CONFIG.n_layer * CONFIG.n_head * 24 * 24
    assert cached[2] == 0, "keys and values were cached that no step could use"


@pytest.mark.parametrize("prompt_len", [1, 5, 23])
def test_the_cache_saves_work_while_the_text_fits(
    model: GPT, prompt_len: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Across block_size: cheaper while the text fits, then the same work as without."""
    prompt = torch.zeros(1, prompt_len, dtype=torch.long)
    n = 2 * CONFIG.block_size
    cached = generation_work(model, prompt, n, True, monkeypatch)
    uncached = generation_work(model, prompt, n, False, monkeypatch)
    assert cached[0] < uncached[0] and cached[1] < uncached[1]
    # Caches are filled only while the text fits: positions 0 .. block_size - 1, once each.
    assert cached[2] == CONFIG.n_layer * CONFIG.block_size
