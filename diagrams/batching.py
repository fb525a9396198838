"""Figure 7.1: training windows cut from the text; targets are the inputs shifted by one."""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from diagrams.style import INK, MUTED, TOKEN_COLORS, arrow, canvas, grid, text, tint

TEXT = "First Citizen:\nBefore we proceed"
BLOCK = 8
STARTS = [2, 17]  # two windows of the batch (random starts in training)
WINDOW_COLORS = [TOKEN_COLORS[0], TOKEN_COLORS[3]]  # neither is a query, key or value colour


def _show(ch: str) -> str:
    return {" ": "␣", "\n": "⏎"}.get(ch, ch)


def draw() -> Figure:
    fig, ax = canvas(9.0, 3.6)
    cell = 0.25
    x0, top = 0.35, 3.15
    n = len(TEXT)
    grid(ax, x0, top, shape=(1, n), cell=cell, labels=[[_show(c) for c in TEXT]], size=8)
    for i in range(0, n, 5):
        text(ax, x0 + (i + 0.5) * cell, top + 0.12, str(i), size=6.5, color=MUTED)
    text(
        ax,
        x0,
        top + 0.32,
        "the training text (one character per cell; ␣ space, ⏎ newline)",
        size=8.5,
        ha="left",
        weight="bold",
    )
    for s, color in zip(STARTS, WINDOW_COLORS, strict=True):
        ax.add_patch(
            Rectangle(
                (x0 + s * cell, top - cell), BLOCK * cell, cell, fill=False, edgecolor=color, lw=2.4
            )
        )
        ax.add_patch(
            Rectangle(
                (x0 + (s + 1) * cell, top - cell - 0.06),
                BLOCK * cell,
                cell + 0.12,
                fill=False,
                edgecolor=color,
                lw=1.2,
                ls="--",
            )
        )

    # The batch: x (B, T) and y (B, T).
    bx, btop = 0.75, 2.2
    for b, (s, color) in enumerate(zip(STARTS, WINDOW_COLORS, strict=True)):
        row = btop - b * 0.95
        xs = [[_show(c) for c in TEXT[s : s + BLOCK]]]
        ys = [[_show(c) for c in TEXT[s + 1 : s + 1 + BLOCK]]]
        grid(ax, bx, row, colors=[[tint(color, 0.35)] * BLOCK], cell=cell, labels=xs, size=8)
        grid(
            ax,
            bx + BLOCK * cell + 1.1,
            row,
            colors=[[tint(color, 0.15)] * BLOCK],
            cell=cell,
            labels=ys,
            size=8,
        )
        text(ax, bx - 0.1, row - cell / 2, f"b={b}", size=8, ha="right", color=MUTED)
        arrow(
            ax,
            (x0 + (s + BLOCK / 2) * cell, top - cell - 0.08),
            (bx + BLOCK * cell / 2, row + 0.02),
            color=color,
            lw=1.0,
            connection="arc3,rad=0.0",
        )
        text(ax, bx + BLOCK * cell + 0.55, row - cell / 2, "next char →", size=7.5, color=MUTED)
    text(ax, bx + BLOCK * cell / 2, btop + 0.2, "inputs x   (B, T)", size=8.5, weight="bold")
    text(
        ax, bx + BLOCK * cell * 1.5 + 1.1, btop + 0.2, "targets y   (B, T)", size=8.5, weight="bold"
    )

    # One window unrolled: T predictions per window.
    ux = 6.05
    s = STARTS[0]
    text(ax, ux + 1.25, 2.42, "one window = T training examples", size=8.5, weight="bold")
    for t in range(4):
        ctx = "".join(_show(c) for c in TEXT[s : s + t + 1])
        nxt = _show(TEXT[s + t + 1])
        text(ax, ux, 2.1 - t * 0.3, f"context '{ctx}'", size=8, ha="left", family="monospace")
        text(ax, ux + 1.85, 2.1 - t * 0.3, f"→ '{nxt}'", size=8, ha="left", family="monospace")
    text(ax, ux + 1.25, 0.85, "...", size=9, color=MUTED)
    text(
        ax,
        4.5,
        0.3,
        "y[b, t] is the character after x[b, t] in the text (solid: x, dashed: y "
        "= the same window moved one to the right); T = block_size = 8 here.",
        size=7.5,
        color=INK,
    )
    return fig
