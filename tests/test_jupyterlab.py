"""`make lab` shows a chapter rendered: JupyterLab with jupyterlab-myst, in headless Chromium.

A real JupyterLab server (a free local port, token auth, its own temporary settings and runtime
folders) opens one Part I chapter that has a figure, exercises, citations and cross-references.
No MyST directive or role may be visible as text, the figure's image must have loaded, and every
number the prose takes from a cell must read as that number (a glue role would show its name).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tools.prose_numbers import bindings

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = "book/part1/queries_keys_values.ipynb"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# What the raw MyST source shows where the extension does not render it.
RAW_MYST = (
    ":name:",
    ":alt:",
    ":label:",
    "{figure}",
    "{exercise}",
    "{cite}",
    "{doc}",
    "{numref}",
    "{glue",
)
START_TIMEOUT_S = 60


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def lab_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Start `jupyter lab` as `make lab` does; yield the chapter's URL; always stop the server."""
    tmp = tmp_path_factory.mktemp("jupyterlab")
    # Render every cell, not only those in view (JupyterLab 4 windows long notebooks).
    tracker = tmp / "settings" / "@jupyterlab" / "notebook-extension"
    tracker.mkdir(parents=True)
    (tracker / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
    port, token = free_port(), secrets.token_hex(16)
    # The environment's own configuration only (not the user's ~/.jupyter).
    env = dict(
        os.environ,
        JUPYTER_RUNTIME_DIR=str(tmp / "runtime"),
        JUPYTER_CONFIG_DIR=str(tmp / "config"),
    )
    command = [
        str(Path(sys.executable).with_name("jupyter")),
        "lab",
        "--no-browser",
        "--allow-root",
        "--ip=127.0.0.1",
        f"--port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={ROOT}",
        f"--LabApp.user_settings_dir={tmp / 'settings'}",
        f"--LabApp.workspaces_dir={tmp / 'workspaces'}",
        # Opening a notebook saves a checkpoint: into the temporary folder, not into book/.
        f"--FileCheckpoints.root_dir={tmp / 'checkpoints'}",
    ]
    log = (tmp / "server.log").open("w")
    server = subprocess.Popen(
        command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                urllib.request.urlopen(
                    f"http://127.0.0.1:{port}/api/status?token={token}", timeout=2
                )
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("JupyterLab did not start:\n" + (tmp / "server.log").read_text())
                time.sleep(0.5)
        yield f"http://127.0.0.1:{port}/lab/tree/{CHAPTER}?token={token}"
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # the server and the kernel it started
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()


@pytest.fixture(scope="module")
def page(lab_url: str):
    sync_api = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.fail(f"chromium not found at {CHROMIUM}: install Debian's chromium (make chromium)")
    local = lab_url.split("/lab/")[0]
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"], headless=True
        )
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        # Only the local server: JupyterLab's news check and the like are cut off.
        page.route(
            "**/*",
            lambda route: (
                route.continue_() if route.request.url.startswith(local) else route.abort()
            ),
        )
        page.goto(lab_url)
        page.wait_for_selector(".jp-Notebook .jp-MarkdownCell", timeout=START_TIMEOUT_S * 1000)
        yield page
        browser.close()


def markdown_sources() -> list[str]:
    cells = json.loads((ROOT / CHAPTER).read_text())["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]


def bound_numbers() -> list[tuple[str, str]]:
    """(glue name, the text the prose shows) for every number the chapter binds to a cell."""
    cells = json.loads((ROOT / CHAPTER).read_text())["cells"]
    return [(b.name, b.text) for c in cells for b in bindings(c) if c["cell_type"] == "markdown"]


def test_the_chapter_uses_the_myst_the_test_looks_for() -> None:
    """Otherwise the checks below would pass without anything to render."""
    source = "\n".join(markdown_sources())
    for raw in ("{figure}", "{exercise}", "{cite}", "{doc}", "{numref}", ":name:"):
        assert raw in source, f"{CHAPTER} no longer has {raw}: pick another chapter"
    assert bound_numbers(), f"{CHAPTER} binds no number to a cell: pick another chapter"


def test_jupyterlab_renders_myst(page) -> None:
    sources = markdown_sources()
    # Every markdown cell is in the page (those under the folded "Solutions" heading hidden).
    cells = page.locator(".jp-Notebook .jp-MarkdownCell")
    cells.nth(len(sources) - 1).wait_for(state="attached", timeout=START_TIMEOUT_S * 1000)
    assert cells.count() == len(sources)
    # The figure's image loads (jupyterlab-myst fetches it from the server).
    try:
        page.wait_for_function(
            """() => {
                const imgs = [...document.querySelectorAll('.jp-MarkdownCell img')];
                return imgs.length > 0 && imgs.every(img => img.complete && img.naturalWidth > 0);
            }""",
            timeout=START_TIMEOUT_S * 1000,
        )
        images_loaded = True
    except Exception:  # playwright's TimeoutError: report what is shown instead
        images_loaded = False
    text = page.inner_text(".jp-Notebook")
    shown = [raw for raw in RAW_MYST if raw in text]
    assert shown == [], f"raw MyST visible in JupyterLab (is jupyterlab-myst enabled?): {shown}"
    assert images_loaded, "the figure's image did not load in JupyterLab"
    figures = sum(source.count("{figure}") for source in sources)
    assert page.locator(".jp-MarkdownCell img").count() >= figures


def test_numbers_from_the_cells_read_as_numbers(page) -> None:
    """A number the prose takes from a cell shows as its value, not as the name it is glued by."""
    text = "\n".join(page.locator(".jp-Notebook .jp-MarkdownCell").all_inner_texts())
    for name, shown in bound_numbers():
        assert shown in text, f"{shown!r} (glued as {name!r}) is not shown in JupyterLab"
        assert name not in text, f"JupyterLab shows the glue name {name!r}"
