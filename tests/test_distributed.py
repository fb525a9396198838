"""helpers.distributed and helpers.train_distributed: the arithmetic, and real ``torchrun``
launches of 2 gloo processes on the CPU checked against one process (as CS336 tests DDP).

Each launch is bounded by a timeout that kills its whole process group; ports are picked free.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from torch.testing import assert_close

from helpers.distributed import (
    backend_for,
    ddp_bytes_per_step,
    free_port,
    fsdp_bytes_per_step,
    rank_generator,
    ring_allreduce_bytes,
    run_torchrun,
    tokens_to_hide_allreduce,
    torchrun_command,
    training_state_bytes,
)
from helpers.export import load_gpt

WORKER = str(Path(__file__).with_name("distributed_worker.py"))
TIMEOUT = 180.0


# --- arithmetic ---------------------------------------------------------------------------


def test_ring_allreduce_moves_two_n_minus_one_over_n() -> None:
    assert ring_allreduce_bytes(1000, 1) == 0.0  # nothing to send alone
    assert ring_allreduce_bytes(1000, 2) == 2 * 1 / 2 * 1000 * 4
    assert ring_allreduce_bytes(1000, 8, bytes_per_element=2) == 2 * 7 / 8 * 1000 * 2
    # Approaches twice the tensor, never reaches it.
    assert 2 * 4000 * 0.99 < ring_allreduce_bytes(1000, 1000) < 2 * 4000


def test_fsdp_sends_one_and_a_half_times_ddp() -> None:
    for n in (2, 4, 64):
        assert fsdp_bytes_per_step(124_000_000, n) == pytest.approx(
            1.5 * ddp_bytes_per_step(124_000_000, n)
        )


def test_tokens_to_hide_allreduce_balances_compute_and_traffic() -> None:
    n_params, world, flops, bandwidth = 10**8, 8, 4e14, 4.5e11
    tokens = tokens_to_hide_allreduce(world, flops, bandwidth, bytes_per_element=2)
    backward_seconds = 4 * n_params * tokens / flops  # only the backward pass can overlap
    comm_seconds = ddp_bytes_per_step(n_params, world, bytes_per_element=2) / bandwidth
    assert backward_seconds == pytest.approx(comm_seconds)
    assert tokens_to_hide_allreduce(1, flops, bandwidth) == 0.0
    with pytest.raises(ValueError):
        tokens_to_hide_allreduce(2, 0.0, bandwidth)


def test_training_state_bytes() -> None:
    assert training_state_bytes(10) == 160.0  # 4 + 4 + 8 bytes per parameter with Adam
    assert training_state_bytes(10, adam=False) == 80.0
    assert training_state_bytes(10, 4, sharded=True) == math.ceil(10 / 4) * 16
    assert training_state_bytes(10, 4, sharded=False) == 160.0  # DDP replicates it


@pytest.mark.parametrize(
    "call",
    [
        lambda: ring_allreduce_bytes(-1, 2),
        lambda: ring_allreduce_bytes(10, 0),
        lambda: fsdp_bytes_per_step(10, 0),
        lambda: training_state_bytes(10, 0),
        lambda: rank_generator(-1, 0),
        lambda: rank_generator(0, -1),
        lambda: backend_for(None),  # type: ignore[arg-type]
        lambda: torchrun_command([], nproc_per_node=2, port=1234),
        lambda: torchrun_command(["x.py"], nproc_per_node=0, port=1234),
    ],
)
def test_bad_input_is_a_value_error(call) -> None:
    with pytest.raises(ValueError):
        call()


def test_backends() -> None:
    assert backend_for("cpu") == "gloo"
    assert backend_for("cuda:3") == "nccl"


def test_rank_generators_differ_by_rank_and_repeat_by_seed() -> None:
    draws = {
        (s, r): torch.randint(10**6, (4,), generator=rank_generator(s, r)).tolist()
        for s in (0, 1)
        for r in (0, 1, 2)
    }
    assert len({tuple(v) for v in draws.values()}) == len(draws)
    again = torch.randint(10**6, (4,), generator=rank_generator(1, 2)).tolist()
    assert again == draws[(1, 2)]


def test_torchrun_command_names_the_rendezvous() -> None:
    port = free_port()
    cmd = torchrun_command(["-m", "x"], nproc_per_node=2, port=port, nnodes=2)
    assert f"--rdzv-endpoint=127.0.0.1:{port}" in cmd and "--nnodes=2" in cmd
    assert cmd[-2:] == ["-m", "x"]


# --- real launches --------------------------------------------------------------------------


def _read_ranks(out: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))]


def _check_worker_results(results: list[dict]) -> None:
    assert len(results) == 2
    for r in results:
        assert r["world_size"] == 2
        # DDP's averaged gradient is the gradient of one process on the concatenated batch.
        assert r["ddp_vs_concat"] < 1e-6
        assert r["manual_vs_ddp"] < 1e-7
        # ...and the check can fail: summing without dividing is far off.
        assert r["sum_vs_ddp"] > 1e-3
    assert results[0]["first_window"] != results[1]["first_window"]  # each rank its own data


def test_ddp_gradients_equal_one_process_on_the_whole_batch(tmp_path: Path) -> None:
    run_torchrun([WORKER, str(tmp_path)], nproc_per_node=2, timeout=TIMEOUT)
    _check_worker_results(_read_ranks(tmp_path))


def test_two_nodes_meet_at_a_rendezvous(tmp_path: Path) -> None:
    run_torchrun([WORKER, str(tmp_path)], nproc_per_node=1, nnodes=2, timeout=TIMEOUT)
    results = _read_ranks(tmp_path)
    assert sorted(r["node"] for r in results) == [0, 1]
    _check_worker_results(results)


@pytest.fixture(scope="module")
def three_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[dict, Path]]:
    """The same 6 steps as one process on both ranks' batches, as DDP and as FSDP."""
    out = tmp_path_factory.mktemp("runs")
    common = "-m helpers.train_distributed --steps 6 --batch-size 4 --n-layer 2 --n-embd 32"
    common += " --block-size 32 --eval-batches 2 --warmup 0 --lr 1e-2"
    common = common.split()
    runs = {}
    for name, extra, nproc in (
        ("single", ["--emulate-ranks", "2"], 1),
        ("ddp", [], 2),
        ("fsdp", ["--mode", "fsdp"], 2),
    ):
        files = ["--report", str(out / f"{name}.json"), "--out", str(out / f"{name}.js")]
        run_torchrun([*common, *extra, *files], nproc_per_node=nproc, timeout=TIMEOUT)
        runs[name] = (json.loads((out / f"{name}.json").read_text()), out / f"{name}.js")
    return runs


@pytest.mark.parametrize("name", ["ddp", "fsdp"])
def test_parallel_training_equals_one_process(three_runs, name: str) -> None:
    single, single_path = three_runs["single"]
    report, path = three_runs[name]
    assert report["world_size"] == 2 and report["global_batch"] == single["global_batch"] == 8
    assert report["ranks_drew_distinct_batches"] is True
    assert_close(
        torch.tensor(report["train_loss"]), torch.tensor(single["train_loss"]), rtol=1e-5, atol=1e-5
    )
    # The averaged gradient has the norm of the whole batch's gradient (a sum would double it).
    assert_close(
        torch.tensor(report["grad_norm"]), torch.tensor(single["grad_norm"]), rtol=1e-4, atol=0
    )
    model, _ = load_gpt(path)  # the checkpoint loads with the book's own loader
    reference, _ = load_gpt(single_path)
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        assert_close(p, q, rtol=1e-5, atol=1e-6)
    # The runs did train: the weights moved away from their initial values.
    assert report["train_loss"][-1] < report["train_loss"][0] - 0.05


def test_ddp_replicas_stay_identical(three_runs) -> None:
    assert three_runs["ddp"][0]["max_weight_diff_across_ranks"] == 0.0


def test_fsdp_holds_half_the_training_state_per_rank(three_runs) -> None:
    ddp, fsdp = three_runs["ddp"][0], three_runs["fsdp"][0]
    n = ddp["n_params"]
    assert ddp["state_bytes_per_rank"] == [training_state_bytes(n)] * 2
    assert sum(fsdp["state_bytes_per_rank"]) == training_state_bytes(n)
    for b in fsdp["state_bytes_per_rank"]:
        # Each rank holds its half, up to the uneven split of single tensors' rows.
        assert abs(b - training_state_bytes(n) / 2) < 0.01 * training_state_bytes(n)
