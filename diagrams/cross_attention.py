"""Figure 5.2: cross-attention, queries from one sequence, keys and values from another."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

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
)

SOURCE = ["Das", "Leben", "ist", "kurz"]  # encoder side (German): keys and values
TARGET = ["Life", "is", "short"]  # decoder side (English): queries
WEIGHTS = np.array(  # illustrative weights of each target token over the source tokens
    [
        [0.10, 0.80, 0.05, 0.05],
        [0.04, 0.08, 0.83, 0.05],
        [0.03, 0.05, 0.10, 0.82],
    ]
)
FOLLOW = 1  # the query whose lines are drawn


def draw() -> Figure:
    fig, ax = canvas(9.0, 3.7)
    xs = [0.5 + 1.15 * j for j in range(len(SOURCE))]
    xt = [0.5 + 0.57 + 1.15 * i for i in range(len(TARGET))]
    y_dec, y_enc = 2.75, 0.75

    text(
        ax,
        0.1,
        y_dec + 0.62,
        "decoder (English so far): queries",
        size=10,
        ha="left",
        color=QUERY_COLOR,
        weight="bold",
    )
    text(
        ax,
        0.1,
        y_enc - 0.5,
        "encoder output (German): keys and values",
        size=10,
        ha="left",
        color=KEY_COLOR,
        weight="bold",
    )
    for i, tok in enumerate(TARGET):
        box(ax, xt[i] - 0.38, y_dec, 0.76, 0.4, tok, color=QUERY_COLOR, fill=0.15, size=10)
        text(ax, xt[i], y_dec - 0.13, f"q{i}", size=9.5, color=QUERY_COLOR)
    for j, tok in enumerate(SOURCE):
        box(ax, xs[j] - 0.38, y_enc - 0.2, 0.76, 0.4, tok, color=INK, fill=0.05, size=10)
        text(ax, xs[j] - 0.16, y_enc + 0.33, f"k{j}", size=9.5, color=KEY_COLOR)
        text(ax, xs[j] + 0.16, y_enc + 0.33, f"v{j}", size=9.5, color=VALUE_COLOR)
    for j in range(len(SOURCE)):
        a = WEIGHTS[FOLLOW, j]
        arrow(
            ax,
            (xs[j], y_enc + 0.45),
            (xt[FOLLOW], y_dec - 0.25),
            color=KEY_COLOR,
            lw=0.6 + 4.0 * a,
            style="-",
            shrink=0,
        )
        mx = 0.6 * xs[j] + 0.4 * xt[FOLLOW]
        text(
            ax,
            mx + 0.15,
            0.6 * (y_enc + 0.45) + 0.4 * (y_dec - 0.25),
            f"{a:.2f}",
            size=9.5,
            color=INK,
        )

    # The weight matrix: (T_q, T_kv), rectangular, no causal mask.
    x0, top, cell = 5.6, 2.85, 0.5
    labels = [[f"{w:.2f}" for w in row] for row in WEIGHTS]
    grid(ax, x0, top, WEIGHTS, cell=cell, labels=labels, size=9.5)
    for j, tok in enumerate(SOURCE):
        text(ax, x0 + (j + 0.5) * cell, top + 0.15, tok, size=9.5, color=KEY_COLOR)
    for i, tok in enumerate(TARGET):
        text(ax, x0 - 0.08, top - (i + 0.5) * cell, tok, size=9.5, color=QUERY_COLOR, ha="right")
    text(ax, x0 + 2 * cell, top + 0.5, "weights (T_q, T_kv), 0 to 1", size=10, weight="bold")
    text(
        ax,
        x0 + 2 * cell,
        top - 3 * cell - 0.3,
        "rectangular: 3 queries x 4 keys;\nno causal mask: the source\nis complete before decoding",
        size=9.5,
        color=MUTED,
    )
    text(
        ax,
        x0 + 2 * cell,
        0.45,
        "Illustrative weights: each target word\nattends mostly to the source word\nit translates.",
        size=9.5,
        color=MUTED,
    )
    return fig
