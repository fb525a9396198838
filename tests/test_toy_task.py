"""Tests for helpers.toy_task: the look-back task and its one-layer attention model."""

import pytest
import torch

from helpers.toy_task import (
    IGNORE,
    LookbackModel,
    ToyConfig,
    lookback_accuracy,
    make_lookback_batch,
    train_lookback,
)


def test_targets_are_the_tokens_offsets_back():
    g = torch.Generator().manual_seed(0)
    idx, targets = make_lookback_batch(4, 10, 5, (1, 3), g)
    assert idx.shape == (4, 10) and targets.shape == (4, 10, 2)
    for t in range(10):
        for i, offset in enumerate((1, 3)):
            if t < offset:
                assert (targets[:, t, i] == IGNORE).all()
            else:
                assert torch.equal(targets[:, t, i], idx[:, t - offset])
    assert idx.min() >= 0 and idx.max() < 5


@pytest.mark.parametrize(
    "kwargs",
    [dict(offsets=(0, 1)), dict(offsets=(1, 10)), dict(offsets=()), dict(vocab_size=0)],
)
def test_bad_batch_arguments_raise(kwargs):
    args = dict(batch_size=2, block_size=10, vocab_size=5, offsets=(1, 3)) | kwargs
    with pytest.raises(ValueError):
        make_lookback_batch(**args)


def test_model_shapes_and_causality():
    torch.manual_seed(0)
    model = LookbackModel(ToyConfig(n_head=2)).eval()
    idx = torch.randint(8, (3, 12))
    logits = model(idx, need_weights=True)
    assert logits.shape == (3, 12, 2, 8)
    assert model.attn.last_weights.shape == (3, 2, 12, 12)
    changed = idx.clone()
    changed[:, -1] = (changed[:, -1] + 1) % 8
    with torch.no_grad():
        assert torch.equal(model(changed)[:, :-1], model(idx)[:, :-1])  # no peeking ahead
    with pytest.raises(ValueError, match="T <= 12"):
        model(torch.zeros(1, 13, dtype=torch.long))


def test_accuracy_counts_only_valid_positions():
    torch.manual_seed(0)
    model = LookbackModel(ToyConfig()).eval()
    idx, targets = make_lookback_batch(8, 12, 8, (1, 3), torch.Generator().manual_seed(1))
    with torch.no_grad():
        predicted = model(idx).argmax(dim=-1)
    perfect = torch.where(targets == IGNORE, targets, predicted)
    torch.testing.assert_close(
        lookback_accuracy(model, idx, perfect), torch.ones(2, dtype=torch.float64)
    )


def test_in_300_steps_two_heads_learn_the_task_and_one_head_does_not():
    torch.set_num_threads(1)
    idx, targets = make_lookback_batch(256, 12, 8, (1, 3), torch.Generator().manual_seed(99))
    two, losses = train_lookback(ToyConfig(n_head=2), seed=1, steps=300)
    one, _ = train_lookback(ToyConfig(n_head=1), seed=1, steps=300)
    assert losses[-1] < 0.1 * losses[0]
    assert lookback_accuracy(two, idx, targets).min() > 0.95
    assert lookback_accuracy(one, idx, targets).min() < 0.7
    again, _ = train_lookback(ToyConfig(n_head=2), seed=1, steps=300)
    for a, b in zip(two.parameters(), again.parameters(), strict=True):
        assert torch.equal(a, b)  # seeded: the same run twice
