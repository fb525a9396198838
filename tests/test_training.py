"""Batches, the split, the learning-rate schedule, loss estimates and the training loop."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from helpers.bigram import BigramLanguageModel
from helpers.training import (
    TrainConfig,
    cosine_lr,
    estimate_loss,
    get_batch,
    make_adamw,
    train,
    train_step,
    train_val_split,
)


def random_tokens(n: int = 1000, vocab_size: int = 11, seed: int = 0) -> torch.Tensor:
    return torch.randint(vocab_size, (n,), generator=torch.Generator().manual_seed(seed))


# ---- get_batch ---------------------------------------------------------------------------------


def test_get_batch_shapes_and_dtype() -> None:
    x, y = get_batch(
        random_tokens(), block_size=8, batch_size=4, generator=torch.Generator().manual_seed(0)
    )
    assert x.shape == y.shape == (4, 8)
    assert x.dtype == y.dtype == torch.int64


def test_y_is_x_shifted_by_one_in_the_data() -> None:
    data = random_tokens(500)
    B, T, seed = 16, 10, 3
    x, y = get_batch(data, T, B, generator=torch.Generator().manual_seed(seed))
    # Replay the generator to recover each window's start, and read the windows off the data.
    starts = torch.randint(len(data) - T, (B,), generator=torch.Generator().manual_seed(seed))
    for b, i in enumerate(starts.tolist()):
        assert torch.equal(x[b], data[i : i + T])
        assert torch.equal(y[b], data[i + 1 : i + T + 1])
    assert torch.equal(x[:, 1:], y[:, :-1])


def test_windows_are_contiguous_positions() -> None:
    data = torch.arange(50)  # each token is its own position
    x, y = get_batch(data, 7, 64, generator=torch.Generator().manual_seed(1))
    assert torch.equal(x - x[:, :1], torch.arange(7).expand(64, 7))
    assert torch.equal(y, x + 1)


def test_every_start_is_reachable_and_the_last_target_is_in_range() -> None:
    data = torch.arange(12)
    x, y = get_batch(data, 4, 2000, generator=torch.Generator().manual_seed(0))
    assert set(x[:, 0].tolist()) == set(range(12 - 4))  # starts 0..7, so y reaches the last token
    assert y.max().item() == 11


def test_get_batch_is_deterministic_with_a_generator_and_spares_the_global_rng() -> None:
    data = random_tokens()
    _ = torch.manual_seed(123)
    state = torch.get_rng_state()
    a = get_batch(data, 8, 4, generator=torch.Generator().manual_seed(7))
    b = get_batch(data, 8, 4, generator=torch.Generator().manual_seed(7))
    c = get_batch(data, 8, 4, generator=torch.Generator().manual_seed(8))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0])
    assert torch.equal(torch.get_rng_state(), state)


@pytest.mark.parametrize(
    ("data", "block_size", "batch_size", "message"),
    [
        (
            torch.zeros(2, 50, dtype=torch.long),
            4,
            2,
            r"1-D tensor of token ids, got shape \(2, 50\)",
        ),
        (torch.zeros(50, dtype=torch.long), 0, 2, "block_size must be a positive int, got 0"),
        (torch.zeros(50, dtype=torch.long), 4, 0, "batch_size must be a positive int, got 0"),
        (torch.zeros(50, dtype=torch.long), 4.0, 2, "block_size must be a positive int, got 4.0"),
        (torch.zeros(8, dtype=torch.long), 8, 2, "need more than block_size=8 tokens, got 8"),
    ],
)
def test_get_batch_errors(
    data: torch.Tensor, block_size: int, batch_size: int, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        get_batch(data, block_size, batch_size)


# ---- train_val_split ---------------------------------------------------------------------------


def test_train_val_split_is_contiguous() -> None:
    data = torch.arange(1000)
    train_data, val_data = train_val_split(data, 0.9)
    assert len(train_data) == 900 and len(val_data) == 100
    assert torch.equal(torch.cat([train_data, val_data]), data)
    train_data, val_data = train_val_split(torch.arange(1_115_394))
    assert len(train_data) == 1_003_854 and len(val_data) == 111_540


@pytest.mark.parametrize("fraction", [0.0, 1.0, -0.1, 1.5])
def test_train_val_split_rejects_bad_fractions(fraction: float) -> None:
    with pytest.raises(ValueError, match=r"train_fraction must be in \(0, 1\)"):
        train_val_split(torch.arange(10), fraction)


def test_train_val_split_rejects_2d() -> None:
    with pytest.raises(ValueError, match="1-D tensor"):
        train_val_split(torch.zeros(3, 3))


# ---- cosine_lr ---------------------------------------------------------------------------------


def test_cosine_lr_values() -> None:
    kw = dict(max_lr=1e-3, warmup_steps=10, total_steps=110, min_lr=1e-4)
    assert cosine_lr(0, **kw) == pytest.approx(1e-4)  # 1/10 of the peak
    assert cosine_lr(4, **kw) == pytest.approx(5e-4)
    assert cosine_lr(9, **kw) == pytest.approx(1e-3)  # end of warm-up: the peak
    assert cosine_lr(10, **kw) == pytest.approx(1e-3)  # decay starts at the peak
    assert cosine_lr(60, **kw) == pytest.approx(5.5e-4)  # half-way: the mean of peak and floor
    assert cosine_lr(35, **kw) == pytest.approx(1e-4 + 0.5 * 9e-4 * (1 + math.cos(math.pi / 4)))
    assert cosine_lr(110, **kw) == pytest.approx(1e-4)
    assert cosine_lr(10_000, **kw) == pytest.approx(1e-4)
    lrs = [cosine_lr(s, **kw) for s in range(10, 111)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:], strict=False)), "the decay must be monotone"


def test_cosine_lr_without_warmup_starts_at_the_peak() -> None:
    assert cosine_lr(0, max_lr=0.5, warmup_steps=0, total_steps=10) == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("step", "kw", "message"),
    [
        (-1, dict(max_lr=1.0, warmup_steps=1, total_steps=10), "step must be >= 0"),
        (0, dict(max_lr=1.0, warmup_steps=-1, total_steps=10), "must be >= 0, got -1, 10"),
        (
            0,
            dict(max_lr=1.0, warmup_steps=1, total_steps=10, min_lr=2.0),
            "need 0 <= min_lr <= max_lr",
        ),
    ],
)
def test_cosine_lr_errors(step: int, kw: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        cosine_lr(step, **kw)


# ---- estimate_loss -----------------------------------------------------------------------------


def test_estimate_loss_is_deterministic_and_spares_the_callers_rng() -> None:
    _ = torch.manual_seed(0)
    model = BigramLanguageModel(11)
    splits = {"train": random_tokens(seed=1), "val": random_tokens(seed=2)}
    _ = torch.manual_seed(99)
    state = torch.get_rng_state()
    first = estimate_loss(model, splits, block_size=8, batch_size=4, eval_steps=5)
    assert torch.equal(torch.get_rng_state(), state), "the caller's random stream must be untouched"
    second = estimate_loss(model, splits, block_size=8, batch_size=4, eval_steps=5)
    assert first == second
    assert set(first) == {"train", "val"} and first["train"] != first["val"]
    other_seed = estimate_loss(model, splits, block_size=8, batch_size=4, eval_steps=5, seed=1)
    assert other_seed != first


def test_estimate_loss_is_the_mean_over_its_batches() -> None:
    _ = torch.manual_seed(0)
    model = BigramLanguageModel(11)
    data = random_tokens(seed=3)
    g = torch.Generator().manual_seed(5)
    losses = []
    for _ in range(4):
        x, y = get_batch(data, 6, 3, generator=g)
        losses.append(model(x, y)[1].item())
    got = estimate_loss(model, {"val": data}, block_size=6, batch_size=3, eval_steps=4, seed=5)[
        "val"
    ]
    assert got == pytest.approx(sum(losses) / 4, rel=1e-6)


def test_estimate_loss_restores_the_training_mode() -> None:
    seen = []

    class Spy(nn.Module):  # records the mode it is called in
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[None, torch.Tensor]:
            seen.append(self.training)
            return None, torch.tensor(1.0)

    model = Spy()
    model.train()
    assert estimate_loss(model, {"a": random_tokens()}, 4, 2, 3) == {"a": 1.0}
    assert seen == [False] * 3 and model.training
    model.eval()
    estimate_loss(model, {"a": random_tokens()}, 4, 2, 1)
    assert not model.training


def test_estimate_loss_errors() -> None:
    model = BigramLanguageModel(11)
    with pytest.raises(ValueError, match="eval_steps must be a positive int, got 0"):
        estimate_loss(model, {"val": random_tokens()}, 4, 2, 0)
    with pytest.raises(ValueError, match="splits is empty"):
        estimate_loss(model, {}, 4, 2, 1)


# ---- train -------------------------------------------------------------------------------------


def repeating_text(n: int = 600) -> torch.Tensor:
    return torch.tensor([0, 1, 2, 3, 4] * (n // 5))  # the next token is fully determined


def test_train_reduces_the_loss_on_a_learnable_problem() -> None:
    _ = torch.manual_seed(0)
    model = BigramLanguageModel(5)
    data = repeating_text()
    config = TrainConfig(
        max_steps=200,
        batch_size=8,
        block_size=8,
        max_lr=0.1,
        min_lr=0.01,
        warmup_steps=10,
        eval_interval=50,
        eval_steps=4,
    )
    calls = []
    history = train(model, data[:500], data[500:], config, progress=calls.append)
    assert calls == [1] * 200
    assert history.steps == [0, 50, 100, 150, 200]
    assert len(history.train_loss) == len(history.val_loss) == 5
    assert history.train_loss[0] > 1.0, "a random table starts far from the answer"
    assert history.val_loss[-1] < 0.1 * history.val_loss[0]
    assert history.val_loss[-1] < 0.2


def test_train_is_reproducible() -> None:
    config = TrainConfig(
        max_steps=30,
        batch_size=4,
        block_size=6,
        max_lr=0.05,
        warmup_steps=5,
        eval_interval=10,
        eval_steps=2,
    )
    data = random_tokens(400, vocab_size=7)
    runs = []
    for _ in range(2):
        _ = torch.manual_seed(0)
        model = BigramLanguageModel(7)
        train(model, data[:300], data[300:], config)
        runs.append(model.token_embedding_table.weight.detach().clone())
    torch.testing.assert_close(runs[0], runs[1], rtol=0, atol=0)


def test_no_eval_interval_estimates_once_at_the_end() -> None:
    """Estimates draw their own batches: skipping them leaves the training and the last estimate
    exactly as they were."""
    data = random_tokens(400, vocab_size=7)
    runs = {}
    for interval in (10, None):
        config = TrainConfig(
            max_steps=30, batch_size=4, block_size=6, max_lr=0.05, warmup_steps=5,
            eval_interval=interval, eval_steps=2,
        )  # fmt: skip
        _ = torch.manual_seed(0)
        model = BigramLanguageModel(7)
        history = train(model, data[:300], data[300:], config)
        runs[interval] = (history, model.token_embedding_table.weight.detach().clone())
    (every, w_every), (once, w_once) = runs[10], runs[None]
    assert every.steps == [0, 10, 20, 30] and once.steps == [30]
    assert once.val_loss == every.val_loss[-1:] and once.train_loss == every.train_loss[-1:]
    torch.testing.assert_close(w_once, w_every, rtol=0, atol=0)


@pytest.mark.parametrize("seed", [0, 1])
def test_train_is_the_loop_written_out(seed: int) -> None:
    """Chapter 8 writes the loop out and checks train() against it bit for bit; so does this."""
    from helpers.model import GPT, GPTConfig

    config = TrainConfig(
        max_steps=12,
        batch_size=3,
        block_size=6,
        max_lr=0.02,
        min_lr=0.002,
        warmup_steps=4,
        eval_interval=5,
        eval_steps=1,
        seed=seed,
    )
    data = random_tokens(300, vocab_size=7, seed=seed)
    gpt = GPTConfig(vocab_size=7, block_size=6, n_layer=1, n_head=2, n_embd=8)
    _ = torch.manual_seed(seed)
    model = GPT(gpt)
    by_hand = GPT(gpt)
    by_hand.load_state_dict(model.state_dict())
    before = model.tok_emb.weight.detach().clone()
    train(model, data[:200], data[200:], config)

    params = list(by_hand.parameters())
    opt = torch.optim.AdamW(
        [
            {"params": [p for p in params if p.dim() >= 2], "weight_decay": config.weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
        ],
        lr=config.max_lr,
        betas=(0.9, 0.99),
    )
    g = torch.Generator().manual_seed(seed)
    for step in range(config.max_steps):
        if step < config.warmup_steps:
            lr = config.max_lr * (step + 1) / config.warmup_steps
        else:
            progress = (step - config.warmup_steps) / (config.max_steps - config.warmup_steps)
            lr = config.min_lr + 0.5 * (config.max_lr - config.min_lr) * (
                1 + math.cos(math.pi * progress)
            )
        for group in opt.param_groups:
            group["lr"] = lr
        x, y = get_batch(data[:200], config.block_size, config.batch_size, generator=g)
        _, loss = by_hand(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(by_hand.parameters(), config.grad_clip)
        opt.step()
    for p, q in zip(model.parameters(), by_hand.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=0)
    assert not torch.equal(model.tok_emb.weight, before)  # it did train


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_train_step_is_the_textbook_step(seed: int) -> None:
    torch.manual_seed(seed)
    model = BigramLanguageModel(11)
    manual = BigramLanguageModel(11)
    manual.load_state_dict(model.state_dict())
    opt = make_adamw(model, lr=1.0, weight_decay=0.1)
    manual_opt = make_adamw(manual, lr=1.0, weight_decay=0.1)
    x, y = get_batch(random_tokens(seed=seed), 8, 4, generator=torch.Generator().manual_seed(seed))

    loss = train_step(model, opt, x, y, lr=0.05, grad_clip=0.5)

    for group in manual_opt.param_groups:
        group["lr"] = 0.05
    _, manual_loss = manual(x, y)
    manual_opt.zero_grad(set_to_none=True)
    manual_loss.backward()
    nn.utils.clip_grad_norm_(manual.parameters(), 0.5)
    manual_opt.step()
    torch.testing.assert_close(loss, manual_loss)
    for p, q in zip(model.parameters(), manual.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=0)
    assert all(group["lr"] == 0.05 for group in opt.param_groups)


@pytest.mark.parametrize("clip", [0.01, 0.1])
def test_train_step_clips_the_gradient_norm(clip: float) -> None:
    # With plain SGD at lr 1 the update is minus the (clipped) gradient, so its norm is the clip.
    torch.manual_seed(0)
    model = BigramLanguageModel(11)
    before = [p.detach().clone() for p in model.parameters()]
    x, y = get_batch(random_tokens(), 8, 4, generator=torch.Generator().manual_seed(0))
    train_step(model, torch.optim.SGD(model.parameters(), lr=0.3), x, y, lr=1.0, grad_clip=clip)
    step = torch.cat([(p - b).flatten() for p, b in zip(model.parameters(), before, strict=True)])
    torch.testing.assert_close(step.norm(), torch.tensor(clip))


def test_train_step_rejects_a_negative_clip() -> None:
    model = BigramLanguageModel(5)
    x = torch.zeros(1, 2, dtype=torch.long)
    with pytest.raises(ValueError, match="grad_clip must be >= 0, got -1"):
        train_step(model, torch.optim.SGD(model.parameters(), lr=0.1), x, x, lr=0.1, grad_clip=-1)


def test_train_with_no_iterations_only_evaluates() -> None:
    model = BigramLanguageModel(5)
    before = model.token_embedding_table.weight.detach().clone()
    config = TrainConfig(max_steps=0, warmup_steps=0, batch_size=2, block_size=4, eval_steps=1)
    history = train(model, repeating_text(), repeating_text(), config)
    assert history.steps == [0]
    torch.testing.assert_close(model.token_embedding_table.weight, before, rtol=0, atol=0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(batch_size=0), "batch_size must be a positive int, got 0"),
        (dict(batch_size=12.0), "batch_size must be a positive int, got 12.0"),
        (dict(block_size=-1), "block_size must be a positive int"),
        (dict(eval_interval=0), "eval_interval must be a positive int"),
        (dict(eval_interval=2.0), "eval_interval must be a positive int"),
        (dict(eval_steps=0), "eval_steps must be a positive int"),
        (dict(max_steps=-5), "max_steps must be an int >= 0, got -5"),
        (dict(warmup_steps=1.5), "warmup_steps must be an int >= 0, got 1.5"),
        (dict(min_lr=1.0, max_lr=0.1), "need 0 <= min_lr <= max_lr"),
    ],
)
def test_train_config_errors(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TrainConfig(**kwargs)


def test_train_logs_one_line_per_estimate() -> None:
    model = BigramLanguageModel(5)
    config = TrainConfig(
        max_steps=6, warmup_steps=0, batch_size=2, block_size=4, eval_interval=3, eval_steps=1
    )
    lines: list[str] = []
    history = train(model, repeating_text(), repeating_text(), config, log=lines.append)
    assert history.steps == [0, 3, 6] and len(lines) == 3
    for line, step, tr, va in zip(
        lines, history.steps, history.train_loss, history.val_loss, strict=True
    ):
        assert line == f"step {step:5d}: train loss {tr:.4f}, val loss {va:.4f}"


def test_train_seconds_count_the_steps_and_not_the_estimates(monkeypatch) -> None:
    """A fake clock that moves 1 s per training step and 100 s per loss estimate: seconds must
    be the steps' time alone (4 s), so that seconds / max_steps is the time of a step."""
    import helpers.training as training

    clock = [0.0]
    real_step, real_estimate = training.train_step, training.estimate_loss

    def step(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        clock[0] += 1.0
        return real_step(*args, **kwargs)

    def estimate(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        clock[0] += 100.0
        return real_estimate(*args, **kwargs)

    monkeypatch.setattr(training.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(training, "train_step", step)
    monkeypatch.setattr(training, "estimate_loss", estimate)
    config = TrainConfig(
        max_steps=4, warmup_steps=0, batch_size=2, block_size=4, eval_interval=2, eval_steps=1
    )
    history = train(BigramLanguageModel(5), repeating_text(), repeating_text(), config)
    assert history.seconds == 4.0 and clock[0] == 304.0


# ---- make_adamw --------------------------------------------------------------------------------


def test_make_adamw_decays_only_matrices() -> None:
    model = nn.Sequential(nn.Embedding(5, 4), nn.LayerNorm(4), nn.Linear(4, 3))
    opt = make_adamw(model, lr=1e-3, weight_decay=0.1)
    decay, no_decay = opt.param_groups
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert {p.dim() for p in decay["params"]} == {2} and len(decay["params"]) == 2
    assert {p.dim() for p in no_decay["params"]} == {1} and len(no_decay["params"]) == 3
    assert opt.defaults["betas"] == (0.9, 0.99)
