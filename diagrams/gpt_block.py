"""Figure 8.1: the GPT, token ids to logits, and one pre-LayerNorm block on the residual stream."""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import Circle, Rectangle

from diagrams.style import (
    INK,
    KEY_COLOR,
    MUTED,
    QUERY_COLOR,
    RESIDUAL_COLOR,
    VALUE_COLOR,
    arrow,
    box,
    canvas,
    text,
)

MIN_FONT = 10.0


def _plus(ax, x: float, y: float) -> None:
    ax.add_patch(Circle((x, y), 0.13, facecolor="white", edgecolor=RESIDUAL_COLOR, lw=1.6))
    text(ax, x, y + 0.01, "+", size=11, color=RESIDUAL_COLOR, weight="bold")


def draw() -> Figure:
    fig, ax = canvas(9.0, 6.25)
    ax.set_ylim(-0.35, 5.9)  # room below the logits for the two-line notes

    # Left: the whole model, top to bottom.
    cx, w = 1.85, 2.6
    box(ax, cx - w / 2, 5.3, w, 0.42, "token ids  idx   (B, T)", color=INK, fill=0.04, size=8.5)
    box(
        ax,
        cx - w / 2,
        4.45,
        w / 2 - 0.05,
        0.55,
        "token emb.\n(vocab_size, C)",
        color=INK,
        fill=0.1,
        size=7.5,
    )
    box(
        ax,
        cx + 0.05,
        4.45,
        w / 2 - 0.05,
        0.55,
        "position emb.\n(block_size, C)",
        color=INK,
        fill=0.1,
        size=7.5,
    )
    arrow(ax, (cx - w / 4, 5.3), (cx - w / 4, 5.02))
    arrow(
        ax, (cx + w / 4, 5.3), (cx + w / 4, 5.02), label="0..T-1", label_offset=(0.35, 0.0), size=7
    )
    _plus(ax, cx, 4.1)
    arrow(ax, (cx - w / 4, 4.45), (cx - 0.12, 4.15), shrink=1)
    arrow(ax, (cx + w / 4, 4.45), (cx + 0.12, 4.15), shrink=1)
    arrow(
        ax,
        (cx, 3.97),
        (cx, 3.72),
        color=RESIDUAL_COLOR,
        label="x  (B, T, C)",
        label_offset=(0.55, 0.0),
        size=7.5,
    )
    box(
        ax,
        cx - w / 2,
        2.55,
        w,
        1.15,
        "Block\n× n_layer\n(right)",
        color=RESIDUAL_COLOR,
        fill=0.08,
        size=9,
        weight="bold",
    )
    arrow(
        ax,
        (cx, 2.55),
        (cx, 2.28),
        color=RESIDUAL_COLOR,
        label="(B, T, C)",
        label_offset=(0.45, 0.0),
        size=7.5,
    )
    box(ax, cx - w / 2, 1.85, w, 0.42, "final LayerNorm", color=INK, fill=0.04, size=8.5)
    arrow(ax, (cx, 1.85), (cx, 1.6))
    box(
        ax,
        cx - w / 2,
        1.05,
        w,
        0.55,
        "LM head  (C, vocab_size)\nweights tied to token emb.",
        color=INK,
        fill=0.1,
        size=7.5,
    )
    arrow(ax, (cx, 1.05), (cx, 0.8))
    box(
        ax, cx - w / 2, 0.35, w, 0.42, "logits   (B, T, vocab_size)", color=INK, fill=0.04, size=8.5
    )
    text(ax, cx, -0.02, "row t: scores for the character\nafter position t", size=7, color=MUTED)

    # Zoom lines from the block to the detail.
    ax.plot([cx + w / 2, 4.35], [3.7, 5.55], color=MUTED, lw=0.8, ls=":")
    ax.plot([cx + w / 2, 4.35], [2.55, 0.45], color=MUTED, lw=0.8, ls=":")
    ax.add_patch(Rectangle((4.35, 0.45), 4.55, 5.1, fill=False, edgecolor=MUTED, lw=0.8, ls=":"))
    text(ax, 6.6, 5.35, "one Block (pre-LayerNorm, as GPT-2)", size=9, weight="bold")

    # Right: the residual stream with two branches.
    sx = 7.9
    ax.plot([sx, sx], [0.62, 5.05], color=RESIDUAL_COLOR, lw=3.0, solid_capstyle="butt")
    arrow(ax, (sx, 0.72), (sx, 0.5), color=RESIDUAL_COLOR, lw=2.0)
    text(ax, sx + 0.12, 4.95, "x (B, T, C)", size=7.5, ha="left", color=RESIDUAL_COLOR)
    text(ax, sx + 0.12, 4.72, "residual\nstream", size=7, ha="left", color=RESIDUAL_COLOR, va="top")
    bx, bw = 4.6, 2.55
    # Branch 1: LayerNorm -> causal multi-head attention -> add.
    ax.plot([sx, bx + bw / 2], [4.85, 4.85], color=INK, lw=1.0)
    arrow(ax, (bx + bw / 2, 4.85), (bx + bw / 2, 4.62))
    box(ax, bx, 4.22, bw, 0.4, "ln_1: LayerNorm", color=INK, fill=0.04, size=8)
    arrow(ax, (bx + bw / 2, 4.22), (bx + bw / 2, 4.0))
    box(ax, bx, 3.3, bw, 0.7, "", color=INK, fill=0.04)
    text(ax, bx + bw / 2, 3.78, "attn: causal multi-head", size=8)
    text(ax, bx + 0.55, 3.5, "q", size=9, color=QUERY_COLOR, weight="bold")
    text(ax, bx + bw / 2, 3.5, "k", size=9, color=KEY_COLOR, weight="bold")
    text(ax, bx + bw - 0.55, 3.5, "v", size=9, color=VALUE_COLOR, weight="bold")
    arrow(ax, (bx + bw / 2, 3.3), (sx - 0.13, 3.1), connection="arc3,rad=0.25")
    _plus(ax, sx, 3.05)
    text(ax, sx - 0.2, 2.82, "x = x + attn(ln_1(x))", size=7.5, ha="right", color=RESIDUAL_COLOR)
    # Branch 2: LayerNorm -> MLP -> add.
    ax.plot([sx, bx + bw / 2], [2.6, 2.6], color=INK, lw=1.0)
    arrow(ax, (bx + bw / 2, 2.6), (bx + bw / 2, 2.37))
    box(ax, bx, 1.97, bw, 0.4, "ln_2: LayerNorm", color=INK, fill=0.04, size=8)
    arrow(ax, (bx + bw / 2, 1.97), (bx + bw / 2, 1.75))
    box(ax, bx, 1.1, bw, 0.65, "mlp: C → 4C, GELU, 4C → C", color=INK, fill=0.04, size=8)
    arrow(ax, (bx + bw / 2, 1.1), (sx - 0.13, 0.95), connection="arc3,rad=0.25")
    _plus(ax, sx, 0.9)
    text(ax, sx - 0.2, 0.66, "x = x + mlp(ln_2(x))", size=7.5, ha="right", color=RESIDUAL_COLOR)
    text(
        ax,
        6.6,
        0.12,
        "Each branch reads a normalised copy of x\nand adds its result back to x.",
        size=7,
        color=MUTED,
    )
    # Every label at least MIN_FONT points: at the book's column width (about 730 px for the
    # figure's 9 inches) that is about 11 px on screen.
    for label in ax.texts:
        label.set_fontsize(max(label.get_fontsize(), MIN_FONT))
    return fig
