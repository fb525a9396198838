"""Figure 9.1: the KV cache: prefill, decode steps, and why a sliding window invalidates it."""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from diagrams.style import (
    INK,
    KEY_COLOR,
    MUTED,
    QUERY_COLOR,
    VALUE_COLOR,
    arrow,
    box,
    canvas,
    grid,
    text,
    tint,
)

HS = 3  # head_size, drawn small


def _cache(ax, x: float, top: float, n: int, new: int, cell: float = 0.22) -> None:
    """K and V caches with n rows; the last ``new`` rows are the ones just computed."""
    for col, (name, color) in enumerate([("K", KEY_COLOR), ("V", VALUE_COLOR)]):
        cx = x + col * (HS * cell + 0.3)
        colors = [[tint(color, 0.75 if i >= n - new else 0.3)] * HS for i in range(n)]
        grid(ax, cx, top, colors=colors, cell=cell)
        text(
            ax,
            cx + HS * cell / 2,
            top + 0.14,
            f"{name} cache",
            size=7.5,
            color=color,
            weight="bold",
        )


def _tokens(
    ax,
    x: float,
    y: float,
    labels: list[str],
    positions: list[str],
    *,
    highlight: set[int] | None = None,
    w: float = 0.42,
) -> None:
    for i, (lab, pos) in enumerate(zip(labels, positions, strict=True)):
        hot = highlight is not None and i in highlight
        box(
            ax,
            x + i * (w + 0.06),
            y,
            w,
            0.34,
            lab,
            color=QUERY_COLOR if hot else INK,
            fill=0.2 if hot else 0.04,
            size=8,
        )
        text(ax, x + i * (w + 0.06) + w / 2, y - 0.13, pos, size=6.5, color=MUTED)


def draw() -> Figure:
    fig, ax = canvas(9.0, 4.0)

    # (a) Prefill.
    text(ax, 1.35, 3.75, "1. prefill: the prompt in one pass", size=8.5, weight="bold")
    _tokens(
        ax, 0.2, 3.05, ["T", "o", "␣", "b"], [f"pos {p}" for p in range(4)], highlight={0, 1, 2, 3}
    )
    arrow(
        ax, (1.15, 2.85), (1.15, 2.55), label="k, v of every token", label_offset=(0.85, 0), size=7
    )
    _cache(ax, 0.45, 2.45, 4, 4)
    text(ax, 1.35, 1.3, "stored: k and v for\npositions 0..3 (every layer)", size=7.5, color=MUTED)

    # (b) A decode step.
    x0 = 3.25
    ax.plot([x0 - 0.2, x0 - 0.2], [0.9, 3.85], color=MUTED, lw=0.6, ls=":")
    text(ax, x0 + 1.3, 3.75, "2. decode: one new token per step", size=8.5, weight="bold")
    _tokens(ax, x0, 3.05, ["T", "o", "␣", "b", "e"], [f"pos {p}" for p in range(5)], highlight={4})
    text(ax, x0 + 4 * 0.48 + 0.21, 2.75, "q4, k4, v4", size=7, color=QUERY_COLOR)
    _cache(ax, x0 + 0.3, 2.45, 5, 1)
    text(
        ax,
        x0 + 1.35,
        1.05,
        "computed: one row of q, k, v;\nappended: k4, v4; "
        "q4 attends to\nall 5 cached keys. Nothing\nof the past is recomputed.",
        size=7.5,
        color=MUTED,
    )

    # (c) The sliding window with learned absolute positions.
    x1 = 6.2
    ax.plot([x1 - 0.2, x1 - 0.2], [0.9, 3.85], color=MUTED, lw=0.6, ls=":")
    text(ax, x1 + 1.35, 3.75, "3. past block_size (here 5): slide", size=8.5, weight="bold")
    was = ["was 1", "was 2", "was 3", "was 4", "new"]
    _tokens(
        ax,
        x1,
        3.05,
        ["o", "␣", "b", "e", "!"],
        [f"pos {p}" for p in range(5)],
        w=0.42,
        highlight={4},
    )
    for i, label in enumerate(was):
        text(ax, x1 + i * 0.48 + 0.21, 2.78, label, size=6.5, color=QUERY_COLOR if i < 4 else MUTED)
    ax.add_patch(
        Rectangle(
            (x1 - 0.05, 2.66), 5 * 0.48 + 0.04, 0.8, fill=False, edgecolor=INK, lw=1.0, ls="--"
        )
    )
    text(
        ax,
        x1 + 1.2,
        2.38,
        "adding '!' drops 'T': every token\nmoves to a new position",
        size=7.5,
        color=INK,
    )
    text(
        ax,
        x1 + 1.2,
        1.7,
        "'o' was cached at pos 1, now sits at\npos 0: x = token emb. + "
        "position emb.\nchanged, so every cached k, v is stale.",
        size=7.5,
        color=INK,
    )
    text(
        ax,
        x1 + 1.2,
        1.05,
        "The book's helper drops the cache and\nreruns the cropped window "
        "(chapter 10: rotary\npositions avoid the position shift).",
        size=7.5,
        color=MUTED,
    )

    text(
        ax,
        4.5,
        0.3,
        "Light rows: cached earlier; dark rows: computed in this step. "
        "Attention itself still reads every cached key.",
        size=7.5,
        color=MUTED,
    )
    return fig
