"""helpers.circuits: the repeated-segment data, the attention-only model, head scores, ablation."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from helpers.circuits import (
    AttentionOnly,
    Seq2Seq,
    ablate_head,
    attention_layers,
    attention_patterns,
    copy_losses,
    copy_masks,
    phase_change_step,
    prefix_matching_score,
    previous_token_score,
    repeated_random_tokens,
    reversal_batch,
    train_copying,
    uniform_causal_weights,
)
from helpers.model import GPT, GPTConfig


def test_repeated_tokens_repeat_their_segment_and_vary_its_length() -> None:
    g = torch.Generator().manual_seed(0)
    x, lengths = repeated_random_tokens(200, 33, 32, min_len=4, generator=g)
    assert x.shape == (200, 33) and int(x.max()) < 32
    for row, n in zip(x, lengths, strict=True):
        assert torch.equal(row[n : 2 * n], row[:n])
    assert int(lengths.min()) == 4 and int(lengths.max()) == 16  # the whole range is drawn
    with pytest.raises(ValueError, match="T // 2"):
        repeated_random_tokens(2, 10, 5, min_len=3, max_len=6)


def test_copy_masks_select_the_right_predictions() -> None:
    first, second = copy_masks(torch.tensor([3]), 8)
    # predictions 0..6: x[i+1] in the first copy for i <= 1; second copy for 3 <= i <= 4
    assert first[0].tolist() == [True, True, False, False, False, False, False]
    assert second[0].tolist() == [False, False, False, True, True, False, False]
    with pytest.raises(ValueError):
        copy_masks(torch.tensor([5]), 8)


def test_attention_only_forward_by_hand_and_bad_input() -> None:
    torch.manual_seed(0)
    m = AttentionOnly(11, 8, (2, 1), 16)
    idx = torch.randint(11, (3, 8))
    x = m.tok_emb(idx) + m.pos_emb.weight
    for layer in m.layers:
        x = x + layer(x)
    assert_close(m(idx), m.head(x))
    assert [w.shape for w in attention_patterns(m, idx)] == [(3, 2, 8, 8), (3, 1, 8, 8)]
    with pytest.raises(ValueError):
        m(torch.randint(11, (1, 9)))
    with pytest.raises(ValueError):
        AttentionOnly(11, 8, 2, 16)  # type: ignore[arg-type]


def test_scores_on_constructed_patterns() -> None:
    T = 6
    prev = torch.zeros(1, 1, T, T)
    prev[0, 0, 0, 0] = 1.0
    for i in range(1, T):
        prev[0, 0, i, i - 1] = 1.0
    uniform = uniform_causal_weights(1, 1, T)
    assert_close(previous_token_score(prev), torch.tensor([1.0]))
    expected = sum(1 / (i + 1) for i in range(1, T)) / (T - 1)
    assert_close(previous_token_score(uniform), torch.tensor([expected]))
    tokens = torch.tensor([[5, 7, 9, 5, 7, 9]])  # a segment of 3, twice
    induction = torch.zeros(1, 1, T, T)
    induction[0, 0, :, 0] = 1.0
    for i in (3, 4, 5):
        induction[0, 0, i] = 0.0
        induction[0, 0, i, i - 2] = 1.0  # the token after the earlier copy
    both = torch.cat([induction, prev], dim=1)
    score = prefix_matching_score(both, tokens)
    assert_close(score, torch.tensor([1.0, 0.0]))
    # uniform: queries 3, 4, 5 have one target each among 4, 5, 6 keys
    assert_close(
        prefix_matching_score(uniform, tokens), torch.tensor([(1 / 4 + 1 / 5 + 1 / 6) / 3])
    )
    assert math.isnan(prefix_matching_score(uniform, torch.tensor([[0, 1, 2, 3, 4, 5]]))[0])
    with pytest.raises(ValueError):
        prefix_matching_score(uniform, tokens[:, :5])
    with pytest.raises(ValueError):
        previous_token_score(torch.ones(2, 3, 4))


def test_prefix_matching_counts_every_earlier_copy() -> None:
    tokens = torch.tensor([[1, 2, 1, 3, 1]])  # query 4: copies at 0 and 2 -> targets 1 and 3
    w = torch.zeros(1, 1, 5, 5)
    w[0, 0, :, 0] = 1.0
    w[0, 0, 4] = torch.tensor([0.0, 0.25, 0.0, 0.5, 0.25])
    w[0, 0, 2] = torch.tensor([0.0, 0.4, 0.6, 0.0, 0.0])  # query 2: target 1
    assert_close(prefix_matching_score(w, tokens), torch.tensor([(0.75 + 0.4) / 2]))


def test_prefix_matching_keeps_only_the_queries_asked_for() -> None:
    tokens = torch.tensor([[1, 2, 1, 3, 1]])  # queries 2 and 4 have targets (see above)
    w = torch.zeros(1, 1, 5, 5)
    w[0, 0, :, 0] = 1.0
    w[0, 0, 4] = torch.tensor([0.0, 0.25, 0.0, 0.5, 0.25])  # 0.75 on its targets
    w[0, 0, 2] = torch.tensor([0.0, 0.4, 0.6, 0.0, 0.0])  # 0.4 on its target
    only_4 = torch.tensor([[False, False, False, False, True]])
    assert_close(prefix_matching_score(w, tokens, queries=only_4), torch.tensor([0.75]))
    assert_close(prefix_matching_score(w, tokens, queries=~only_4), torch.tensor([0.4]))
    none_with_a_target = torch.tensor([[True, True, False, True, False]])
    assert math.isnan(prefix_matching_score(w, tokens, queries=none_with_a_target)[0])
    with pytest.raises(ValueError, match="boolean queries mask"):
        prefix_matching_score(w, tokens, queries=only_4.int())
    with pytest.raises(ValueError, match="boolean queries mask"):
        prefix_matching_score(w, tokens, queries=only_4[:, :4])


@pytest.mark.parametrize("kind", ["mha", "gpt"])
def test_ablate_head_removes_exactly_one_head_and_restores(kind: str) -> None:
    torch.manual_seed(1)
    if kind == "mha":
        model = AttentionOnly(13, 10, (3, 2), 12)
    else:
        model = GPT(GPTConfig(vocab_size=13, block_size=10, n_layer=2, n_head=3, n_embd=12))
    layer = attention_layers(model)[0]
    idx = torch.randint(13, (2, 10))
    before = model(idx)
    captured = {}
    handle0 = layer.c_proj.register_forward_hook(  # sees the input after the pre-hooks
        lambda _m, inp, _out: captured.__setitem__("y", inp[0].detach().clone())
    )
    handle = ablate_head(layer, 1)
    after = model(idx)
    handle.remove()
    handle0.remove()
    y = captured["y"]  # what c_proj received under ablation
    assert torch.all(y[..., 4:8] == 0) and y[..., :4].abs().sum() > 0 and y[..., 8:].abs().sum() > 0
    assert not torch.allclose(before if kind == "mha" else before[0], after if kind == "mha" else
                              after[0])  # fmt: skip
    again = model(idx)
    assert_close(again if kind == "mha" else again[0], before if kind == "mha" else before[0])
    with pytest.raises(ValueError):
        ablate_head(layer, 3)
    with pytest.raises(ValueError):
        ablate_head(torch.nn.Linear(3, 3), 0)


def test_training_makes_the_second_copy_easier() -> None:
    torch.manual_seed(0)
    m = AttentionOnly(8, 12, (2, 1), 16)
    held = repeated_random_tokens(64, 13, 8, min_len=3, generator=torch.Generator().manual_seed(1))
    h = train_copying(m, 30, seed=2, held_out=held, min_len=3, eval_every=10)
    assert h.steps == [0, 10, 20, 30]
    assert h.second[-1] < h.second[0] - 0.1  # 30 steps already help on the second copy
    assert_close(copy_losses(m, *held), (h.first[-1], h.second[-1]))
    assert phase_change_step(h, 100.0) == 0 and phase_change_step(h, -1.0) is None


def test_reversal_batch_and_seq2seq_cross_weights() -> None:
    src, tgt_in, tgt = reversal_batch(5, 6, 10, torch.Generator().manual_seed(0))
    assert torch.equal(tgt, src.flip(1)) and torch.all(tgt_in[:, 0] == 10)
    assert torch.equal(tgt_in[:, 1:], tgt[:, :-1])
    torch.manual_seed(0)
    m = Seq2Seq(10, 6)
    logits = m(src, tgt_in, need_weights=True)
    assert logits.shape == (5, 6, 10)
    w = m.cross.last_weights
    assert w.shape == (5, 1, 6, 6)
    assert_close(w.sum(-1), torch.ones(5, 1, 6))
    with pytest.raises(ValueError):
        m(src[:, :5], tgt_in[:, :5])
