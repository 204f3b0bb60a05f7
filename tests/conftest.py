"""Fixtures shared by the bayes_recon and nn_recon tests."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

ImageSizes = list[tuple[bool, int, int]]


@pytest.fixture
def chromium_images(tmp_path) -> Callable[[Path], tuple[ImageSizes, str]]:
    """Opens an HTML page in headless Chromium; returns every image's (loaded, width, height) as
    decoded by the browser, and the page's DOM. Skips where Chromium is not installed."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("headless Chromium is not installed (Debian: apt-get install chromium)")

    def open_page(page: Path) -> tuple[ImageSizes, str]:
        # A copy that writes every image's decoded size into the DOM once the page has loaded.
        probe = tmp_path / f"probe-{page.name}"
        script = (
            "<script>window.addEventListener('load', () => { const out = document.createElement('pre');"
            " out.id = 'sizes'; out.textContent = JSON.stringify([...document.images].map("
            "i => [i.complete, i.naturalWidth, i.naturalHeight])); document.body.appendChild(out); });"
            "</script>"
        )
        probe.write_text(page.read_text().replace("</body>", script + "</body>"))
        result = subprocess.run(
            [browser, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000",
             "--dump-dom", probe.as_uri()],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        dom = result.stdout
        assert '<pre id="sizes">' in dom, result.stderr[-2000:]
        sizes = json.loads(dom.split('<pre id="sizes">')[1].split("</pre>")[0])
        return [tuple(size) for size in sizes], dom

    return open_page
