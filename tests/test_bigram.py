"""The bigram language model: a table of next-token logits, its loss, training and sampling."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from helpers.bigram import BigramLanguageModel


def ids(shape: tuple[int, ...], vocab_size: int, seed: int) -> torch.Tensor:
    return torch.randint(vocab_size, shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_logits_are_rows_of_the_table_and_loss_is_cross_entropy(seed: int) -> None:
    _ = torch.manual_seed(seed)
    vocab_size = 13
    model = BigramLanguageModel(vocab_size)
    x, y = ids((4, 9), vocab_size, seed), ids((4, 9), vocab_size, seed + 100)
    logits, loss = model(x, y)
    table = model.token_embedding_table.weight
    assert logits.shape == (4, 9, vocab_size)
    torch.testing.assert_close(logits, table[x])
    # the loss, written out: the mean negative log-probability of each target under its row
    by_hand = -F.log_softmax(table, dim=-1)[x, y].mean()
    torch.testing.assert_close(loss, by_hand)
    # and PyTorch's cross_entropy with the classes in dimension 1, (B, vocab_size, T)
    torch.testing.assert_close(loss, F.cross_entropy(logits.transpose(1, 2), y))


def test_no_targets_gives_no_loss_and_the_same_logits() -> None:
    model = BigramLanguageModel(7)
    x = ids((2, 5), 7, 0)
    logits, loss = model(x)
    assert loss is None and logits.shape == (2, 5, 7)
    torch.testing.assert_close(logits, model(x, x)[0])


def test_a_zero_table_predicts_uniformly() -> None:
    vocab_size = 65
    model = BigramLanguageModel(vocab_size)
    with torch.no_grad():
        model.token_embedding_table.weight.zero_()
    _, loss = model(ids((3, 8), vocab_size, 0), ids((3, 8), vocab_size, 1))
    torch.testing.assert_close(loss, torch.tensor(math.log(vocab_size)))


def test_a_table_of_log_probabilities_scores_the_count_cross_entropy() -> None:
    vocab_size = 6
    data = ids((5000,), vocab_size, 0)
    counts = (
        torch.bincount(data[:-1] * vocab_size + data[1:], minlength=vocab_size * vocab_size)
        .view(vocab_size, vocab_size)
        .float()
    )
    probs = counts / counts.sum(1, keepdim=True)
    model = BigramLanguageModel(vocab_size)
    with torch.no_grad():
        model.token_embedding_table.weight.copy_(probs.log())
    _, loss = model(data[None, :-1], data[None, 1:])
    expected = -(counts * probs.log()).sum() / counts.sum()  # conditional entropy of the pairs
    torch.testing.assert_close(loss, expected)


@pytest.mark.parametrize("seed", [0, 1])
def test_overfits_a_batch_down_to_its_conditional_entropy(seed: int) -> None:
    _ = torch.manual_seed(seed)
    vocab_size = 8
    model = BigramLanguageModel(vocab_size)
    x = ids((4, 16), vocab_size, seed)
    y = ids((4, 16), vocab_size, seed + 10)
    # the best any bigram table can do on this batch: the entropy of y given x, from counts
    counts = (
        torch.bincount((x * vocab_size + y).flatten(), minlength=vocab_size * vocab_size)
        .view(vocab_size, vocab_size)
        .float()
    )
    rows = counts.sum(1, keepdim=True).clamp(min=1)
    floor = -(counts * (counts / rows).clamp(min=1e-12).log()).sum() / counts.sum()
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    first = model(x, y)[1].item()
    for _ in range(500):
        _, loss = model(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    final = model(x, y)[1].item()
    assert final < first - 0.5
    assert final >= floor.item() - 1e-4, "no bigram model can beat the count table"
    assert final == pytest.approx(floor.item(), abs=0.02)


def test_a_deterministic_batch_is_learned_exactly() -> None:
    _ = torch.manual_seed(0)
    model = BigramLanguageModel(5)
    x = torch.tensor([[0, 1, 2, 3, 4, 0, 1, 2]])
    opt = torch.optim.Adam(model.parameters(), lr=0.2)
    for _ in range(300):
        _, loss = model(x[:, :-1], x[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.01


def test_generate_shape_range_prefix_and_determinism() -> None:
    _ = torch.manual_seed(0)
    vocab_size = 11
    model = BigramLanguageModel(vocab_size)
    start = ids((3, 4), vocab_size, 0)
    out = model.generate(start, 20, generator=torch.Generator().manual_seed(1))
    assert out.shape == (3, 24) and out.dtype == torch.int64
    assert torch.equal(out[:, :4], start)
    assert 0 <= out.min() and out.max() < vocab_size
    again = model.generate(start, 20, generator=torch.Generator().manual_seed(1))
    other = model.generate(start, 20, generator=torch.Generator().manual_seed(2))
    assert torch.equal(out, again) and not torch.equal(out, other)
    assert not out.requires_grad
    assert torch.equal(model.generate(start, 0), start)


def test_generate_depends_only_on_the_last_token() -> None:
    _ = torch.manual_seed(0)
    model = BigramLanguageModel(9)
    a = model.generate(torch.tensor([[1, 2, 3, 7]]), 15, generator=torch.Generator().manual_seed(4))
    b = model.generate(torch.tensor([[7]]), 15, generator=torch.Generator().manual_seed(4))
    assert torch.equal(a[:, 4:], b[:, 1:])


def test_generate_follows_a_deterministic_table() -> None:
    vocab_size = 5
    model = BigramLanguageModel(vocab_size)
    nxt = torch.tensor([2, 0, 4, 1, 3])  # a cycle 0 -> 2 -> 4 -> 3 -> 1 -> 0
    with torch.no_grad():
        model.token_embedding_table.weight.fill_(-1e4)
        model.token_embedding_table.weight[torch.arange(vocab_size), nxt] = 0.0
    out = model.generate(torch.tensor([[0]]), 10, generator=torch.Generator().manual_seed(0))
    assert out[0].tolist() == [0, 2, 4, 3, 1, 0, 2, 4, 3, 1, 0]


@pytest.mark.parametrize(
    ("idx", "targets", "message"),
    [
        (torch.tensor([1, 2, 3]), None, r"idx must be \(B, T\) token ids, got shape \(3,\)"),
        (
            torch.tensor([[1.0, 2.0]]),
            None,
            "idx must hold integer token ids, got dtype torch.float32",
        ),
        (torch.tensor([[1, 7]]), None, r"idx has ids in 1\.\.7, outside the vocabulary 0\.\.6"),
        (torch.tensor([[-1, 2]]), None, "outside the vocabulary"),
        (
            torch.tensor([[1, 2]]),
            torch.tensor([[1, 2, 3]]),
            r"targets must have the shape of idx \(1, 2\), got \(1, 3\)",
        ),
        (torch.tensor([[1, 2]]), torch.tensor([[1, 9]]), r"targets has ids in 1\.\.9"),
        (torch.tensor([[1, 2]]), torch.tensor([1, 2]), r"targets must be \(B, T\)"),
    ],
)
def test_forward_errors(idx: torch.Tensor, targets: torch.Tensor | None, message: str) -> None:
    model = BigramLanguageModel(7)
    with pytest.raises(ValueError, match=message):
        model(idx, targets)


def test_generate_and_constructor_errors() -> None:
    model = BigramLanguageModel(7)
    with pytest.raises(ValueError, match="at least one token to continue from, got T=0"):
        model.generate(torch.zeros(1, 0, dtype=torch.long), 5)
    with pytest.raises(ValueError, match="max_new_tokens must be an int >= 0, got -1"):
        model.generate(torch.zeros(1, 1, dtype=torch.long), -1)
    with pytest.raises(ValueError, match="vocab_size must be a positive int, got 0"):
        BigramLanguageModel(0)
    with pytest.raises(ValueError, match="vocab_size must be a positive int, got 7.0"):
        BigramLanguageModel(7.0)
    with pytest.raises(ValueError, match="max_new_tokens must be an int >= 0, got 2.0"):
        model.generate(torch.zeros(1, 1, dtype=torch.long), 2.0)
