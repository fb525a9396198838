"""Newton-Schulz orthogonalises; Muon's AdamW groups are AdamW."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from helpers.model import GPT, GPTConfig
from helpers.muon import Muon, make_muon, newton_schulz, newton_schulz_scalar


@pytest.mark.parametrize("shape", [(64, 64), (64, 192), (256, 64)])
def test_singular_values_follow_the_scalar_map(shape: tuple[int, int]) -> None:
    g = torch.Generator().manual_seed(0)
    G = torch.randn(*shape, generator=g, dtype=torch.float64)
    s_in = torch.linalg.svdvals(G) / torch.linalg.matrix_norm(G)
    s_out = torch.linalg.svdvals(newton_schulz(G))
    assert_close(s_out, newton_schulz_scalar(s_in).sort(descending=True).values)
    # The band of the quintic: every singular value that starts at >= 0.002 of the Frobenius
    # norm ends in [0.68, 1.21], not at exactly 1 (a square matrix also has smaller ones).
    band = s_out[s_in >= 2e-3]
    assert len(band) >= min(shape) - 2
    assert 0.68 <= band.min() and band.max() <= 1.21


def test_singular_vectors_are_kept() -> None:
    g = torch.Generator().manual_seed(1)
    G = torch.randn(32, 48, generator=g, dtype=torch.float64)
    U, S, Vh = torch.linalg.svd(G, full_matrices=False)
    s = newton_schulz_scalar(S / torch.linalg.matrix_norm(G))
    assert_close(newton_schulz(G), U @ torch.diag(s) @ Vh)


def test_batched_equals_one_by_one() -> None:
    G = torch.randn(3, 16, 24)
    assert_close(newton_schulz(G), torch.stack([newton_schulz(m) for m in G]))


def test_adamw_groups_match_torch_adamw() -> None:
    torch.manual_seed(0)
    a, b = nn.Linear(8, 4), nn.Linear(8, 4)
    b.load_state_dict(a.state_dict())
    opt_a = Muon(a.parameters(), lr=1e-2, weight_decay=0.1)
    opt_b = torch.optim.AdamW(b.parameters(), lr=1e-2, betas=(0.9, 0.99), weight_decay=0.1)
    for _ in range(5):
        x = torch.randn(16, 8)
        for m, opt in ((a, opt_a), (b, opt_b)):
            opt.zero_grad()
            m(x).pow(2).sum().backward()
            opt.step()
    assert_close(a.weight, b.weight)
    assert_close(a.bias, b.bias)


def test_muon_step_is_orthogonalised_momentum() -> None:
    torch.manual_seed(0)
    w = nn.Parameter(torch.randn(16, 8))
    opt = Muon([{"params": [w], "use_muon": True, "lr_scale": 2.0}], lr=0.01, nesterov=False)
    w0 = w.detach().clone()
    grad = torch.randn(16, 8)
    w.grad = grad.clone()
    opt.step()
    expected = w0 - 0.02 * 2**0.5 * newton_schulz(grad)  # tall: factor sqrt(16 / 8)
    assert_close(w.detach(), expected)


def test_wide_matrix_gets_no_factor() -> None:
    """Rows are nn.Linear's outputs: a wide (out < in) weight steps by lr alone; a factor taken
    from an (in, out) layout, sqrt(16 / 8), would make its step larger."""
    torch.manual_seed(1)
    w = nn.Parameter(torch.randn(8, 16))
    opt = Muon([{"params": [w], "use_muon": True}], lr=0.01, nesterov=False)
    w0 = w.detach().clone()
    grad = torch.randn(8, 16)
    w.grad = grad.clone()
    opt.step()
    assert_close(w.detach(), w0 - 0.01 * newton_schulz(grad))


def test_make_muon_splits_parameters() -> None:
    model = GPT(GPTConfig(pos="rope", norm="rmsnorm", qk_norm=True, mlp="relu2"))
    opt = make_muon(model, lr=1e-3, weight_decay=0.1, muon_lr_scale=8.0)
    muon = [g for g in opt.param_groups if g["use_muon"]]
    assert len(muon) == 1
    n_muon = sum(p.numel() for p in muon[0]["params"])
    C, L = model.config.n_embd, model.config.n_layer
    assert n_muon == 12 * C * C * L  # every matrix in the blocks, nothing else
    ids = {id(p) for g in opt.param_groups for p in g["params"]}
    assert ids == {id(p) for p in model.parameters()}


def test_errors() -> None:
    with pytest.raises(ValueError):
        newton_schulz(torch.randn(5))
    with pytest.raises(ValueError):
        Muon([{"params": [nn.Parameter(torch.randn(3))], "use_muon": True}])
