"""The figure of the chapter "Training on more than one device": data parallelism (every rank
a full copy, gradients averaged by an all-reduce) beside sharding (every rank a slice of the
model, gathered when needed)."""

from __future__ import annotations

from matplotlib.figure import Figure

from diagrams.style import HEAD_COLORS, INK, MUTED, RESIDUAL_COLOR, arrow, box, canvas, text

RANKS = ("rank 0", "rank 1")


def _data_parallel(ax, x0: float) -> None:
    text(ax, x0 + 2.1, 4.05, "Data parallelism (DDP)", weight="bold", size=11)
    for i, rank in enumerate(RANKS):
        x = x0 + i * 2.25
        color = HEAD_COLORS[i]
        text(ax, x + 0.95, 3.7, rank, weight="bold")
        box(ax, x, 3.0, 1.9, 0.45, f"batch shard {i}", color=color, fill=0.15, size=9)
        box(ax, x, 2.2, 1.9, 0.5, "whole model", color=INK, fill=0.06, size=9)
        arrow(ax, (x + 0.95, 3.0), (x + 0.95, 2.7))
        box(ax, x, 1.45, 1.9, 0.45, f"gradient $g_{i}$", color=color, fill=0.15, size=9)
        arrow(ax, (x + 0.95, 2.2), (x + 0.95, 1.9), label="backward", label_offset=(0.45, 0))
        arrow(ax, (x + 0.95, 1.45), (x0 + 2.03 + 0.1 * (2 * i - 1), 1.05))
    box(
        ax,
        x0 + 0.6,
        0.6,
        2.95,
        0.45,
        "all-reduce: $(g_0 + g_1)\\,/\\,2$ on both",
        color=RESIDUAL_COLOR,
        fill=0.12,
        size=9,
    )
    text(
        ax,
        x0 + 2.07,
        0.3,
        "same gradient, same step: the copies stay identical",
        size=9,
        color=MUTED,
    )


def _sharded(ax, x0: float) -> None:
    text(ax, x0 + 2.1, 4.05, "Sharding (FSDP)", weight="bold", size=11)
    for i, rank in enumerate(RANKS):
        x = x0 + i * 2.25
        color = HEAD_COLORS[i]
        text(ax, x + 0.95, 3.7, rank, weight="bold")
        box(
            ax,
            x,
            3.0,
            1.9,
            0.5,
            f"half {i} of weights,\ngrads, Adam state",
            color=color,
            fill=0.15,
            size=9,
            dashed=True,
        )
        box(
            ax,
            x,
            1.9,
            1.9,
            0.5,
            f"layer's full weights\n+ batch shard {i}",
            color=INK,
            fill=0.06,
            size=9,
        )
    # all-gather: each rank's full layer is built from both halves
    for i in range(2):
        for j in range(2):
            src = (x0 + i * 2.25 + 0.95 + (0.25 if i == 0 else -0.25), 3.0)
            dst = (x0 + j * 2.25 + 0.95 + (-0.25 if j == 0 else 0.25), 2.4)
            arrow(ax, src, dst, color=HEAD_COLORS[i])
    text(ax, x0 + 0.05, 2.72, "all-gather", size=9, ha="left")
    box(
        ax,
        x0 + 0.6,
        0.95,
        2.95,
        0.5,
        "reduce-scatter: each rank keeps the\nmean gradient of its own half",
        color=RESIDUAL_COLOR,
        fill=0.12,
        size=9,
    )
    for i in range(2):
        arrow(
            ax,
            (x0 + i * 2.25 + 0.95, 1.9),
            (x0 + 2.03 + 0.1 * (2 * i - 1), 1.45),
            label="backward" if i == 0 else "",
            label_offset=(-0.5, 0),
        )
    text(
        ax,
        x0 + 2.07,
        0.6,
        "full layers are gathered just before use and freed after;",
        size=9,
        color=MUTED,
    )
    text(ax, x0 + 2.07, 0.3, "state per rank / 2, traffic up to x 1.5", size=9, color=MUTED)


def draw() -> Figure:
    fig, ax = canvas(9.6, 4.35)
    _data_parallel(ax, 0.2)
    _sharded(ax, 5.0)
    ax.plot([4.8, 4.8], [0.2, 4.2], color=MUTED, lw=0.8, ls=":")
    return fig
