"""Open every built page in headless Chromium with the network cut off.

Each page must load with no request leaving the machine, render its math with the bundled MathJax,
load every image, link only to files that exist, log no console error at all, pass axe-core's
accessibility audit with no serious or critical violation (the colour contrast of each kind of
highlighted code token is checked on the first page that shows it: its colour comes from the same
style sheet on every page), and show its code whole: at a
1280 x 800 window no code cell and no output scrolls sideways, at 1024 px at most a handful of
outputs do. On a 390 px phone screen no page scrolls sideways (a code block may scroll inside its
own box). Dark mode follows the system's setting, and passes the same audit.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote, urlparse

from browser_support import (
    Page,
    axe_violations,
    built_pages,
    clipped_blocks,
    page_overflow,
    unwrap_seen_tokens,
)

# Code blocks allowed to scroll sideways, over the whole book, at each window width.
MAX_CLIPPED = {1280: {"code": 0, "output": 0, "other": 0}, 1024: {"code": 0, "output": 5}}
PHONE_WIDTH = 390  # an iPhone 12 to 15's CSS width


def test_book_has_pages(book_build) -> None:
    assert book_build.returncode == 0, book_build.log[-3000:]
    assert len(built_pages(book_build.html_dir)) >= 3


def test_every_page_works_offline(book_build, browser) -> None:
    assert book_build.returncode == 0, book_build.log[-3000:]
    problems: list[str] = []
    clipped: dict[int, list[str]] = {1280: [], 1024: []}
    pages = built_pages(book_build.html_dir)
    math_pages = 0
    seen_tokens: set[str] = set()  # highlighted-code token classes already checked by axe
    for path in pages:
        page_problems, rendered_math = check_page(browser, path, clipped, seen_tokens)
        problems += page_problems
        math_pages += rendered_math
    assert math_pages >= 1, "no page rendered any math: the MathJax check never ran"
    for width, blocks in clipped.items():
        print(f"\n{width} px: {len(blocks)} code block(s) scroll sideways", *blocks, sep="\n  ")
        for kind in ("code", "output", "other"):
            found = [b for b in blocks if b.startswith(kind)]
            limit = MAX_CLIPPED[width].get(kind, 0)
            if len(found) > limit:
                problems.append(
                    f"{len(found)} {kind} block(s) scroll sideways at {width} px (at most "
                    f"{limit}): " + "; ".join(found[:8])
                )
    assert problems == [], f"{len(problems)} problem(s) on {len(pages)} pages:\n" + "\n".join(
        problems
    )


REDIRECT = re.compile(r'<meta http-equiv="Refresh" content="0; url=([^"]+)"', re.IGNORECASE)


def check_page(
    browser, path: Path, clipped: dict[int, list[str]], seen_tokens: set[str]
) -> tuple[list[str], bool]:
    """Return the problems found on one page, and whether it rendered math; add the page's code
    blocks that scroll sideways to clipped (by window width), and the classes of its highlighted
    code tokens to seen_tokens (axe checks each class once, on the first page that has it)."""
    name = path.name if path.parent.name == "html" else f"{path.parent.name}/{path.name}"
    redirect = REDIRECT.search(path.read_text(encoding="utf-8"))
    if redirect:  # index.html only forwards to the first page: check where it points
        target = path.parent / unquote(redirect.group(1))
        return ([] if target.is_file() else [f"{name}: redirects to missing {target}"]), False
    opened = Page(browser, path.as_uri(), width=1280, height=800)
    page = opened.page
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

    page.set_viewport_size({"width": PHONE_WIDTH, "height": 844})
    page.wait_for_timeout(50)
    phone = page_overflow(page)
    if phone["over"] > 0:
        problems.append(
            f"{name}: scrolls {phone['over']} px sideways on a {PHONE_WIDTH} px phone: "
            + "; ".join(phone["culprits"])
        )
    for width in (1024, 1280):  # back at 1280 px for axe
        page.set_viewport_size({"width": width, "height": 800})
        page.wait_for_timeout(50)
        clipped[width] += [
            f"{b['kind']} {name} ({b['hidden']} px hidden): {b['text']}"
            for b in clipped_blocks(page)
        ]
    unwrap_seen_tokens(page, seen_tokens)  # last: it edits the page
    problems += [f"{name}: accessibility: {v}" for v in axe_violations(page)]
    problems += [f"{name}: {p}" for p in opened.problems()]
    opened.close()
    return problems, has_math


def test_offline_search_lists_results_quietly(book_build, browser) -> None:
    """From disk the search page lists its results, with no console error (a browser refuses to
    fetch the result pages for excerpts from file://, so there it shows none)."""
    assert book_build.returncode == 0, book_build.log[-3000:]
    search = book_build.html_dir / "search.html"
    opened = Page(browser, f"{search.as_uri()}?q=softmax", width=1280, height=800)
    opened.page.wait_for_function(
        "() => /found \\d+ page/.test(document.getElementById('search-results')?.innerText)"
    )
    opened.page.wait_for_timeout(300)  # results are added one by one
    titles = opened.page.eval_on_selector_all("#search-results li > a", "as => as.map(a => a.href)")
    assert any(t.endswith("scaling_softmax.html") for t in titles), titles
    assert opened.problems() == []
    opened.close()


def test_no_page_loads_live_code(book_build) -> None:
    """No "Live Code" (thebe): it loads from a CDN and needs a remote kernel."""
    for path in built_pages(book_build.html_dir):
        html = path.read_text(encoding="utf-8")
        assert "THEBE_JS_URL" not in html and "launch-thebe" not in html, path.name


def test_dark_mode_follows_the_system(book_build, browser) -> None:
    """With the system in dark mode a chapter opens dark, stays readable (axe's contrast rules)
    and logs no error; figures keep their white card."""
    assert book_build.returncode == 0, book_build.log[-3000:]
    chapter = book_build.html_dir / "book" / "part1" / "causal_masking.html"
    opened = Page(browser, chapter.as_uri(), width=1280, height=800, color_scheme="dark")
    page = opened.page
    assert page.evaluate("() => document.documentElement.dataset.theme") == "dark"
    backgrounds = page.evaluate(
        "() => [...document.querySelectorAll('.bd-article img')]"
        ".map(i => getComputedStyle(i).backgroundColor)"
    )
    assert backgrounds and set(backgrounds) == {"rgb(255, 255, 255)"}, backgrounds
    unwrap_seen_tokens(page, set())
    assert axe_violations(page) == []
    assert opened.problems() == []
    opened.close()
