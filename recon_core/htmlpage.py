"""The pieces of a self-contained HTML report: page skeleton, tables and inline PNG images.

Nothing is fetched when the page opens: the style is inline and images are base64 data URIs.
Used by :mod:`bayes_recon.report` and :mod:`nn_recon.audit`.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

STYLE = """
body { font-family: sans-serif; max-width: 1100px; margin: 2em auto; color: #222; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
td.recovered { background: #f6c6c6; } td.partly { background: #fbe3b5; } td.not { background: #cfeccf; }
img { max-width: 100%; }
.note { color: #555; font-size: 0.9em; }
"""


def escape(value: Any) -> str:
    return html.escape(str(value))


def page(title: str, sections: Sequence[str]) -> str:
    """A whole page: ``title`` as its title and the already rendered ``sections`` as its body."""
    body = "\n".join(sections)
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<title>{escape(title)}</title><style>{STYLE}</style></head>\n"
        f"<body>\n{body}\n</body></html>\n"
    )


def write(text: str, path: str | Path) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    return out


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Cells escaped as given; an all-empty ``header`` draws no header row."""
    head = "<tr>" + "".join(f"<th>{escape(h)}</th>" for h in header) + "</tr>" if any(header) else ""
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table>{head}{body}</table>"


def png_image(png: bytes, alt: str) -> str:
    encoded = base64.b64encode(png).decode("ascii")
    return f"<img alt='{escape(alt)}' src='data:image/png;base64,{encoded}'>"


def figure_image(figure: Any, alt: str) -> str:
    """A matplotlib figure as an inline PNG; the figure is closed."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=80, bbox_inches="tight")
    plt.close(figure)
    return png_image(buffer.getvalue(), alt)
