"""Fixtures shared by the bayes_recon and nn_recon tests."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from html import escape as html_escape
from html.parser import HTMLParser
from pathlib import Path

import pytest

from recon_core import progress
from recon_core.headline import NOT_FOR_PUBLICATION

# The tests run small problems, so their time is mostly XLA compiling (thousands of programs); with its
# optimisations off the default run takes about 30 % less (stop 53: the Poisson attack 59 → 42 s, the
# kidiq command 51 → 34 s). Their assertions should not depend on the optimisations: stop 53 found one
# that did and fixed it (the rescaling test). Set before any test imports JAX, and inherited by the
# commands the tests run; JAX_DISABLE_MOST_OPTIMIZATIONS=0 turns them back on.
os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")

ImageSizes = list[tuple[bool, int, int]]
WINDOW = (1280, 800)  # the browser window of the layout check: the verdict must fit in its first screen
BROWSER_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 f"--window-size={WINDOW[0]},{WINDOW[1]}"]  # fmt: skip


@pytest.fixture(autouse=True)
def _progress_bars_off() -> None:
    """A CLI run in-process turns progress bars on (recon_core.progress.enable); the next test starts quiet,
    whichever tests ran before it on its worker."""
    progress.enable(False)


def _browser() -> str:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("headless Chromium is not installed (Debian: apt-get install chromium)")
    return browser


class _Body(HTMLParser):
    """The first element inside <body>, and whether any text came before it."""

    def __init__(self) -> None:
        super().__init__()
        self.in_body, self.first, self.text_before = False, None, ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "body":
            self.in_body = True
        elif self.in_body and self.first is None:
            self.first = (tag, dict(attrs))

    def handle_data(self, data: str) -> None:
        if self.in_body and self.first is None:
            self.text_before += data.strip()


def first_in_body(html: str) -> tuple[str, dict[str, str | None]]:
    """The first element of the page's body (tag, attributes); fails if text precedes it."""
    parser = _Body()
    parser.feed(html)
    assert parser.first is not None and parser.text_before == "", parser.text_before
    return parser.first


@pytest.fixture
def verdict_first() -> Callable[[str], None]:
    """Checks that a report opens with its verdict: the first thing in <body>, with the
    not-for-publication warning and the page's heading inside it, before any other section."""

    def check(html: str) -> None:
        tag, attrs = first_in_body(html)
        assert (tag, attrs.get("id")) == ("section", "verdict")
        verdict = html[html.index("<section id='verdict'") : html.index("</section>")]
        assert html_escape(NOT_FOR_PUBLICATION) in verdict and "<h1>" in verdict and "What to do" in verdict
        assert html.index("</section>") < html.index("<h2>")

    return check


def _after_load(browser: str, tmp_path: Path, page: Path, expression: str) -> tuple[str, str]:
    """The text of a JavaScript ``expression`` evaluated once ``page`` has loaded in headless Chromium
    (written into the DOM by a script in a copy of the page), and the page's DOM."""
    probe = tmp_path / f"probe-{page.name}"
    script = (
        "<script>window.addEventListener('load', () => { const out = document.createElement('pre');"
        f" out.id = 'probe'; out.textContent = {expression}; document.body.appendChild(out); }});</script>"
    )
    probe.write_text(page.read_text().replace("</body>", script + "</body>"))
    run = [browser, *BROWSER_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000"]
    result = subprocess.run([*run, "--dump-dom", probe.as_uri()], capture_output=True, text=True, timeout=120)
    assert '<pre id="probe">' in result.stdout, result.stderr[-2000:]
    return result.stdout.split('<pre id="probe">')[1].split("</pre>")[0], result.stdout


@pytest.fixture
def chromium_layout(tmp_path) -> Callable[[Path], tuple[float, Path]]:
    """Opens an HTML page in headless Chromium in a 1280 × 800 window: returns the bottom of its
    verdict block in CSS pixels (getBoundingClientRect) and a screenshot of the first screen. Skips
    where Chromium is not installed."""
    browser = _browser()

    def open_page(page: Path) -> tuple[float, Path]:
        bottom, _ = _after_load(
            browser, tmp_path, page, "document.getElementById('verdict').getBoundingClientRect().bottom"
        )
        png = tmp_path / f"{page.stem}.png"
        run = [browser, *BROWSER_FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
        shot = subprocess.run([*run, f"--screenshot={png}", page.as_uri()], capture_output=True, text=True,
                              timeout=120)  # fmt: skip
        assert png.is_file() and png.stat().st_size > 0, shot.stderr[-2000:]
        return float(bottom), png

    return open_page


@pytest.fixture
def chromium_images(tmp_path) -> Callable[[Path], tuple[ImageSizes, str]]:
    """Opens an HTML page in headless Chromium; returns every image's (loaded, width, height) as
    decoded by the browser, and the page's DOM. Skips where Chromium is not installed."""
    browser = _browser()

    def open_page(page: Path) -> tuple[ImageSizes, str]:
        sizes, dom = _after_load(
            browser,
            tmp_path,
            page,
            "JSON.stringify([...document.images].map(i => [i.complete, i.naturalWidth, i.naturalHeight]))",
        )
        return [tuple(size) for size in json.loads(sizes)], dom

    return open_page
