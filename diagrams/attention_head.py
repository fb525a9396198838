"""Figure 3.1: one attention head, followed for one token (the query at position t = 2)."""

from __future__ import annotations

import numpy as np
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

T, C, HS = 4, 4, 3  # tokens, channels, head_size (small, to draw)
t = 2  # the token we follow
OMEGA = np.array([0.9, -0.2, 1.4, 0.0])  # its scores (the last one is in the future)


def _rows_of(
    ax, x: float, y_mid: float, cell: float, name: str, color: str, *, title_y: float
) -> float:
    """The (T, head_size) keys or values, one labelled row per token; returns the top edge."""
    top = y_mid + T * cell / 2
    grid(ax, x, top, colors=[[tint(color, 0.4)] * HS for _ in range(T)], cell=cell)
    for i in range(T):
        text(
            ax,
            x + HS * cell + 0.1,
            top - (i + 0.5) * cell,
            f"{name}{i}",
            size=8,
            ha="left",
            color=color,
        )
    text(
        ax,
        x + HS * cell / 2,
        top + title_y,
        f"{name.upper()}   (T, head_size)",
        size=8.5,
        color=color,
        weight="bold",
    )
    return top


def draw() -> Figure:
    fig, ax = canvas(9.0, 4.6)
    cell = 0.3

    # x: the token embeddings (private to each token).
    xa, top = 0.45, 3.3
    grid(ax, xa, top, colors=[[tint(INK, 0.08)] * C for _ in range(T)], cell=cell)
    ax.add_patch(Rectangle((xa, top - (t + 1) * cell), C * cell, cell, fill=False, lw=2.2))
    for i in range(T):
        text(ax, xa - 0.12, top - (i + 0.5) * cell, f"x{i}", size=8, ha="right", color=MUTED)
    text(ax, xa + C * cell / 2, top + 0.3, "x   (T, C)", weight="bold")
    text(
        ax,
        xa + C * cell / 2,
        top - T * cell - 0.22,
        "what each token\nholds (private)",
        size=8,
        color=MUTED,
    )

    # The three projections.
    xb, bw, bh = 2.05, 0.95, 0.42
    rows = {"q": 4.0, "k": 2.85, "v": 1.35}
    colors = {"q": QUERY_COLOR, "k": KEY_COLOR, "v": VALUE_COLOR}
    names = {"q": "W_q", "k": "W_k", "v": "W_v"}
    for r, y in rows.items():
        box(
            ax,
            xb,
            y - bh / 2,
            bw,
            bh,
            f"{names[r]}\n(C, head_size)",
            color=colors[r],
            fill=0.15,
            size=7.5,
        )
        arrow(ax, (xa + C * cell + 0.05, top - T * cell / 2), (xb - 0.03, y), color=colors[r])

    # q for token t only; k and v for every token.
    xc = 3.45
    grid(ax, xc, rows["q"] + cell / 2, colors=[[tint(QUERY_COLOR, 0.45)] * HS], cell=cell)
    text(
        ax,
        xc + HS * cell + 0.1,
        rows["q"],
        f"q{t}   (head_size,)",
        size=8.5,
        ha="left",
        color=QUERY_COLOR,
        weight="bold",
    )
    arrow(ax, (xb + bw, rows["q"]), (xc - 0.03, rows["q"]), color=QUERY_COLOR)
    ktop = _rows_of(ax, xc, rows["k"], cell, "k", KEY_COLOR, title_y=+0.15)
    arrow(ax, (xb + bw, rows["k"]), (xc - 0.03, rows["k"]), color=KEY_COLOR)
    _rows_of(ax, xc, rows["v"], cell, "v", VALUE_COLOR, title_y=-T * cell - 0.17)
    arrow(ax, (xb + bw, rows["v"]), (xc - 0.03, rows["v"]), color=VALUE_COLOR)

    # Scores of query t against every key, masked, then softmax.
    xd = 5.25
    future = np.arange(T) > t
    labels = [["-∞" if future[j] else f"{OMEGA[j]:+.1f}" for j in range(T)]]
    stop = 3.3
    grid(ax, xd, stop, shape=(1, T), cell=0.42, labels=labels, hidden=future[None, :], size=8)
    for j in range(T):
        text(ax, xd + (j + 0.5) * 0.42, stop + 0.13, f"k{j}", size=7.5, color=KEY_COLOR)
    text(
        ax,
        xd + 2 * 0.42,
        stop + 0.45,
        f"ω{t}j / √head_size   (scores ω{t}j = q{t}·kj)",
        size=8.5,
        weight="bold",
    )
    arrow(
        ax,
        (xc + HS * cell + 0.05, rows["q"] - 0.12),
        (xd - 0.05, stop - 0.12),
        color=QUERY_COLOR,
        connection="arc3,rad=-0.15",
    )
    arrow(
        ax,
        (xc + HS * cell + 0.4, ktop - 0.6),
        (xd - 0.05, stop - 0.3),
        color=KEY_COLOR,
        label="q2 · k0..k3",
        label_offset=(0.05, -0.22),
        size=7.5,
    )

    scores = np.where(future, -np.inf, OMEGA)
    alpha = np.exp(scores - scores.max())
    alpha /= alpha.sum()
    ya = 2.2
    grid(ax, xd, ya, alpha[None, :], cell=0.42, labels=[[f"{a:.2f}" for a in alpha]], size=8)
    text(ax, xd + 2 * 0.42, ya - 0.62, f"weights α{t}j (0 to 1, sum 1)", size=8.5, weight="bold")
    arrow(
        ax,
        (xd + 2 * 0.42, stop - 0.44),
        (xd + 2 * 0.42, ya + 0.02),
        color=INK,
        label="softmax",
        label_offset=(0.42, 0.0),
        size=7.5,
    )

    # Weighted sum of the values.
    xe = 7.55
    ze = rows["v"] + cell / 2
    grid(ax, xe, ze, colors=[[tint(VALUE_COLOR, 0.7)] * HS], cell=cell)
    text(ax, xe + HS * cell / 2, ze + 0.22, f"z{t}   (head_size,)", size=8.5, weight="bold")
    text(ax, xe + HS * cell / 2, ze - cell - 0.22, f"z{t} = Σj α{t}j vj", size=8.5)
    arrow(
        ax,
        (xd + 4 * 0.42 + 0.05, ya - 0.21),
        (xe + HS * cell / 2, ze + 0.4),
        color=INK,
        connection="arc3,rad=-0.3",
    )
    arrow(
        ax,
        (xc + HS * cell + 0.4, rows["v"]),
        (xe - 0.05, rows["v"]),
        color=VALUE_COLOR,
        label="weighted sum of the values v0..v3",
        label_offset=(0.0, -0.17),
        size=7.5,
    )

    text(
        ax,
        4.5,
        0.22,
        "Every row of x goes through the same W_q, W_k, W_v. The output for all "
        "T tokens at once is (T, C) -> (T, head_size).",
        size=8.5,
        color=MUTED,
    )
    return fig
