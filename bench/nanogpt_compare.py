"""Training throughput of nanoGPT's own code and of the book's code, side by side.

nanoGPT (https://github.com/karpathy/nanoGPT) is not part of this repository and none of its code
is copied here: clone it anywhere outside the repository and pass its folder with ``--nanogpt``.
The script

1. writes nanoGPT's data files for Tiny Shakespeare characters (``train.bin``, ``val.bin``,
   ``meta.pkl``, the format of its ``data/shakespeare_char/prepare.py``) into
   ``<nanogpt>/data/shakespeare_char/``, from the book's cached copy of the text (no download);
2. alternates, ``--rounds`` times: nanoGPT's ``train.py`` with its CPU recipe for Shakespeare
   characters (4 layers, 4 heads, ``n_embd`` 128, ``block_size`` 64, batch 12, no dropout,
   float32, no ``torch.compile``) for ``--steps`` iterations, then the book's training loop on the
   same recipe (``bench/train_gpt.py``'s ``reference``) for the same number of steps, each in a
   fresh process with the same number of threads;
3. prints the median wall-clock time per step of each (nanoGPT's from the per-iteration times in
   its log, skipping the first 10 iterations, whose times include its start-up evaluation) and
   the tokens/s, 768 tokens per step;
4. with ``--threads 1``, also the CPU time per step, which a busy machine hardly changes: each
   program runs once more for only 20 steps, and the difference of the two runs' CPU times
   (start-up cancels) is divided by the difference of their step counts.

Example::

    git clone https://github.com/karpathy/nanoGPT /tmp/nanoGPT
    .venv/bin/python bench/nanogpt_compare.py --nanogpt /tmp/nanoGPT --steps 300 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import pickle
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SHORT = 20  # steps of the extra run that measures start-up CPU time
SKIP = 10  # first steps not timed (allocations, thread pool; nanoGPT's first evaluation)
NANOGPT_CPU_RECIPE = [
    "--device=cpu",
    "--compile=False",
    "--dtype=float32",
    "--eval_iters=1",
    "--eval_interval=1000000",
    "--log_interval=1",
    "--always_save_checkpoint=False",
    "--block_size=64",
    "--batch_size=12",
    "--n_layer=4",
    "--n_head=4",
    "--n_embd=128",
    "--dropout=0.0",
]


def prepare_data(nanogpt: Path) -> None:
    """Write train.bin / val.bin / meta.pkl as nanoGPT's prepare.py does (sorted characters,
    uint16 ids, first 90% for training)."""
    sys.path.insert(0, str(ROOT))
    from helpers.data import load_tinyshakespeare

    text = load_tinyshakespeare()
    chars = sorted(set(text))
    stoi = {ch: i for i, ch in enumerate(chars)}
    ids = np.array([stoi[c] for c in text], dtype=np.uint16)
    n = int(0.9 * len(ids))
    out = nanogpt / "data" / "shakespeare_char"
    out.mkdir(parents=True, exist_ok=True)
    ids[:n].tofile(out / "train.bin")
    ids[n:].tofile(out / "val.bin")
    meta = {"vocab_size": len(chars), "itos": dict(enumerate(chars)), "stoi": stoi}
    with open(out / "meta.pkl", "wb") as f:
        pickle.dump(meta, f)


def child_cpu_seconds() -> float:
    """CPU time (user + system) of all finished child processes so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_nanogpt(nanogpt: Path, steps: int, threads: int) -> list[float]:
    """nanoGPT's train.py for ``steps`` iterations; its per-iteration times in seconds."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    with tempfile.TemporaryDirectory() as out_dir:
        cmd = [
            sys.executable,
            "train.py",
            "config/train_shakespeare_char.py",
            *NANOGPT_CPU_RECIPE,
            f"--max_iters={steps}",
            f"--lr_decay_iters={steps}",
            f"--out_dir={out_dir}",
        ]
        proc = subprocess.run(cmd, cwd=nanogpt, env=env, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"nanoGPT failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    times = [float(m) / 1e3 for m in re.findall(r"^iter \d+: .*time ([\d.]+)ms", proc.stdout, re.M)]
    return times[SKIP:]


def run_book(steps: int, threads: int) -> list[float]:
    """The book's training loop on the reference recipe in a fresh process; per-step seconds."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    cmd = [sys.executable, __file__, "--book-worker", f"--steps={steps}", f"--threads={threads}"]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"book worker failed:\n{proc.stderr[-2000:]}")
    return [float(t) for t in proc.stdout.split()][SKIP:]


def book_worker(steps: int, threads: int) -> None:
    """Time ``steps`` steps of bench/train_gpt.py's reference recipe, one step at a time, each
    including its batch and learning rate (as nanoGPT's per-iteration time does)."""
    import torch

    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "bench"))
    from train_gpt import REFERENCE, Run

    from helpers.data import load_tinyshakespeare
    from helpers.tokenizer import CharTokenizer
    from helpers.training import train_val_split

    torch.set_num_threads(threads)
    text = load_tinyshakespeare()
    data = torch.tensor(CharTokenizer.from_text(text).encode(text), dtype=torch.long)
    train_data, _ = train_val_split(data, 0.9)
    run = Run(REFERENCE, train_data, seed=1337, device="cpu")
    for _ in range(steps):
        start = time.perf_counter()
        run.steps(1, total_steps=steps)
        print(f"{time.perf_counter() - start:.6f}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nanogpt", type=Path, help="a nanoGPT checkout (outside this repository)")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--book-worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.book_worker:
        book_worker(args.steps, args.threads)
        return 0
    if args.nanogpt is None or not (args.nanogpt / "train.py").exists():
        p.error("--nanogpt must be a nanoGPT checkout (a folder with train.py)")
    if args.steps <= SHORT + SKIP:
        p.error(f"--steps must be more than {SHORT + SKIP}")
    if args.nanogpt.resolve().is_relative_to(ROOT):
        p.error("put the nanoGPT checkout outside this repository")
    prepare_data(args.nanogpt)
    import torch

    print(f"# torch {torch.__version__}, {args.threads} threads, {args.steps} steps per run")
    medians: dict[str, list[float]] = {"nanoGPT": [], "book": []}
    cpu_steps: dict[str, list[float]] = {"nanoGPT": [], "book": []}
    for r in range(args.rounds):
        runners = {
            "nanoGPT": lambda: run_nanogpt(args.nanogpt, args.steps, args.threads),
            "book": lambda: run_book(args.steps, args.threads),
        }
        short_runners = {
            "nanoGPT": lambda: run_nanogpt(args.nanogpt, SHORT, args.threads),
            "book": lambda: run_book(SHORT, args.threads),
        }
        for name, runner in runners.items():
            cpu_start = child_cpu_seconds()
            times = runner()
            cpu_long = child_cpu_seconds() - cpu_start
            medians[name].append(statistics.median(times))
            line = (
                f"round {r + 1}: {name:8s} median {1e3 * medians[name][-1]:.1f} ms/step "
                f"({768 / medians[name][-1]:,.0f} tokens/s)"
            )
            if args.threads == 1:
                cpu_start = child_cpu_seconds()
                short_runners[name]()
                cpu_short = child_cpu_seconds() - cpu_start
                cpu_steps[name].append((cpu_long - cpu_short) / (args.steps - SHORT))
                line += f"; CPU time {1e3 * cpu_steps[name][-1]:.1f} ms/step"
            print(line, flush=True)
    for name, m in medians.items():
        best, med = min(m), statistics.median(m)
        print(
            f"{name:8s} ms/step: best round {1e3 * best:.1f} ({768 / best:,.0f} tokens/s), "
            f"median of rounds {1e3 * med:.1f} ({768 / med:,.0f} tokens/s)"
        )
    ratio = statistics.median(medians["nanoGPT"]) / statistics.median(medians["book"])
    print(f"book / nanoGPT tokens/s (wall clock): x{ratio:.2f}")
    if args.threads == 1:
        for name, c in cpu_steps.items():
            med = statistics.median(c)
            print(
                f"{name:8s} CPU ms/step: median of rounds {1e3 * med:.1f} "
                f"({768 / med:,.0f} tokens/s)"
            )
        ratio = statistics.median(cpu_steps["nanoGPT"]) / statistics.median(cpu_steps["book"])
        print(f"book / nanoGPT tokens/s (CPU time): x{ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
