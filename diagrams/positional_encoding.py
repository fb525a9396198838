"""Figure 6.1: positions enter by addition; sin/cos pairs are clock hands of different speeds."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Circle, FancyArrowPatch

from diagrams.style import INK, MUTED, arrow, box, canvas, grid, text, tint

D_MODEL = 8  # four (sin, cos) pairs
BASE = 10000.0
POS = 3


def _clock(
    ax, cx: float, cy: float, r: float, theta: float, theta_next: float, i: int, omega: float
) -> None:
    ax.add_patch(Circle((cx, cy), r, facecolor=tint(INK, 0.04), edgecolor=INK, lw=1.0))
    for tick in range(12):
        a = 2 * np.pi * tick / 12
        ax.plot(
            [cx + 0.9 * r * np.sin(a), cx + r * np.sin(a)],
            [cy + 0.9 * r * np.cos(a), cy + r * np.cos(a)],
            color=MUTED,
            lw=0.6,
        )
    # Hand at angle theta from 12 o'clock, clockwise: tip = (sin, cos) = (PE[2i], PE[2i+1]).
    for angle, color, lw, alpha in [(theta_next, MUTED, 1.4, 0.8), (theta, INK, 2.2, 1.0)]:
        ax.add_patch(
            FancyArrowPatch(
                (cx, cy),
                (cx + r * np.sin(angle), cy + r * np.cos(angle)),
                arrowstyle="-|>",
                mutation_scale=9,
                color=color,
                lw=lw,
                alpha=alpha,
                shrinkA=0,
                shrinkB=0,
            )
        )
    text(ax, cx, cy - r - 0.18, f"pair i = {i}", size=9.5, weight="bold")
    text(ax, cx, cy - r - 0.38, f"dims {2 * i}, {2 * i + 1}", size=9.5, color=MUTED)
    text(ax, cx, cy - r - 0.57, f"ω = {omega:g} rad/step", size=9.5, color=MUTED)


def draw() -> Figure:
    fig, ax = canvas(10.0, 3.8)

    # Left: x0 = token embedding + position vector, entering the first block.
    cell, top = 0.36, 3.15
    rng = np.random.default_rng(0)
    emb = [[tint("#E69F00", 0.25 + 0.5 * rng.random()) for _ in range(D_MODEL)]]
    grid(ax, 0.2, top, colors=emb, cell=cell)
    text(ax, 0.2 + D_MODEL * cell / 2, top + 0.17, "token embedding of 'c'  (C,)", size=9.5)
    text(ax, 0.2 + D_MODEL * cell / 2, top - 0.58, "+", size=14)
    pe = np.empty(D_MODEL)
    for i in range(D_MODEL // 2):
        omega = BASE ** (-2 * i / D_MODEL)
        pe[2 * i], pe[2 * i + 1] = np.sin(POS * omega), np.cos(POS * omega)
    pos_colors = [[tint("#56B4E9", 0.2 + 0.6 * (v + 1) / 2) for v in pe]]
    grid(
        ax,
        0.2,
        top - 0.8,
        colors=pos_colors,
        cell=cell,
        labels=[[f"{v:.1f}" for v in pe]],
        size=8.5,
    )
    text(
        ax,
        0.2 + D_MODEL * cell / 2,
        top - 0.8 - cell - 0.15,
        f"position vector PE[{POS}]  (C,)",
        size=9.5,
    )
    arrow(ax, (0.2 + D_MODEL * cell / 2, top - 1.45), (0.2 + D_MODEL * cell / 2, 1.3))
    box(
        ax,
        0.2,
        0.7,
        D_MODEL * cell,
        0.6,
        "first block\n(attention sees x + PE)",
        color=INK,
        fill=0.05,
        size=9.5,
    )
    text(
        ax,
        0.2 + D_MODEL * cell / 2,
        0.35,
        "same 'c' at another position:\nsame embedding, other PE",
        size=9.5,
        color=MUTED,
    )

    # Right: the four (sin, cos) pairs of PE[3] as clock hands.
    r = 0.62
    for i in range(D_MODEL // 2):
        omega = BASE ** (-2 * i / D_MODEL)
        cx = 3.95 + 1.6 * i
        _clock(ax, cx, 2.3, r, POS * omega, (POS + 1) * omega, i, omega)
    text(
        ax,
        6.35,
        3.55,
        f"PE[{POS}] as four clock hands: hand i points at angle pos·ω_i",
        size=10,
        weight="bold",
    )
    text(
        ax,
        6.35,
        0.82,
        f"black: position {POS};  grey: position {POS + 1}.  Each step turns hand i\n"
        "by its own angle ω_i = 10000^(-2i/C).",
        size=9.5,
        color=INK,
    )
    text(
        ax,
        6.35,
        0.3,
        "The hand's tip is (sin, cos) = (PE[pos, 2i], PE[pos, 2i+1]);\n"
        "moving k steps on is one fixed rotation, M_k.",
        size=9.5,
        color=MUTED,
    )
    return fig
