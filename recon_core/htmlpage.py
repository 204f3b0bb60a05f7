"""The pieces of a self-contained HTML report: page skeleton with the verdict first, tables and inline PNGs.

Nothing is fetched when the page opens: the style is inline and images are base64 data URIs.
Used by :mod:`bayes_recon.report` and :mod:`nn_recon.audit_page`.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recon_core.headline import NOT_FOR_PUBLICATION, Headline, Severity

STYLE = """
body { font-family: sans-serif; max-width: 1100px; margin: 2em auto; color: #222; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
td.recovered { background: #f6c6c6; } td.partly { background: #fbe3b5; } td.not { background: #cfeccf; }
img { max-width: 100%; }
.note { color: #555; font-size: 0.9em; }
#verdict { border-left: 10px solid; padding: 0.2em 1em 0.6em; margin-bottom: 2em; }
#verdict.recovered { border-color: #c0392b; background: #fbeaea; }
#verdict.partly { border-color: #d68910; background: #fdf3e1; }
#verdict.not { border-color: #1e8449; background: #e9f7ef; }
#verdict.unsure { border-color: #7f8c8d; background: #f2f3f4; }
#verdict h1 { margin: 0.3em 0; font-size: 1.5em; }
#verdict .private { margin: 0.5em 0; color: #922; font-weight: bold; }
#verdict .answer { font-size: 1.2em; font-weight: bold; margin: 0.4em 0; }
#verdict dt { font-weight: bold; margin-top: 0.4em; }
#verdict dd { margin-left: 1.5em; } #verdict ul { margin: 0; padding-left: 1.2em; }
"""


def escape(value: Any) -> str:
    return html.escape(str(value))


def page(title: str, headline: Headline, sections: Sequence[str]) -> str:
    """A whole page: the verdict first (with ``title`` as the page's heading), then the already
    rendered ``sections``."""
    body = "\n".join([verdict_block(title, headline), *sections])
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


def verdict_block(title: str, headline: Headline) -> str:
    """The answer to "may I publish?", coloured by its severity, with the not-for-publication warning."""
    points = "".join(
        f"<dt>{escape(label)}</dt><dd>"
        + (
            escape(sentences[0])
            if len(sentences) == 1
            else "<ul>" + "".join(f"<li>{escape(s)}</li>" for s in sentences) + "</ul>"
        )
        + "</dd>"
        for label, sentences in headline.points
    )
    return (
        f"<section id='verdict' class='{headline.severity}'>"
        f"<p class='private'>{escape(NOT_FOR_PUBLICATION)}</p>"
        f"<h1>{escape(title)}</h1><p class='answer'>{escape(headline.answer)}</p><dl>{points}</dl></section>"
    )


@dataclass(frozen=True)
class Cell:
    """A table cell coloured by a verdict (the class of its ``<td>``)."""

    value: Any
    severity: Severity


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Cells escaped as given (a :class:`Cell` coloured by its verdict); an all-empty ``header`` draws
    no header row."""
    head = "<tr>" + "".join(f"<th>{escape(h)}</th>" for h in header) + "</tr>" if any(header) else ""
    body = "".join("<tr>" + "".join(map(_cell, row)) + "</tr>" for row in rows)
    return f"<table>{head}{body}</table>"


def _cell(value: Any) -> str:
    if isinstance(value, Cell):
        return f"<td class='{value.severity}'>{escape(value.value)}</td>"
    return f"<td>{escape(value)}</td>"


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
