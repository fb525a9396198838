"""Run by tests/test_distributed.py under ``torchrun`` (2 processes, gloo on the CPU).

Every rank checks one data-parallel step against the single-process truth and writes what it
measured to ``<out_dir>/rank<r>.json``:

- ``ddp_vs_concat``: largest difference between DDP's averaged gradients and the gradients of
  one process on the concatenation of every rank's batch (computed on every rank, which can
  regenerate the other ranks' batches from their seeds);
- ``manual_vs_ddp``: largest difference between ``helpers.distributed.average_gradients`` (one
  all-reduce per tensor) and DDP's bucketed all-reduce;
- ``sum_vs_ddp``: the same without the division by the world size (a plausible mistake): must
  be far from zero, or the two checks above prove nothing.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from helpers.distributed import average_gradients, init_distributed, rank_generator
from helpers.model import GPT, GPTConfig
from helpers.training import get_batch

SEED = 7


def grads(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.grad.detach().clone() for p in model.parameters()]


def max_diff(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max((x - y).abs().max().item() for x, y in zip(a, b, strict=True))


def fresh_model() -> GPT:
    torch.manual_seed(SEED)
    return GPT(GPTConfig(vocab_size=65, block_size=16, n_layer=2, n_head=2, n_embd=32))


def main() -> None:
    out_dir = Path(sys.argv[1])
    env = init_distributed("cpu")
    data = torch.randint(0, 65, (5_000,), generator=torch.Generator().manual_seed(0))

    def batch(rank: int) -> tuple[torch.Tensor, torch.Tensor]:
        return get_batch(data, 16, 4, generator=rank_generator(SEED, rank))

    x, y = batch(env.rank)
    ddp = DistributedDataParallel(fresh_model())
    ddp(x, y)[1].backward()
    g_ddp = grads(ddp.module)

    manual = fresh_model()
    manual(x, y)[1].backward()
    average_gradients(manual.parameters())
    g_manual = grads(manual)

    summed = fresh_model()
    summed(x, y)[1].backward()
    for p in summed.parameters():
        dist.all_reduce(p.grad)
    g_sum = grads(summed)

    reference = fresh_model()
    pairs = [batch(r) for r in range(env.world_size)]
    xs, ys = torch.cat([p[0] for p in pairs]), torch.cat([p[1] for p in pairs])
    reference(xs, ys)[1].backward()
    g_ref = grads(reference)

    result = {
        "rank": env.rank,
        "world_size": env.world_size,
        "node": int(os.environ.get("GROUP_RANK", "0")),
        "ddp_vs_concat": max_diff(g_ddp, g_ref),
        "manual_vs_ddp": max_diff(g_manual, g_ddp),
        "sum_vs_ddp": max_diff(g_sum, g_ddp),
        "first_window": x[0].tolist(),
    }
    (out_dir / f"rank{env.rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
