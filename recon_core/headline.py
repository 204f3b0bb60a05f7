"""The verdict at the top of an audit: "may I publish?" answered in plain words, for a page and a terminal.

Both audits (:mod:`bayes_recon.verdict`, :mod:`nn_recon.audit_page`) word their results into a
:class:`Headline`; :func:`recon_core.htmlpage.page` puts it first on the page and the command-line
tools print :meth:`Headline.text` before their tables.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

# How bad the news is; the page colours the verdict (and the tables' verdict cells) by it.
Severity = Literal["recovered", "partly", "not", "unsure"]

NOT_FOR_PUBLICATION = (
    "This audit contains the true private data's statistics and scores: it is for the data owner, "
    "not for publication."
)


@dataclass(frozen=True)
class Headline:
    """``answer``: one sentence; ``points``: (label, its sentences), e.g. ("What to do", (...)).

    ``severity``: recovered (the release gives data away), partly, not (nothing found), unsure (the
    attack's own check failed, so what it did not find may still leak)."""

    answer: str
    severity: Severity
    points: tuple[tuple[str, tuple[str, ...]], ...]

    def text(self, width: int = 100) -> str:
        """The verdict for a terminal: the answer, each point as an indented paragraph, then the warning."""
        lines = textwrap.wrap(f"VERDICT: {self.answer}", width)
        for label, sentences in self.points:
            lines.append(f"  {label}:")
            for sentence in sentences:
                lines += textwrap.wrap(sentence, width, initial_indent="  - ", subsequent_indent="    ")
        return "\n".join([*lines, *textwrap.wrap(f"({NOT_FOR_PUBLICATION})", width)])


def words(items: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    if len(items) < 2:
        return "".join(items)
    return f"{', '.join(items[:-1])} and {items[-1]}"


def percent(share: float) -> str:
    """A share as a percentage: 0.0123 → ``1.2 %``, 0.47 → ``47 %``, 1e-9 → ``under 0.01 %`` (a no-break
    space before the sign, so that a line never starts with it)."""
    value = 100 * share
    return "under 0.01\u00a0%" if 0 < value < 0.01 else f"{number(value)}\u00a0%"


def number(value: float) -> str:
    """Two significant digits, without an exponent from 100 up: 0.0345, 9.4, 236."""
    return f"{value:.2g}" if abs(value) < 100 else f"{value:,.0f}"


def count(n: int, noun: str) -> str:
    """``1 run``, ``2 runs``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"
