"""Figure 4.1 (schematic): the spread of the scores with and without 1/sqrt(head_size)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from diagrams.style import ATTENTION_CMAP, INK, MUTED, arrow, canvas, text


def _bell(ax, x0: float, y0: float, width: float, height: float, spread: float, color: str) -> None:
    """A normal density of standard deviation ``spread`` (in units of the axis' half-width)."""
    u = np.linspace(-1, 1, 200)
    d = np.exp(-0.5 * (u / spread) ** 2)
    ax.fill_between(
        x0 + (u + 1) / 2 * width,
        y0,
        y0 + height * d / d.max() * min(1, 0.25 / spread),
        color=color,
        alpha=0.25,
        lw=0,
    )
    ax.plot(
        x0 + (u + 1) / 2 * width,
        y0 + height * d / d.max() * min(1, 0.25 / spread),
        color=color,
        lw=1.5,
    )
    ax.plot([x0, x0 + width], [y0, y0], color=INK, lw=0.8)
    ax.plot([x0 + width / 2] * 2, [y0 - 0.04, y0 + 0.04], color=INK, lw=0.8)
    text(ax, x0 + width / 2, y0 - 0.17, "0", size=10, color=MUTED)


def _bars(ax, x0: float, y0: float, weights: np.ndarray, height: float) -> None:
    cm = plt.get_cmap(ATTENTION_CMAP)
    w, gap = 0.26, 0.08
    for j, a in enumerate(weights):
        ax.add_patch(
            Rectangle(
                (x0 + j * (w + gap), y0),
                w,
                max(a * height, 0.005),
                facecolor=cm(a),
                edgecolor=INK,
                lw=0.6,
            )
        )
        text(ax, x0 + j * (w + gap) + w / 2, y0 + a * height + 0.12, f"{a:.2f}", size=9.5)
    ax.plot([x0 - 0.05, x0 + len(weights) * (w + gap)], [y0, y0], color=INK, lw=0.8)
    ax.plot([x0 - 0.05] * 2, [y0, y0 + height], color=MUTED, lw=0.6, ls=":")
    text(ax, x0 - 0.12, y0 + height, "1", size=10, color=MUTED, ha="right")


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max())
    return e / e.sum()


def draw() -> Figure:
    fig, ax = canvas(9.6, 3.1)
    z = np.array([0.1, -0.2, 0.3, -0.2, 0.5])  # chapter 4's five logits
    z = (z - z.mean()) / z.std(ddof=1)  # mean 0, standard deviation 1, as the chapter
    d_k = 64
    for col, (title, spread, scale, label) in enumerate(
        [
            ("without scaling", 0.8, np.sqrt(d_k), "q·k: variance ≈ head_size (64)"),
            ("with 1/√head_size", 0.1, 1.0, "q·k / √head_size: variance ≈ 1"),
        ]
    ):
        x0 = 0.2 + col * 4.75
        text(ax, x0 + 2.1, 2.9, title, weight="bold", size=11)
        _bell(ax, x0, 1.45, 2.0, 0.95, spread, INK)
        text(ax, x0 + 1.0, 1.12, label, size=10)
        text(ax, x0 + 1.0, 0.88, "spread of one row of scores", size=10, color=MUTED)
        weights = _softmax(z * scale)
        arrow(
            ax, (x0 + 2.15, 1.9), (x0 + 2.6, 1.9), label="softmax", label_offset=(0, 0.17), size=10
        )
        _bars(ax, x0 + 2.75, 1.45, weights, 1.0)
        text(ax, x0 + 3.6, 1.12, "weights α (0 to 1)", size=10)
        verdict = (
            "one key takes almost everything: the gradient\n"
            "vanishes for every score, the winner's too"
            if col == 0
            else "weights spread over several keys:\ngradient flows to each"
        )
        text(ax, x0 + 2.2, 0.5, verdict, size=10, color=INK)
    text(
        ax,
        4.8,
        0.1,
        "Schematic: the same five scores of standard deviation 1, multiplied by √64 = 8 "
        "(left) or not (right).",
        size=10,
        color=MUTED,
    )
    return fig
