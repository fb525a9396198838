"""RMSNorm written out equals PyTorch's; it differs from LayerNorm by not centring."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from helpers.norms import RMSNorm, rms_norm


@pytest.mark.parametrize("eps", [None, 1e-5])
def test_matches_torch_rmsnorm(eps: float | None) -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, 16, generator=g) * 3 + 1
    mine, theirs = RMSNorm(16, eps=eps), nn.RMSNorm(16, eps=eps)
    with torch.no_grad():
        w = torch.randn(16, generator=g)
        mine.weight.copy_(w)
        theirs.weight.copy_(w)
    assert_close(mine(x), theirs(x))
    mine(x).sum().backward()
    theirs(x).sum().backward()
    assert_close(mine.weight.grad, theirs.weight.grad)


def test_rms_is_one_and_mean_is_not_removed() -> None:
    x = torch.randn(4, 32) + 2.0
    y = rms_norm(x)
    assert_close(y.pow(2).mean(-1), torch.ones(4))
    assert (y.mean(-1) > 0.5).all()  # the offset survives: RMSNorm does not centre
    # On centred inputs RMSNorm and LayerNorm (without gain or bias) agree.
    xc = x - x.mean(-1, keepdim=True)
    assert_close(rms_norm(xc, eps=1e-5), nn.functional.layer_norm(xc, (32,), eps=1e-5))


def test_errors() -> None:
    with pytest.raises(ValueError):
        RMSNorm(8)(torch.randn(2, 7))
    with pytest.raises(ValueError):
        RMSNorm(0)
