"""Tests of helpers.interactive's Python side: the HTML it returns, and its input checks.

What the figures compute in the browser is tested in tests/test_browser_interactive.py.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch

from helpers import interactive
from helpers.export import export_gpt
from helpers.interactive import (
    InteractiveHTML,
    causal_mask_widget,
    js_source,
    model_explorer,
    positional_encoding_widget,
    softmax_temperature_widget,
)
from helpers.model import GPT, GPTConfig
from helpers.tokenizer import CharTokenizer

WIDGETS = [
    lambda: causal_mask_widget(torch.zeros(4, 4)),
    lambda: softmax_temperature_widget([1.0, 0.5, 0.2, -0.3, -1.0]),
    lambda: positional_encoding_widget(),
]


def payload_of(fig: InteractiveHTML) -> dict:
    """The data object passed to the figure's JavaScript."""
    assert f'AFS.common.mount("{fig.element_id}", function (root)' in fig.data
    match = re.search(r"\(root, (\{.*\})\);", fig.data)
    assert match, "no call with the figure's data"
    return json.loads(match.group(1).replace("<\\/", "</"))


@pytest.mark.parametrize("make", WIDGETS)
def test_html_is_self_contained_with_a_noscript_note(make) -> None:
    fig = make()
    html = fig._repr_html_()
    assert html == fig.data
    assert html.startswith(f'<div id="{fig.element_id}"')
    assert "<noscript>" in html and "needs JavaScript" in html
    assert "AFS.common" in html and "AFS.widgets" in html  # the library is inlined
    assert "src=" not in html and "http" not in html.replace("http://www.w3.org/2000/svg", "")
    assert html.count("<script>") == html.count("</script>") == 2
    assert repr(fig) == f"<interactive figure: {fig.kind}>"  # the stable text/plain output


def test_outputs_are_deterministic_across_runs(monkeypatch) -> None:
    """A re-executed notebook gives the same HTML (nbval compares it), yet two figures in one
    notebook never share an element id."""

    def run() -> list[str]:
        monkeypatch.setattr(interactive, "_COUNTER", __import__("itertools").count())
        return [make().data for make in WIDGETS] + [WIDGETS[0]().data]

    first, second = run(), run()
    assert first == second
    ids = [re.match(r'<div id="([^"]+)"', html).group(1) for html in first]
    assert len(set(ids)) == len(ids)


def test_the_element_id_does_not_depend_on_float_values(monkeypatch) -> None:
    """Another CPU's rounding changes the scores' last digits: the id nbval compares must not."""
    scores = torch.tensor([[0.25, 0.0], [0.5, 1 / 3]])
    ids = []
    for nudge in (0.0, 1e-3):
        monkeypatch.setattr(interactive, "_COUNTER", __import__("itertools").count())
        ids.append(causal_mask_widget(scores + nudge).element_id)
    assert ids[0] == ids[1]
    monkeypatch.setattr(interactive, "_COUNTER", __import__("itertools").count())
    assert causal_mask_widget(torch.zeros(3, 3)).element_id != ids[0]  # another shape


def test_numbers_are_rounded_so_last_bits_cannot_change_the_output() -> None:
    scores = torch.tensor([[0.1234567891, 0.0], [0.5, 1 / 3]])
    data = payload_of(causal_mask_widget(scores))
    assert data["scores"] == [[0.123457, 0.0], [0.5, 0.333333]]
    assert data["values"] == [[0.0], [1.0]]  # default: the positions
    assert data["labels"] == ["0", "1"]


def test_causal_mask_widget_checks_its_input() -> None:
    with pytest.raises(ValueError, match=r"\(T, T\)"):
        causal_mask_widget(torch.zeros(3, 4))
    with pytest.raises(ValueError, match="1 <= T <= 12"):
        causal_mask_widget(torch.zeros(13, 13))
    with pytest.raises(ValueError, match="finite"):
        causal_mask_widget(torch.tensor([[0.0, float("-inf")], [0.0, 0.0]]))
    with pytest.raises(ValueError, match="values must be"):
        causal_mask_widget(torch.zeros(3, 3), values=torch.zeros(2, 1))
    with pytest.raises(ValueError, match="need 3 labels"):
        causal_mask_widget(torch.zeros(3, 3), labels=["a", "b"])
    data = payload_of(causal_mask_widget(labels=["my", "dog", "ran"]))
    assert data["scores"] == [[0.0] * 3] * 3  # default scores: uniform averaging


def test_softmax_widget_checks_its_input() -> None:
    with pytest.raises(ValueError, match="2 to 20"):
        softmax_temperature_widget([1.0])
    with pytest.raises(ValueError, match="1-D"):
        softmax_temperature_widget(np.zeros((2, 2)))
    with pytest.raises(ValueError, match="scale must be"):
        softmax_temperature_widget([1.0, 2.0], scale=1000.0)
    with pytest.raises(ValueError, match="min_scale"):
        softmax_temperature_widget([1.0, 2.0], min_scale=0.0)
    data = payload_of(softmax_temperature_widget(torch.tensor([2.0, 1.0]), scale=8.0))
    assert data["logits"] == [2.0, 1.0] and data["scale"] == 8.0


def test_positional_widget_checks_its_input() -> None:
    with pytest.raises(ValueError, match="even d_model"):
        positional_encoding_widget(16, 7)
    with pytest.raises(ValueError, match="q must be a position"):
        positional_encoding_widget(16, 8, q=16)
    with pytest.raises(ValueError, match="base"):
        positional_encoding_widget(16, 8, base=1.0)
    with pytest.raises(ValueError, match="T must be a positive int"):
        positional_encoding_widget(0, 8)


def test_model_explorer_embeds_the_export(tmp_path) -> None:
    torch.manual_seed(0)
    tok = CharTokenizer("abc \n")
    model = GPT(GPTConfig(vocab_size=5, block_size=8, n_layer=1, n_head=2, n_embd=8))
    fig = model_explorer(model, tok, text="ab")
    data = payload_of(fig)
    assert data["options"] == {"text": "ab"}
    assert data["model"]["chars"] == "abc \n" and data["model"]["config"]["n_embd"] == 8
    assert "AFS.explorer" in fig.data and "AFS.gpt" in fig.data
    path = export_gpt(model, tok, tmp_path / "m.js")
    assert payload_of(model_explorer(path))["model"] == data["model"]
    with pytest.raises(ValueError, match="tokenizer"):
        model_explorer(model)
    with pytest.raises(ValueError, match="GPT or an exported file"):
        model_explorer(42)


def test_javascript_files_are_plain_and_inlinable() -> None:
    names = sorted(p.name for p in interactive.JS_DIR.glob("*.js"))
    assert names == ["afs-common.js", "afs-explorer.js", "afs-gpt.js", "afs-widgets.js"]
    text = js_source(*names)
    assert "</script" not in text.lower()
    for forbidden in ("http://", "https://", "import ", "require(", "fetch("):
        lines = [ln for ln in text.splitlines() if forbidden in ln and "w3.org/2000/svg" not in ln]
        assert lines == [], f"{forbidden!r} in the JavaScript: {lines[:2]}"
    long = [(i, len(ln)) for i, ln in enumerate(text.splitlines(), 1) if len(ln) > 100]
    assert long == [], f"lines over 100 characters: {long}"
    assert (interactive.JS_DIR / "README.md").is_file()


def test_committed_figure_outputs_are_current() -> None:
    """The book shows the committed outputs: a figure in an executed notebook must carry today's
    JavaScript (a change to helpers/js means re-executing the chapters that show a figure)."""
    library = js_source("afs-common.js", "afs-widgets.js")
    stale = []
    for path in sorted((interactive.JS_DIR.parents[1] / "book").rglob("*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            for output in cell.get("outputs", []):
                html = "".join(output.get("data", {}).get("text/html", []))
                if 'class="afs-widget' in html and library not in html:
                    stale.append(path.name)
    assert stale == [], f"re-execute (make execute NB=...): {sorted(set(stale))}"
