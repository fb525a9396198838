"""Right answers pass the exercise checkers on every rounding path, not only this machine's.

Float32 results depend on the order of the sums: a vectorised kernel (AVX-512, AVX2), PyTorch's
scalar fallback (``ATEN_CPU_CAPABILITY=default``), MKL's reproducible mode (``MKL_CBWR``) and
another CPU each round a little differently. A checker must not build an input whose answer
flips with a difference of one unit in the last place: scores of size 1e10 meant to tie, for
example, differ by 1024 on one path and put a whole row's weight on one key there. Three tests:
the edge case with every score about -1e10 keeps its order however the scores are computed;
right answers whose scores are one unit in the last place off pass; and the right answers of
every checker, run under the other paths in a fresh process, pass with the same reports.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from test_checking import CHECKERS, _check, _future

from helpers.checking._core import _far_below_scores
from helpers.masking import causal_mask

Tensor = torch.Tensor
ROOT = Path(__file__).resolve().parents[1]


def _score_paths(q: Tensor, k: Tensor) -> dict[str, Tensor]:
    """The scaled scores of ``q`` and ``k`` computed in the orders a reader might use."""
    hs = q.shape[-1]
    return {
        "matmul": q @ k.transpose(-2, -1) / math.sqrt(hs),
        "scaled_first": (q / math.sqrt(hs)) @ k.transpose(-2, -1),
        "both_scaled": (q * hs**-0.25) @ (k * hs**-0.25).transpose(-2, -1),
        "einsum": torch.einsum("...td,...sd->...ts", q, k) / math.sqrt(hs),
        "summed_products": (q.unsqueeze(-2) * k.unsqueeze(-3)).sum(-1) / math.sqrt(hs),
        "reversed_sum": (q.flip(-1).unsqueeze(-2) * k.flip(-1).unsqueeze(-3)).cumsum(-1)[..., -1]
        / math.sqrt(hs),
        "float64": (q.double() @ k.double().transpose(-2, -1) / math.sqrt(hs)).float(),
    }


@pytest.mark.parametrize("head_size", [4, 8, 16, 64])
def test_scores_far_below_keep_their_order_on_every_path(head_size: int) -> None:
    """Every score of the edge case is below -1e9, and each query's scores are at least 1e7
    apart however they are computed: the largest one, and so the answer, is the same on every
    path."""
    q, k = _far_below_scores((2, 3), 9, head_size, seed=5)
    reference = _score_paths(q, k)["float64"]
    for path, scores in _score_paths(q, k).items():
        assert scores.max() < -1e9, path
        gaps = scores.sort(dim=-1).values.diff(dim=-1)
        assert gaps.min() > 1e7, path
        assert torch.equal(scores.argmax(dim=-1), reference.argmax(dim=-1)), path
        weights = scores.softmax(dim=-1)
        assert torch.equal(weights, F.one_hot(reference.argmax(-1), 9).float()), path


def _one_ulp_off(scores: Tensor) -> Tensor:
    """``scores`` with a seeded half of its entries moved one unit in the last place, up or
    down (what another rounding path can do to a right answer's scores); differentiable."""
    g = torch.Generator().manual_seed(0)
    moved = torch.rand(scores.shape, generator=g) < 0.5
    up = torch.rand(scores.shape, generator=g) < 0.5
    plain = scores.detach()
    target = torch.where(up, torch.full_like(plain, math.inf), torch.full_like(plain, -math.inf))
    nudged = torch.where(moved, torch.nextafter(plain, target), plain)
    return scores + (nudged - plain)


def attention_one_ulp_off(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    scores = _one_ulp_off(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]))
    return scores.masked_fill(_future(q.shape[-2]), -math.inf).softmax(dim=-1) @ v


def cached_one_ulp_off(q_new: Tensor, k: Tensor, v: Tensor) -> Tensor:
    T_new, T = q_new.shape[-2], k.shape[-2]
    scores = _one_ulp_off(q_new @ k.transpose(-2, -1) / math.sqrt(q_new.shape[-1]))
    scores = scores.masked_fill(~causal_mask(T_new, T_past=T - T_new), -math.inf)
    return scores.softmax(dim=-1) @ v


@pytest.mark.parametrize(
    ("name", "answer"),
    [("causal_attention", attention_one_ulp_off), ("cached_attention", cached_one_ulp_off)],
)
def test_right_answers_one_unit_in_the_last_place_off_pass(
    name: str, answer: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """A right answer whose scores another machine rounds differently (one unit in the last
    place, in either direction) is still right: every checker that builds scores accepts it."""
    result = _check(name, answer)
    out = capsys.readouterr().out
    assert result, out


_SCRIPT = """
import sys
sys.path.insert(0, "tests")
import test_checking as t
for name, (_, right, _) in t.CHECKERS.items():
    for label, answer in right.items():
        print(f"== {name} {label}")
        t._check(name, answer)
"""

_PATHS = {
    "scalar_kernels": {"ATEN_CPU_CAPABILITY": "default"},
    "avx2_reproducible_mkl": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE"},
}


@pytest.mark.parametrize("path", list(_PATHS))
def test_right_answers_pass_on_other_rounding_paths(
    path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The right answers of every checker, in a process whose kernels round differently, pass
    with the same reports as here (the notebooks' committed outputs must match everywhere)."""
    env = {**os.environ, **_PATHS[path], "OMP_NUM_THREADS": "1"}
    other = subprocess.run(
        [sys.executable, "-c", _SCRIPT],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    ).stdout
    for name, (_, right, _) in CHECKERS.items():
        for label, answer in right.items():
            print(f"== {name} {label}")
            _check(name, answer)
    here = capsys.readouterr().out
    assert "failed" not in other, other
    assert other == here
