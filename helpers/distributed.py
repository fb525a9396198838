"""Data parallelism with PyTorch's own ``torch.distributed``: joining the process group that
``torchrun`` sets up, giving each rank its own data, averaging gradients, and the arithmetic of
what the devices must send each other.

Defined in the chapter "Training on more than one device". The training script that uses it is
``helpers/train_distributed.py`` (``torchrun --nproc-per-node 2 -m helpers.train_distributed``).

Every process started by ``torchrun`` runs the same script. ``torchrun`` tells each one who it is
through environment variables (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``,
``MASTER_PORT``); :func:`init_distributed` reads them. The backend is ``gloo`` on CPUs and
``nccl`` on NVIDIA GPUs, from the same code.
"""

from __future__ import annotations

import math
import os
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from helpers.device import pick_device
from helpers.validation import check_non_negative_int, check_positive_int


@dataclass(frozen=True)
class DistEnv:
    """Who this process is: its ``rank`` among ``world_size`` processes, its ``local_rank``
    on its machine, and the ``device`` it trains on (``cuda:<local_rank>`` on GPUs)."""

    rank: int
    world_size: int
    local_rank: int
    device: str

    @property
    def is_main(self) -> bool:
        """Rank 0 writes checkpoints and prints; the others stay quiet."""
        return self.rank == 0


def backend_for(device: str) -> str:
    """``"nccl"`` for CUDA devices (GPU-to-GPU links), ``"gloo"`` for everything else."""
    if not isinstance(device, str):
        raise ValueError(f"device must be a string such as 'cpu' or 'cuda', got {device!r}")
    return "nccl" if device.startswith("cuda") else "gloo"


def init_distributed(device: str | None = None) -> DistEnv:
    """Join the process group ``torchrun`` prepared, or run as a world of one without it.

    Args:
        device: ``"cpu"``, ``"cuda"`` or ``None`` (``helpers.device.pick_device()``; Apple's MPS
            has no collective backend, so it falls back to the CPU here). On CUDA each process
            takes the GPU numbered by its ``LOCAL_RANK``.

    Returns:
        This process's :class:`DistEnv`. Outside ``torchrun`` (no ``WORLD_SIZE`` in the
        environment) no process group is created and the world has one rank.
    """
    if device is None:
        device = pick_device()
        if device == "mps":
            device = "cpu"
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    if "WORLD_SIZE" not in os.environ:
        return DistEnv(rank=0, world_size=1, local_rank=0, device=device)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device == "cuda":
        torch.cuda.set_device(local_rank)
        device = f"cuda:{local_rank}"
    if not dist.is_initialized():
        dist.init_process_group(backend=backend_for(device))
    return DistEnv(dist.get_rank(), dist.get_world_size(), local_rank, device)


def rank_generator(seed: int, rank: int) -> torch.Generator:
    """A random generator of batch positions for one rank: different ranks draw different
    windows of the text (their own shard of every global batch), and a rank re-started with the
    same ``seed`` draws the same ones.

    Seeds are ``seed * 1_000_003 + rank`` so that ``(seed, rank)`` pairs never share a stream.
    """
    check_non_negative_int("seed", seed)
    check_non_negative_int("rank", rank)
    return torch.Generator().manual_seed(seed * 1_000_003 + rank)


def average_gradients(params: Iterable[torch.nn.Parameter]) -> None:
    """All-reduce every gradient and divide by the number of ranks: afterwards each rank holds
    the mean of all ranks' gradients, which is the gradient of the mean loss over the global
    batch (the ranks' batches are of equal size). This is what ``DistributedDataParallel`` does,
    one tensor at a time and without overlapping with the backward pass.

    Parameters without a gradient are skipped. A world of one (no process group) is a no-op.
    """
    if not dist.is_available() or not dist.is_initialized():
        return
    world = dist.get_world_size()
    for p in params:
        if p.grad is not None:
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
            p.grad /= world


def ring_allreduce_bytes(n_elements: int, world_size: int, bytes_per_element: int = 4) -> float:
    """Bytes each rank sends in a ring all-reduce of ``n_elements``: ``2 (N - 1) / N`` times the
    tensor (a reduce-scatter then an all-gather, each moving ``(N - 1) / N`` of it)."""
    check_non_negative_int("n_elements", n_elements)
    check_positive_int("world_size", world_size)
    check_positive_int("bytes_per_element", bytes_per_element)
    return 2 * (world_size - 1) / world_size * n_elements * bytes_per_element


def ddp_bytes_per_step(n_params: int, world_size: int, bytes_per_element: int = 4) -> float:
    """Bytes each rank sends per optimiser step under data parallelism: one all-reduce of the
    gradients, ``2 (N - 1) / N`` times the model's size in bytes."""
    return ring_allreduce_bytes(n_params, world_size, bytes_per_element)


def fsdp_bytes_per_step(n_params: int, world_size: int, bytes_per_element: int = 4) -> float:
    """At most the bytes each rank sends per step with parameters, gradients and optimiser state
    sharded (FSDP / ZeRO-3): an all-gather of the parameters for the forward pass, another for
    the backward pass, and a reduce-scatter of the gradients, each ``(N - 1) / N`` of the model:
    ``3 (N - 1) / N`` times its size, 1.5 times data parallelism's all-reduce. It is an upper
    bound: FSDP2 by default keeps the root module's weights (here the embeddings, the tied head
    and the last norm) gathered from the forward to the backward pass, so those are gathered
    once; and sharding only gradients and optimiser state (ZeRO-1/2) costs what DDP costs."""
    check_non_negative_int("n_params", n_params)
    check_positive_int("world_size", world_size)
    check_positive_int("bytes_per_element", bytes_per_element)
    return 3 * (world_size - 1) / world_size * n_params * bytes_per_element


def tokens_to_hide_allreduce(
    world_size: int,
    flops_per_second: float,
    bytes_per_second: float,
    bytes_per_element: int = 4,
) -> float:
    """Tokens each rank must process per step for its backward pass to take as long as DDP's
    gradient all-reduce: below this, the ranks wait for the network.

    Only the backward pass can overlap the all-reduce (no gradient exists during the forward
    pass), and it costs about ``4 * n_params * tokens`` FLOPs (ignoring attention's own share);
    the all-reduce sends ``2 (N - 1) / N * n_params * bytes_per_element`` bytes over a link of
    ``bytes_per_second`` in each direction. Setting the two times equal, ``n_params`` cancels:
    ``tokens = (N - 1) / N * bytes_per_element * flops_per_second / (2 * bytes_per_second)``.
    To first order the answer does not depend on the model's size, only on the hardware's ratio
    of arithmetic to bandwidth (it ignores latency, which dominates small messages, and the last
    bucket's all-reduce, which nothing can hide).
    """
    check_positive_int("world_size", world_size)
    check_positive_int("bytes_per_element", bytes_per_element)
    if not (flops_per_second > 0 and bytes_per_second > 0):
        raise ValueError("flops_per_second and bytes_per_second must be positive")
    return (
        (world_size - 1)
        / world_size
        * bytes_per_element
        * flops_per_second
        / (2 * bytes_per_second)
    )


def training_state_bytes(
    n_params: int, world_size: int = 1, *, sharded: bool = False, adam: bool = True
) -> float:
    """Bytes of float32 training state per rank: parameters (4 bytes each), gradients (4) and,
    with Adam, two moment estimates (8): 16 bytes per parameter. Data parallelism keeps all of it
    on every rank; sharding (``sharded=True``) keeps ``1 / world_size`` of it on each, counted as
    an even split of the parameter count rounded up (FSDP2 pads each parameter's first dimension
    to a multiple of ``world_size`` instead: a little more, negligible for large models).
    Activations are extra."""
    check_non_negative_int("n_params", n_params)
    check_positive_int("world_size", world_size)
    per_param = 4 + 4 + (8 if adam else 0)
    if not sharded:
        return float(n_params * per_param)
    return float(math.ceil(n_params / world_size) * per_param)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that is free right now, for a ``torchrun`` rendezvous."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def torchrun_command(
    target: Sequence[str],
    *,
    nproc_per_node: int,
    port: int,
    nnodes: int = 1,
    host: str = "127.0.0.1",
    run_id: str = "afs",
) -> list[str]:
    """The ``torchrun`` command line that starts ``target`` (``["-m", "module", ...]`` or
    ``["script.py", ...]``) on ``nproc_per_node`` processes of this machine, meeting the other
    ``nnodes - 1`` machines at the c10d rendezvous ``host:port``.

    ``run_id`` names the job: the nodes of one job must pass the same id, and two jobs that
    share an endpoint are kept apart only by their ids, so give every job its own (a cluster's
    job id; :func:`run_torchrun` draws a fresh one per launch)."""
    if not run_id:
        raise ValueError("run_id is empty: every node of a job passes the job's own id")
    check_positive_int("nproc_per_node", nproc_per_node)
    check_positive_int("nnodes", nnodes)
    check_positive_int("port", port)
    if not target:
        raise ValueError("target is empty: pass ['-m', 'module', ...] or ['script.py', ...]")
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    if not Path(torchrun).exists():
        torchrun_args = [sys.executable, "-m", "torch.distributed.run"]
    else:
        torchrun_args = [torchrun]
    return [
        *torchrun_args,
        f"--nnodes={nnodes}",
        f"--nproc-per-node={nproc_per_node}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={host}:{port}",
        f"--rdzv-id={run_id}",
        *target,
    ]


def run_torchrun(
    target: Sequence[str],
    *,
    nproc_per_node: int = 2,
    nnodes: int = 1,
    timeout: float = 300.0,
    env: dict[str, str] | None = None,
) -> str:
    """Run ``torchrun`` on this machine (``nnodes`` copies of it, all on 127.0.0.1, stand in for
    that many machines) and return what the first node printed to standard output.

    Standard error (torchrun's own banners, and any warnings PyTorch's C++ side logs while the
    processes shut down) is kept apart: it appears only in the error of a failed launch, so the
    returned text is the script's own output and nothing else.

    Each ``torchrun`` is started in its own process group and killed with everything it started
    if it runs past ``timeout`` seconds, so a hung collective cannot hang the caller. Every launch
    gets a free port and its own rendezvous id (``afs-`` and 12 random hex digits), shared by its
    nodes only, so two launches can never join one job.

    Raises:
        RuntimeError: if a launch fails or times out (its output is in the message).
    """
    port = free_port()
    run_id = f"afs-{uuid.uuid4().hex[:12]}"
    base_env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    procs = [
        subprocess.Popen(
            torchrun_command(
                target, nproc_per_node=nproc_per_node, port=port, nnodes=nnodes, run_id=run_id
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=base_env,
            start_new_session=True,
        )
        for _ in range(nnodes)
    ]
    outputs: list[str] = []
    failed: list[str] = []
    for i, proc in enumerate(procs):
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for p in procs:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
            out, err = proc.communicate()
            failed.append(f"node {i} timed out after {timeout} s:\n{out}{err}")
            continue
        outputs.append(out)
        if proc.returncode != 0:
            failed.append(f"node {i} exited with {proc.returncode}:\n{out}{err}")
    if failed:
        raise RuntimeError("torchrun failed\n" + "\n".join(failed))
    return outputs[0]
