"""Torch files written whole, and read back as tensors and plain data only, never code.

A run stopped mid-write keeps the file it had, never half of a new one (the write is
:func:`recon_core.files.write_atomically`). Reading uses
``torch.load(weights_only=True)``; a file it refuses (corrupt, truncated, or holding objects whose
unpickling would run code) is a short :class:`ReconError`, not PyTorch's advice to load it with
``weights_only=False``. Network weights are checked to be finite before they are loaded.
A training loop that resumes keeps its state in a :class:`StateStore`, which :class:`CheckpointFile`
keeps in one such file; the loop itself names no file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from recon_core.errors import ReconError
from recon_core.files import write_atomically


def save_atomically(path: str | Path, state: Any) -> Path:
    """``torch.save`` through :func:`recon_core.files.write_atomically`, so a run stopped mid-write
    keeps its last whole checkpoint; the folder is made if missing."""
    return write_atomically(path, lambda temporary: torch.save(state, temporary))


def load_torch_file(path: Path, what: str, fix: str, map_location: str | torch.device = "cpu") -> Any:
    """The tensors and plain data in ``path``; a file torch cannot read that way says it is not
    ``what`` (e.g. "a model file written by nn-recon train") and how to ``fix`` it."""
    try:
        return torch.load(path, weights_only=True, map_location=map_location)
    except Exception:
        raise ReconError(
            f"{path} is not {what}: torch cannot read it as plain tensors (it is corrupt, truncated or holds "
            f"code, which is never run); {fix}"
        ) from None


def load_weights(module: torch.nn.Module, state_dict: Mapping[str, Any], source: str | Path) -> None:
    """``module.load_state_dict(state_dict)``, refusing NaN or infinite weights read from ``source``."""
    broken = [
        name
        for name, value in state_dict.items()
        if isinstance(value, torch.Tensor) and value.is_floating_point() and not value.isfinite().all()
    ]
    if broken:
        raise ReconError(
            f"{source} holds NaN or infinite weights ({', '.join(broken[:3])}); the run that wrote it "
            "diverged or the file is damaged: retrain it (lower --lr) or delete it to start over"
        )
    module.load_state_dict(state_dict)


class StateStore(Protocol):
    """Where a training loop keeps its state between runs, so that a stopped run resumes; ``str`` of
    it names it in messages."""

    def load(self, device: str | torch.device) -> dict[str, Any] | None:
        """The state saved last, its tensors on ``device``; None before the first save."""

    def save(self, state: dict[str, Any]) -> None: ...


@dataclass(frozen=True)
class CheckpointFile:
    """A :class:`StateStore` in the torch file ``path``, written whole; ``what`` it holds (e.g. "a
    RecoNN checkpoint") names it when it cannot be read."""

    path: Path
    what: str

    def __str__(self) -> str:
        return str(self.path)

    def load(self, device: str | torch.device) -> dict[str, Any] | None:
        if not self.path.exists():
            return None
        return load_torch_file(self.path, self.what, "delete it to start over", device)

    def save(self, state: dict[str, Any]) -> None:
        save_atomically(self.path, state)
