"""Train the book's GPT on one process, several processes, or several machines.

Defined in the chapter "Training on more than one device". The same script is written to run
unchanged

- on one CPU:            ``python -m helpers.train_distributed --steps 200``
- on two CPU processes:  ``torchrun --nproc-per-node 2 -m helpers.train_distributed``
- on an 8-GPU machine:   ``torchrun --nproc-per-node 8 -m helpers.train_distributed --device cuda``

``--mode ddp`` (the default) wraps the model in ``DistributedDataParallel``: every rank keeps the
whole model and the gradients are averaged by an all-reduce. ``--mode fsdp`` shards parameters,
gradients and optimiser state over the ranks with ``fully_shard`` (FSDP2). Each rank draws its
own windows of the text (``helpers.distributed.rank_generator``), so the global batch is
``world_size * grad_accum * batch_size`` windows. With ``--grad-accum k`` the ranks
reduce their gradients once per optimiser step, during the last micro-step's backward pass
(DDP's ``no_sync``, FSDP's ``set_requires_gradient_sync``); FSDP still all-gathers the weights
for every micro-step. Rank 0 writes the checkpoint (``--out``, the
format ``helpers.export.load_gpt`` reads) and a JSON report (``--report``); with
``--measure-memory`` the report also holds each rank's memory during its second step.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from helpers.data import load_tinyshakespeare
from helpers.distributed import DistEnv, init_distributed, rank_generator
from helpers.export import export_gpt
from helpers.measure import AllocatorTrace
from helpers.model import GPT, GPTConfig
from helpers.tokenizer import CharTokenizer
from helpers.training import cosine_lr, estimate_loss, get_batch, make_adamw, train_val_split


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line; every default is the book's CPU recipe at a short length."""
    d = GPTConfig()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=("ddp", "fsdp"), default="ddp")
    p.add_argument("--steps", type=int, default=200, help="optimiser steps")
    p.add_argument("--batch-size", type=int, default=12, help="windows per rank per micro-step")
    p.add_argument("--grad-accum", type=int, default=1, help="micro-steps per optimiser step")
    p.add_argument("--lr", type=float, default=5e-3)
    p.add_argument("--min-lr", type=float, default=5e-5)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument(
        "--dtype",
        choices=("float32", "bfloat16"),
        default="float32",
        help="bfloat16: autocast the forward pass (weights stay float32)",
    )
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--n-layer", type=int, default=d.n_layer)
    p.add_argument("--n-head", type=int, default=d.n_head)
    p.add_argument("--n-embd", type=int, default=d.n_embd)
    p.add_argument("--block-size", type=int, default=d.block_size)
    p.add_argument(
        "--emulate-ranks",
        type=int,
        default=1,
        help="one process only: draw each batch from this many ranks' generators "
        "and concatenate them (the single-process twin of a torchrun run)",
    )
    p.add_argument("--eval-batches", type=int, default=20, help="batches per loss estimate")
    p.add_argument(
        "--measure-memory",
        action="store_true",
        help="record each rank's bytes at rest and at peak during its second step (CPU: "
        "PyTorch's allocator, from before the model is built; CUDA: memory_allocated)",
    )
    p.add_argument("--out", type=Path, default=None, help="checkpoint to write (rank 0)")
    p.add_argument("--report", type=Path, default=None, help="JSON report to write (rank 0)")
    args = p.parse_args(argv)
    for name in (
        "steps",
        "batch_size",
        "grad_accum",
        "eval_batches",
        "block_size",
        "emulate_ranks",
    ):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be a positive integer")
    if args.measure_memory and args.steps < 2:
        p.error("--measure-memory measures the second step: it needs --steps 2 or more")
    return args


def build_model(args: argparse.Namespace, vocab_size: int) -> GPT:
    """The GPT every rank builds: the same seed gives every rank the same initial weights."""
    torch.manual_seed(args.seed)
    config = GPTConfig(
        vocab_size=vocab_size,
        block_size=args.block_size,
        n_layer=args.n_layer,
        n_head=args.n_head,
        n_embd=args.n_embd,
    )
    return GPT(config)


def wrap(model: GPT, mode: str, env: DistEnv) -> nn.Module:
    """Wrap ``model`` for data parallelism (DDP) or sharding (FSDP2); a world of one is left as
    it is under DDP, so the same script is also the single-process baseline."""
    if mode == "fsdp":
        from torch.distributed.fsdp import fully_shard

        if env.world_size == 1:
            raise ValueError("--mode fsdp needs torchrun with more than one process")
        for block in model.blocks:
            fully_shard(block)
        fully_shard(model)
        return model
    if env.world_size == 1:
        return model
    # Every rank starts from rank 0's weights (the seed made them equal already; this makes
    # sure). DDP would send them itself (init_sync, which also first checks that the ranks'
    # shapes agree) through a flat copy of all of them, which gloo can free on its own thread,
    # where the CPU memory trace (AllocatorTrace) does not see the free; a broadcast of each
    # tensor in place leaves no copy behind (parameters() lists the tied weight once).
    for tensor in [*model.parameters(), *model.buffers()]:
        dist.broadcast(tensor.detach(), src=0)
    device_ids = [env.local_rank] if env.device.startswith("cuda") else None
    return DistributedDataParallel(model, device_ids=device_ids, init_sync=False)


def full_state_dict(model: nn.Module, mode: str) -> dict[str, torch.Tensor]:
    """Every parameter in full on the CPU (FSDP gathers the shards; DDP unwraps)."""
    if mode == "fsdp":
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return get_model_state_dict(model, options=options)
    inner = model.module if isinstance(model, DistributedDataParallel) else model
    return {k: v.detach().cpu() for k, v in inner.state_dict().items()}


def local_state_bytes(model: nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Bytes of parameters, gradients and optimiser state that this rank holds itself (with
    FSDP only its shards: ``to_local()`` of each sharded tensor)."""

    def nbytes(t: torch.Tensor) -> int:
        local = t.to_local() if hasattr(t, "to_local") else t
        return local.numel() * local.element_size()

    total = 0
    for p in model.parameters():
        total += nbytes(p)
        if p.grad is not None:
            total += nbytes(p.grad)
    for state in optimizer.state.values():
        for value in state.values():
            if isinstance(value, torch.Tensor) and value.dim() > 0:
                total += nbytes(value)
    return total


def main(argv: Sequence[str] | None = None) -> dict:
    """Train, write the checkpoint and report on rank 0, and return the report (every rank)."""
    args = parse_args(argv)
    env = init_distributed(None if args.device == "auto" else args.device)
    text = load_tinyshakespeare()
    tokenizer = CharTokenizer.from_text(text)
    data = torch.tensor(tokenizer.encode(text), dtype=torch.long)
    train_data, val_data = train_val_split(data)

    cuda = env.device.startswith("cuda")
    memory = contextlib.ExitStack()  # the allocator trace, from the model's birth to step 2
    trace = memory.enter_context(AllocatorTrace()) if args.measure_memory and not cuda else None
    memory_bytes: dict[str, int] = {}
    model = build_model(args, tokenizer.vocab_size).to(env.device)
    ddp_model = wrap(model, args.mode, env)
    fsdp = args.mode == "fsdp"
    step_model = torch.compile(ddp_model) if args.compile else ddp_model
    optimizer = make_adamw(model, lr=args.lr, weight_decay=args.weight_decay)
    if args.emulate_ranks > 1 and env.world_size > 1:
        raise ValueError("--emulate-ranks is for a single process, not under torchrun")
    ranks = range(args.emulate_ranks) if env.world_size == 1 else [env.rank]
    generators = [rank_generator(args.seed, r) for r in ranks]

    def next_batch() -> tuple[torch.Tensor, torch.Tensor]:
        pairs = [
            get_batch(train_data, args.block_size, args.batch_size, generator=g, device=env.device)
            for g in generators
        ]
        return torch.cat([x for x, _ in pairs]), torch.cat([y for _, y in pairs])

    device_type = env.device.split(":")[0]
    autocast = (
        torch.autocast(device_type, dtype=torch.bfloat16)
        if args.dtype == "bfloat16"
        else contextlib.nullcontext()
    )

    losses = torch.zeros(args.steps, device=env.device)  # kept on the device: no sync per step
    grad_norms = torch.zeros(args.steps, device=env.device)
    first_x = None
    logits_dtype = None
    start = time.perf_counter()
    for step in range(args.steps):
        optimizer.zero_grad(set_to_none=True)
        measuring = args.measure_memory and step == 1  # Adam's state exists from step 1 on
        mark = contextlib.nullcontext()
        if measuring and trace is not None:
            mark = trace.mark("step")
        elif measuring:
            memory_bytes["at_rest"] = torch.cuda.memory_allocated(env.device)
            torch.cuda.reset_peak_memory_stats(env.device)
        with mark:
            lr = cosine_lr(
                step,
                max_lr=args.lr,
                warmup_steps=args.warmup,
                total_steps=args.steps,
                min_lr=args.min_lr,
            )
            for group in optimizer.param_groups:
                group["lr"] = lr
            for micro in range(args.grad_accum):
                x, y = next_batch()
                if first_x is None:
                    first_x = x.cpu()
                # The ranks communicate during the last micro-step's backward only: until then
                # each rank adds its micro-batches' gradients up locally (with FSDP, unsharded).
                last = micro == args.grad_accum - 1
                sync = contextlib.nullcontext()
                if isinstance(ddp_model, DistributedDataParallel) and not last:
                    sync = ddp_model.no_sync()
                if fsdp and args.grad_accum > 1:
                    model.set_requires_gradient_sync(last)  # type: ignore[operator]
                with sync:
                    with autocast:
                        logits, loss = step_model(x, y)
                    (loss / args.grad_accum).backward()
                logits_dtype = str(logits.dtype).removeprefix("torch.")
                losses[step] += loss.detach() / args.grad_accum
                del logits, loss  # nothing of this micro-step outlives it
            # The norm of the whole (averaged) gradient, before clipping: a gradient summed
            # instead of averaged over ranks shows here, while Adam's update would almost hide it.
            norm = nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip or float("inf"))
            grad_norms[step] = norm.full_tensor() if hasattr(norm, "full_tensor") else norm
            optimizer.step()
        if measuring:
            if trace is not None:
                memory.close()  # ends the trace
                memory_bytes["at_rest"] = trace.live_at_start("step")
                memory_bytes["step_peak"] = trace.peak("step")
            else:
                memory_bytes["step_peak"] = torch.cuda.max_memory_allocated(env.device)
    if env.world_size > 1:
        dist.all_reduce(losses)
        losses /= env.world_size
    seconds = time.perf_counter() - start
    state_bytes = local_state_bytes(model, optimizer)
    state = full_state_dict(ddp_model, args.mode)
    assert first_x is not None
    first_batches = _gather_tensors(first_x, env)
    distinct = (
        None
        if env.world_size == 1
        else all(
            not torch.equal(a, b)
            for i, a in enumerate(first_batches)
            for b in first_batches[i + 1 :]
        )
    )
    replicas = (
        _gather_tensors(_flat_params(model), env)
        if args.mode == "ddp" and env.world_size > 1
        else []
    )

    global_batch = env.world_size * args.emulate_ranks * args.grad_accum * args.batch_size
    report: dict = {
        "mode": args.mode,
        "world_size": env.world_size,
        "device": env.device,
        "steps": args.steps,
        "global_batch": global_batch,
        "train_loss": losses.tolist(),
        "grad_norm": grad_norms.tolist(),
        "seconds": seconds,
        "tokens_per_second": args.steps * global_batch * args.block_size / seconds,
        "n_params": sum(p.numel() for p in GPT(model.config).parameters()),
        "state_bytes_per_rank": _gather_ints(state_bytes, env),
        # --measure-memory: bytes alive on each rank after zero_grad at the start of step 2,
        # and the most alive during that step (see AllocatorTrace); empty lists without it.
        "bytes_at_rest_per_rank": _gather_ints(memory_bytes["at_rest"], env)
        if memory_bytes
        else [],
        "step_peak_bytes_per_rank": _gather_ints(memory_bytes["step_peak"], env)
        if memory_bytes
        else [],
        "grad_accum": args.grad_accum,
        "dtype": args.dtype,
        "logits_dtype": logits_dtype,  # bfloat16 when autocast ran the matrix products
        "compiled": args.compile,
        # DDP's gradient bucket size (bytes), as the DDP object was built; None without DDP.
        "ddp_bucket_bytes": getattr(ddp_model, "bucket_bytes_cap", None),
        "ranks_drew_distinct_batches": distinct,
        # DDP only: the largest difference between any rank's weights and rank 0's.
        "max_weight_diff_across_ranks": max(
            ((r - replicas[0]).abs().max().item() for r in replicas), default=None
        ),
    }
    if env.is_main:
        plain = GPT(model.config)
        plain.load_state_dict(state)
        val = estimate_loss(
            plain, {"val": val_data}, args.block_size, args.batch_size, args.eval_batches
        )["val"]
        report["val_loss"] = val
        if args.out is not None:
            description = (
                f"{args.mode} on {env.world_size} process(es), {args.steps} steps, "
                f"global batch {global_batch}"
            )
            export_gpt(plain, tokenizer, args.out, dtype="float32", description=description)
        if args.report is not None:
            args.report.parent.mkdir(parents=True, exist_ok=True)
            args.report.write_text(json.dumps(report, indent=1))
        who = f"{env.world_size} process(es)"
        if args.emulate_ranks > 1:
            who = f"1 process drawing {args.emulate_ranks} ranks' batches"
        print(f"{args.mode}, {who}: val loss {val:.3f} after {args.steps} steps")
    if env.world_size > 1:
        dist.barrier()
        dist.destroy_process_group()
    return report


def _flat_params(model: nn.Module) -> torch.Tensor:
    """Every parameter of ``model`` in one flat CPU vector."""
    return torch.cat([p.detach().reshape(-1).cpu() for p in model.parameters()])


def _gather_tensors(t: torch.Tensor, env: DistEnv) -> list[torch.Tensor]:
    """``t`` (same shape on every rank) from every rank, in rank order."""
    if env.world_size == 1:
        return [t]
    out: list[torch.Tensor | None] = [None] * env.world_size
    dist.all_gather_object(out, t)
    return [x for x in out if x is not None]


def _gather_ints(value: int, env: DistEnv) -> list[int]:
    """``value`` from every rank, in rank order (a world of one returns ``[value]``)."""
    if env.world_size == 1:
        return [value]
    out: list[int | None] = [None] * env.world_size
    dist.all_gather_object(out, value)
    return [int(v) for v in out if v is not None]


if __name__ == "__main__":
    main()
