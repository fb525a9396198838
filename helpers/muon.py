"""Muon: momentum whose update matrix is orthogonalised by a Newton-Schulz iteration.

Defined in chapter 10, "From GPT-2 to a modern transformer".

For a weight matrix, SGD with momentum steps along the momentum matrix ``M``, whose few largest
singular directions dominate. Muon (Jordan et al., 2024) steps along ``U V^T`` instead, the
nearest (semi-)orthogonal matrix to ``M = U S V^T``: every singular direction moves by the same
amount. It computes an approximation of ``U V^T`` without an SVD, with five iterations of the
quintic polynomial ``X <- a X + b (X X^T) X + c (X X^T)^2 X``, which acts on every singular value
``s`` of ``X`` by ``phi(s) = a s + b s^3 + c s^5`` and pushes all of them towards 1.

Muon is meant for the 2-D weights inside the blocks; embeddings, the LM head and the 1-D gains
are trained with AdamW. :class:`Muon` does both, one parameter group each, so that one optimiser
(and one learning-rate schedule, via ``lr_scale``) drives the whole model.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

# The quintic's coefficients from Jordan et al. (2024): tuned to raise small singular values as
# fast as possible, at the price of not converging to exactly 1: after five iterations every
# singular value that started at >= 0.002 of the Frobenius norm lies in [0.68, 1.21].
NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)


def newton_schulz_scalar(s: torch.Tensor, steps: int = 5) -> torch.Tensor:
    """What ``steps`` iterations of the quintic do to a singular value ``s`` (of the matrix
    already divided by its Frobenius norm): ``phi`` applied ``steps`` times."""
    a, b, c = NS_COEFFICIENTS
    for _ in range(steps):
        s = a * s + b * s**3 + c * s**5
    return s


def newton_schulz(G: torch.Tensor, steps: int = 5, eps: float = 1e-7) -> torch.Tensor:
    """Approximately orthogonalise ``G`` (``(..., m, n)``): return about ``U V^T`` for
    ``G = U S V^T``, with every singular value mapped to ``newton_schulz_scalar(s / ||G||_F)``.

    The matrix is first divided by its Frobenius norm, so every singular value is at most 1 (the
    iteration only converges there). A tall matrix is transposed, so the products ``X X^T`` are
    of the smaller size.

    Raises:
        ValueError: if ``G`` has fewer than 2 dimensions or ``steps`` is negative.
    """
    if G.dim() < 2:
        raise ValueError(f"expected a matrix (..., m, n), got shape {tuple(G.shape)}")
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    a, b, c = NS_COEFFICIENTS
    X = G / (torch.linalg.matrix_norm(G, keepdim=True) + eps)
    transposed = G.shape[-2] > G.shape[-1]
    if transposed:
        X = X.mT
    for _ in range(steps):
        A = X @ X.mT
        B = b * A + c * (A @ A)
        X = a * X + B @ X
    return X.mT if transposed else X


class Muon(torch.optim.Optimizer):
    """Muon for the parameter groups with ``use_muon=True``, AdamW for the others.

    Muon groups (2-D weights): ``buf = momentum * buf + g``; the update ``g + momentum * buf``
    (Nesterov) or ``buf`` is orthogonalised by :func:`newton_schulz` and applied as
    ``p -= lr * sqrt(max(1, rows / cols)) * update``. An orthogonal ``rows x cols`` matrix has
    entries of RMS ``1 / sqrt(max(rows, cols))``; with the factor, every shape's step has entries
    of RMS ``lr / sqrt(cols)``, where ``cols`` is the input width of ``nn.Linear``'s ``(out, in)``
    weight. AdamW groups: the usual AdamW update with decoupled weight decay.

    Every group's step size is ``group["lr"] * group["lr_scale"]``, so a schedule that sets the
    same ``lr`` on every group (like ``helpers.training.train_step``) scales both together while
    Muon's rate stays ``lr_scale`` times AdamW's.

    Args:
        params: parameter groups (dicts with ``"params"`` and optionally ``"use_muon"``,
            ``"lr_scale"``, ``"weight_decay"``), or an iterable of tensors (AdamW for all).
        lr: base learning rate.
        momentum: Muon's momentum.
        nesterov: Nesterov momentum for Muon.
        ns_steps: Newton-Schulz iterations.
        betas, eps: AdamW's.
        weight_decay: decoupled weight decay (both kinds of groups).
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict],
        lr: float = 1e-3,
        *,
        momentum: float = 0.95,
        nesterov: bool = True,
        ns_steps: int = 5,
        betas: tuple[float, float] = (0.9, 0.99),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ) -> None:
        if lr < 0:
            raise ValueError(f"lr must be >= 0, got {lr}")
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {momentum}")
        defaults = dict(
            lr=lr,
            lr_scale=1.0,
            use_muon=False,
            momentum=momentum,
            nesterov=nesterov,
            ns_steps=ns_steps,
            betas=betas,
            eps=eps,
            weight_decay=weight_decay,
        )
        super().__init__(params, defaults)
        for group in self.param_groups:
            if group["use_muon"] and any(p.dim() != 2 for p in group["params"]):
                raise ValueError("Muon groups may only hold 2-D weight matrices")

    @torch.no_grad()
    def step(self, closure=None):  # noqa: ANN001, ANN201 (torch's signature)
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            if group["use_muon"]:
                self._muon_step(group)
            else:
                self._adamw_step(group)
        return loss

    def _muon_step(self, group: dict) -> None:
        lr = group["lr"] * group["lr_scale"]
        mom, wd = group["momentum"], group["weight_decay"]
        by_shape: dict[tuple[int, ...], list[tuple[torch.Tensor, torch.Tensor]]] = {}
        for p in group["params"]:
            if p.grad is None:
                continue
            state = self.state[p]
            if "momentum_buffer" not in state:
                state["momentum_buffer"] = torch.zeros_like(p)
            buf = state["momentum_buffer"]
            buf.mul_(mom).add_(p.grad)
            update = p.grad.add(buf, alpha=mom) if group["nesterov"] else buf
            by_shape.setdefault(tuple(p.shape), []).append((p, update))
        # Matrices of the same shape are orthogonalised together, as one batched product.
        for shape, items in by_shape.items():
            ortho = newton_schulz(torch.stack([u for _, u in items]), group["ns_steps"])
            scale = max(1.0, shape[0] / shape[1]) ** 0.5
            for (p, _), o in zip(items, ortho, strict=True):
                if wd:
                    p.mul_(1 - lr * wd)
                p.add_(o.to(p.dtype), alpha=-lr * scale)

    def _adamw_step(self, group: dict) -> None:
        lr = group["lr"] * group["lr_scale"]
        beta1, beta2 = group["betas"]
        for p in group["params"]:
            if p.grad is None:
                continue
            state = self.state[p]
            if "step" not in state:
                state["step"] = 0
                state["exp_avg"] = torch.zeros_like(p)
                state["exp_avg_sq"] = torch.zeros_like(p)
            state["step"] += 1
            t = state["step"]
            m, v = state["exp_avg"], state["exp_avg_sq"]
            m.lerp_(p.grad, 1 - beta1)
            v.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
            if group["weight_decay"]:
                p.mul_(1 - lr * group["weight_decay"])
            denom = (v / (1 - beta2**t)).sqrt_().add_(group["eps"])
            p.addcdiv_(m, denom, value=-lr / (1 - beta1**t))


def is_hidden_matrix(name: str, p: torch.Tensor) -> bool:
    """True for the 2-D weights inside the transformer blocks (Muon's parameters); False for
    embeddings, the LM head (tied to the token embedding) and 1-D gains."""
    return p.dim() == 2 and name.startswith("blocks.")


def make_muon(model: nn.Module, *, lr: float, weight_decay: float, muon_lr_scale: float) -> Muon:
    """One :class:`Muon` optimiser for a GPT: Muon for the blocks' matrices (learning rate
    ``lr * muon_lr_scale``, no weight decay), AdamW for the rest (weight decay on the embedding,
    none on gains), like ``helpers.training.make_adamw``."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    hidden = [p for n, p in named if is_hidden_matrix(n, p)]
    other_matrices = [p for n, p in named if p.dim() >= 2 and not is_hidden_matrix(n, p)]
    vectors = [p for _, p in named if p.dim() < 2]
    groups = [
        {"params": hidden, "use_muon": True, "lr_scale": muon_lr_scale, "weight_decay": 0.0},
        {"params": other_matrices, "weight_decay": weight_decay},
        {"params": vectors, "weight_decay": 0.0},
    ]
    return Muon([g for g in groups if g["params"]], lr=lr)
