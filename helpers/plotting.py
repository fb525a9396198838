"""The book's visual language: one colour per role and one way to draw an attention matrix.

Defined in chapter 1, "The averaging trick", and used by every chapter. Queries, keys and values
have one colour each across every plot and diagram of the book (colour-blind-safe colours from
the Okabe-Ito palette); attention weights are probabilities and are drawn on a fixed 0-1 scale,
so equal weights get equal colours in every panel.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.colors import Colormap

QUERY_COLOR = "#D55E00"  # vermillion: queries, q, W_q
KEY_COLOR = "#0072B2"  # blue: keys, k, W_k
VALUE_COLOR = "#009E73"  # bluish green: values, v, W_v
ATTENTION_CMAP = "Blues"  # attention weights, always on a 0-1 scale

# Categorical colours for things that are not queries, keys or values: one colour per head of a
# multi-head layer, or per token in a diagram. None is a red, blue or green, so a head or a token
# is never mistaken for a query, a key or a value: reddish purple and yellow (Okabe-Ito), grey
# and wine (Paul Tol).
HEAD_COLORS = ("#CC79A7", "#F0E442", "#999999", "#882255")
TOKEN_COLORS = HEAD_COLORS


def plot_attention(
    weights: torch.Tensor | np.ndarray,
    keys: Sequence[str] | None = None,
    queries: Sequence[str] | None = None,
    *,
    ax: Axes | None = None,
    title: str | None = None,
    annotate: bool | None = None,
    cmap: str | Colormap = ATTENTION_CMAP,
    colorbar: bool = True,
    vmin: float = 0.0,
    vmax: float | None = 1.0,
    colorbar_label: str | None = None,
) -> Axes:
    """Draw a ``(T_q, T_k)`` attention matrix as a heatmap: rows are queries, columns keys.

    Args:
        weights: 2-D weights (a tensor is detached and moved to the CPU).
        keys: labels of the columns (the tokens attended to); defaults to positions.
        queries: labels of the rows (the tokens attending); defaults to ``keys`` when the matrix
            is square, else to positions.
        ax: axes to draw into; a new figure is made if omitted.
        title: axes title.
        annotate: write each weight in its cell; default only for matrices up to 10 x 10.
        cmap: Matplotlib colour map.
        colorbar: add a colour bar.
        vmin, vmax: the values mapped to the ends of the colour map. Attention weights are
            probabilities, so the default is the fixed scale 0-1: equal weights get equal colours
            in every panel of a figure. ``vmax=None`` scales to this matrix's maximum (only for
            matrices that are not probabilities, such as raw scores; then keep the colour bar).
        colorbar_label: what the colour bar measures (with its unit); recommended whenever the
            matrix is not a matrix of attention weights.

    Raises:
        ValueError: if ``weights`` is not 2-D or a label list has the wrong length.
    """
    w = (
        weights.detach().float().cpu().numpy()
        if isinstance(weights, torch.Tensor)
        else np.asarray(weights, dtype=float)
    )
    if w.ndim != 2:
        raise ValueError(
            f"weights must be 2-D (T_q, T_k), got shape {w.shape}; pick one batch element and head"
        )
    T_q, T_k = w.shape
    if queries is None and keys is not None and T_q == T_k:
        queries = keys
    keys = list(keys) if keys is not None else [str(j) for j in range(T_k)]
    queries = list(queries) if queries is not None else [str(i) for i in range(T_q)]
    if len(keys) != T_k or len(queries) != T_q:
        raise ValueError(
            f"got {len(queries)} query labels and {len(keys)} key labels for a {T_q} x {T_k} matrix"
        )
    if ax is None:
        _, ax = plt.subplots(figsize=(min(1 + 0.55 * T_k, 9), min(0.8 + 0.5 * T_q, 8)))
    top = float(w.max()) if vmax is None else float(vmax)
    if not top > vmin:
        raise ValueError(f"need vmax > vmin, got vmin={vmin}, vmax={top}")
    image = ax.imshow(w, cmap=cmap, vmin=vmin, vmax=top, aspect="auto")
    ax.set_xticks(
        range(T_k),
        [repr(s)[1:-1] for s in keys],
        rotation=90 if max(map(len, keys), default=0) > 2 else 0,
    )
    ax.set_yticks(range(T_q), [repr(s)[1:-1] for s in queries])
    ax.set_xlabel("key (attended to)", color=KEY_COLOR)
    ax.set_ylabel("query (attending)", color=QUERY_COLOR)
    if title:
        ax.set_title(title)
    if annotate is None:
        annotate = T_q <= 10 and T_k <= 10
    if annotate:
        for i in range(T_q):
            for j in range(T_k):
                ax.text(
                    j,
                    i,
                    f"{w[i, j]:.2f}",
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white" if w[i, j] > vmin + 0.6 * (top - vmin) else "black",
                )
    if colorbar:
        bar = ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
        if colorbar_label:
            bar.set_label(colorbar_label)
    return ax
