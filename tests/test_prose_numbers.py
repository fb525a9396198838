"""Numbers in the prose come from the cells.

A number typed by hand into a markdown cell drifts as soon as the code above it changes (a new
seed, a new size, a fixed bug). This test reads the markdown cells of the notebooks in
``NOTEBOOKS`` and fails for every number that nothing backs. A number is **backed** when

1. **a binding records it**: the number is typed in the prose, so that it reads as a number on
   every surface (the HTML, JupyterLab, GitHub, Colab), and the markdown cell's metadata binds
   that text to a value a code cell records with ``glue("name", value, display=False)``
   (``tools/prose_numbers.py``). The binding's text must be in the cell and must equal the
   committed value formatted as the binding says, so the number cannot drift from its cell;
2. **an assertion states it**: the same number, with the same digits (same rounding), is a
   literal inside an ``assert`` statement or an ``assert_close``/``assert_allclose``/
   ``assert_equal`` call of the nearest code cell above the markdown cell. A percentage ``87%``
   is also backed by the literal ``0.87``;
3. **it is a setting the reader can see**: a literal that a code cell of the notebook assigns
   (``T = 8``, ``B, T, C = 4, 8, 2``) or passes as an argument (``torch.randn(8, 256, 64)``,
   ``manual_seed(1337)``). Restating a chosen size or seed is not reporting a result, and the
   literal stays next to the code that uses it.

What is not scanned, and why:

- **Small integers, 0 to 10**, outside math: they count things the text shows ("4 sequences",
  "row 2", "ways 2 and 3"). A small integer followed by ``%``, ``x``, ``×`` or "times" is a
  measurement and is scanned.
- **Integers inside math** (``$...$``, ``$$...$$``, ``{math}``): indices, exponents and constants
  of a definition (``t+1``, ``1/\\sqrt{d_k}``, ``e^0 = 1``). Decimals inside math are scanned,
  and so is an integer above 10 that is the whole right-hand side of ``=`` or ``\\approx``
  (``B \\cdot T = 2048``, not ``10000^{-2i/d}``). Thin spaces in math (``20\\,000``) are
  thousands separators. Plain arithmetic is checked by this test itself: in
  ``\\log 5 \\approx 1.61`` or ``\\sqrt{384} \\approx 19.6``, where the left side holds only
  numbers, ``\\pi``, ``\\sqrt``, ``\\log`` and ``\\frac``, the test computes it and fails if the
  written rounding is wrong.
- **Code**: inline code spans and fenced code blocks quote code; their numbers are literals of
  that code (shapes, arguments, ``C**-0.5``), not claims about a result.
- **Markup**: roles (``{cite}``, ``{numref}``, ``{doc}``, ``{ref}``), directive arguments and
  options (``:width: 100%``), link targets and URLs.
- **Identifiers and names**: digits glued to a preceding letter, hyphen or underscore (``k3``,
  ``GPT-2``, ``d2l``, ``ω_12``) name something; they are not quantities.
- **Years** (1900 to 2039, outside math) and **version numbers** (after "version", "PyTorch",
  "Python"): dates and releases, checked by the citation they come with.
- **References**: a number after "chapter", "figure", "fig.", "section", "part", "equation",
  "eq.", "table", "exercise" or "step" points somewhere; it measures nothing.

A number written as a word ("two heads") is not found; keep measured quantities in digits.
"""

from __future__ import annotations

import ast
import json
import math
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path

import pytest

from tools.prose_numbers import bindings, problems

ROOT = Path(__file__).resolve().parents[1]

ALL_NOTEBOOKS = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "book").rglob("*.ipynb"))
# Every chapter is held to the rule, a new one too.
NOTEBOOKS = ALL_NOTEBOOKS

SMALL = 10  # integers up to this are counting words
ASSERT_CALLS = ("assert_close", "assert_allclose", "assert_equal", "assert_array_equal")
REFERENCE_WORDS = (
    "chapter",
    "chapters",
    "figure",
    "figures",
    "fig.",
    "section",
    "sections",
    "part",
    "equation",
    "eq.",
    "table",
    "exercise",
    "step",
)
VERSION_WORDS = ("version", "versions", "pytorch", "python")

ROLE = re.compile(r"\{(?P<name>[\w:-]+)\}`(?P<body>[^`]*)`")
GLUE_CALL = re.compile(r"""\bglue\(\s*["']([^"']+)["']""")
MATH_BLOCK = re.compile(r"\$\$.*?\$\$", re.S)
MATH_INLINE = re.compile(r"(?<![\\$])\$(?!\$)(?:[^$\\]|\\.)+?\$")
THIN_SPACE = re.compile(r"(?<=\d)(?:\\,|\{,\})(?=\d{3})")  # 20\,000 and 20{,}000 in math
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)
LINK_TARGET = re.compile(r"\]\([^)]*\)")
URL = re.compile(r"https?://\S+")
NUMBER = re.compile(
    r"(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|\.\d+)"
    r"(?P<suffix>\s*(?:%|×|x\b|times\b))?"
)


@dataclass(frozen=True)
class Finding:
    cell: int
    number: str
    context: str

    def __str__(self) -> str:
        return f"cell [{self.cell}]: {self.number!r} in ...{self.context}..."


def _source(cell: dict) -> str:
    src = cell["source"]
    return "".join(src) if isinstance(src, list) else src


def _code_without_magics(code: str) -> str:
    """IPython magics and shell escapes are not Python: blank them so ``ast`` can parse."""
    return "\n".join(
        "" if line.lstrip().startswith(("%", "!")) else line for line in code.splitlines()
    )


def _canonical(text: str) -> Decimal | None:
    try:
        return abs(Decimal(text.replace(",", ""))).normalize()
    except InvalidOperation:
        return None


def _number_literals(node: ast.AST, code: str) -> set[Decimal]:
    """Every int/float literal under ``node``, as written in the source (so 0.470 stays 0.470)."""
    found = set()
    for sub in ast.walk(node):
        if (
            isinstance(sub, ast.Constant)
            and isinstance(sub.value, int | float)
            and not isinstance(sub.value, bool)
        ):
            text = ast.get_source_segment(code, sub) or repr(sub.value)
            value = _canonical(text.replace("_", ""))
            if value is not None:
                found.add(value)
    return found


def _call_name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def asserted_literals(code: str) -> set[Decimal]:
    """Number literals inside the assertions of one code cell."""
    try:
        tree = ast.parse(_code_without_magics(code))
    except SyntaxError:
        return set()
    code = _code_without_magics(code)
    found: set[Decimal] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assert) or (
            isinstance(node, ast.Call) and _call_name(node) in ASSERT_CALLS
        ):
            found |= _number_literals(node, code)
    return found


def _direct_literals(node: ast.AST, code: str) -> set[Decimal]:
    """Literals that are ``node`` itself or the elements of a tuple/list ``node`` (negated too)."""
    items = node.elts if isinstance(node, ast.Tuple | ast.List) else [node]
    found = set()
    for item in items:
        if isinstance(item, ast.UnaryOp) and isinstance(item.op, ast.USub):
            item = item.operand
        if isinstance(item, ast.Constant):
            found |= _number_literals(item, code)
    return found


def setting_literals(code: str) -> set[Decimal]:
    """Literals a code cell assigns or passes as call arguments: the settings the reader sees."""
    code = _code_without_magics(code)
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return set()
    found: set[Decimal] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            found |= _direct_literals(node.value, code)
        elif isinstance(node, ast.Call):
            for arg in [*node.args, *(kw.value for kw in node.keywords)]:
                found |= _direct_literals(arg, code)
    return found


def _blank(match: re.Match) -> str:
    return " " * len(match.group(0))


def formatted_glue_names(markdown: str) -> set[str]:
    """Glue names used with a number format, as in ``{glue:text}`loss:.2f```."""
    return {
        m.group("body").split(":")[0]
        for m in ROLE.finditer(markdown)
        if m.group("name").startswith("glue") and ":" in m.group("body")
    }


def prose_parts(markdown: str) -> tuple[str, str, set[str]]:
    """Split a markdown cell into (prose, math, glue names), with markup and code blanked."""
    glue_names = {
        m.group("body").split(":")[0]
        for m in ROLE.finditer(markdown)
        if m.group("name").startswith("glue")
    }
    lines, in_code, fence = [], False, ""
    for line in markdown.splitlines():
        stripped = line.strip()
        opener = re.match(r"^(`{3,}|~{3,})(.*)$", stripped)
        if in_code:
            if stripped.startswith(fence) and stripped.strip("`~") == "":
                in_code = False
            lines.append("")
            continue
        if opener:
            info = opener.group(2).strip()
            if info.startswith("{") or info == "":
                lines.append("")  # a directive fence (its argument is a path or a label)
                continue
            in_code, fence = True, opener.group(1)
            lines.append("")
            continue
        if re.match(r"^\s*:[\w-]+:", line):  # a directive option
            lines.append("")
            continue
        lines.append(line)
    text = "\n".join(lines)
    math_parts = [m.group("body") for m in ROLE.finditer(text) if m.group("name") == "math"]
    text = ROLE.sub(_blank, text)
    text = CODE_SPAN.sub(_blank, text)
    for pattern in (MATH_BLOCK, MATH_INLINE):
        math_parts += [THIN_SPACE.sub("", m.group(0)) for m in pattern.finditer(text)]
        text = pattern.sub(_blank, text)
    text = LINK_TARGET.sub(_blank, text)
    text = URL.sub(_blank, text)
    return text, "\n".join(math_parts), glue_names


def _glued_to_name(text: str, start: int) -> bool:
    """Digits right after a letter, digit, underscore, dot or a hyphen that follows a word."""
    if start == 0:
        return False
    before = text[start - 1]
    if before.isalnum() or before in "_.\\":
        return True
    return before == "-" and start >= 2 and (text[start - 2].isalnum() or text[start - 2] in "_")


RELATION = re.compile(r"(=|\\approx|\\sim|≈)\s*$")


def _is_result(text: str, start: int, end: int) -> bool:
    """Whether a number in math is the whole right-hand side of ``=``, ``\\approx`` or ``\\sim``
    (``B \\cdot T = 2048``), not part of a formula (``\\omega_i = 10000^{-2i/d}``)."""
    if not RELATION.search(text[max(0, start - 12) : start]):
        return False
    after = text[end:].lstrip()
    return after == "" or after[0] in "$,.;)" or after.startswith(("\\quad", "\\text", "\\;"))


def _arithmetic(expr: str) -> float | None:
    """The value of a formula made only of numbers and constants (``\\log 5``, ``2\\pi``,
    ``\\sqrt{384}``), or None when it names anything else."""
    py = expr.strip()
    py = re.sub(r"\\(?:log|ln)\s*(\d+(?:\.\d+)?)", r"log(\1)", py)
    py = re.sub(r"\\frac\{([^{}]*)\}\{([^{}]*)\}", r"((\1)/(\2))", py)
    py = py.replace("\\sqrt", "sqrt").replace("\\log", "log").replace("\\ln", "log")
    py = py.replace("\\pi", "pi").replace("\\cdot", "*").replace("\\times", "*")
    py = py.replace("\\left", "").replace("\\right", "").replace("^", "**")
    py = py.replace("{", "(").replace("}", ")")
    py = re.sub(r"(\d)\s*(pi|sqrt|log|\()", r"\1*\2", py)
    if (
        not py
        or re.search(r"[^\d\s.+\-*/()a-z]", py)
        or set(re.findall(r"[a-z]+", py))
        - {
            "sqrt",
            "log",
            "pi",
        }
    ):
        return None
    try:
        return float(eval(py, {"__builtins__": {}}, vars(math)))  # noqa: S307 (digits only)
    except (SyntaxError, ValueError, TypeError, ZeroDivisionError, OverflowError):
        return None


def _checked_arithmetic(text: str, start: int, written: str) -> bool | None:
    """For ``EXPR \\approx 1.61`` with a constant EXPR: whether the rounding is right; None when
    the left side is not plain arithmetic."""
    before = text[:start]
    relation = RELATION.search(before)
    if relation is None:
        return None
    left = re.split(r"=|\\approx|\\sim|≈|\$|,|\\quad", before[: relation.start()])[-1]
    value = _arithmetic(left)
    if value is None:
        return None
    if "." in written:
        places = len(written.split(".")[1])
    else:  # 47000 is rounded to the thousands
        places = -(len(written) - len(written.rstrip("0")))
    return round(value, places) == float(written.replace(",", ""))


def _word_before(text: str, start: int) -> str:
    words = re.findall(r"[\w.]+", text[max(0, start - 30) : start].lower())
    return words[-1] if words else ""


def candidate_numbers(prose: str, math: str) -> list[tuple[str, Decimal, bool, str]]:
    """(as written, value, is a percentage, context) for every number the rules scan."""
    found = []
    for source, in_math in ((prose, False), (math, True)):
        for m in NUMBER.finditer(source):
            num, suffix = m.group("num"), (m.group("suffix") or "").strip()
            start = m.start("num")
            if _glued_to_name(source, start):
                continue
            if m.end("num") < len(source) and (
                source[m.end("num")].isalpha() and not suffix and source[m.end("num")] not in "x"
            ):
                continue  # "1st", "3D": part of a word
            is_decimal = "." in num or "e" in num.lower()
            value = _canonical(num)
            if value is None:
                continue
            if (
                in_math
                and not is_decimal
                and not (value > SMALL and _is_result(source, start, m.end()))
            ):
                continue
            context = " ".join(source[max(0, start - 40) : m.end() + 30].split())
            if in_math:
                arithmetic = _checked_arithmetic(source, start, num)
                if arithmetic is True:
                    continue  # e.g. log 5 = 1.61: the test itself computed it
                if arithmetic is False:
                    found.append((num, value, False, "WRONG ARITHMETIC: " + context))
                    continue
            word = _word_before(source, start)
            if word in REFERENCE_WORDS or word.rstrip(".") in {
                w.rstrip(".") for w in REFERENCE_WORDS
            }:
                continue
            if word in VERSION_WORDS:
                continue
            if not in_math and not is_decimal and "," not in num and 1900 <= int(num) <= 2039:
                continue  # a year
            if not is_decimal and value <= SMALL and not suffix:
                continue  # a counting word written in digits
            found.append((num, value, suffix == "%", context))
    return found


def unbacked_numbers(notebook: Path) -> list[Finding]:
    cells = json.loads(notebook.read_text())["cells"]
    settings: set[Decimal] = set()
    for cell in cells:
        if cell["cell_type"] == "code":
            settings |= setting_literals(_source(cell))
    findings: list[Finding] = []
    asserted: set[Decimal] = set()
    for index, cell in enumerate(cells):
        if cell["cell_type"] == "code":
            asserted = asserted_literals(_source(cell))
            continue
        if cell["cell_type"] != "markdown":
            continue
        bound = {  # every number in a bound text ("56%", "1,024", "layer 3, head 1")
            _canonical(m.group("num")) for b in bindings(cell) for m in NUMBER.finditer(b.text)
        } - {None}
        prose, math, _ = prose_parts(_source(cell))
        for written, value, percent, context in candidate_numbers(prose, math):
            backing = asserted | settings | bound
            if not context.startswith("WRONG") and (
                value in backing or (percent and (value / 100).normalize() in asserted)
            ):
                continue
            findings.append(Finding(index, written, context))
    return findings


@pytest.mark.parametrize("notebook", ALL_NOTEBOOKS)
def test_every_bound_number_is_in_its_cell_and_matches_its_record(notebook: str) -> None:
    found = problems(json.loads((ROOT / notebook).read_text()))
    assert not found, f"{notebook}:\n" + "\n".join(found)


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_every_number_in_the_prose_is_backed(notebook: str) -> None:
    findings = unbacked_numbers(ROOT / notebook)
    assert not findings, (
        f"{notebook}: numbers in the prose that neither a binding, an assertion in the code cell "
        "above, nor a visible setting backs:\n" + "\n".join(map(str, findings))
    )


# The rules themselves, on small examples: each must be able to fail.


def _notebook(tmp_path: Path, cells: list[tuple[str, str]]) -> Path:
    path = tmp_path / "nb.ipynb"
    path.write_text(
        json.dumps({"cells": [{"cell_type": kind, "source": src} for kind, src in cells]})
    )
    return path


def test_a_typed_result_is_caught(tmp_path: Path) -> None:
    nb = _notebook(tmp_path, [("code", "x = f()\nprint(x)"), ("markdown", "The loss is 1.73.")])
    assert [f.number for f in unbacked_numbers(nb)] == ["1.73"]


def test_an_assertion_above_backs_the_same_rounding_only(tmp_path: Path) -> None:
    code = "assert abs(loss - 1.73) < 0.005"
    good = _notebook(tmp_path, [("code", code), ("markdown", "The loss is 1.73.")])
    assert unbacked_numbers(good) == []
    bad = _notebook(tmp_path, [("code", code), ("markdown", "The loss is 1.7.")])
    assert [f.number for f in unbacked_numbers(bad)] == ["1.7"]


def test_an_assertion_further_up_does_not_back(tmp_path: Path) -> None:
    cells = [("code", "assert round(a, 2) == 0.47"), ("code", "b = g()"), ("markdown", "a is 0.47")]
    assert [f.number for f in unbacked_numbers(_notebook(tmp_path, cells))] == ["0.47"]


def _record(name: str, value: str) -> dict:
    return {
        "output_type": "display_data",
        "data": {"application/papermill.record/text/plain": value},
        "metadata": {"scrapbook": {"name": name}},
    }


def _bound_notebook(text: str, record: str, binding: dict) -> dict:
    return {
        "cells": [
            {
                "cell_type": "code",
                "source": "glue('loss', x)",
                "outputs": [_record("loss", record)],
            },
            {"cell_type": "markdown", "source": text, "metadata": {"glued": [binding]}},
        ]
    }


def test_a_binding_backs_its_number_only(tmp_path: Path) -> None:
    nb = _bound_notebook(
        "The loss is 1.73, not 1.74.", "1.7312", {"name": "loss", "format": ".2f", "text": "1.73"}
    )
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps(nb))
    assert [f.number for f in unbacked_numbers(path)] == ["1.74"]
    assert problems(nb) == []


def test_a_stale_missing_or_unglued_binding_is_caught() -> None:
    binding = {"name": "loss", "format": ".2f", "text": "1.73"}
    stale = _bound_notebook("The loss is 1.73.", "1.7412", binding)
    assert any("is now '1.74'" in p for p in problems(stale))
    absent = _bound_notebook("The loss is 1.7.", "1.7312", binding)
    assert any("not in the cell's text" in p for p in problems(absent))
    inside = _bound_notebook("The loss is 11.73.", "1.7312", binding)
    assert any("not in the cell's text" in p for p in problems(inside))
    unglued = _bound_notebook("The loss is 1.73.", "1.7312", {**binding, "name": "los"})
    assert any("no code cell glues 'los'" in p for p in problems(unglued))


def test_a_glue_role_left_in_the_prose_is_caught() -> None:
    nb = _bound_notebook(
        "The loss is {glue:text}`loss:.2f`.",
        "1.7312",
        {"name": "loss", "format": ".2f", "text": "1.73"},
    )
    assert any("reads as a name" in p for p in problems(nb))


def test_settings_math_code_and_references_are_not_claims(tmp_path: Path) -> None:
    cells = [
        ("code", "B, T, C = 4, 256, 64\nx = torch.randn(B, T, C, generator=g.manual_seed(1337))"),
        (
            "markdown",
            "With T = 256 tokens (seed 1337), scores divided by $\\sqrt{64}$ as in `C**-0.5`; "
            "see chapter 12, GPT-2 {cite}`radford2019language`, PyTorch 2.5 and 2023.",
        ),
    ]
    assert unbacked_numbers(_notebook(tmp_path, cells)) == []


def test_decimals_in_math_and_measured_small_numbers_are_scanned(tmp_path: Path) -> None:
    cells = [
        ("code", "x = 1"),
        ("markdown", "It is $\\approx 19.6$, 3x faster, 7% of rows, $B \\cdot T = 2048$ steps."),
    ]
    found = [f.number for f in unbacked_numbers(_notebook(tmp_path, cells))]
    assert found == ["3", "7", "19.6", "2048"]


def test_plain_arithmetic_in_math_is_computed_by_the_test(tmp_path: Path) -> None:
    cells = [
        ("code", "x = 1"),
        (
            "markdown",
            "Here $\\log 5 \\approx 1.61$, $2\\pi \\approx 6.3$, $\\sqrt{384} \\approx 19.5$.",
        ),
    ]
    found = unbacked_numbers(_notebook(tmp_path, cells))
    assert [(f.number, f.context.startswith("WRONG")) for f in found] == [("19.5", True)]


def test_formulas_and_thin_spaces_in_math(tmp_path: Path) -> None:
    cells = [
        ("code", "x = 1"),
        ("markdown", "With $\\omega_i = 10000^{-2i/d}$ and $N = 20\\,000$ draws."),
    ]
    assert [f.number for f in unbacked_numbers(_notebook(tmp_path, cells))] == ["20000"]


def test_a_glued_value_that_cannot_be_formatted_is_caught() -> None:
    nb = _bound_notebook(
        "It is 87%.", "np.float64(87.4)", {"name": "loss", "format": ".0f", "text": "87"}
    )
    assert any("does not format" in p for p in problems(nb))
