"""Figure: tiled attention. Query blocks meet key blocks one tile at a time; a running
maximum, sum and output per query are rescaled as each key block arrives."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from diagrams.style import (
    INK,
    KEY_COLOR,
    MUTED,
    QUERY_COLOR,
    arrow,
    box,
    canvas,
    grid,
    text,
    tint,
)

T = 12  # tokens drawn
BLOCK = 3  # block size drawn (queries and keys)
CELL = 0.2
ACTIVE = 2  # the query block whose inner loop is shown


def _blocks(ax, x: float, top: float, n: int, color: str, *, vertical: bool) -> None:
    """A strip of ``n`` token cells in ``color``, with thick lines between blocks."""
    shape = (n, 1) if vertical else (1, n)
    colors = [[tint(color, 0.35)] * shape[1] for _ in range(shape[0])]
    grid(ax, x, top, colors=colors, cell=CELL, color=color, lw=0.5)
    for b in range(0, n + 1, BLOCK):
        if vertical:
            ax.plot([x, x + CELL], [top - b * CELL] * 2, color=color, lw=1.6)
        else:
            ax.plot([x + b * CELL] * 2, [top, top - CELL], color=color, lw=1.6)


def draw() -> Figure:
    fig, ax = canvas(9.0, 4.0)

    # Left: the T x T score matrix, cut into tiles; causal, so tiles above the diagonal are
    # skipped and the diagonal tiles are masked inside.
    x0, top = 0.75, 3.2
    text(ax, 2.0, 3.8, "the scores, one tile at a time (causal)", size=8.5, weight="bold")
    _blocks(ax, x0 - 0.3, top, T, QUERY_COLOR, vertical=True)
    _blocks(ax, x0, top + 0.3, T, KEY_COLOR, vertical=False)
    text(ax, x0 - 0.5, top - T * CELL / 2, "queries", size=7.5, color=QUERY_COLOR, rotation=90)
    text(ax, x0 + T * CELL / 2, top + 0.45, "keys (and values)", size=7.5, color=KEY_COLOR)
    rows = np.arange(T)[:, None] // BLOCK
    cols = np.arange(T)[None, :] // BLOCK
    skipped = cols > rows  # whole tiles after the query block: never computed
    masked = (np.arange(T)[None, :] > np.arange(T)[:, None]) & ~skipped
    colors = np.empty((T, T), dtype=object)
    for i in range(T):
        for j in range(T):
            if skipped[i, j]:
                colors[i, j] = "white"
            elif masked[i, j]:
                colors[i, j] = tint(MUTED, 0.35)
            elif rows[i, 0] == ACTIVE:
                colors[i, j] = tint(QUERY_COLOR, 0.45)
            else:
                colors[i, j] = tint(INK, 0.06)
    grid(ax, x0, top, colors=colors, cell=CELL, color=tint(INK, 0.35), lw=0.4)
    for b in range(0, T + 1, BLOCK):  # tile borders
        ax.plot([x0, x0 + T * CELL], [top - b * CELL] * 2, color=INK, lw=1.2)
        ax.plot([x0 + b * CELL] * 2, [top, top - T * CELL], color=INK, lw=1.2)
    # The inner loop of the active query block: key block 0, 1, 2, left to right.
    y = top - (ACTIVE * BLOCK + BLOCK / 2) * CELL
    for j in range(ACTIVE + 1):
        text(ax, x0 + (j * BLOCK + BLOCK / 2) * CELL, y, f"{j + 1}", size=8, weight="bold")
    text(
        ax,
        x0 + T * CELL + 0.1,
        y,
        "query block 3:\nkey blocks\n1, 2, 3 in turn",
        size=7,
        color=QUERY_COLOR,
        ha="left",
    )
    text(
        ax,
        x0 + T * CELL / 2,
        0.45,
        "white tiles: skipped; grey: masked inside",
        size=7.5,
        color=MUTED,
    )

    # Right: the running state of the active query block, updated tile by tile.
    x1 = 4.0
    text(ax, 6.3, 3.8, "for each query row: a running partial result", size=8.5, weight="bold")
    box(ax, x1, 2.55, 4.7, 0.95, color=QUERY_COLOR, fill=0.06)
    text(ax, x1 + 0.15, 3.3, "state after the tiles seen so far:", size=8, ha="left")
    text(
        ax,
        x1 + 0.15,
        3.0,
        r"$m$ = largest score;  $\ell$ = $\sum\, e^{s - m}$;",
        size=8.5,
        ha="left",
    )
    text(
        ax,
        x1 + 0.15,
        2.72,
        r"$\mathrm{acc}$ = $\sum\, e^{s - m}\, v$  (a vector of head_size)",
        size=8.5,
        ha="left",
        color=INK,
    )
    arrow(ax, (x1 + 2.35, 2.5), (x1 + 2.35, 2.25), lw=1.0)
    box(ax, x1, 1.2, 4.7, 1.0, color=INK, fill=0.04)
    text(
        ax,
        x1 + 0.15,
        2.0,
        r"a new tile gives its own $(m', \ell', \mathrm{acc}')$; merge:",
        size=8,
        ha="left",
    )
    text(ax, x1 + 0.15, 1.7, r"$\hat{m} = \max(m, m')$", size=8.5, ha="left")
    text(
        ax,
        x1 + 0.15,
        1.4,
        r"$\ell \leftarrow e^{m - \hat{m}}\,\ell + e^{m' - \hat{m}}\,\ell'$;   "
        r"$\mathrm{acc}$ likewise",
        size=8.5,
        ha="left",
    )
    arrow(ax, (x1 + 2.35, 1.15), (x1 + 2.35, 0.9), lw=1.0)
    text(
        ax,
        x1 + 2.35,
        0.7,
        r"after the last tile: output = $\mathrm{acc} / \ell$;  keep $m + \log \ell$ per row",
        size=8.5,
    )
    text(
        ax,
        x1 + 2.35,
        0.4,
        r"alive at once: one tile of scores, not the $T \times T$ matrix",
        size=7.5,
        color=MUTED,
    )
    return fig
