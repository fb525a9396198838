"""Figure 5.1: multi-head attention as reshapes around one batched attention call."""

from __future__ import annotations

from matplotlib.figure import Figure

from diagrams.style import (
    HEAD_COLORS,
    INK,
    MUTED,
    QUERY_COLOR,
    arrow,
    box,
    canvas,
    grid,
    text,
    tint,
)

T, N_HEAD, HS = 4, 4, 2  # tokens, heads, head_size (drawn small); C = N_HEAD * HS


def _banded(ax, x: float, top: float, cell: float, amount: float = 0.6) -> tuple[float, float]:
    """A (T, C) grid whose columns are coloured by the head they belong to."""
    colors = [[tint(HEAD_COLORS[j // HS], amount) for j in range(N_HEAD * HS)] for _ in range(T)]
    return grid(ax, x, top, colors=colors, cell=cell)


def _stack(ax, x: float, top: float, cell: float) -> float:
    """n_head small (T, head_size) grids, one behind the other; returns the total width."""
    step = 0.13
    for h in reversed(range(N_HEAD)):
        grid(
            ax,
            x + h * step,
            top + h * step,
            colors=[[tint(HEAD_COLORS[h], 0.6)] * HS for _ in range(T)],
            cell=cell,
        )
    text(ax, x + HS * cell / 2, top - T * cell - 0.12, "h0", size=9.5, color=MUTED)
    text(
        ax,
        x + 3 * step + HS * cell + 0.05,
        top + 3 * step - 0.05,
        "h3",
        size=9.5,
        color=MUTED,
        ha="left",
    )
    return HS * cell + (N_HEAD - 1) * step


def draw() -> Figure:
    fig, ax = canvas(9.0, 3.3)
    cell, top = 0.15, 2.45
    y_mid = top - T * cell / 2

    box(ax, 0.1, y_mid - 0.3, 0.75, 0.6, "x\n(B, T, C)", color=INK, fill=0.06, size=10)
    box(ax, 1.0, y_mid - 0.34, 0.85, 0.68, "c_attn\nC → 3C", color=INK, fill=0.06, size=10)
    arrow(ax, (0.85, y_mid), (1.0, y_mid))

    x1 = 2.05
    w, h = _banded(ax, x1, top, cell)
    text(ax, x1 + w / 2, top + 0.2, "q   (B, T, C)", size=10, weight="bold", color=QUERY_COLOR)
    text(ax, x1 + w / 2, top - h - 0.2, "one colour\nper head", size=9.5, color=MUTED)
    arrow(ax, (1.85, y_mid), (x1 - 0.03, y_mid))

    x2 = x1 + w + 0.7
    arrow(ax, (x1 + w + 0.05, y_mid), (x2 - 0.05, y_mid), label="split", size=9.5)
    text(
        ax,
        (x1 + w + x2) / 2 + 0.25,
        y_mid - 1.0,
        ".view(B, T, n_head, head_size)\n.transpose(1, 2)",
        size=9,
        color=MUTED,
        family="monospace",
    )
    ws = _stack(ax, x2, top, cell)
    text(ax, x2 + ws / 2, top + 0.6, "(B, n_head, T, head_size)", size=10, weight="bold")

    x3 = x2 + ws + 0.3
    box(
        ax,
        x3,
        y_mid - 0.5,
        1.05,
        1.0,
        "attention\nin every head\n(one batched\ncall)",
        color=INK,
        fill=0.04,
        size=9.5,
    )
    arrow(ax, (x2 + ws + 0.02, y_mid), (x3 - 0.02, y_mid))
    text(ax, x3 + 0.52, y_mid - 0.72, "k and v are split\nthe same way", size=9.5, color=MUTED)

    x4 = x3 + 1.25
    ws4 = _stack(ax, x4, top, cell)
    arrow(ax, (x3 + 1.07, y_mid), (x4 - 0.03, y_mid))

    x5 = x4 + ws4 + 0.6
    w5, _ = _banded(ax, x5, top, cell, amount=0.8)
    arrow(ax, (x4 + ws4 + 0.05, y_mid), (x5 - 0.05, y_mid), label="merge", size=9.5)
    text(ax, x5 + w5 / 2, top + 0.2, "(B, T, C)", size=10, weight="bold")
    text(
        ax,
        x5 + w5 / 2,
        top - T * cell - 0.3,
        ".transpose(1, 2)\n.reshape(B, T, C)",
        size=9,
        color=MUTED,
        family="monospace",
    )

    box(
        ax,
        x5 - 0.05,
        0.55,
        w5 + 0.1,
        0.55,
        "$W^O$  (C, C)\nmixes the heads",
        color=INK,
        fill=0.06,
        size=9.5,
    )
    arrow(ax, (x5 + w5 / 2, top - T * cell - 0.55), (x5 + w5 / 2, 1.12))
    arrow(ax, (x5 - 0.05, 0.82), (x5 - 0.6, 0.82))
    text(ax, x5 - 0.65, 0.82, "out (B, T, C)", size=10, ha="right", weight="bold")

    text(
        ax,
        3.4,
        0.3,
        "c_attn computes q, k and v at once; .split(C) separates them. C = n_head · head_size.",
        size=9.5,
        color=MUTED,
    )
    text(
        ax,
        3.4,
        0.1,
        "Head h takes its own head_size columns of q, k and v and computes its own (T, T) weights.",
        size=9.5,
        color=MUTED,
    )
    return fig
