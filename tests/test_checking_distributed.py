"""check_average_gradients: accepts right answers written in unusual ways, rejects a catalogue
of plausible wrong ones with the hint that names each mistake, and never raises."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

import helpers.checking.distributed as checker_module
from helpers.checking import check_average_gradients


def per_tensor(params):
    world = dist.get_world_size()
    for p in params:
        if p.grad is not None:
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
            p.grad /= world


def one_bucket(params):
    grads = [p.grad for p in params if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat.mul_(1.0 / dist.get_world_size())
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()


def asynchronous(params):
    grads = [p.grad for p in params if p.grad is not None]
    works = [dist.all_reduce(g, async_op=True) for g in grads]
    for w, g in zip(works, grads, strict=True):
        w.wait()
        g.div_(dist.get_world_size())


@pytest.mark.parametrize("fn", [per_tensor, one_bucket, asynchronous])
def test_accepts_right_answers(fn, capsys) -> None:
    result = check_average_gradients(fn)
    assert result, result.report
    assert "All 5 properties hold" in capsys.readouterr().out


def no_exchange(params):
    for p in params:
        if p.grad is not None:
            p.grad /= dist.get_world_size()


def sum_only(params):
    for p in params:
        if p.grad is not None:
            dist.all_reduce(p.grad)


def divide_by_two(params):
    for p in params:
        if p.grad is not None:
            dist.all_reduce(p.grad)
            p.grad /= 2


def reduce_to_rank0(params):
    for p in params:
        if p.grad is not None:
            dist.reduce(p.grad, dst=0)
            p.grad /= dist.get_world_size()


def broadcast_rank0(params):
    for p in params:
        if p.grad is not None:
            dist.broadcast(p.grad, src=0)


def no_none_check(params):
    for p in params:
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()


def replaces_with_none(params):
    for p in params:
        p.grad = None


def averages_weights(params):
    for p in params:
        if p.grad is not None:
            dist.all_reduce(p.data)
            p.data /= dist.get_world_size()


def steps_too(params):
    per_tensor(params := list(params))
    with torch.no_grad():
        for p in params:
            if p.grad is not None:
                p -= 0.1 * p.grad


def only_rank0_reduces(params):
    if dist.get_rank() == 0:
        per_tensor(params)


def exits(params):
    raise SystemExit(1)


def stub(params):
    raise NotImplementedError


WRONG = [
    (no_exchange, "mean", "exchange gradients"),
    (sum_only, "mean", "divide by dist.get_world_size()"),
    (divide_by_two, "world", "not by a fixed number"),
    (reduce_to_rank0, "mean", "dist.reduce leaves the result on one rank"),
    (broadcast_rank0, "mean", "average every parameter's gradient"),
    (no_none_check, "no-grad", "skip parameters whose .grad is None"),
    (replaces_with_none, "mean", "change p.grad in place"),
    (averages_weights, "mean", "exchange gradients"),
    (steps_too, "weights", "only the gradients are averaged"),
    (exits, "mean", "SystemExit"),
]


@pytest.mark.parametrize(("fn", "key", "words"), WRONG, ids=[w[0].__name__ for w in WRONG])
def test_rejects_wrong_answers_with_the_right_hint(fn, key: str, words: str) -> None:
    result = check_average_gradients(fn)
    assert not result
    assert result.failed_key == key, result.report
    assert words in result.report


def test_a_collective_on_one_rank_only_is_reported_not_hung(monkeypatch) -> None:
    monkeypatch.setattr(checker_module, "_COLLECTIVE_TIMEOUT", 2.0)
    result = check_average_gradients(only_rank0_reduces)
    assert not result and result.failed_key == "mean"
    assert "same collective calls" in result.report


def test_stub_and_garbage() -> None:
    assert check_average_gradients(stub).not_implemented
    result = check_average_gradients(42)  # type: ignore[arg-type]
    assert not result and "not a function" in result.report
