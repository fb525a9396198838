"""Figure 1.1: the averaging trick as one matrix product, ``out = weights @ x``."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from diagrams.style import INK, MUTED, TOKEN_COLORS, canvas, grid, text, tint

T, C = 4, 3
ROW = 2  # the highlighted row


def draw() -> Figure:
    fig, ax = canvas(8.6, 3.3)
    cell = 0.42
    top = 2.55

    # weights: row t holds 1/(t+1) in columns 0..t, zeros above the diagonal.
    weights = np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]
    frac = [
        [("1" if t == 0 else f"1/{t + 1}") if s <= t else "0" for s in range(T)] for t in range(T)
    ]
    x0 = 0.75
    w, h = grid(ax, x0, top, weights, cell=cell, labels=frac, size=9)
    text(ax, x0 + w / 2, top + 0.5, "weights   (T, T)", weight="bold")
    text(ax, x0 + w / 2, top + 0.27, "token position s", size=8, color=MUTED)
    for t in range(T):
        text(ax, x0 - 0.15, top - (t + 0.5) * cell, f"t={t}", size=8, color=MUTED, ha="right")
    for s in range(T):
        text(ax, x0 + (s + 0.5) * cell, top + 0.02, str(s), size=7, color=MUTED, va="bottom")
    ax.add_patch(
        Rectangle((x0, top - (ROW + 1) * cell), w, cell, fill=False, edgecolor=INK, lw=2.4)
    )

    text(ax, x0 + w + 0.35, top - h / 2, "@", size=16)

    # x: one row per token, each token its own colour.
    x1 = x0 + w + 0.7
    colors = [[tint(c, 0.55)] * C for c in TOKEN_COLORS]
    labels = [[f"x{t}" if j == 1 else "" for j in range(C)] for t in range(T)]
    wx, hx = grid(ax, x1, top, colors=colors, cell=cell, labels=labels, size=9)
    text(ax, x1 + wx / 2, top + 0.5, "x   (T, C)", weight="bold")
    text(ax, x1 + wx / 2, top + 0.27, "channels", size=8, color=MUTED)
    ax.add_patch(
        Rectangle(
            (x1, top - (ROW + 1) * cell), wx, (ROW + 1) * cell, fill=False, edgecolor=INK, lw=2.4
        )
    )

    text(ax, x1 + wx + 0.35, top - h / 2, "=", size=16)

    # out: row t is the average of the colours of tokens 0..t.
    x2 = x1 + wx + 0.7
    rgb = np.array([tint(c, 0.55) for c in TOKEN_COLORS])
    mixed = [[tuple(rgb[: t + 1].mean(axis=0))] * C for t in range(T)]
    wo, _ = grid(ax, x2, top, colors=mixed, cell=cell)
    text(ax, x2 + wo / 2, top + 0.5, "out = weights @ x   (T, C)", weight="bold")
    ax.add_patch(
        Rectangle((x2, top - (ROW + 1) * cell), wo, cell, fill=False, edgecolor=INK, lw=2.4)
    )
    means = ["x0", "(x0 + x1) / 2", "(x0 + x1 + x2) / 3", "(x0 + ... + x3) / 4"]
    for t in range(T):
        text(
            ax,
            x2 + wo + 0.15,
            top - (t + 0.5) * cell,
            means[t],
            size=9,
            ha="left",
            weight="bold" if t == ROW else "normal",
        )

    text(
        ax,
        4.3,
        0.45,
        "Row t of weights puts weight 1/(t+1) on tokens 0..t and 0 on the future, so row t of the "
        "product is the average of x0..xt.",
        size=9,
        color=INK,
    )
    text(
        ax, 4.3, 0.18, "Highlighted: t = 2 averages the first three rows of x.", size=9, color=MUTED
    )
    return fig
