"""The interactive pages in headless Chromium with the network cut off, checked against PyTorch.

- The built explorer page (book/part2/explorer.md): its JavaScript forward pass gives the logits
  and attention weights of helpers.model.GPT on the same exported weights (max abs difference
  at most 1e-4), typing, the selectors, sliders and the generate button change what is drawn,
  the selected position follows the end of the text until the reader picks one, bad text and
  bad numbers show a message in the page (never a silent change), and "stop" always stops.
- The figures of helpers.interactive, on a test page written from their HTML: each computes what
  the chapter's PyTorch code computes for the same settings, and reacts to its controls.

No page may log a console error or send a request off the machine, and each passes axe-core's
accessibility audit with no serious or critical violation.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib
import numpy as np
import pytest
import torch
from browser_support import Page, axe_violations

from helpers.export import load_gpt
from helpers.interactive import (
    causal_mask_widget,
    positional_encoding_widget,
    softmax_temperature_widget,
)
from helpers.positional import sinusoidal_encoding

TOLERANCE = 1e-4  # JS (float64) against PyTorch (float32) on the same float16 weights
EXPLORER = Path("book") / "part2" / "explorer.html"
TEXTS = [
    "ROMEO:\nBut, soft! what light through yonder window breaks?",
    "First Citizen:\nBefore we proceed any further, hear me speak.\nAll",  # 64: block_size
    "A",
    "zzz  ,,, QQQ\n\n",
]


# ---- the explorer page ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def explorer_path(book_build) -> Path:
    path = book_build.html_dir / EXPLORER
    assert path.is_file(), f"the build made no {EXPLORER}:\n{book_build.log[-3000:]}"
    return path


@pytest.fixture(scope="module")
def torch_model(book_build, explorer_path: Path):
    """The PyTorch model loaded from the very file the built page loads."""
    return load_gpt(book_build.html_dir / "_static" / "gpt_shakespeare.js")


def open_explorer(browser, explorer_path: Path) -> Page:
    page = Page(browser, explorer_path.as_uri())
    page.page.wait_for_function("() => document.getElementById('afs-explorer').afsExplorer")
    return page


@pytest.fixture
def explorer(browser, explorer_path: Path):
    page = open_explorer(browser, explorer_path)
    yield page
    assert page.problems() == []
    page.close()


@pytest.fixture(scope="module")
def shared_explorer(browser, explorer_path: Path):
    page = open_explorer(browser, explorer_path)
    yield page
    page.close()


@pytest.fixture
def explorer_for_bad_input(shared_explorer: Page):
    """The bad-input cases share one page (opening one takes about a second): each starts from
    good values, checked, and its console errors are its own."""
    page = shared_explorer.page
    page.fill("textarea", "Good start")
    page.fill("input[aria-label='seed']", "7")
    page.fill("input[aria-label='characters to generate']", "40")
    assert page.inner_text(".afs-message") == page.inner_text(".afs-gen-message") == ""
    assert page.locator("input[aria-invalid='true']").count() == 0
    assert page.locator(".afs-bar").count() > 0
    assert not page.is_disabled("button:has-text('generate')")
    yield shared_explorer
    problems = shared_explorer.problems()
    shared_explorer.errors.clear()
    shared_explorer.external.clear()
    assert problems == []


def js_forward(page, text: str) -> dict:
    """Run the page's model on text; return its logits and every layer's attention weights."""
    return page.evaluate(
        """(text) => {
            const ex = document.getElementById('afs-explorer').afsExplorer;
            const logits = ex.model.forward(ex.tokenizer.encode(text), {need_weights: true});
            return {
                logits: logits.map((r) => Array.from(r)),
                weights: ex.model.blocks.map((b) =>
                    b.attn.last_weights.map((h) => h.map((r) => Array.from(r)))),
            };
        }""",
        text,
    )


def torch_forward(torch_model, text: str) -> tuple[torch.Tensor, list[torch.Tensor]]:
    model, tok = torch_model
    with torch.no_grad():
        logits, _ = model(torch.tensor([tok.encode(text)]), need_weights=True)
    return logits[0].double(), [b.attn.last_weights[0].double() for b in model.blocks]


def test_explorer_forward_pass_matches_pytorch(explorer, torch_model) -> None:
    worst_logits = worst_weights = 0.0
    for text in TEXTS:
        got = js_forward(explorer.page, text)
        want_logits, want_weights = torch_forward(torch_model, text)
        js_logits = torch.tensor(got["logits"], dtype=torch.float64)
        assert js_logits.shape == want_logits.shape
        worst_logits = max(worst_logits, (js_logits - want_logits).abs().max().item())
        for layer, want in enumerate(want_weights):
            js_w = torch.tensor(got["weights"][layer], dtype=torch.float64)
            # The page keeps zeros above the diagonal, as PyTorch's weights have.
            assert js_w.shape == want.shape, (layer, js_w.shape, want.shape)
            worst_weights = max(worst_weights, (js_w - want).abs().max().item())
    print(
        f"\nJS vs PyTorch, max abs difference: logits {worst_logits:.1e}, "
        f"attention weights {worst_weights:.1e}"
    )
    assert worst_logits <= TOLERANCE and worst_weights <= TOLERANCE
    # The logits are not trivially small (the comparison could not pass by accident).
    assert want_logits.abs().max() > 1.0


def test_explorer_generation_follows_generate_rules(explorer, torch_model) -> None:
    model, tok = torch_model
    text = TEXTS[0]
    for temperature, top_k in [(1.0, None), (0.5, 5), (1.7, 1)]:
        js_probs = explorer.page.evaluate(
            """([text, temperature, top_k]) => {
                const ex = document.getElementById('afs-explorer').afsExplorer;
                const logits = ex.model.forward(ex.tokenizer.encode(text));
                return Array.from(ex.model.constructor.nextTokenProbs(logits[logits.length - 1],
                    {temperature, top_k}));
            }""",
            [text, temperature, top_k],
        )
        with torch.no_grad():
            logits = model(torch.tensor([tok.encode(text)]))[0][0, -1].double() / temperature
        if top_k is not None:  # as GPT.generate
            kth = torch.topk(logits, top_k).values[-1]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        want = torch.softmax(logits, dim=-1)
        got = torch.tensor(js_probs, dtype=torch.float64)
        assert (got - want).abs().max() <= TOLERANCE, (temperature, top_k)
        assert int((got > 0).sum()) == (top_k or tok.vocab_size)


def box_colours(page) -> list[str]:
    return page.eval_on_selector_all(".afs-char", "bs => bs.map(b => b.style.background)")


def bar_widths(page) -> list[float]:
    return page.eval_on_selector_all(
        ".afs-bar", "bs => bs.map(b => Number(b.getAttribute('width')))"
    )


def set_range(page, label: str, value: float) -> None:
    page.evaluate(
        """([label, value]) => {
            const input = document.querySelector(`input[aria-label="${label}"]`);
            input.value = value;
            input.dispatchEvent(new Event('input'));
        }""",
        [label, value],
    )


def test_explorer_controls_change_what_is_drawn(explorer, torch_model) -> None:
    page = explorer.page
    model, tok = torch_model
    text = TEXTS[0]
    assert page.input_value("textarea") == text  # prefilled with Shakespeare
    assert page.locator(".afs-char").count() == len(text)

    # The boxes show the selected query's weights: hover a character, compare with PyTorch.
    _, weights = torch_forward(torch_model, text)
    for layer, head, query in [(0, 0, 10), (3, 2, 40), (1, 3, len(text) - 1)]:
        page.select_option("select[aria-label=layer]", str(layer))
        page.select_option("select[aria-label=head]", str(head))
        page.locator(".afs-char").nth(query).hover()
        shown = page.eval_on_selector_all(
            ".afs-char", "bs => bs.map(b => b.dataset.weight === '' ? null : +b.dataset.weight)"
        )
        want = weights[layer][head, query]
        assert shown[query + 1 :] == [None] * (len(text) - query - 1)  # the future: masked
        got = torch.tensor(shown[: query + 1], dtype=torch.float64)
        assert (got - want[: query + 1]).abs().max() <= TOLERANCE
        assert page.locator(".afs-char.afs-selected").get_attribute("data-pos") == str(query)

    before = box_colours(page)
    page.select_option("select[aria-label=head]", "0")
    assert box_colours(page) != before, "changing the head did not recolour the characters"

    # The bars follow the temperature and top-k sliders.
    widths = bar_widths(page)
    set_range(page, "temperature", 0.3)
    assert bar_widths(page) != widths
    assert "0.30" in page.inner_text(".afs-explorer")
    set_range(page, "top-k", 3)
    probs = page.evaluate("() => document.getElementById('afs-explorer').afsExplorer.probs()")
    assert sum(p > 0 for p in probs) == 3

    # Typing changes the context, the boxes and the prediction.
    page.fill("textarea", "To be, or not to be")
    assert page.locator(".afs-char").count() == len("To be, or not to be")
    assert page.inner_text(".afs-message") == ""

    # Generation: seeded, reproducible, one character at a time, from the vocabulary.
    page.fill("input[aria-label=seed]", "7")
    page.fill("input[aria-label='characters to generate']", "40")

    def generate() -> str:
        page.click("button:has-text('generate')")
        page.wait_for_function(
            "() => (document.getElementById('afs-explorer').dataset.generated || '').length === 40"
        )
        out = page.evaluate("() => document.getElementById('afs-explorer').dataset.generated")
        page.evaluate("() => delete document.getElementById('afs-explorer').dataset.generated")
        return out

    first, again = generate(), generate()
    assert first == again and set(first) <= set(tok.chars)
    assert "seed 7" in page.inner_text(".afs-explorer")
    page.fill("input[aria-label=seed]", "8")
    assert generate() != first  # (40 characters from 3 choices each: equal by chance ~ 3**-40)


@pytest.mark.parametrize(
    "text, message",
    [
        ("Caf\u00e9 au lait", 'The character "\u00e9" (U+00E9) at position 3 is not in'),
        ("tab\there", "(U+0009) at position 3 is not in the model's vocabulary"),
        ("x" * 65, "The text has 65 characters, but the model reads at most block_size = 64"),
        ("", "Type at least one character."),
    ],
)
def test_explorer_bad_input_shows_a_message(
    explorer_for_bad_input, text: str, message: str
) -> None:
    page = explorer_for_bad_input.page
    page.fill("textarea", text)
    shown = page.inner_text(".afs-message")
    assert message in shown, shown
    assert page.locator(".afs-char").count() == 0  # nothing stale is drawn
    assert page.locator(".afs-bar").count() == 0
    assert page.is_disabled("button:has-text('generate')")
    page.fill("textarea", "Good again")
    assert page.inner_text(".afs-message") == ""
    assert page.locator(".afs-char").count() == len("Good again")
    assert page.locator(".afs-bar").count() > 0
    assert not page.is_disabled("button:has-text('generate')")


def selected(page) -> int:
    return int(page.locator(".afs-char.afs-selected").get_attribute("data-pos"))


def test_explorer_selection_follows_the_end_of_the_text(explorer) -> None:
    page = explorer.page
    box = page.locator("textarea")
    follow = page.get_by_label("follow the last character")
    assert selected(page) == len(TEXTS[0]) - 1 and follow.is_checked()

    # Select all and type a new prompt: the prediction is after its last character.
    box.click()
    page.keyboard.press("Control+A")
    page.keyboard.type("To be, or not")
    assert selected(page) == len("To be, or not") - 1
    # Append: the selection moves to the new end.
    page.keyboard.press("End")
    page.keyboard.type(" to be")
    assert selected(page) == len("To be, or not to be") - 1

    # The reader picks a character: it stays picked while the text grows.
    page.locator(".afs-char").nth(3).click()
    page.mouse.move(0, 0)
    assert selected(page) == 3 and not follow.is_checked()
    box.click()
    page.keyboard.press("End")
    page.keyboard.type(", that is")
    assert selected(page) == 3
    # ... until the picked position no longer exists, or the reader asks to follow again.
    follow.check()
    assert selected(page) == len("To be, or not to be, that is") - 1
    page.locator(".afs-char").nth(5).click()
    page.mouse.move(0, 0)
    page.fill("textarea", "Yes")
    assert selected(page) == 2 and follow.is_checked()

    # Keyboard: Tab to a character, Enter picks it, and the focus stays on it.
    page.locator(".afs-char").nth(1).focus()
    page.keyboard.press("Enter")
    assert selected(page) == 1 and not follow.is_checked()
    assert page.evaluate("() => document.activeElement.dataset.pos") == "1"


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("seed", "99999999999", "seed must be a whole number from 0 to 4294967295; got 99999"),
        ("seed", "4294967296", "seed must be a whole number from 0 to 4294967295"),
        ("seed", "-5", "seed must be a whole number from 0 to 4294967295; got -5."),
        ("seed", "1.5", "seed must be a whole number from 0 to 4294967295; got 1.5."),
        ("seed", "", "The seed is empty"),
        ("characters to generate", "0", "characters must be a whole number from 1 to 500"),
        ("characters to generate", "", "The number of characters is empty"),
        ("characters to generate", "100000", "from 1 to 500; got 100000."),
        ("characters to generate", "2.5", "from 1 to 500; got 2.5."),
    ],
)
def test_explorer_rejects_bad_numbers_in_the_page(
    explorer_for_bad_input, field, value, message
) -> None:
    page = explorer_for_bad_input.page
    field_box = page.locator(f"input[aria-label='{field}']")
    field_box.fill(value)
    shown = page.inner_text(".afs-gen-message")
    assert message in shown, shown
    assert page.is_disabled("button:has-text('generate')")
    assert field_box.input_value() == value  # the box keeps what was typed: nothing changed
    assert field_box.get_attribute("aria-invalid") == "true"
    # The largest values of each range are accepted, as stated.
    field_box.fill("4294967295" if field == "seed" else "500")
    assert page.inner_text(".afs-gen-message") == ""
    assert field_box.get_attribute("aria-invalid") != "true"
    assert not page.is_disabled("button:has-text('generate')")


def test_explorer_stop_always_stops(explorer) -> None:
    page = explorer.page
    button = page.locator("button.afs-generate")
    page.fill("input[aria-label='characters to generate']", "500")
    length = "() => document.querySelector('.afs-output').textContent.length"
    done = "() => 'generated' in document.getElementById('afs-explorer').dataset"

    # The reader presses stop.
    page.click("button:has-text('generate')")
    page.wait_for_function(f"({length})() >= 5")
    assert button.inner_text() == "stop" and button.is_enabled()
    button.click()
    page.wait_for_function(done)
    assert (
        len(page.evaluate("() => document.getElementById('afs-explorer').dataset.generated")) < 500
    )
    assert button.inner_text() == "generate" and button.is_enabled()

    # The text turns invalid while generating: the generation stops, the button is disabled.
    page.evaluate("() => delete document.getElementById('afs-explorer').dataset.generated")
    button.click()
    page.wait_for_function(f"({length})() >= 5")
    page.fill("textarea", "Caf\u00e9")
    page.wait_for_function(done)
    stopped_at = page.evaluate(length)
    page.wait_for_timeout(200)
    assert page.evaluate(length) == stopped_at < 500
    assert button.inner_text() == "generate" and button.is_disabled()

    # A bad number while generating leaves stop working.
    page.fill("textarea", "Good again")
    page.evaluate("() => delete document.getElementById('afs-explorer').dataset.generated")
    button.click()
    page.wait_for_function(f"({length})() >= 5")
    page.fill("input[aria-label=seed]", "-1")
    assert button.inner_text() == "stop" and button.is_enabled()
    button.click()
    page.wait_for_function(done)
    assert button.inner_text() == "generate" and button.is_disabled()


def test_explorer_passes_the_accessibility_audit(explorer) -> None:
    page = explorer.page
    page.locator(".afs-char").nth(10).click()  # later characters are drawn as masked
    page.mouse.move(0, 0)
    assert page.locator(".afs-char.afs-future").count() > 0
    assert axe_violations(page) == []


def test_attention_colour_scale_is_matplotlibs_blues(explorer) -> None:
    xs = np.linspace(0, 1, 21)
    got = explorer.page.evaluate(
        "(xs) => xs.map((x) => AFS.common.blues(x).match(/\\d+/g).map(Number))", xs.tolist()
    )
    want = np.round(matplotlib.colormaps["Blues"](xs)[:, :3] * 255)
    # matplotlib looks colours up in a 256-entry table; the page interpolates the same anchors.
    assert np.abs(np.array(got) - want).max() <= 2


# ---- the figures of helpers.interactive on a test page ----------------------------------------


@pytest.fixture(scope="module")
def chapter_numbers() -> dict:
    """What the chapters compute, with their own code and settings."""
    # Chapter 2: random queries and keys for six words, head size 4.
    words = "my dog chased the red ball".split()
    T = len(words)
    _ = torch.manual_seed(0)
    q, k = torch.randn(T, 4), torch.randn(T, 4)
    scores = q @ k.T / math.sqrt(4)
    # Chapter 4: the five logits.
    z = torch.tensor([0.1, -0.2, 0.3, -0.2, 0.5], dtype=torch.float64)
    return {"words": words, "scores": scores, "z": z}


@pytest.fixture(scope="module")
def widget_page(browser, chapter_numbers, tmp_path_factory):
    figures = [
        causal_mask_widget(chapter_numbers["scores"], labels=chapter_numbers["words"]),
        softmax_temperature_widget(chapter_numbers["z"], scale=8.0),
        positional_encoding_widget(128, 64),
    ]
    body = "\n".join(f._repr_html_() for f in figures)
    path = tmp_path_factory.mktemp("widgets") / "widgets.html"
    path.write_text(
        "<!doctype html><html lang='en'><head><meta charset='utf-8'><title>figures</title>"
        f"</head><body><main>{body}</main></body></html>",
        encoding="utf-8",
    )
    page = Page(browser, path.as_uri())
    yield page.page, {f.kind: f.element_id for f in figures}
    assert page.problems() == []
    page.close()


def widget_state(page, element_id: str) -> dict:
    return page.evaluate(
        "(id) => JSON.parse(JSON.stringify(document.getElementById(id).afsWidget.state))",
        element_id,
    )


def masked_weights(scores: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """Chapter 2's decoder weights for any mask: softmax(scores.masked_fill(~allowed, -inf))."""
    return torch.softmax(scores.double().masked_fill(~allowed, float("-inf")), dim=-1)


def test_causal_mask_widget_matches_chapter_2(widget_page, chapter_numbers) -> None:
    page, ids = widget_page
    scores, T = chapter_numbers["scores"], len(chapter_numbers["words"])
    positions = torch.arange(T, dtype=torch.float64)[:, None]
    root = f"#{ids['mask']}"

    allowed = torch.tril(torch.ones(T, T, dtype=torch.bool))
    state = widget_state(page, ids["mask"])
    want = masked_weights(scores, allowed)
    assert (torch.tensor(state["weights"]) - want).abs().max() <= 1e-5
    assert (torch.tensor(state["out"]) - want @ positions).abs().max() <= 1e-5
    assert not any(state["changed"])
    # The weights as printed in the table, 2 decimals, row by row.
    cells = page.eval_on_selector_all(
        f"{root} table >> nth=1 >> td", "tds => tds.map(td => td.textContent)"
    )
    assert cells == [f"{w:.2f}" for w in want.flatten().tolist()]

    # Click: hide key "dog" (1) from query "the" (3); only row 3 changes.
    page.click(f"{root} td[data-row='3'][data-col='1']")
    allowed[3, 1] = False
    state = widget_state(page, ids["mask"])
    want = masked_weights(scores, allowed)
    assert (torch.tensor(state["weights"]) - want).abs().max() <= 1e-5
    assert (torch.tensor(state["out"]) - want @ positions).abs().max() <= 1e-5
    assert state["changed"] == [False, False, False, True, False, False]
    assert page.inner_text(f"{root} td[data-row='3'][data-col='1']") == "−∞"
    assert "1 output row(s) differ" in page.inner_text(root)

    # Show the future too: the encoder's weights, softmax over the whole row.
    page.click(f"{root} button:has-text('no mask')")
    state = widget_state(page, ids["mask"])
    assert (torch.tensor(state["weights"]) - torch.softmax(scores.double(), -1)).abs().max() < 1e-5

    # A query that sees nothing: no weights (NaN), and the page says why.
    page.click(f"{root} button:has-text('causal mask')")
    page.click(f"{root} td[data-row='0'][data-col='0']")
    state = widget_state(page, ids["mask"])
    assert all(w is None for w in state["weights"][0])  # NaN becomes null in JSON
    assert "see no key at all" in page.inner_text(root)
    page.click(f"{root} button:has-text('causal mask')")


def softmax_numbers(z: torch.Tensor, s: float) -> dict:
    """Chapter 4's measures of softmax(s z): p_max, entropy and ||diag(p) - p p^T||_F."""
    p = torch.softmax(s * z, dim=-1)
    J = torch.diag(p) - torch.outer(p, p)
    return {
        "p": p,
        "pmax": p.max().item(),
        "entropy": -(p * p.clamp_min(1e-300).log()).sum().item(),
        "jacobian_norm": torch.linalg.matrix_norm(J).item(),
    }


def test_softmax_widget_matches_chapter_4(widget_page, chapter_numbers) -> None:
    page, ids = widget_page
    z = chapter_numbers["z"]
    root = f"#{ids['softmax']}"
    for s in (8.0, 1.0, 0.1, 37.5, 100.0):
        if s != 8.0:  # 8.0 is the figure's starting scale
            page.evaluate(
                "([id, s]) => document.getElementById(id).afsWidget.setScale(s)",
                [ids["softmax"], s],
            )
        state = widget_state(page, ids["softmax"])
        want = softmax_numbers(z, s)
        assert state["scale"] == s
        assert (torch.tensor(state["p"], dtype=torch.float64) - want["p"]).abs().max() < 1e-12
        for key in ("pmax", "entropy", "jacobian_norm"):
            assert abs(state[key] - want[key]) < 1e-12, (s, key)
        text = page.inner_text(f"{root} .afs-readout")
        assert f"p_max = {want['pmax']:.3f}" in text
        assert f"‖J‖_F = {want['jacobian_norm']:.4f}" in text

    # Moving the slider changes the bars and the read-out.
    heights = page.eval_on_selector_all(
        f"{root} .afs-bar", "bs => bs.map(b => b.getAttribute('y'))"
    )
    set_slider = (
        "([id, v]) => { const i = document.querySelector(`#${id} input[type=range]`);"
        " i.value = v; i.dispatchEvent(new Event('input')); }"
    )
    page.evaluate(set_slider, [ids["softmax"], 500])
    state = widget_state(page, ids["softmax"])
    assert abs(state["scale"] - math.sqrt(0.1 * 100.0)) < 1e-9  # the middle of the log slider
    assert (
        page.eval_on_selector_all(f"{root} .afs-bar", "bs => bs.map(b => b.getAttribute('y'))")
        != heights
    )
    assert abs(state["jacobian_norm"] - softmax_numbers(z, state["scale"])["jacobian_norm"]) < 1e-12


def split_encoding(T: int, d_model: int) -> torch.Tensor:
    """Chapter 6's common mistake (base 1000, sin at even positions, cos at odd), in float64."""
    two_i = 2 * torch.arange(0, d_model, dtype=torch.float64)
    denom = torch.pow(1000, two_i / d_model)
    even_pos = torch.arange(0, T, 2, dtype=torch.float64)[:, None]
    odd_pos = torch.arange(1, T, 2, dtype=torch.float64)[:, None]
    return torch.stack([torch.sin(even_pos / denom), torch.cos(odd_pos / denom)], dim=1).view(
        T, d_model
    )


def test_positional_widget_matches_chapter_6(widget_page) -> None:
    page, ids = widget_page
    T, d_model = 128, 64
    correct = sinusoidal_encoding(T, d_model, dtype=torch.float64)
    wrong = split_encoding(T, d_model)
    root = f"#{ids['posenc']}"
    colours = page.eval_on_selector_all(f"{root} rect", "rs => rs.map(r => r.getAttribute('fill'))")
    for p, q, mistake in [(10, 13, False), (0, 127, False), (50, 53, True), (51, 54, True)]:
        page.evaluate(
            "([id, p, q, m]) => document.getElementById(id).afsWidget.set(p, q, m)",
            [ids["posenc"], p, q, mistake],
        )
        state = widget_state(page, ids["posenc"])
        enc = wrong if mistake else correct
        assert (torch.tensor(state["pe_p"], dtype=torch.float64) - enc[p]).abs().max() < 1e-9
        assert (torch.tensor(state["pe_q"], dtype=torch.float64) - enc[q]).abs().max() < 1e-9
        assert abs(state["dot"] - (enc[p] @ enc[q]).item()) < 1e-9
        assert f"PE({p}) · PE({q}) = {(enc[p] @ enc[q]).item():.3f}".replace("-", "−") in (
            page.inner_text(f"{root} .afs-readout")
        )
        # Offset only (correct) versus position too (mistake), as the chapter asserts.
        same = abs(state["dot_from_0"] - state["dot"]) < 1e-9
        assert same != mistake
    assert (
        page.eval_on_selector_all(f"{root} rect", "rs => rs.map(r => r.getAttribute('fill'))")
        != colours
    )
    # The radio button switches the encoding.
    page.check(f"{root} input[value=correct]")
    assert widget_state(page, ids["posenc"])["mistake"] is False


def test_figures_pass_the_accessibility_audit(widget_page) -> None:
    page, ids = widget_page
    page.click(f"#{ids['mask']} td[data-row='2'][data-col='0']")  # a hidden cell, and a change
    assert axe_violations(page) == []
    page.click(f"#{ids['mask']} button:has-text('causal mask')")


def test_without_javascript_the_pages_say_so(browser, explorer_path, widget_page) -> None:
    """With JavaScript off, the explorer and each figure show their short note instead."""
    context = browser.new_context(java_script_enabled=False)
    context.route(
        "**/*", lambda r: r.abort() if r.request.url.startswith("http") else r.continue_()
    )
    page = context.new_page()
    page.goto(explorer_path.as_uri())
    assert "The explorer runs in JavaScript" in page.inner_text("#afs-explorer")
    widgets, _ = widget_page
    page.goto(widgets.url)
    notes = page.eval_on_selector_all(".afs-widget", "ws => ws.map(w => w.innerText)")
    assert len(notes) == 3 and all("needs JavaScript" in n for n in notes), notes
    context.close()
