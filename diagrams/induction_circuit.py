"""Figure 13.1: an induction head, a previous-token head and an induction head composing through
the shifted key."""

from __future__ import annotations

from matplotlib.figure import Figure

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

TOKENS = ["x", "A", "B", "y", "z", "A"]  # the context; the last A is the current token
X0, STEP, W = 2.3, 1.08, 0.84  # the first column's left edge, the column spacing, a box's width


def _cx(i: int) -> float:
    """The centre of column ``i``."""
    return X0 + i * STEP + W / 2


def draw() -> Figure:
    fig, ax = canvas(9.0, 4.0)
    rows = {"tokens": 0.55, "layer1": 1.65, "layer2": 2.85}
    for name, y, label in (
        ("tokens", rows["tokens"], "tokens\n(embeddings)"),
        ("layer1", rows["layer1"], "layer 1:\nprevious-token head"),
        ("layer2", rows["layer2"], "layer 2:\ninduction head"),
    ):
        text(ax, 1.0, y + 0.2, label, size=8.5, weight="bold" if name != "tokens" else "normal")

    # The tokens, with their positions.
    for i, tok in enumerate(TOKENS):
        current = i == len(TOKENS) - 1
        box(ax, X0 + i * STEP, rows["tokens"], W, 0.4, tok, color=QUERY_COLOR if current else INK,
            fill=0.2 if current else 0.04, size=10)  # fmt: skip
        text(ax, _cx(i), rows["tokens"] - 0.17, f"position {i}", size=6.5, color=MUTED)

    # Layer 1: every position receives the token before it (the shifted key).
    for i in range(1, len(TOKENS)):
        hot = i == 2
        arrow(ax, (_cx(i - 1), rows["tokens"] + 0.42), (_cx(i) - 0.12, rows["layer1"] - 0.02),
              color=KEY_COLOR if hot else MUTED, lw=1.3 if hot else 0.8)  # fmt: skip
        label = f"key: after {TOKENS[i - 1]}" if hot else f"after {TOKENS[i - 1]}"
        box(ax, X0 + i * STEP, rows["layer1"], W, 0.4, label,
            color=KEY_COLOR if hot else MUTED, fill=0.2 if hot else 0.05, size=7.5,
            text_color=KEY_COLOR if hot else INK)  # fmt: skip
    text(ax, 1.0, rows["layer1"] - 0.22, "each position receives\nthe token before it", size=7,
         color=MUTED)  # fmt: skip

    # Layer 2: the current A queries for "after A", finds position 2 and copies its token B.
    q = len(TOKENS) - 1
    box(ax, X0 + q * STEP, rows["layer2"], W, 0.4, "query A", color=QUERY_COLOR, fill=0.2,
        size=7.5, text_color=QUERY_COLOR)  # fmt: skip
    right = X0 + q * STEP + W + 0.04
    arrow(ax, (right, rows["tokens"] + 0.2), (right, rows["layer2"] + 0.2), color=QUERY_COLOR,
          lw=0.9, connection="arc3,rad=0.35")  # fmt: skip
    arrow(ax, (X0 + q * STEP - 0.02, rows["layer2"] + 0.2), (_cx(2) + 0.3, rows["layer1"] + 0.42),
          color=QUERY_COLOR, lw=1.3, connection="arc3,rad=0.25",
          label="matches the shifted key", label_offset=(0.35, 0.32), size=7.5)  # fmt: skip
    box(ax, X0 + 2 * STEP, rows["layer2"] + 0.55, W, 0.4, "value B", color=VALUE_COLOR, fill=0.2,
        size=7.5, text_color=VALUE_COLOR)  # fmt: skip
    left = X0 + 2 * STEP - 0.04
    arrow(ax, (left, rows["tokens"] + 0.2), (left, rows["layer2"] + 0.75), color=VALUE_COLOR,
          lw=0.9, connection="arc3,rad=-0.3")  # fmt: skip
    box(ax, X0 + q * STEP - 0.25, rows["layer2"] + 0.6, W + 0.5, 0.4, "predict B",
        color=RESIDUAL_COLOR, fill=0.15, size=8.5, weight="bold",
        text_color=RESIDUAL_COLOR)  # fmt: skip
    arrow(ax, (X0 + 2 * STEP + W + 0.02, rows["layer2"] + 0.75),
          (X0 + q * STEP - 0.28, rows["layer2"] + 0.8), color=VALUE_COLOR, lw=1.3,
          label="copied to the current position", label_offset=(0.0, 0.14), size=7.5)  # fmt: skip
    return fig
