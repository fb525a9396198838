"""The exercise checker of the chapter "Training on more than one device": the reader's
gradient all-reduce (``check_average_gradients``).

The reader's function runs where it would in real training: in separate processes joined by a
``gloo`` process group (started with ``fork``, so a function defined in a notebook needs no file),
each with its own batch, once with 2 ranks and once with 3. Each rank reports back what it found;
a rank that hangs in a collective is stopped after a timeout and reported as such.
"""

from __future__ import annotations

import datetime
import multiprocessing as mp
import textwrap
from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from helpers.checking._core import _WIDTH, NOT_IMPLEMENTED_MESSAGE, CheckResult

_PROPERTIES = (
    ("mean", "every rank ends with the mean of all ranks' gradients"),
    ("same", "all ranks end with identical gradients"),
    ("weights", "the weights themselves are left unchanged"),
    ("no-grad", "a parameter without a gradient (.grad is None) is skipped"),
    ("world", "the world size is read from the process group, not assumed"),
)
_TIMEOUT = 30.0  # seconds for one launch of all ranks
_COLLECTIVE_TIMEOUT = 8.0  # seconds a rank waits in a collective the others never join
# What gloo says when a rank waits for partners that left or never came.
_LONELY_COLLECTIVE = ("timed out", "timeout", "connection reset", "connection closed")


def _model() -> nn.Module:
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3))
    frozen = nn.Linear(3, 3)
    frozen.requires_grad_(False)
    model.append(frozen)  # its parameters never get a gradient
    return model


def _worker(fn: Callable[..., Any], rank: int, world: int, port: int, queue: Any) -> None:
    """One rank: a backward pass on its own batch, then the reader's function."""
    torch.set_num_threads(1)
    out: dict[str, Any] = {"rank": rank}
    try:
        dist.init_process_group(
            "gloo",
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=world,
            timeout=datetime.timedelta(seconds=_COLLECTIVE_TIMEOUT),
        )
        model = _model()
        g = torch.Generator().manual_seed(100 + rank)
        x = torch.randn(4, 5, generator=g)
        model(x).pow(2).mean().backward()
        own = [p.grad.clone() for p in model.parameters() if p.grad is not None]
        weights = [p.detach().clone() for p in model.parameters()]
        everyone = [torch.zeros_like(t) for t in own]
        for total, t in zip(everyone, own, strict=True):
            total.copy_(t)
            dist.all_reduce(total)
        try:
            fn(model.parameters())
        except NotImplementedError:
            out["not_implemented"] = True
        except BaseException as error:  # noqa: BLE001  (SystemExit from the reader included)
            message = " ".join(f"{type(error).__name__}: {error}".split())
            out["raised"] = message if len(message) < 160 else message[:157] + "..."
        else:
            got = [p.grad for p in model.parameters() if p.requires_grad]
            mean = [t / world for t in everyone]
            out["nones_left_alone"] = all(
                p.grad is None for p in model.parameters() if not p.requires_grad
            )
            if any(t is None for t in got):
                out["lost_grad"] = True
            else:
                out["err_mean"] = max(
                    (a - b).abs().max().item() for a, b in zip(got, mean, strict=True)
                )
                out["err_sum"] = max(
                    (a - b).abs().max().item() for a, b in zip(got, everyone, strict=True)
                )
                out["err_own"] = min(  # its own gradient, or its own divided by the world size
                    max((a - b * c).abs().max().item() for a, b in zip(got, own, strict=True))
                    for c in (1.0, 1.0 / world)
                )
                out["err_half"] = max(
                    (a - b / 2).abs().max().item() for a, b in zip(got, everyone, strict=True)
                )
                # Plain numbers: tensors would travel through shared memory that dies with
                # the process.
                out["grads"] = torch.cat([t.reshape(-1) for t in got]).tolist()
            out["weights_changed"] = any(
                not torch.equal(p.detach(), w)
                for p, w in zip(model.parameters(), weights, strict=True)
            )
    except BaseException as error:  # noqa: BLE001
        out["setup_failed"] = f"{type(error).__name__}: {error}"
    finally:
        queue.put(out)
        if dist.is_initialized():
            dist.destroy_process_group()


def _launch(fn: Callable[..., Any], world: int) -> list[dict[str, Any]] | str:
    """Run ``fn`` on ``world`` forked ranks; their reports, or why there are none."""
    from helpers.distributed import free_port

    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_worker, args=(fn, r, world, port, queue)) for r in range(world)]
    for p in procs:
        p.start()
    results: list[dict[str, Any]] = []
    try:
        for _ in procs:
            results.append(queue.get(timeout=_TIMEOUT))
    except Exception:  # noqa: BLE001  (queue.Empty: a rank never answered)
        return (
            f"no answer from every rank within {_TIMEOUT:.0f} s: a collective (all_reduce, "
            "reduce, broadcast, ...) was probably called on some ranks but not on the others"
        )
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
    return sorted(results, key=lambda r: r["rank"])


def _verdict(ranks: list[dict[str, Any]], world: int) -> tuple[str, str, str] | None:
    """The first property that fails on these ranks' reports: (key, got, hint)."""
    for r in ranks:
        if "setup_failed" in r:
            return (
                "mean",
                f"the check could not start its processes ({r['setup_failed']})",
                ("this is not your function's fault; run the cell again"),
            )
    raised = [r for r in ranks if "raised" in r]
    if (
        raised
        and len(raised) < len(ranks)
        and any(word in r["raised"].lower() for r in raised for word in _LONELY_COLLECTIVE)
    ):
        return (
            "mean",
            f"rank {raised[0]['rank']} waited in a collective that the other ranks never joined",
            "every rank must make the same collective calls, in the same order",
        )
    for r in ranks:
        if "raised" in r and "NoneType" in r["raised"]:
            return (
                "no-grad",
                f"rank {r['rank']} raised {r['raised']}",
                "skip parameters whose .grad is None (frozen ones have no gradient)",
            )
        if "raised" in r:
            return (
                "mean",
                f"rank {r['rank']} raised {r['raised']}",
                (
                    "call torch.distributed.all_reduce(p.grad) on each parameter's gradient; the "
                    "process group is already set up"
                ),
            )
        if r.get("lost_grad"):
            return (
                "mean",
                f"rank {r['rank']} set a gradient to None",
                ("change p.grad in place (all_reduce works in place), do not replace or delete it"),
            )
    tol = 1e-6
    if all(r["err_mean"] <= tol for r in ranks):
        pass
    elif all(r["err_own"] <= tol for r in ranks):
        return (
            "mean",
            "every rank still has its own gradient",
            ("the ranks must exchange gradients: dist.all_reduce(p.grad) sums them across ranks"),
        )
    elif all(r["err_sum"] <= tol for r in ranks):
        return (
            "mean",
            f"the sum of the {world} ranks' gradients",
            ("all_reduce sums; divide by dist.get_world_size() to get the mean"),
        )
    elif world != 2 and all(r["err_half"] <= tol for r in ranks):
        return (
            "world",
            f"the sum divided by 2 with {world} ranks",
            ("divide by dist.get_world_size(), not by a fixed number of ranks"),
        )
    elif any(r["err_mean"] <= tol for r in ranks):
        good = [r["rank"] for r in ranks if r["err_mean"] <= tol]
        return (
            "mean",
            f"the mean only on rank(s) {good}",
            ("dist.reduce leaves the result on one rank; all_reduce gives it to every rank"),
        )
    else:
        worst = max(r["err_mean"] for r in ranks)
        return (
            "mean",
            f"gradients that differ from the mean by up to {worst:.3g}",
            ("average every parameter's gradient: all_reduce (sum), then divide by the world size"),
        )
    if any(r["grads"] != ranks[0]["grads"] for r in ranks[1:]):
        return "same", "gradients that differ between ranks", "every rank must end the same"
    if any(r["weights_changed"] for r in ranks):
        return (
            "weights",
            "the weights changed",
            ("only the gradients are averaged; the optimiser changes the weights afterwards"),
        )
    if not all(r["nones_left_alone"] for r in ranks):
        return (
            "no-grad",
            "a gradient appeared on a frozen parameter",
            ("skip parameters whose .grad is None"),
        )
    return None


def check_average_gradients(fn: Callable[[Iterable[nn.Parameter]], None]) -> CheckResult:
    """Check ``fn(params)``: after it returns, on every rank, each ``p.grad`` is the mean over
    all ranks of that gradient (what ``DistributedDataParallel`` computes), the weights are
    unchanged, and parameters without a gradient are left alone. Runs ``fn`` in 2 and then 3
    forked processes joined by a gloo process group on 127.0.0.1."""
    names = tuple(name for _, name in _PROPERTIES)
    keys = tuple(key for key, _ in _PROPERTIES)
    failed: tuple[str, str, str, int] | None = None
    not_implemented = False
    calls = 0
    if not callable(fn):
        failed = ("mean", f"a {type(fn).__name__}, not a function", "pass the function itself", 2)
    else:
        for world in (2, 3):
            ranks = _launch(fn, world)
            calls += world
            if isinstance(ranks, str):
                failed = ("mean", ranks, "every rank must make the same collective calls", world)
                break
            if any(r.get("not_implemented") for r in ranks):
                not_implemented = True
                break
            verdict = _verdict(ranks, world)
            if verdict is not None:
                failed = (*verdict, world)
                break
    if not_implemented:
        report = NOT_IMPLEMENTED_MESSAGE
        failed_key = failed_name = None
        passed: tuple[str, ...] = ()
    elif failed is None:
        report = textwrap.fill(
            f"All {len(names)} properties hold: {'; '.join(names)} (checked on 2 and 3 ranks).",
            width=_WIDTH,
            break_on_hyphens=False,
        )
        failed_key = failed_name = None
        passed = names
    else:
        key, got, hint, world = failed
        index = keys.index(key)
        failed_key, failed_name = key, names[index]
        passed = names[:index]
        lines = [
            f"Property {index + 1} of {len(names)} failed: {failed_name}",
            f"input: {world} ranks of a small MLP, each with its own batch of 4",
            f"got: {got}",
            f"hint: {hint}",
        ]
        report = "\n".join(textwrap.fill(s, width=_WIDTH, subsequent_indent="  ") for s in lines)
    print(report)
    return CheckResult(
        checker="check_average_gradients",
        properties=names,
        property_keys=keys,
        passed=passed,
        failed=failed_name,
        failed_key=failed_key,
        not_implemented=not_implemented,
        n_calls=calls,
        report=report,
    )
