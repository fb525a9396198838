"""check_average_gradients: accepts right answers written in unusual ways, rejects a catalogue
of plausible wrong ones with the hint that names each mistake, and never raises."""

from __future__ import annotations

import time

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


def through_futures(params):
    grads = [p.grad for p in params if p.grad is not None]
    works = [dist.all_reduce(g, async_op=True) for g in grads]
    torch.futures.wait_all([w.get_future() for w in works])
    for g in grads:
        g.div_(dist.get_world_size())


@pytest.mark.parametrize("fn", [per_tensor, one_bucket, asynchronous, through_futures])
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


def never_waits(params):
    for p in params:
        if p.grad is not None:
            dist.all_reduce(p.grad, async_op=True)  # the handle is dropped, never waited on
            p.grad /= dist.get_world_size()


def never_waits_positional(params):
    for p in params:
        if p.grad is not None:
            dist.all_reduce(p.grad, dist.ReduceOp.SUM, None, True)  # async_op by position
            p.grad /= dist.get_world_size()


WRONG = [
    (no_exchange, "mean", "exchange gradients"),
    (sum_only, "mean", "divide by dist.get_world_size()"),
    (divide_by_two, "world", "not by a fixed number"),
    (reduce_to_rank0, "mean", "dist.reduce"),
    (broadcast_rank0, "mean", "average every parameter's gradient"),
    (no_none_check, "no-grad", "skip parameters whose .grad is None"),
    (replaces_with_none, "mean", "change p.grad in place"),
    (averages_weights, "mean", "your all_reduce calls reduced the weights"),
    (steps_too, "weights", "only the gradients are averaged"),
    (exits, "mean", "SystemExit"),
    (never_waits, "mean", "call .wait() (or .get_future().wait()) on each handle"),
    (never_waits_positional, "mean", "call .wait() (or .get_future().wait()) on each handle"),
]


@pytest.mark.parametrize(("fn", "key", "words"), WRONG, ids=[w[0].__name__ for w in WRONG])
def test_rejects_wrong_answers_with_the_right_hint(fn, key: str, words: str) -> None:
    result = check_average_gradients(fn)
    assert not result
    assert result.failed_key == key, result.report
    assert words in " ".join(result.report.split()), result.report


def test_a_collective_on_one_rank_only_is_reported_not_hung(monkeypatch) -> None:
    monkeypatch.setattr(checker_module, "_COLLECTIVE_TIMEOUT", 2.0)
    result = check_average_gradients(only_rank0_reduces)
    assert not result and result.failed_key == "mean"
    assert "same collective calls" in result.report


def test_stub_and_garbage() -> None:
    assert check_average_gradients(stub).not_implemented
    result = check_average_gradients(42)  # type: ignore[arg-type]
    assert not result and result.kind == "not_callable"
    first = result.report.splitlines()[0]
    assert first == (
        "The check needs your function itself, and it was given an object of type int."
    ), result.report
    assert "Property" not in result.report and "a int" not in result.report
    assert "without calling it" in result.report


# Mistakes of the kinds that pass on a plain model: an order taken from memory addresses, a
# reduction on a copy, a second loop over a used-up iterator, a trainable parameter that got no
# gradient this step, a process group torn down, a division on some ranks only.


def set_order(params):
    world = dist.get_world_size()
    for p in set(params):  # a set orders the parameters by memory address
        if p.grad is not None:
            dist.all_reduce(p.grad)
            p.grad /= world


def sorted_by_id(params):
    world = dist.get_world_size()
    for p in sorted(params, key=id):  # ids are memory addresses
        if p.grad is not None:
            dist.all_reduce(p.grad)
            p.grad /= world


def reduces_a_float_copy(params):
    world = dist.get_world_size()
    for p in params:
        if p.grad is not None:
            g = p.grad.float()  # the same tensor for float32, a copy for bfloat16
            dist.all_reduce(g)
            g /= world


def divides_in_a_second_loop(params):
    for p in params:
        if p.grad is not None:
            dist.all_reduce(p.grad)
    for p in params:  # params is used up: this loop runs zero times
        if p.grad is not None:
            p.grad /= dist.get_world_size()


def skips_frozen_only(params):
    world = dist.get_world_size()
    for p in params:
        if p.requires_grad:  # a trainable parameter unused in this step has no gradient
            dist.all_reduce(p.grad)
            p.grad /= world


def destroys_the_group(params):
    per_tensor(params)
    dist.destroy_process_group()


def only_rank0_divides(params):
    for p in params:
        if p.grad is not None:
            dist.all_reduce(p.grad)
            if dist.get_rank() == 0:
                p.grad /= dist.get_world_size()


def forgets_view_as(params):
    grads = [p.grad for p in params if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= dist.get_world_size()
    offset = 0
    for g in grads:
        g.data = flat[offset : offset + g.numel()]  # no .view_as(g): the gradient becomes 1-D
        offset += g.numel()


def float32_data_kept(params):
    world = dist.get_world_size()
    for p in params:
        if p.grad is not None:
            g = p.grad.float()  # reduced in float32 for precision...
            dist.all_reduce(g)
            p.grad.data = g / world  # ...and left in float32: the bfloat16 gradient changes dtype


def reduces_a_clone(params):
    world = dist.get_world_size()
    for p in params:
        if p.grad is not None:
            g = p.grad.clone()  # a copy: reduced, divided, then dropped
            dist.all_reduce(g)
            g /= world


LATENT = [
    (set_order, "same", "memory address"),
    (sorted_by_id, "same", "memory address"),
    (reduces_a_float_copy, "mean", "the reduction ran on a copy"),
    (divides_in_a_second_loop, "mean", "second loop over params ran zero times"),
    (skips_frozen_only, "no-grad", "a trainable one that this step did not use"),
    (destroys_the_group, "mean", "destroyed the process group"),
    (only_rank0_divides, "mean", "not only some of them"),
    (forgets_view_as, "mean", "your function changed the shape and the dtype of p.grad"),
    (float32_data_kept, "mean", "your function changed the dtype of p.grad"),
    (reduces_a_clone, "mean", "every reduction ran on a copy"),
]


@pytest.mark.parametrize(("fn", "key", "words"), LATENT, ids=[w[0].__name__ for w in LATENT])
def test_rejects_mistakes_a_plain_model_hides(fn, key: str, words: str) -> None:
    result = check_average_gradients(fn)
    assert not result
    assert result.failed_key == key, result.report
    assert words in " ".join(result.report.split()), result.report
    assert "not your function's fault" not in result.report, result.report


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no message")


def raises_unprintable(params):
    raise Unprintable


def rank1_raises(params):
    if dist.get_rank() == 1:
        raise ValueError("rank one's own problem")
    per_tensor(params)


def every_rank_exits(params):
    import os

    os._exit(0)


def never_returns(params):
    while True:
        continue


def test_an_exception_that_cannot_be_printed_is_the_functions(capsys) -> None:
    result = check_average_gradients(raises_unprintable)
    assert not result and result.kind == "raised"
    assert "rank 0 raised Unprintable: (its message cannot be printed" in result.report
    assert "run the cell again" not in result.report and "not your function" not in result.report
    assert "line " in result.report and "raise Unprintable" in result.report
    capsys.readouterr()


def test_the_raising_ranks_own_message_is_shown(monkeypatch, capsys) -> None:
    monkeypatch.setattr(checker_module, "_COLLECTIVE_TIMEOUT", 2.0)
    result = check_average_gradients(rank1_raises)
    assert not result and result.kind == "raised"
    assert "rank 1 raised ValueError: rank one's own problem" in result.report
    assert "connection" not in result.report.lower()
    capsys.readouterr()


def test_ranks_that_end_their_process_are_reported_at_once(monkeypatch, capsys) -> None:
    # Every rank has ended: the check must not wait for its launch's time limit. A check that
    # waited would take at least that limit, and report a timeout or mismatched calls.
    monkeypatch.setattr(checker_module, "_TIMEOUT", 15.0)
    started = time.monotonic()
    result = check_average_gradients(every_rank_exits)
    waited = time.monotonic() - started
    assert not result
    assert result.kind == "exited" and "ended inside your function" in result.report
    assert "collective" not in result.report and "within" not in result.report
    assert waited < checker_module._TIMEOUT, f"the check waited {waited:.1f} s"
    capsys.readouterr()


def test_a_function_that_never_returns_is_stopped(monkeypatch, capsys) -> None:
    monkeypatch.setattr(checker_module, "_TIMEOUT", 3.0)
    result = check_average_gradients(never_returns)
    assert not result and result.kind == "timeout"
    assert result.report.startswith("Your function did not finish in time.")
    assert "did not finish within 3 s" in result.report
    capsys.readouterr()


def test_address_orders_count_only_parameters_with_a_gradient() -> None:
    # A reader's all-reduce skips parameters without a gradient; ranks whose orders differ only
    # in where those sit reduce alike, so the checker must not count them as different orders.
    model = checker_module._model()
    model(torch.randn(4, 5)).pow(2).mean().backward()
    with_grad = {name for name, p in model.named_parameters() if p.grad is not None}
    assert with_grad and len(with_grad) < len(list(model.parameters()))
    for order in checker_module._address_orders(model):
        assert sorted(order) == sorted(with_grad)
