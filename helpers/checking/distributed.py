"""The exercise checker of the chapter "Training on more than one device": the reader's
gradient all-reduce (``check_average_gradients``).

The reader's function runs where it would in real training: in separate processes joined by a
``gloo`` process group (started with ``fork``, so a function defined in a notebook needs no file),
each with its own batch, once with 2 ranks and once with 3. Each rank reports back what it found;
a rank that waits in a collective the others never join gives up after
:data:`_COLLECTIVE_TIMEOUT` seconds, a rank whose call of the function has not returned after
:data:`_TIMEOUT` seconds is stopped and reported as such, and a rank whose process ends inside
the function (``os._exit``, a crash) is reported as soon as it has ended.

The model holds what a real training step can hold: a frozen layer (no gradient), a trainable
parameter that this step did not use (``.grad`` is ``None``) and a bfloat16 parameter (its
gradient is bfloat16). The parameters are handed over as a one-pass iterator, as
``model.parameters()`` is, and each rank allocates a different amount of memory before building
its model, so that an order taken from memory addresses (a ``set`` of parameters, ``sorted(...,
key=id)``) differs between ranks, as it can between real processes. Ranks compare those orders
(of the parameters that have a gradient, the ones a function reduces) before the call and give
their parameters new objects until every rank's orders differ, so such an answer fails every
time rather than when the addresses happen to line up.
"""

from __future__ import annotations

import datetime
import inspect
import multiprocessing as mp
import textwrap
import time
from collections.abc import Callable, Iterable, Iterator
from multiprocessing.connection import Connection, wait
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from helpers.checking._core import (
    _HEADERS,
    _WIDTH,
    NOT_IMPLEMENTED_MESSAGE,
    CheckResult,
    _error_text,
    _not_callable_lines,
    _reader_line,
)

_PROPERTIES = (
    ("mean", "every rank ends with the mean of all ranks' gradients"),
    ("same", "all ranks end with identical gradients"),
    ("weights", "the weights themselves are left unchanged"),
    ("no-grad", "a parameter without a gradient (.grad is None) is skipped"),
    ("world", "the world size is read from the process group, not assumed"),
)
_TIMEOUT = 30.0  # seconds for one launch of all ranks
_COLLECTIVE_TIMEOUT = 8.0  # seconds a rank waits in a collective the others never join
_ORDER_ATTEMPTS = 50  # rounds of reallocation until the ranks' address orders differ
# What gloo says when a rank waits for partners that left or never came.
_LONELY_COLLECTIVE = ("timed out", "timeout", "connection reset", "connection closed")
_COLLECTIVES = ("all_reduce", "reduce", "broadcast", "all_gather", "reduce_scatter", "barrier")


class _Handle:
    """The work handle of an ``async_op=True`` collective, noting whether ``wait()`` was
    called on it; everything else goes to the handle itself."""

    def __init__(self, work: Any) -> None:
        self._work = work
        self.waited = False

    def wait(self, *args: Any, **kwargs: Any) -> Any:
        self.waited = True
        return self._work.wait(*args, **kwargs)

    def get_future(self) -> Any:  # waiting on the future waits on the work
        self.waited = True
        return self._work.get_future()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._work, name)


class _OnePass:
    """The parameters as ``model.parameters()`` gives them: an iterator that can be walked once.
    It remembers whether the reader's code asked for more after it was used up (a second
    ``for`` loop over it, which runs zero times)."""

    def __init__(self, params: Iterable[nn.Parameter]) -> None:
        self._it = iter(list(params))
        self.exhausted = False
        self.reused = False

    def __iter__(self) -> Iterator[nn.Parameter]:
        if self.exhausted:
            self.reused = True
        return self

    def __next__(self) -> nn.Parameter:
        try:
            return next(self._it)
        except StopIteration:
            if self.exhausted:
                self.reused = True
            self.exhausted = True
            raise


def _model() -> nn.Module:
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3))
    frozen = nn.Linear(3, 3)
    frozen.requires_grad_(False)
    model.append(frozen)  # its parameters never get a gradient
    model.register_parameter("unused", nn.Parameter(torch.zeros(4)))  # trainable, not used
    model.register_parameter("low_precision", nn.Parameter(torch.zeros(6, dtype=torch.bfloat16)))
    return model


def _address_orders(model: nn.Module) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The names of the parameters that have a gradient, in the orders a ``set`` and
    ``sorted(key=id)`` would give. Only those count: a function skips the others, so two ranks
    whose orders differ only in where a parameter without a gradient sits reduce alike."""
    names = {id(p): name for name, p in model.named_parameters() if p.grad is not None}
    return (
        tuple(names[id(p)] for p in set(model.parameters()) if id(p) in names),
        tuple(names[id(p)] for p in sorted(model.parameters(), key=id) if id(p) in names),
    )


def _reallocate(model: nn.Module, generator: torch.Generator) -> list[list[object]]:
    """Give every parameter a new object (same values, gradient and ``requires_grad``), created
    in a shuffled order between objects of random size; return those objects (keep them alive,
    or their memory is reused at once)."""
    owners = [(m, n) for m in model.modules() for n, _ in m.named_parameters(recurse=False)]
    ballast: list[list[object]] = []
    for i in torch.randperm(len(owners), generator=generator).tolist():
        module, name = owners[i]
        old = getattr(module, name)
        size = int(torch.randint(1, 64, (1,), generator=generator))
        ballast.append([object() for _ in range(size)])
        new = nn.Parameter(old.data, requires_grad=old.requires_grad)
        new.grad = old.grad
        setattr(module, name, new)
    return ballast


def _distinct_address_orders(model: nn.Module, rank: int, world: int) -> list[list[object]]:
    """Reallocate parameters on the ranks whose address orders equal a lower rank's, until
    every rank's orders differ (a collective: every rank calls it). Returns ballast to keep."""
    generator = torch.Generator().manual_seed(7 + rank)
    ballast: list[list[object]] = []
    for _ in range(_ORDER_ATTEMPTS):
        gathered: list[Any] = [None] * world
        dist.all_gather_object(gathered, _address_orders(model))
        clash = [
            r
            for r in range(world)
            if any(gathered[r][k] == gathered[o][k] for o in range(r) for k in (0, 1))
        ]
        if not clash:
            break
        if rank in clash:
            ballast += _reallocate(model, generator)
    return ballast


def _kind(got: torch.Tensor, own: torch.Tensor, total: torch.Tensor, world: int) -> str:
    """What a gradient after the reader's function is: ``mean``, ``sum``, ``own`` (unchanged),
    ``own/world``, ``half`` (the sum divided by 2) or ``other``."""
    g, o, t = got.double(), own.double(), total.double()
    tol = 2e-2 if got.dtype == torch.bfloat16 else 1e-6
    rtol = 2e-2 if got.dtype == torch.bfloat16 else 0.0
    for name, want in (
        ("mean", t / world),
        ("sum", t),
        ("own", o),
        ("own/world", o / world),
        ("half", t / 2),
    ):
        if torch.allclose(g, want, atol=tol, rtol=rtol):
            return name
    return "other"


def _worker(fn: Callable[..., Any], rank: int, world: int, port: int, conn: Connection) -> None:
    """One rank: a backward pass on its own batch, then the reader's function. It sends what it
    does through ``conn`` as it goes (each message is written before the next step, so what a
    rank did reaches the checker even if its process is then killed by a crash)."""
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
        ballast = [torch.nn.Parameter(torch.zeros(1)) for _ in range(37 * rank + 5)]
        model = _model()
        g = torch.Generator().manual_seed(100 + rank)
        x = torch.randn(4, 5, generator=g)
        model(x).pow(2).mean().backward()
        # The gradient of a bfloat16 layer.
        model.low_precision.grad = torch.randn(6, generator=g).to(torch.bfloat16)
        reallocated = _distinct_address_orders(model, rank, world)
        names = [name for name, _ in model.named_parameters()]
        had = [p.grad is not None for p in model.parameters()]
        own = [p.grad.clone() for p in model.parameters() if p.grad is not None]
        weights = [p.detach().clone() for p in model.parameters()]
        everyone = [t.clone() for t in own]
        for total in everyone:
            dist.all_reduce(total)
        calls: list[str] = []
        real = {name: getattr(dist, name) for name in _COLLECTIVES}
        # What each reduction works on: a gradient, a weight, or a tensor of neither (a copy).
        storages = {
            "grad": {
                p.grad.untyped_storage().data_ptr()
                for p in model.parameters()
                if p.grad is not None
            },
            "weight": {p.untyped_storage().data_ptr() for p in model.parameters()},
        }
        reduced: list[str] = []
        handles: list[_Handle] = []

        def recorded(name: str) -> Callable[..., Any]:
            def collective(*args: Any, **kwargs: Any) -> Any:
                tensor = args[0] if args else kwargs.get("tensor")
                if name in ("all_reduce", "reduce") and isinstance(tensor, torch.Tensor):
                    where = tensor.untyped_storage().data_ptr()
                    reduced.append(next((k for k, s in storages.items() if where in s), "copy"))
                if args and args[0] is None:
                    out["none_passed"] = True
                    calls.append(f"{name}(None)")
                else:
                    shape = tuple(args[0].shape) if args and hasattr(args[0], "shape") else ()
                    calls.append(f"{name}{shape}")
                conn.send({"call": calls[-1]})
                result = real[name](*args, **kwargs)
                try:  # async_op may also come by position
                    bound = inspect.signature(real[name]).bind(*args, **kwargs).arguments
                except (TypeError, ValueError):  # a signature Python cannot read
                    bound = kwargs
                if bound.get("async_op") and result is not None:
                    result = _Handle(result)
                    handles.append(result)
                return result

            return collective

        params = _OnePass(model.parameters())
        for name in _COLLECTIVES:
            setattr(dist, name, recorded(name))
        conn.send({"started": True})
        try:
            fn(params)
        except NotImplementedError:
            out["not_implemented"] = True
        except BaseException as error:  # noqa: BLE001  (SystemExit from the reader included)
            out["raised"] = _error_text(error)
            out["raised_at"] = _reader_line(error)
        finally:
            for name in _COLLECTIVES:
                setattr(dist, name, real[name])
        out["calls"] = calls
        out["reduced"] = reduced
        out["not_waited"] = sum(not h.waited for h in handles)
        out["reused"] = params.reused
        out["group_alive"] = dist.is_initialized()
        if "raised" not in out and "not_implemented" not in out:
            # What the function left behind: whatever goes wrong from here on is its doing.
            try:
                _analyse(out, list(model.parameters()), names, had, own, everyone, weights, world)
            except Exception as error:  # noqa: BLE001
                out["unusable"] = _error_text(error)
        del ballast, reallocated
    except BaseException as error:  # noqa: BLE001
        out["setup_failed"] = _error_text(error)
    finally:
        conn.send(out)
        conn.close()
        if dist.is_initialized():
            dist.destroy_process_group()


def _analyse(
    out: dict[str, Any],
    params_now: list[nn.Parameter],
    names: list[str],
    had: list[bool],
    own: list[torch.Tensor],
    everyone: list[torch.Tensor],
    weights: list[torch.Tensor],
    world: int,
) -> None:
    """Record in ``out`` what the reader's function left in the parameters and gradients: which
    gradients appeared or went, which changed shape or dtype, what each one now is (see
    :func:`_kind`), and whether the weights changed."""
    out["new_grad"] = [
        names[i] for i, p in enumerate(params_now) if not had[i] and p.grad is not None
    ]
    out["lost_grad"] = [names[i] for i, p in enumerate(params_now) if had[i] and p.grad is None]
    out["weights_changed"] = any(
        p.shape != w.shape or not torch.equal(p.detach(), w)
        for p, w in zip(params_now, weights, strict=True)
    )
    if out["lost_grad"]:
        return
    with_grad = [(i, p) for i, p in enumerate(params_now) if had[i]]
    changed = [
        (names[i], what, now, then)
        for what in ("shape", "dtype")
        for (i, p), before in zip(with_grad, own, strict=True)
        for now, then in [_described(p.grad, before, what)]
        if now != then
    ]
    if changed:
        out["changed_grad"] = changed
        return
    out["kinds"] = {
        names[i]: _kind(p.grad, o, t, world)
        for (i, p), o, t in zip(with_grad, own, everyone, strict=True)
    }
    out["dtypes"] = {names[i]: str(p.grad.dtype) for i, p in with_grad}
    # Plain numbers: tensors would travel through shared memory that dies with the process.
    out["grads"] = torch.cat([p.grad.double().reshape(-1) for _, p in with_grad]).tolist()


def _described(now: torch.Tensor, before: torch.Tensor, what: str) -> tuple[str, str]:
    """The ``shape`` or ``dtype`` of a gradient after and before the reader's function."""
    if what == "dtype":
        return str(now.dtype).removeprefix("torch."), str(before.dtype).removeprefix("torch.")
    return tuple(  # type: ignore[return-value]
        "(" + ", ".join(map(str, t.shape)) + (",)" if t.dim() == 1 else ")") for t in (now, before)
    )


def _launch(fn: Callable[..., Any], world: int) -> list[dict[str, Any]] | tuple[str, str, str, str]:
    """Run ``fn`` on ``world`` forked ranks; their reports, or (property key, got, hint, kind)
    when some rank gave none: its process ended inside the function (after a collective call
    that the other ranks made differently, or on its own), or the function did not return in
    time."""
    from helpers.distributed import free_port

    ctx = mp.get_context("fork")
    port = free_port()
    pipes = [ctx.Pipe(duplex=False) for _ in range(world)]
    procs = [
        ctx.Process(target=_worker, args=(fn, r, world, port, pipes[r][1])) for r in range(world)
    ]
    for p in procs:
        p.start()
    for _, sender in pipes:
        sender.close()  # the parent's copy: the pipe ends when the rank's process does
    readers = {pipes[r][0]: r for r in range(world)}
    results: dict[int, dict[str, Any]] = {}
    started: set[int] = set()
    calls: dict[int, list[str]] = {r: [] for r in range(world)}
    ended: list[int] = []  # ranks whose process ended without a report, in order
    deadline = time.monotonic() + _TIMEOUT
    try:
        while readers and time.monotonic() < deadline:
            for conn in wait(list(readers), timeout=0.2):
                rank = readers[conn]  # type: ignore[index]
                try:
                    message = conn.recv()  # type: ignore[union-attr]
                except EOFError:  # the process ended
                    del readers[conn]  # type: ignore[arg-type]
                    if rank not in results:
                        ended.append(rank)
                    continue
                if "call" in message:
                    calls[rank].append(message["call"])
                elif message.get("started"):
                    started.add(rank)
                else:
                    results[rank] = {**message, "calls": calls[rank]}
    finally:
        for p in procs:
            p.join(timeout=0.5 if len(results) < world else 5)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
        for conn in readers:
            conn.close()  # type: ignore[union-attr]
    if len(results) < world:
        if ended:
            mismatch = _different_calls([calls[r] for r in range(world)])
            if mismatch is not None:
                return ("same", *mismatch, "property")
            rank = ended[0]
            where = "inside your function" if rank in started else "before its turn"
            return (
                "mean",
                f"the process of rank {rank} ended {where} (exit code {procs[rank].exitcode}) "
                "without a report",
                "your function ended the process (os._exit, os.kill, a crash in native code): "
                "return instead, and let the ranks exit on their own",
                "exited",
            )
        late = sorted(set(range(world)) - set(results))
        inside = [r for r in late if r in started]
        if inside:
            return (
                "mean",
                f"rank {inside[0]}'s call of your function did not finish within "
                f"{_TIMEOUT:g} s and was stopped",
                "a right answer takes well under a second: look for a loop that never ends (a "
                "continue where break was meant, a while loop whose condition never changes)",
                "timeout",
            )
        return (
            "mean",
            f"no answer from rank {late[0]} within {_TIMEOUT:g} s",
            "the check's processes could not start: this machine may be too busy; run the "
            "cell again",
            "property",
        )
    return [results[r] for r in range(world)]


_ORDER_HINT = (
    "every rank must make the same collective calls on the same tensors, in the same order: "
    "walk the parameters in the order given (a set, or sorting by id(), orders them by memory "
    "address, which differs between processes)"
)


def _different_calls(sequences: list[list[str]]) -> tuple[str, str] | None:
    """(got, hint) when two ranks made a different collective call at the same step (not merely
    fewer calls), else ``None``."""
    longest = max(map(len, sequences))
    for i in range(longest):
        made = [s[i] if i < len(s) else None for s in sequences]
        if len(set(made)) > 1:
            if None in made:
                return None
            shown = "; ".join(f"rank {r} {call}" for r, call in enumerate(made))
            return f"the ranks made different collective calls: call {i + 1} was {shown}", (
                _ORDER_HINT
            )
    return None


def _secondary(r: dict[str, Any]) -> bool:
    """Whether a rank's error only says that another rank left a collective (a consequence)."""
    return any(word in r.get("raised", "").lower() for word in _LONELY_COLLECTIVE)


def _verdict(ranks: list[dict[str, Any]], world: int) -> tuple[str, str, str] | None:
    """The first property that fails on these ranks' reports: (key, got, hint)."""
    for r in ranks:
        if "setup_failed" in r:
            return (
                "mean",
                f"the check could not start its processes ({r['setup_failed']})",
                "this is not your function's fault; run the cell again",
            )
    raised = [r for r in ranks if "raised" in r]
    primary = [r for r in raised if not _secondary(r)]
    mismatch = _different_calls([list(r.get("calls", ())) for r in ranks])
    if mismatch is not None:
        return ("same", *mismatch)
    if primary:  # the rank that raised first, not those left waiting for it
        r = primary[0]
        at = f" (at {r['raised_at']})" if r.get("raised_at") else ""
        if "NoneType" in r["raised"] or r.get("none_passed"):
            return (
                "no-grad",
                f"rank {r['rank']} raised {r['raised']}{at}",
                "skip parameters whose .grad is None: frozen ones have no gradient, and "
                "neither has a trainable one that this step did not use",
            )
        if r["raised"].startswith("SystemExit"):
            hint = "your function called exit() or sys.exit(): return instead"
        else:
            hint = (
                "the error comes from your function, at the line shown; the process group is "
                "already set up: call torch.distributed.all_reduce(p.grad) on each gradient"
            )
        return ("mean", f"rank {r['rank']} raised {r['raised']}{at}", hint)
    if raised:
        return (
            "mean",
            f"rank {raised[0]['rank']} waited in a collective that the other ranks never joined",
            "every rank must make the same collective calls, in the same order",
        )
    for r in ranks:  # right or wrong by luck: the sum may or may not have arrived in time
        if r.get("not_waited"):
            return (
                "mean",
                f"rank {r['rank']} never called .wait() on {r['not_waited']} of the handles "
                "that its async_op=True collectives returned",
                "async_op=True returns a work handle at once, before the sum has arrived: "
                "call .wait() (or .get_future().wait()) on each handle before you divide or "
                "return",
            )
    for r in ranks:
        if not r.get("group_alive", True):
            return (
                "mean",
                f"rank {r['rank']} destroyed the process group",
                "leave the process group alone: training goes on using it after your function "
                "(no dist.destroy_process_group() or init_process_group() inside it)",
            )
        if "changed_grad" in r:
            changed = r["changed_grad"]
            kinds = " and the ".join(dict.fromkeys(what for _, what, _, _ in changed))
            shown = "; ".join(
                f"the gradient of {name} has {what} {got} after your function, {want} before"
                for name, what, got, want in changed[:2]
            )
            more = f"; and {len(changed) - 2} more" if len(changed) > 2 else ""
            return (
                "mean",
                f"rank {r['rank']}: {shown}{more}",
                f"your function changed the {kinds} of p.grad: the optimiser needs each "
                "gradient in its parameter's shape and dtype. Copy the result back into the "
                "gradient, g.copy_(flat[o:o + n].view_as(g)), rather than assigning g.data or "
                "p.grad",
            )
        if "unusable" in r:
            return (
                "mean",
                f"rank {r['rank']}: after your function returned, its gradients could not be "
                f"read ({r['unusable']})",
                "leave each p.grad a tensor of its parameter's shape and dtype, holding the mean "
                "of all ranks' gradients",
            )
        if r.get("lost_grad"):
            return (
                "mean",
                f"rank {r['rank']} set the gradient of {r['lost_grad'][0]} to None",
                "change p.grad in place (all_reduce works in place), do not replace or delete it",
            )
    kinds = [r["kinds"] for r in ranks]
    names = list(kinds[0])
    bad = [n for n in names if any(k[n] != "mean" for k in kinds)]
    if bad:
        half = [n for n in names if ranks[0]["dtypes"][n] == "torch.bfloat16"]
        everything = set(bad)
        if everything <= set(half) and all(
            k[n] in ("own", "own/world") for k in kinds for n in bad
        ):
            return (
                "mean",
                f"the bfloat16 gradient ({bad[0]}) kept each rank's own value, the others are "
                "the mean",
                "the reduction ran on a copy: .float() or .to(...) of a bfloat16 gradient is a "
                "new tensor, and all_reduce on it leaves p.grad as it was. Reduce p.grad itself, "
                "or copy the result back with p.grad.copy_(...)",
            )
        every = {k[n] for k in kinds for n in names}
        if every == {"own"} or every <= {"own", "own/world"}:
            reduced = ranks[0].get("reduced", [])
            if "weight" in reduced:
                return (
                    "mean",
                    f"every rank still has its own gradient; {reduced.count('weight')} of rank "
                    "0's reductions ran on the weights",
                    "the ranks must exchange gradients: your all_reduce calls reduced the "
                    "weights (p.data or p) instead; reduce p.grad",
                )
            if "copy" in reduced:
                return (
                    "mean",
                    f"every rank still has its own gradient, though rank 0 reduced "
                    f"{reduced.count('copy')} tensor(s) that are not its gradients",
                    "every reduction ran on a copy that was then dropped: clone(), .float(), "
                    ".to(...) or torch.cat(...) make a new tensor, and all_reduce on it leaves "
                    "p.grad as it was. Reduce p.grad itself, or copy the result back with "
                    "p.grad.copy_(...)",
                )
            return (
                "mean",
                "every rank still has its own gradient",
                "the ranks must exchange gradients: dist.all_reduce(p.grad) sums them across ranks",
            )
        if every == {"sum"}:
            if any(r.get("reused") for r in ranks):
                return (
                    "mean",
                    f"the sum of the {world} ranks' gradients: your second loop over params "
                    "ran zero times",
                    "params is a one-pass iterator, as model.parameters() is: the first loop "
                    "used it up. Make a list first (params = list(params)), or divide in the "
                    "same loop",
                )
            return (
                "mean",
                f"the sum of the {world} ranks' gradients",
                "all_reduce sums; divide by dist.get_world_size() to get the mean",
            )
        if world != 2 and every == {"half"}:
            return (
                "world",
                f"the sum divided by 2 with {world} ranks",
                "divide by dist.get_world_size(), not by a fixed number of ranks",
            )
        good = [r["rank"] for r, k in zip(ranks, kinds, strict=True) if k[bad[0]] == "mean"]
        others = {k[bad[0]] for k in kinds if k[bad[0]] != "mean"}
        if good and others == {"sum"}:
            return (
                "mean",
                f"the mean only on rank(s) {good}; the other ranks have the sum",
                "every rank must divide by the world size, not only some of them",
            )
        if good and others <= {"own", "own/world", "other"}:
            return (
                "mean",
                f"the mean only on rank(s) {good}",
                "the other ranks did not get the result: dist.reduce (or a call on some ranks "
                "only) leaves it on one rank; all_reduce gives it to every rank",
            )
        return (
            "mean",
            f"gradients that differ from the mean (first: {bad[0]})",
            "average every parameter's gradient: all_reduce (sum), then divide by the world size",
        )
    if any(r["grads"] != ranks[0]["grads"] for r in ranks[1:]):
        return "same", "gradients that differ between ranks", "every rank must end the same"
    if any(r["weights_changed"] for r in ranks):
        return (
            "weights",
            "the weights changed",
            "only the gradients are averaged; the optimiser changes the weights afterwards",
        )
    for r in ranks:
        if r.get("new_grad"):
            return (
                "no-grad",
                f"a gradient appeared on {r['new_grad'][0]}, which had none",
                "skip parameters whose .grad is None",
            )
    return None


def check_average_gradients(fn: Callable[[Iterable[nn.Parameter]], None]) -> CheckResult:
    """Check ``fn(params)``: after it returns, on every rank, each ``p.grad`` is the mean over
    all ranks of that gradient (what ``DistributedDataParallel`` computes), the weights are
    unchanged, and parameters without a gradient are left alone. Runs ``fn`` in 2 and then 3
    forked processes joined by a gloo process group on 127.0.0.1.

    The reader writes ``fn(params)``: ``params`` iterates once over a model's parameters, as
    ``model.parameters()`` does; among them are frozen ones and a trainable one without a
    gradient in this step (``.grad`` is ``None``), and a bfloat16 one. Each rank must make the
    same collective calls in the same order, leave the process group as it found it, and return
    within :data:`_TIMEOUT` seconds."""
    names = tuple(name for _, name in _PROPERTIES)
    keys = tuple(key for key, _ in _PROPERTIES)
    failed: tuple[str, str, str, int] | None = None
    not_implemented = False
    kind: str | None = None
    calls = 0
    if not callable(fn):
        kind = "not_callable"
    else:
        for world in (2, 3):
            ranks = _launch(fn, world)
            calls += world
            if isinstance(ranks, tuple):
                failed = (*ranks[:3], world)
                kind = ranks[3]
                break
            if any(r.get("not_implemented") for r in ranks):
                not_implemented = True
                kind = "not_implemented"
                break
            verdict = _verdict(ranks, world)
            if verdict is not None:
                failed = (*verdict, world)
                kind = "raised" if " raised " in verdict[1] else "property"
                break
    if not_implemented:
        report = NOT_IMPLEMENTED_MESSAGE
        failed_key = failed_name = None
        passed: tuple[str, ...] = ()
    elif kind == "not_callable":
        report = "\n".join(_not_callable_lines(type(fn).__name__))
        failed_key, failed_name = keys[0], names[0]
        passed = ()
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
        headers = {**_HEADERS, "exited": "Your function ended its process."}
        if kind in headers:
            top = [headers[kind], f"during: property {index + 1} of {len(names)}, {failed_name}"]
        else:
            top = [f"Property {index + 1} of {len(names)} failed: {failed_name}"]
        lines = [
            *top,
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
        kind=kind,
    )
