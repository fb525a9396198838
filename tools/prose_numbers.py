"""Numbers in the prose, typed as numbers and bound to the cells that compute them.

A markdown cell shows every number as plain text, so that it reads as a number on every surface:
the built HTML, JupyterLab, GitHub's notebook viewer and Colab. A number that a code cell
computes is still bound to that cell: the code cell records it with myst-nb's
``glue("name", value, display=False)``, and the markdown cell lists the binding in its
metadata::

    "metadata": {"glued": [{"name": "val_loss", "format": ".2f", "text": "1.59"}]}

``text`` is the recorded value formatted with ``format`` exactly as myst-nb formats
``{glue:text}`name:.2f``` (a ``format`` of ``""`` is ``str(value)``, myst-nb's ``{glue:md}``),
and it must appear in the cell. ``tests/test_prose_numbers.py`` fails when it does not, or when
the recorded value no longer formats to it; nbval (through the root ``conftest.py``) compares a
re-executed record by that same text. A binding may carry ``"tolerance": 0.02`` for a number
that depends on the CPU's rounding path (a trained model's loss): the re-executed value must
then lie within the tolerance of the committed one, and the prose must present the number as
approximate.

Usage, after re-executing a notebook (``make execute NB=...``)::

    python tools/prose_numbers.py sync book/part1/x.ipynb   # retype changed numbers
    python tools/prose_numbers.py convert book/part1/x.ipynb  # glue roles -> typed numbers
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from ast import literal_eval
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

RECORD = "application/papermill.record/text/plain"
MARKDOWN_RECORD = "application/papermill.record/text/markdown"
GLUE_ROLE = re.compile(r"\{glue(?::(?P<kind>text|md))?\}`(?P<body>[^`]*)`")
METADATA_KEY = "glued"


@dataclass(frozen=True)
class Binding:
    """One number (or phrase) in a markdown cell and the glued record it comes from."""

    name: str
    format: str
    text: str
    tolerance: float | None = None

    def as_json(self) -> dict:
        out: dict = {"name": self.name, "format": self.format, "text": self.text}
        if self.tolerance is not None:
            out["tolerance"] = self.tolerance
        return out


def _joined(value: str | list[str]) -> str:
    return "".join(value) if isinstance(value, list) else value


def format_record(text: str, fmt: str) -> str:
    """Format a recorded value (see :func:`records`) as myst-nb's glue roles do."""
    if text.startswith("md:"):
        return text[3:]
    try:
        value = literal_eval(text)
    except (SyntaxError, ValueError):
        value = text
    if fmt == "":
        return str(value)
    kind = fmt[-1]
    if kind == "s":
        value = str(value)
    elif kind in "bcdoxX":
        value = int(value)
    elif kind in "eEfFgGn%":
        value = float(value)
    return format(value, fmt)


def records(notebook: dict) -> dict[str, str]:
    """Every glued name of a notebook and its recorded text (the last one wins).

    A glued ``Markdown`` object records its markdown, marked by a leading ``"md:"``; any other
    value records its ``text/plain`` repr.
    """
    found: dict[str, str] = {}
    for cell in notebook["cells"]:
        for output in cell.get("outputs", []):
            name = output.get("metadata", {}).get("scrapbook", {}).get("name")
            data = output.get("data", {})
            if name and MARKDOWN_RECORD in data:
                found[name] = "md:" + _joined(data[MARKDOWN_RECORD])
            elif name and RECORD in data:
                found[name] = _joined(data[RECORD])
    return found


def bindings(cell: dict) -> list[Binding]:
    """The bindings a markdown cell lists in its metadata."""
    return [
        Binding(b["name"], b["format"], b["text"], b.get("tolerance"))
        for b in cell.get("metadata", {}).get(METADATA_KEY, [])
    ]


def notebook_bindings(notebook: dict) -> Iterator[tuple[int, Binding]]:
    """(cell index, binding) for every binding of every markdown cell."""
    for index, cell in enumerate(notebook["cells"]):
        if cell["cell_type"] == "markdown":
            for binding in bindings(cell):
                yield index, binding


def occurs(text: str, source: str) -> bool:
    """Whether ``text`` stands in ``source`` on its own (not inside a longer number or word)."""
    pattern = re.escape(text)
    if text[:1].isalnum():
        pattern = r"(?<![\w.])" + pattern
    if text[-1:].isalnum():
        pattern += r"(?!\w|\.\d)"
    return re.search(pattern, source) is not None


def problems(notebook: dict) -> list[str]:
    """Everything wrong with a notebook's bindings, one sentence each (empty when all hold)."""
    recorded = records(notebook)
    found = []
    names = [
        output.get("metadata", {}).get("scrapbook", {}).get("name")
        for cell in notebook["cells"]
        for output in cell.get("outputs", [])
    ]
    for name in sorted({n for n in names if n and names.count(n) > 1}):
        found.append(f"{name!r} is glued more than once (the strict build fails on it)")
    for index, cell in enumerate(notebook["cells"]):
        if cell["cell_type"] != "markdown":
            continue
        source = _joined(cell["source"])
        for role in GLUE_ROLE.finditer(source):
            found.append(
                f"cell [{index}]: {role.group(0)} reads as a name outside the built HTML; "
                "type the number and bind it (python tools/prose_numbers.py convert)"
            )
        for b in bindings(cell):
            if b.name not in recorded:
                found.append(f"cell [{index}]: no code cell glues {b.name!r}")
                continue
            try:
                now = format_record(recorded[b.name], b.format)
            except (TypeError, ValueError) as err:
                found.append(f"cell [{index}]: {b.name!r} does not format with {b.format!r}: {err}")
                continue
            if now != b.text:
                found.append(
                    f"cell [{index}]: {b.name!r} is now {now!r}, the prose says {b.text!r} "
                    "(python tools/prose_numbers.py sync)"
                )
            if not occurs(b.text, source):
                found.append(f"cell [{index}]: {b.text!r} ({b.name}) is not in the cell's text")
    return found


def _replace(source: str, old: str, new: str) -> str:
    pattern = re.escape(old)
    if old[:1].isalnum():
        pattern = r"(?<![\w.])" + pattern
    if old[-1:].isalnum():
        pattern += r"(?!\w|\.\d)"
    return re.sub(pattern, lambda _: new, source)


def convert(notebook: dict) -> int:
    """Replace every glue role in the prose by its formatted value and record the binding."""
    recorded = records(notebook)
    changed = 0
    for cell in notebook["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        source = _joined(cell["source"])
        found = {(b.name, b.format): b for b in bindings(cell)}

        def typed(role: re.Match, found: dict = found) -> str:
            name, _, fmt = role.group("body").partition(":")
            if role.group("kind") == "md":
                fmt = ""
            text = format_record(recorded[name], fmt)
            found.setdefault((name, fmt), Binding(name, fmt, text))
            return text

        new = GLUE_ROLE.sub(typed, source)
        if new != source:
            changed += 1
            cell["source"] = new.splitlines(keepends=True)
            cell.setdefault("metadata", {})[METADATA_KEY] = [b.as_json() for b in found.values()]
    return changed


def sync(notebook: dict) -> list[str]:
    """Retype every bound number whose record changed; return what changed."""
    recorded = records(notebook)
    report = []
    for index, cell in enumerate(notebook["cells"]):
        if cell["cell_type"] != "markdown" or not bindings(cell):
            continue
        source = _joined(cell["source"])
        updated = []
        for b in bindings(cell):
            now = format_record(recorded[b.name], b.format) if b.name in recorded else b.text
            if now != b.text:
                source = _replace(source, b.text, now)
                report.append(f"cell [{index}]: {b.name} {b.text} -> {now}")
            updated.append(Binding(b.name, b.format, now, b.tolerance).as_json())
        cell["source"] = source.splitlines(keepends=True)
        cell["metadata"][METADATA_KEY] = updated
    return report


def _write(path: Path, notebook: dict) -> None:
    path.write_text(json.dumps(notebook, indent=1, ensure_ascii=False, sort_keys=True) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["convert", "sync", "check"])
    parser.add_argument("notebooks", nargs="+", type=Path)
    args = parser.parse_args(argv)
    status = 0
    for path in args.notebooks:
        notebook = json.loads(path.read_text())
        if args.command == "convert":
            print(f"{path}: {convert(notebook)} cells converted")
            _write(path, notebook)
        elif args.command == "sync":
            for line in sync(notebook):
                print(f"{path}: {line}")
            _write(path, notebook)
        for line in problems(notebook):
            print(f"{path}: {line}", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
