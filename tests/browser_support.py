"""Helpers of the browser tests (tests/test_browser*.py): not tests, not fixtures.

The `browser` fixture itself lives in tests/conftest.py; this module holds what the tests call:
where Chromium is, the built pages, a page opened with the network cut off, the accessibility
audit (axe-core, bundled by axe-playwright-python, so it runs offline) and the measure of code
blocks that scroll sideways.
"""

from __future__ import annotations

import shutil
from pathlib import Path

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
LOCAL_SCHEMES = ("file:", "data:", "blob:", "about:")
# axe-core's impact levels that fail a page (it also reports "moderate" and "minor").
FAILING_IMPACTS = ("serious", "critical")


def built_pages(html_dir: Path) -> list[Path]:
    """Every HTML page of the built book (not the theme's static files or page sources)."""
    return sorted(
        p
        for p in html_dir.rglob("*.html")
        if "_static" not in p.parts and "_sources" not in p.parts
    )


class Page:
    """A page opened with the network blocked, recording console errors and outside requests."""

    def __init__(
        self,
        chromium,
        url: str,
        width: int = 1100,
        height: int = 900,
        color_scheme: str = "light",
    ) -> None:
        self.context = chromium.new_context(
            viewport={"width": width, "height": height}, color_scheme=color_scheme
        )
        self.external: list[str] = []
        self.errors: list[str] = []

        def block(route) -> None:
            if route.request.url.startswith(LOCAL_SCHEMES):
                route.continue_()
            else:
                self.external.append(route.request.url)
                route.abort()

        self.context.route("**/*", block)
        self.page = self.context.new_page()
        self.page.on("console", self._console)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.goto(url, wait_until="load")

    def _console(self, msg) -> None:
        if msg.type == "error":
            self.errors.append(msg.text)

    def problems(self) -> list[str]:
        """Console errors and requests that tried to leave the machine, so far."""
        self.page.wait_for_timeout(100)  # let late console messages arrive
        return [f"console error: {e}" for e in self.errors] + [
            f"request left the machine: {u}" for u in self.external
        ]

    def close(self) -> None:
        self.context.close()


# Syntax highlighting draws every token of a code cell as a span whose colour comes from its
# Pygments class (`k`, `nf`, `s2`, ...): the same colour on the same background on every page.
# Checking the contrast of thousands of such spans on every page is most of axe's time, so a
# token class is checked on the first page that shows it; on later pages its spans are turned
# back into plain text (checked as the code block's own text colour) before axe runs.
UNWRAP_SEEN_TOKENS = """(seen) => {
    const known = new Set(seen), found = new Set();
    for (const span of [...document.querySelectorAll('div.highlight pre span[class]')]) {
        if (known.has(span.className)) span.replaceWith(document.createTextNode(span.textContent));
        else found.add(span.className);
    }
    return [...found];
}"""


def unwrap_seen_tokens(page, seen: set[str]) -> None:
    """Turn the page's highlighted code tokens whose class an earlier page showed into plain text,
    and add the page's new token classes to seen. Changes the page: call it last."""
    seen.update(page.evaluate(UNWRAP_SEEN_TOKENS, sorted(seen)))


def axe_violations(page, context: str | None = None) -> list[str]:
    """The serious and critical accessibility violations axe-core finds on the page as shown."""
    from axe_playwright_python.sync_playwright import Axe

    # No preload: axe would fetch the style sheets itself, which a page from disk refuses
    # (a console error); the one rule that needs them (css-orientation-lock) is not run.
    options = {"resultTypes": ["violations"], "preload": False}
    results = Axe().run(page, context=context, options=options)
    return [
        f"{v['impact']} {v['id']} ({v['help']}): "
        + "; ".join(" ".join(map(str, n["target"])) for n in v["nodes"][:5])
        + (f" and {len(v['nodes']) - 5} more" if len(v["nodes"]) > 5 else "")
        for v in results.response["violations"]
        if v["impact"] in FAILING_IMPACTS
    ]


# Every visible code cell, output or other code block whose text is wider than its box.
CLIPPED_BLOCKS = """() => [...document.querySelectorAll('.bd-article pre')]
    .filter((e) => e.offsetParent !== null && e.scrollWidth > e.clientWidth + 1)
    .map((e) => ({
        kind: e.closest('.cell_input') ? 'code' : e.closest('.cell_output') ? 'output' : 'other',
        hidden: e.scrollWidth - e.clientWidth,
        text: e.textContent.trim().split('\\n')[0].slice(0, 50),
    }))"""


# How far the page itself scrolls sideways (0 when it fits the window), and what sticks out.
PAGE_OVERFLOW = """() => {
    const width = document.documentElement.clientWidth;
    const over = document.documentElement.scrollWidth - width;
    const clipped = (e) => {  // inside a box that scrolls or clips its own content
        for (let a = e.parentElement; a; a = a.parentElement) {
            if (getComputedStyle(a).overflowX !== 'visible') return a !== document.body
                && a !== document.documentElement;
        }
        return false;
    };
    const culprits = over <= 0 ? [] : [...document.querySelectorAll('body *')]
        .filter((e) => e.getBoundingClientRect().right > width + 1 && !clipped(e))
        .slice(-5)
        .map((e) => `${e.tagName.toLowerCase()}.${e.className}: `
            + (e.textContent || '').trim().slice(0, 40));
    return {over, culprits};
}"""


def page_overflow(page) -> dict:
    """How many pixels the page scrolls sideways (``over``) and up to five elements that stick
    out past the window (``culprits``)."""
    return page.evaluate(PAGE_OVERFLOW)


def clipped_blocks(page) -> list[dict]:
    """The page's code blocks that scroll sideways: kind (code, output, other), hidden pixels."""
    return page.evaluate(CLIPPED_BLOCKS)
