"""Figure 2.1: who sees whom, and how -inf becomes a weight of exactly 0."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from diagrams.style import KEY_COLOR, MUTED, QUERY_COLOR, arrow, canvas, grid, text

T = 4
SCORES = np.array(
    [
        [0.8, -0.3, 1.1, 0.2],
        [0.5, 1.2, -0.7, 0.9],
        [-0.4, 0.3, 0.6, 1.5],
        [1.0, 0.1, -0.2, 0.7],
    ]
)


def _axes_labels(ax, x: float, top: float, cell: float, tokens: list[str]) -> None:
    for j, tok in enumerate(tokens):
        text(ax, x + (j + 0.5) * cell, top + 0.13, tok, size=9, color=KEY_COLOR)
    for i, tok in enumerate(tokens):
        text(ax, x - 0.14, top - (i + 0.5) * cell, tok, size=9, color=QUERY_COLOR)


def draw() -> Figure:
    fig, ax = canvas(8.6, 3.4)
    cell, top = 0.42, 2.7
    tokens = ["t0", "t1", "t2", "t3"]
    future = np.triu(np.ones((T, T), dtype=bool), k=1)

    x0 = 0.5
    labels = [[f"{v:+.1f}" for v in row] for row in SCORES]
    w, h = grid(ax, x0, top, shape=(T, T), cell=cell, labels=labels, size=8)
    _axes_labels(ax, x0, top, cell, tokens)
    text(ax, x0 + w / 2, top + 0.45, "scores", weight="bold")

    x1 = x0 + w + 1.15
    masked = [
        ["-∞" if future[i, j] else f"{SCORES[i, j]:+.1f}" for j in range(T)] for i in range(T)
    ]
    grid(ax, x1, top, shape=(T, T), cell=cell, labels=masked, hidden=future, size=8)
    _axes_labels(ax, x1, top, cell, tokens)
    text(ax, x1 + w / 2, top + 0.45, "masked scores", weight="bold")

    scores = np.where(future, -np.inf, SCORES)
    weights = np.exp(scores - scores.max(axis=1, keepdims=True))
    weights /= weights.sum(axis=1, keepdims=True)
    x2 = x1 + w + 1.15
    wl = [[f"{v:.2f}" for v in row] for row in weights]
    grid(ax, x2, top, weights, cell=cell, labels=wl, size=8)
    _axes_labels(ax, x2, top, cell, tokens)
    text(ax, x2 + w / 2, top + 0.45, "weights (0 to 1)", weight="bold")

    mid = top - h / 2
    arrow(
        ax,
        (x0 + w + 0.1, mid),
        (x1 - 0.25, mid),
        label="key after\nquery: -∞",
        label_offset=(0.0, 0.32),
    )
    arrow(
        ax,
        (x1 + w + 0.1, mid),
        (x2 - 0.25, mid),
        label="softmax\nper row",
        label_offset=(0.0, 0.32),
    )

    text(
        ax,
        4.3,
        0.62,
        "Rows are queries, columns are keys. Query ti may see keys t0..ti "
        "(on and below the diagonal), never a later one.",
        size=9,
    )
    text(
        ax,
        4.3,
        0.34,
        "exp(-∞) = 0: masked keys get weight exactly 0, and each row's visible "
        "weights still sum to 1.",
        size=9,
        color=MUTED,
    )
    return fig
