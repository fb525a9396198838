"""Open every built page in headless Chromium with the network cut off.

Each page must load with no request leaving the machine, render its math with the bundled MathJax,
load every image, link only to files that exist, and log no console error (except the documented
third-party noise in ALLOWED_CONSOLE_ERRORS).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

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
# sphinx-thebe inserts its inline script twice on every page; harmless, and not ours to fix.
ALLOWED_CONSOLE_ERRORS = ("Identifier 'THEBE_JS_URL' has already been declared",)


def built_pages(html_dir: Path) -> list[Path]:
    return sorted(
        p
        for p in html_dir.rglob("*.html")
        if "_static" not in p.parts and "_sources" not in p.parts
    )


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.fail(f"chromium not found at {CHROMIUM}: install Debian's chromium (make chromium)")
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield browser
        browser.close()


def test_book_has_pages(book_build) -> None:
    assert book_build.returncode == 0, book_build.log[-3000:]
    assert len(built_pages(book_build.html_dir)) >= 3


def test_every_page_works_offline(book_build, browser) -> None:
    assert book_build.returncode == 0, book_build.log[-3000:]
    problems: list[str] = []
    pages = built_pages(book_build.html_dir)
    math_pages = 0
    for path in pages:
        page_problems, rendered_math = check_page(browser, path)
        problems += page_problems
        math_pages += rendered_math
    assert math_pages >= 1, "no page rendered any math: the MathJax check never ran"
    assert problems == [], f"{len(problems)} problem(s) on {len(pages)} pages:\n" + "\n".join(
        problems
    )


REDIRECT = re.compile(r'<meta http-equiv="Refresh" content="0; url=([^"]+)"', re.IGNORECASE)


def check_page(browser, path: Path) -> tuple[list[str], bool]:
    """Return the problems found on one page, and whether it rendered math."""
    name = path.name if path.parent.name == "html" else f"{path.parent.name}/{path.name}"
    redirect = REDIRECT.search(path.read_text(encoding="utf-8"))
    if redirect:  # index.html only forwards to the first page: check where it points
        target = path.parent / unquote(redirect.group(1))
        return ([] if target.is_file() else [f"{name}: redirects to missing {target}"]), False
    external: list[str] = []
    console_errors: list[str] = []
    context = browser.new_context()

    def block_network(route) -> None:
        if route.request.url.startswith(("file:", "data:", "blob:", "about:")):
            route.continue_()
        else:
            external.append(route.request.url)
            route.abort()

    context.route("**/*", block_network)
    page = context.new_page()
    page.on("console", lambda msg: msg.type == "error" and console_errors.append(msg.text))
    page.on("pageerror", lambda err: console_errors.append(str(err)))
    page.goto(path.as_uri(), wait_until="load")
    problems: list[str] = []

    has_math = page.locator("span.math, div.math").count() > 0
    if has_math:
        page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise")
        page.evaluate("() => MathJax.startup.promise")
        if page.locator("mjx-container").count() == 0:
            problems.append(f"{name}: math present but MathJax rendered nothing")
        if page.locator("mjx-merror").count() > 0:
            problems.append(
                f"{name}: MathJax reported {page.locator('mjx-merror').count()} error(s)"
            )
        # A backslash drawn as a glyph (U+005C) is TeX that MathJax printed literally, such as
        # `\_` inside `\text{}`: no formula of the book shows a backslash on purpose.
        literal = page.evaluate(
            "() => [...document.querySelectorAll('mjx-container')]"
            ".filter(c => c.querySelector('mjx-c.mjx-c5C'))"
            ".map(c => c.getAttribute('aria-label') || c.outerHTML.slice(0, 120))"
        )
        problems += [f"{name}: math shows a literal backslash: {label}" for label in literal]

    search_boxes = page.evaluate(
        "() => [...document.querySelectorAll('.search-button-field, form.bd-search')]"
        ".filter(e => e.offsetParent !== null).length"
    )
    # A theme release that does not match Jupyter Book 1.0 draws two (the search page itself
    # has its own search form besides the sidebar's).
    if search_boxes > (2 if path.name == "search.html" else 1):
        problems.append(f"{name}: {search_boxes} visible search boxes")

    broken_images = page.evaluate(
        "() => [...document.images]"
        ".filter(i => !i.complete || i.naturalWidth === 0).map(i => i.src)"
    )
    problems += [f"{name}: image did not load: {src}" for src in broken_images]

    for href in page.evaluate("() => [...document.querySelectorAll('a[href]')].map(a => a.href)"):
        url = urlparse(href)
        if url.scheme == "file" and not Path(unquote(url.path)).exists():
            problems.append(f"{name}: broken internal link {href}")

    page.wait_for_timeout(200)  # let late console messages arrive
    context.close()
    problems += [f"{name}: request left the machine: {url}" for url in external]
    problems += [
        f"{name}: console error: {msg}"
        for msg in console_errors
        if not any(allowed in msg for allowed in ALLOWED_CONSOLE_ERRORS)
    ]
    return problems, has_math
