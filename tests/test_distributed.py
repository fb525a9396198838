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

import helpers.train_distributed as train_distributed
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
from helpers.measure import AllocatorTrace, interleaved_median_times
from helpers.training import get_batch

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


# --- measuring tools the chapter added to helpers.measure ----------------------------------


def test_allocator_trace_counts_bytes_alive_and_the_peak_of_a_range() -> None:
    torch.set_num_threads(1)
    before = torch.zeros(10_000)  # made before the trace: not counted, even when freed inside
    with AllocatorTrace() as trace:
        kept = torch.zeros(1000)  # 4,000 bytes, alive when the range begins
        del before
        with trace.mark("step"):
            scratch = torch.zeros(2000)  # 8,000 bytes at once, then freed
            del scratch
            result = torch.zeros(500)
    assert trace.live_at_start("step") == 4000
    assert trace.peak("step") == 4000 + 8000
    assert kept.numel() + result.numel() == 1500
    with pytest.raises(ValueError):
        trace.peak("never marked")
    with pytest.raises(ValueError):
        trace.mark("[memory]")


def test_interleaved_median_times_runs_every_function_in_turn() -> None:
    calls: list[str] = []
    times = interleaved_median_times(
        {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")},
        rounds=3,
        repeats=2,
        warmup=1,
    )
    assert set(times) == {"a", "b"} and all(t >= 0 for t in times.values())
    assert calls == ["a", "b"] + ["a", "a", "b", "b"] * 3  # warm-ups, then alternating rounds
    for bad in (
        lambda: interleaved_median_times({}),
        lambda: interleaved_median_times({"a": lambda: None}, rounds=0),
        lambda: interleaved_median_times({"a": lambda: None}, warmup=-1),
    ):
        with pytest.raises(ValueError):
            bad()


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


# Gradient norms of a parallel run and its one-process twin differ by float32 rounding only
# (a mean of per-rank means adds the same numbers in another order), and Adam carries the
# difference on from step to step. Measured on an AMD EPYC (AVX-512): at most 2.5e-6 relative
# over the 40 steps of the chapter's runs (DDP, seeds 0 and 7); in these 6-step runs 1e-7 for
# DDP and FSDP, and 8.4e-6 for FSDP's 2 accumulated micro-steps against one process taking the
# whole batch at once. CPUs whose kernels round a 4-row batch differently from an 8-row one
# start further apart and drift more. 1e-4 keeps a margin of 12 over what was measured and is
# still 10,000 times smaller than the factor 2 of a sum instead of a mean, or the factor k of an
# accumulation that forgets 1/k.
GRAD_NORM_RTOL = 1e-4
# Step 1 starts from identical weights: there the difference is one rounding of each sum.
FIRST_GRAD_NORM_RTOL = 1e-5


@pytest.fixture(scope="module")
def three_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[dict, Path]]:
    """The same 6 steps as one process on both ranks' batches, as DDP and as FSDP; then steps
    of twice the batch: as one process taking each rank's 8 windows at once (no accumulation,
    the independent reference), and as 2 micro-steps of 4 windows per rank, accumulated, under
    FSDP and under DDP with bfloat16 and torch.compile.

    A rank's generator draws the same windows as 2 draws of 4 or as 1 draw of 8, so the
    whole-batch run sees the same 16 windows per step as the accumulating runs, in another
    order (checked in ``test_accumulation_reference_draws_the_same_windows``)."""
    out = tmp_path_factory.mktemp("runs")
    common = "-m helpers.train_distributed --steps 6 --batch-size 4 --n-layer 2 --n-embd 32"
    common += " --block-size 32 --eval-batches 2 --warmup 0 --lr 1e-2"
    common = common.split()
    accum = ["--grad-accum", "2"]
    runs = {}
    for name, extra, nproc in (
        ("single", ["--emulate-ranks", "2"], 1),
        ("ddp", ["--measure-memory"], 2),
        ("fsdp", ["--mode", "fsdp", "--measure-memory"], 2),
        ("single_whole_batch", ["--emulate-ranks", "2", "--batch-size", "8"], 1),
        ("fsdp_accum", ["--mode", "fsdp", *accum], 2),
        ("ddp_accum_bf16_compiled", [*accum, "--dtype", "bfloat16", "--compile"], 2),
    ):
        files = ["--report", str(out / f"{name}.json"), "--out", str(out / f"{name}.js")]
        if nproc == 1:  # the script's own single-process path, in this process: 4 s less each
            train_distributed.main([*common[2:], *extra, *files])
        else:
            run_torchrun([*common, *extra, *files], nproc_per_node=nproc, timeout=TIMEOUT)
        runs[name] = (json.loads((out / f"{name}.json").read_text()), out / f"{name}.js")
    return runs


@pytest.mark.parametrize(
    ("name", "reference"),
    [("ddp", "single"), ("fsdp", "single"), ("fsdp_accum", "single_whole_batch")],
)
def test_parallel_training_equals_one_process(three_runs, name: str, reference: str) -> None:
    single, single_path = three_runs[reference]
    report, path = three_runs[name]
    assert report["world_size"] == 2 and report["global_batch"] == single["global_batch"]
    assert report["global_batch"] == 8 * report["grad_accum"]
    assert single["grad_accum"] == 1  # the reference takes each step's batch at once
    assert report["ranks_drew_distinct_batches"] is True
    assert_close(
        torch.tensor(report["train_loss"]), torch.tensor(single["train_loss"]), rtol=1e-5, atol=1e-5
    )
    # The averaged gradient has the norm of the whole batch's gradient (a sum would double it).
    norms, reference_norms = torch.tensor(report["grad_norm"]), torch.tensor(single["grad_norm"])
    assert_close(norms[0], reference_norms[0], rtol=FIRST_GRAD_NORM_RTOL, atol=0)
    assert_close(norms, reference_norms, rtol=GRAD_NORM_RTOL, atol=0)
    model, _ = load_gpt(path)  # the checkpoint loads with the book's own loader
    reference, _ = load_gpt(single_path)
    # Adam divides by the root of its running squared gradient (plus 1e-8), so a weight whose
    # gradient is tiny moves by up to the learning rate on rounding noise alone. Without
    # accumulation the two runs add the same numbers in nearly the same order: every weight
    # agrees within 1e-6 plus 1e-5 of its size. Two micro-steps against one whole batch add them
    # in another order, and a few weights of the first block's query/key/value matrix drift
    # further: up to 7.9e-5, measured under six rounding paths of an AMD EPYC (the default,
    # ATEN_CPU_CAPABILITY=avx2, MKL_ENABLE_INSTRUCTIONS=SSE4_2, MKL on its Intel path,
    # ONEDNN_MAX_CPU_ISA=AVX512_CORE and ONEDNN_MAX_CPU_ISA=AVX2, the worst). So there each
    # parameter tensor is compared as a whole: the norm of the difference, relative to the
    # tensor's, was at most 8.7e-5; a run one step short gives 2.1e-3 to 0.13, one that
    # accumulates only one micro-step 1.1e-2 to 0.67. The bound, 1e-3, is 11 times the worst.
    for (name, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
        if report["grad_accum"] == 1:
            assert_close(p, q, rtol=1e-5, atol=1e-6, msg=lambda m, name=name: f"{name}: {m}")
        else:
            ratio = torch.linalg.norm(p - q) / torch.linalg.norm(q)
            assert ratio <= 1e-3, f"{name}: relative difference {ratio:.1e}"
    # The runs did train: the weights moved away from their initial values.
    assert report["train_loss"][-1] < report["train_loss"][0] - 0.05


def test_ddp_replicas_stay_identical(three_runs) -> None:
    assert three_runs["ddp"][0]["max_weight_diff_across_ranks"] == 0.0
    assert three_runs["ddp_accum_bf16_compiled"][0]["max_weight_diff_across_ranks"] == 0.0


def test_accumulation_reference_draws_the_same_windows() -> None:
    """The whole-batch reference is independent of the accumulation code only if it sees the
    same windows: a rank's generator gives the same positions as 2 draws of 4 or 1 draw of 8."""
    data = torch.arange(10_000)
    for rank in (0, 1):
        two, one = rank_generator(1337, rank), rank_generator(1337, rank)
        for _ in range(3):  # consecutive optimiser steps
            x4 = torch.cat([get_batch(data, 32, 4, generator=two)[0] for _ in range(2)])
            assert torch.equal(x4, get_batch(data, 32, 8, generator=one)[0])


def test_bfloat16_compiled_accumulation_trains_like_float32(three_runs) -> None:
    """--dtype bfloat16 --compile --grad-accum 2 under DDP: autocast did run the matrix products
    in bfloat16, and the 6 steps follow the float32 whole-batch run to bfloat16's precision."""
    report, path = three_runs["ddp_accum_bf16_compiled"]
    single = three_runs["single_whole_batch"][0]
    assert report["compiled"] is True and report["grad_accum"] == 2
    assert report["logits_dtype"] == "bfloat16" and single["logits_dtype"] == "float32"
    assert report["global_batch"] == single["global_batch"] == 16
    losses, reference = torch.tensor(report["train_loss"]), torch.tensor(single["train_loss"])
    # bfloat16 keeps 8 significant bits: a loss near 4 moves by about 4 * 2**-8 = 0.016 per
    # rounding; measured over these 6 steps: at most 0.011.
    assert_close(losses, reference, rtol=0, atol=0.03)
    assert not torch.equal(losses, reference)  # bfloat16 did change the rounding
    # The losses cannot catch a gradient of the wrong scale (a missing 1/k, a sum over ranks):
    # Adam divides the scale out of its steps. The gradient norm shows it, doubled. At the first
    # step, from identical weights, bfloat16 moved the norm by 1.5e-4 relative (measured); later
    # the runs follow their own paths (one step's norm differed by 65%), so only the first is
    # compared, with a margin of 60 that still tells 1 from 2.
    norms, reference_norms = torch.tensor(report["grad_norm"]), torch.tensor(single["grad_norm"])
    assert_close(norms[0], reference_norms[0], rtol=0.01, atol=0)
    assert losses[-1] < losses[0] - 0.05
    model, _ = load_gpt(path)
    assert all(p.dtype == torch.float32 for p in model.parameters())  # weights stay float32


def test_memory_measured_during_a_step(three_runs) -> None:
    """Each rank's bytes (PyTorch's allocator) at the start of its second step and at its peak:
    DDP holds weights, Adam's two moments and its gradient bucket, 16 bytes per parameter; FSDP
    holds its halves of weights and moments (6 bytes per parameter) and buffers of its collectives
    not seen freed (alive, or freed on gloo's threads): how many varies from run to run (measured
    over 28 runs of a rank on a loaded machine: from none to 5.8 bytes per parameter). So FSDP's
    count is bounded by what it must hold and by DDP's. The step's activations come on top."""
    ddp, fsdp = three_runs["ddp"][0], three_runs["fsdp"][0]
    n = ddp["n_params"]
    slack = 0.02 * 16 * n  # the batch, Adam's step counters, the loss records
    # DDP's ranks hold the same tensors. (DDP's own first broadcast of the weights goes through
    # a flat copy that gloo can free on its own thread, unseen: a rank showed 4 bytes per
    # parameter more in 3 of 58 runs, measured. helpers.train_distributed.wrap broadcasts each
    # tensor in place instead: 0 of 52 runs.)
    for rest in ddp["bytes_at_rest_per_rank"]:
        assert abs(rest - 16 * n) < slack
    for rest in fsdp["bytes_at_rest_per_rank"]:
        assert 6 * n < rest < 16 * n
    for peak, ddp_peak, ddp_rest in zip(
        fsdp["step_peak_bytes_per_rank"],
        ddp["step_peak_bytes_per_rank"],
        ddp["bytes_at_rest_per_rank"],
        strict=True,
    ):
        assert peak < ddp_peak and ddp_peak > ddp_rest + 4 * n  # gradients, activations on top
    assert three_runs["single"][0]["bytes_at_rest_per_rank"] == []  # only when asked


def test_fsdp_holds_half_the_training_state_per_rank(three_runs) -> None:
    ddp, fsdp = three_runs["ddp"][0], three_runs["fsdp"][0]
    n = ddp["n_params"]
    assert ddp["state_bytes_per_rank"] == [training_state_bytes(n)] * 2
    # The shards, counted tensor by tensor, are one copy split without overlap (padding aside).
    assert sum(fsdp["state_bytes_per_rank"]) == training_state_bytes(n)
    for b in fsdp["state_bytes_per_rank"]:
        # Each rank holds its half, up to the uneven split of single tensors' rows.
        assert abs(b - training_state_bytes(n) / 2) < 0.01 * training_state_bytes(n)


def test_each_launch_gets_its_own_rendezvous_id(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two launches never share a rendezvous id; the nodes of one launch always do."""
    commands: list[list[str]] = []

    class FakeProcess:
        returncode = 0
        pid = 0

        def __init__(self, cmd: list[str], **kwargs: object) -> None:
            commands.append(cmd)

        def communicate(self, timeout: float | None = None) -> tuple[str, str]:
            return "", ""

        def poll(self) -> int:
            return 0

    monkeypatch.setattr("helpers.distributed.subprocess.Popen", FakeProcess)
    run_torchrun(["x.py"], nproc_per_node=1, nnodes=2)
    run_torchrun(["x.py"], nproc_per_node=2)
    ids = [next(a for a in cmd if a.startswith("--rdzv-id=")) for cmd in commands]
    assert len(ids) == 3 and ids[0] == ids[1] and ids[1] != ids[2]
    with pytest.raises(ValueError):
        torchrun_command(["x.py"], nproc_per_node=1, port=1234, run_id="")
