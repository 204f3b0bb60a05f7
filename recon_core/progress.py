"""One progress-bar helper: silent unless the caller (the CLI) turns bars on."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")

_enabled = False


def enable(on: bool = True) -> None:
    """Show progress bars from now on (the CLI calls this; library use stays quiet)."""
    global _enabled
    _enabled = on


def progress(items: Iterable[T], total: int | None = None, desc: str = "") -> Iterator[T]:
    """Iterate over ``items``, with a tqdm bar on stderr when enabled."""
    if not _enabled:
        yield from items
        return
    from tqdm.auto import tqdm

    yield from tqdm(items, total=total, desc=desc, leave=False, dynamic_ncols=True)
