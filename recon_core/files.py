"""Files written whole: a run stopped mid-write keeps the file it had, never half of a new one.

The one atomic write of the project: checkpoints, trained models and shadow-farm chunks all go
through :func:`write_atomically` (``nn_recon.checkpoint.save_atomically`` hands it ``torch.save``).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path


def write_atomically(path: str | Path, write: Callable[[Path], object]) -> Path:
    """``write(temporary)`` beside ``path``, then rename the temporary file over ``path``; the folder
    is made if missing. The rename is atomic on one file system, so ``path`` is always whole; the
    temporary name is this writer's own, so two processes writing one path never mix their bytes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f"{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    try:
        write(temporary)
        temporary.replace(path)
    finally:
        temporary.unlink(missing_ok=True)
    return path
