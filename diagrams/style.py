"""The drawing primitives and visual language shared by every diagram of the book.

Colours come from :mod:`helpers.plotting` (one colour each for queries, keys and values, the
attention colour map on a fixed 0-1 scale, and per-head and per-token colours that are none of
the three), so diagrams and plots speak one language. Shapes are
named as in the book's notation table: ``B, T, C, head_size, n_head, block_size, vocab_size``.

Coordinates: every diagram draws on one Matplotlib axes whose data units are inches, with the
origin at the bottom left, so sizes and font sizes stay comparable across diagrams.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle  # noqa: E402

from helpers.plotting import (  # noqa: E402
    ATTENTION_CMAP,
    HEAD_COLORS,
    KEY_COLOR,
    QUERY_COLOR,
    TOKEN_COLORS,
    VALUE_COLOR,
)

__all__ = [
    "ATTENTION_CMAP",
    "HEAD_COLORS",
    "INK",
    "KEY_COLOR",
    "MUTED",
    "QUERY_COLOR",
    "RESIDUAL_COLOR",
    "TOKEN_COLORS",
    "VALUE_COLOR",
    "arrow",
    "box",
    "canvas",
    "grid",
    "save",
    "text",
    "tint",
]

INK = "#222222"  # text and outlines
MUTED = "#888888"  # secondary text, hidden (masked) cells
RESIDUAL_COLOR = "#6A3D9A"  # the residual stream
FONT = 10  # base font size in points

_RC = {
    "svg.fonttype": "none",  # text stays text: small files, crisp at any zoom, selectable
    "svg.hashsalt": "attention-from-scratch",  # deterministic element ids
    "font.family": "DejaVu Sans",
    "font.size": FONT,
    "mathtext.fontset": "dejavusans",
}


def tint(color: str, amount: float) -> tuple[float, float, float]:
    """``color`` mixed with white: ``amount`` 0 gives white, 1 the colour itself."""
    rgb = np.array(matplotlib.colors.to_rgb(color))
    return tuple(1.0 - amount * (1.0 - rgb))  # type: ignore[return-value]


def canvas(width: float, height: float) -> tuple[Figure, Axes]:
    """A white figure of ``width`` x ``height`` inches whose axes use inches as data units.

    The white background keeps the diagram readable on the dark theme of the book, too.
    """
    with plt.rc_context(_RC):
        fig = plt.figure(figsize=(width, height), facecolor="white")
        ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.set_aspect("equal")
    ax.axis("off")
    return fig, ax


def text(
    ax: Axes,
    x: float,
    y: float,
    s: str,
    *,
    size: float = FONT,
    color: str = INK,
    ha: str = "center",
    va: str = "center",
    weight: str = "normal",
    **kw,
) -> None:
    """Write ``s`` centred at ``(x, y)`` (Matplotlib mathtext allowed: ``$\\alpha$``)."""
    ax.text(x, y, s, fontsize=size, color=color, ha=ha, va=va, fontweight=weight, **kw)


def box(
    ax: Axes,
    x: float,
    y: float,
    w: float,
    h: float,
    label: str = "",
    *,
    color: str = INK,
    fill: float = 0.12,
    size: float = FONT,
    weight: str = "normal",
    text_color: str = INK,
    round_: float = 0.06,
    lw: float = 1.2,
    dashed: bool = False,
) -> None:
    """A rounded box with its bottom-left corner at ``(x, y)``, outlined in ``color`` and
    filled with ``color`` mixed with white (``fill`` 0: white)."""
    patch = FancyBboxPatch(
        (x, y),
        w,
        h,
        boxstyle=f"round,pad=0,rounding_size={round_}",
        facecolor=tint(color, fill),
        edgecolor=color,
        linewidth=lw,
        linestyle="--" if dashed else "-",
    )
    ax.add_patch(patch)
    if label:
        text(ax, x + w / 2, y + h / 2, label, size=size, color=text_color, weight=weight)


def arrow(
    ax: Axes,
    start: tuple[float, float],
    end: tuple[float, float],
    *,
    color: str = INK,
    lw: float = 1.2,
    label: str = "",
    label_offset: tuple[float, float] = (0.0, 0.12),
    size: float = FONT - 1,
    style: str = "-|>",
    connection: str = "arc3,rad=0",
    shrink: float = 2.0,
) -> None:
    """An arrow from ``start`` to ``end`` with an optional label near its middle."""
    ax.add_patch(
        FancyArrowPatch(
            start,
            end,
            arrowstyle=style,
            mutation_scale=10,
            color=color,
            linewidth=lw,
            connectionstyle=connection,
            shrinkA=shrink,
            shrinkB=shrink,
        )
    )
    if label:
        mx, my = (start[0] + end[0]) / 2, (start[1] + end[1]) / 2
        text(ax, mx + label_offset[0], my + label_offset[1], label, size=size, color=color)


def grid(
    ax: Axes,
    x: float,
    y: float,
    values: np.ndarray | None = None,
    *,
    shape: tuple[int, int] | None = None,
    cell: float = 0.32,
    colors: np.ndarray | None = None,
    color: str = INK,
    cmap: str = ATTENTION_CMAP,
    vmin: float = 0.0,
    vmax: float = 1.0,
    labels: Sequence[Sequence[str]] | None = None,
    size: float = FONT - 2,
    hidden: np.ndarray | None = None,
    lw: float = 0.8,
) -> tuple[float, float]:
    """A matrix of cells with its top-left corner at ``(x, y)``; returns its (width, height).

    ``values`` are coloured with ``cmap`` on the fixed scale ``vmin..vmax`` (attention weights:
    0-1); ``colors`` gives each cell's colour directly; otherwise cells are white. ``hidden``
    cells (True) are drawn grey, as masked positions. ``labels`` are written in the cells.
    """
    if values is not None:
        rows, cols = np.asarray(values).shape
    elif colors is not None:
        rows, cols = np.asarray(colors).shape[:2]
    elif shape is not None:
        rows, cols = shape
    else:
        raise ValueError("give values, colors or shape")
    cm = plt.get_cmap(cmap)
    for i in range(rows):
        for j in range(cols):
            if hidden is not None and hidden[i, j]:
                face = tint(MUTED, 0.35)
            elif values is not None:
                face = cm((float(values[i, j]) - vmin) / (vmax - vmin))
            elif colors is not None:
                face = colors[i][j]
            else:
                face = "white"
            ax.add_patch(
                Rectangle(
                    (x + j * cell, y - (i + 1) * cell),
                    cell,
                    cell,
                    facecolor=face,
                    edgecolor=color,
                    linewidth=lw,
                )
            )
            if labels is not None and labels[i][j]:
                dark = values is not None and (float(values[i, j]) - vmin) / (vmax - vmin) > 0.6
                text(
                    ax,
                    x + (j + 0.5) * cell,
                    y - (i + 0.5) * cell,
                    labels[i][j],
                    size=size,
                    color="white" if dark else INK,
                )
    return cols * cell, rows * cell


def save(fig: Figure, path: Path) -> None:
    """Write ``fig`` as a deterministic SVG (no date, fixed ids) and close it."""
    with plt.rc_context(_RC):
        fig.savefig(path, format="svg", facecolor="white", metadata={"Date": None, "Creator": None})
    plt.close(fig)
