"""Torch files written whole: a run stopped mid-write keeps the file it had, never half of a new one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch


def save_atomically(path: Path, state: dict[str, Any]) -> None:
    """``torch.save`` beside ``path`` and rename over it, so a run stopped mid-write keeps its last
    whole checkpoint; the folder is made if missing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    torch.save(state, temporary)
    temporary.replace(path)
