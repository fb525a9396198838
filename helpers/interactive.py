"""Interactive figures: controls that run in the reader's browser, with no kernel and no network.

Defined in chapter 2, "Causal masking", and used in chapters 4 ("Scaling and softmax peakiness"),
6 ("Positional encoding") and 8 ("Building and training a GPT").

Each function returns an :class:`InteractiveHTML` object. Shown as a notebook cell's output it
becomes a small HTML page fragment: an element, a short ``<noscript>`` note, and inline
JavaScript from this package's ``js/`` folder (no framework, no CDN). The same output works
live in Jupyter, JupyterLab and Colab and, committed in an executed notebook, in the built
book opened from disk. The JavaScript recomputes the figure from the numbers passed here (the
browser test checks it against the chapters' PyTorch code). Outputs are deterministic: element
ids come from the data and a per-process counter, and numbers are rounded to 6 decimals, so a
re-run notebook compares equal under nbval.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from helpers.validation import check_positive_int

JS_DIR = Path(__file__).with_name("js")
_COUNTER = itertools.count()
MAX_T_MASK = 12  # the mask widget's grid stays readable up to 12 x 12
MAX_LOGITS = 20


class InteractiveHTML:
    """An HTML fragment with its JavaScript inlined; Jupyter shows it via ``_repr_html_``.

    Attributes:
        data: the HTML text (as ``IPython.display.HTML.data``).
        kind: which figure it is.
        element_id: the id of the figure's root element.
    """

    def __init__(self, data: str, kind: str, element_id: str) -> None:
        self.data = data
        self.kind = kind
        self.element_id = element_id

    def _repr_html_(self) -> str:
        return self.data

    def __repr__(self) -> str:  # the notebook's text/plain output: short and stable
        return f"<interactive figure: {self.kind}>"


def js_source(*names: str) -> str:
    """The text of the named files of the package's ``js/`` folder, concatenated."""
    parts = []
    for name in names:
        text = (JS_DIR / name).read_text(encoding="utf-8")
        if "</script" in text.lower():
            raise ValueError(f"{name} contains '</script', which would end an inline script")
        parts.append(text)
    return "\n".join(parts)


def _json(data: object) -> str:
    # "<\/" keeps a string such as "</script>" inside the data from ending the script early.
    return json.dumps(data, sort_keys=True, separators=(",", ":")).replace("</", "<\\/")


def _skeleton(data: object) -> object:
    """The data with every float replaced by 0.0: its keys, shapes, labels and integers only."""
    if isinstance(data, dict):
        return {key: _skeleton(value) for key, value in data.items()}
    if isinstance(data, list | tuple):
        return [_skeleton(value) for value in data]
    return 0.0 if isinstance(data, float) else data


def _figure(
    kind: str, call: str, data: dict, files: Sequence[str], noscript: str
) -> InteractiveHTML:
    payload = _json(data)
    # The element id must be unique on a page (JupyterLab shows several notebooks in one page)
    # and the same on every machine: it hashes the figure's place and shape, never its floats,
    # whose last digits depend on the CPU's rounding.
    shape = _json(_skeleton(data))
    digest = hashlib.sha1(f"{next(_COUNTER)}:{kind}:{shape}".encode()).hexdigest()[:10]
    element_id = f"afs-{kind}-{digest}"
    html = (
        f'<div id="{element_id}" class="afs-widget afs-{kind}">'
        f"<noscript><p>{noscript}</p></noscript></div>\n"
        f"<script>\n{js_source('afs-common.js', *files)}\n</script>\n"
        f'<script>\nAFS.common.mount("{element_id}", function (root) {{\n'
        f"  {call}(root, {payload});\n}}, document.currentScript);\n</script>\n"
    )
    return InteractiveHTML(html, kind, element_id)


def _matrix(name: str, x: object, dims: int) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().to("cpu", torch.float64).numpy()
    try:
        a = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be numbers, got {type(x).__name__}") from err
    if a.ndim != dims:
        raise ValueError(f"{name} must be {dims}-D, got shape {a.shape}")
    if not np.isfinite(a).all():
        raise ValueError(f"{name} must be finite numbers (the widget applies the mask itself)")
    return a


def _rounded(a: np.ndarray) -> list:
    return np.round(a, 6).tolist()


def _labels(labels: Sequence[str] | None, n: int, what: str) -> list[str]:
    if labels is None:
        return [str(i) for i in range(n)]
    labels = [str(s) for s in labels]
    if len(labels) != n:
        raise ValueError(f"need {n} labels ({what}), got {len(labels)}")
    return labels


def causal_mask_widget(
    scores: torch.Tensor | np.ndarray | None = None,
    values: torch.Tensor | np.ndarray | None = None,
    labels: Sequence[str] | None = None,
) -> InteractiveHTML:
    """Click the cells of a mask and watch the attention weights and the output rows change.

    The figure shows three tables: the mask (click a cell to hide or show that key to that query;
    it starts causal), the weights ``softmax(scores masked with -inf)`` on the book's 0-1 colour
    scale, and the output rows ``weights @ values``; rows that differ from the causal result are
    marked. A row that sees no key at all gets no weights (softmax over nothing is undefined).

    Args:
        scores: ``(T, T)`` attention scores, row = query, column = key. Default: zeros, so every
            row averages what it sees (the averaging trick of chapter 1).
        values: ``(T, C)`` vectors to average, ``C <= 6``. Default: one column holding the
            position ``0 .. T-1``, so an output row is the mean position the query looks at.
        labels: ``T`` names of the tokens (for example the words). Default: the positions.

    Raises:
        ValueError: on shapes that do not match, non-finite numbers, or ``T > 12``.
    """
    if scores is None:
        T = len(labels) if labels is not None else (len(values) if values is not None else 5)
        scores = np.zeros((T, T))
    s = _matrix("scores", scores, 2)
    T = s.shape[0]
    if s.shape != (T, T) or not 1 <= T <= MAX_T_MASK:
        raise ValueError(f"scores must be (T, T) with 1 <= T <= {MAX_T_MASK}, got {s.shape}")
    if values is None:
        v = np.arange(T, dtype=np.float64)[:, None]
        columns = ["position"]
    else:
        v = _matrix("values", values, 2)
        if v.shape[0] != T or not 1 <= v.shape[1] <= 6:
            raise ValueError(f"values must be (T, C) = ({T}, 1..6), got {v.shape}")
        columns = [f"c{j}" for j in range(v.shape[1])]
    data = {
        "scores": _rounded(s),
        "values": _rounded(v),
        "labels": _labels(labels, T, "one per token"),
        "columns": columns,
    }
    return _figure(
        "mask",
        "AFS.widgets.causalMask",
        data,
        ["afs-widgets.js"],
        "This interactive figure needs JavaScript; the figures above show the causal mask "
        "and its weights.",
    )


def softmax_temperature_widget(
    logits: torch.Tensor | np.ndarray | Sequence[float],
    *,
    scale: float = 1.0,
    labels: Sequence[str] | None = None,
    min_scale: float = 0.1,
    max_scale: float = 100.0,
) -> InteractiveHTML:
    """``softmax(s * logits)`` under a slider for the scale ``s`` (the inverse temperature).

    The figure draws the probabilities on a fixed 0-1 axis and reads out ``s``, the temperature
    ``1/s``, the largest probability ``p_max``, the entropy in nats and the size of the gradient
    through the softmax, the Frobenius norm of its Jacobian ``J = diag(p) - p p^T``, next to its
    bound ``4 (1 - p_max)``; a small plot shows ``p_max`` and ``||J||_F`` over the whole range of
    scales, with the current one marked.

    Args:
        logits: 1-D, 2 to 20 finite numbers.
        scale: the slider's starting value.
        labels: names of the entries. Default: their indices.
        min_scale, max_scale: the slider's range (logarithmic), ``0 < min_scale < max_scale``.

    Raises:
        ValueError: on bad logits, labels, or a scale outside the range.
    """
    z = _matrix("logits", logits, 1)
    if not 2 <= len(z) <= MAX_LOGITS:
        raise ValueError(f"logits must hold 2 to {MAX_LOGITS} numbers, got {len(z)}")
    if not (0 < min_scale < max_scale and math.isfinite(max_scale)):
        raise ValueError(f"need 0 < min_scale < max_scale, got {min_scale}, {max_scale}")
    if not min_scale <= scale <= max_scale:
        raise ValueError(f"scale must be in [{min_scale}, {max_scale}], got {scale}")
    data = {
        "logits": _rounded(z),
        "labels": _labels(labels, len(z), "one per logit"),
        "scale": float(scale),
        "min_scale": float(min_scale),
        "max_scale": float(max_scale),
    }
    return _figure(
        "softmax",
        "AFS.widgets.softmaxTemperature",
        data,
        ["afs-widgets.js"],
        "This interactive figure needs JavaScript; the plots above show the same sweep of scales.",
    )


def positional_encoding_widget(
    T: int = 128,
    d_model: int = 64,
    *,
    base: float = 10000.0,
    p: int = 10,
    q: int = 13,
    mistake: bool = False,
) -> InteractiveHTML:
    """Two positions, their sinusoidal encodings, and the dot product against the offset.

    The figure shows ``PE(p)`` and ``PE(q)`` as strips of ``d_model`` coloured cells (-1 to 1),
    their dot product, and ``PE(p) . PE(p + k)`` against the offset ``k`` (with the curve from
    position 0 for comparison). A switch changes between the correct encoding
    (``helpers.positional.sinusoidal_encoding``: sine and cosine over the *dimensions*) and the
    common mistake of chapter 6 (sine at even *positions*, cosine at odd ones, ``d_model``
    frequencies with base 1000), for which the dot product depends on the position too.

    Args:
        T: number of positions (2 to 1024).
        d_model: encoding size (even, 2 to 256).
        base: base of the correct encoding's frequencies.
        p, q: the two positions shown first.
        mistake: start with the mistaken encoding.

    Raises:
        ValueError: on sizes or positions out of range.
    """
    T = check_positive_int("T", T, what="the number of positions")
    d_model = check_positive_int("d_model", d_model, what="the encoding size")
    if not 2 <= T <= 1024 or d_model % 2 or not 2 <= d_model <= 256:
        raise ValueError(f"need 2 <= T <= 1024 and an even d_model <= 256, got {T}, {d_model}")
    if not (math.isfinite(base) and base > 1):
        raise ValueError(f"base must be a finite number > 1, got {base}")
    for name, pos in (("p", p), ("q", q)):
        if isinstance(pos, bool) or not isinstance(pos, int) or not 0 <= pos < T:
            raise ValueError(f"{name} must be a position in 0..{T - 1}, got {pos!r}")
    data = {
        "T": T,
        "d_model": d_model,
        "base": float(base),
        "mistake_base": 1000.0,
        "p": p,
        "q": q,
        "mistake": bool(mistake),
    }
    return _figure(
        "posenc",
        "AFS.widgets.positionalEncoding",
        data,
        ["afs-widgets.js"],
        "This interactive figure needs JavaScript; the figures above show the encodings and "
        "their dot products.",
    )


def model_explorer(
    model: object,
    tokenizer: object | None = None,
    *,
    text: str | None = None,
) -> InteractiveHTML:
    """The model explorer of the book's explorer page, for any GPT, in a notebook.

    Args:
        model: a :class:`helpers.model.GPT` (then pass its ``tokenizer``), or the path of a file
            written by :func:`helpers.export.export_gpt`.
        tokenizer: the model's :class:`helpers.tokenizer.CharTokenizer`.
        text: the text the explorer starts with (default: a line of Shakespeare).

    The output embeds the weights in float16 (about 0.55 MB for the book's model): use it in
    a live session rather than in a committed notebook.

    Raises:
        ValueError: as :func:`helpers.export.gpt_payload` and :func:`helpers.export.load_gpt`.
    """
    from helpers.export import gpt_payload, read_export
    from helpers.model import GPT

    if isinstance(model, GPT):
        if tokenizer is None:
            raise ValueError("pass the model's tokenizer too: model_explorer(model, tokenizer)")
        payload = gpt_payload(model, tokenizer)  # type: ignore[arg-type]
    elif isinstance(model, str | Path):
        payload = read_export(model)
    else:
        raise ValueError(f"model must be a GPT or an exported file's path, got {type(model)}")
    options = {} if text is None else {"text": str(text)}
    return _figure(
        "explorer",
        "AFS.widgets.explorer",
        {"model": payload, "options": options},
        ["afs-gpt.js", "afs-explorer.js", "afs-widgets.js"],
        "The model explorer needs JavaScript.",
    )
