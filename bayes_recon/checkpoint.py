"""Resumable attacks: every finished round of restarts is kept on disk, under a fingerprint of the run.

:func:`bayes_recon.reconstruct` with ``checkpoint=FOLDER`` runs its restarts in rounds (one compiled
round, called once per batch of ``restarts_at_once``) and writes each round's outputs to
``FOLDER/round-NNNNN.npz`` as soon as it ends (atomically: a killed run leaves whole files only).
Run again with the same folder, it loads the rounds already there and runs only the rest; a round's
inputs depend on the seed and its restart index only, so the result is bitwise the one an
uninterrupted run gives. One more file after the rounds keeps the repairs' record: the Frank–Wolfe
rounds' result (:mod:`bayes_recon.refine`) where they ran, and whether the rescue's best restart was
taken.

``FOLDER/fingerprint.json`` says which attack the rounds belong to: the model (name and source),
the draws (a hash of their bytes), the free, fixed and support arguments, the number of points,
the seed, the :class:`~bayes_recon.ReconConfig`, and the code and platform that ran it (this
package's source, JAX's version, the backend and device). A folder written by another attack is
refused with a :class:`ReconError`, never reused: :func:`remove` it (the command line's
``--fresh``) or choose another folder.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import jax
import numpy as np
from numpyro.distributions.constraints import Constraint

from recon_core.errors import ReconError
from recon_core.files import write_atomically

FINGERPRINT = "fingerprint.json"
ROUND = "round-{:05d}.npz"
PACKAGE = Path(__file__).resolve().parent


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _model_identity(model: Callable) -> str:
    name = f"{getattr(model, '__module__', '?')}.{getattr(model, '__qualname__', type(model).__qualname__)}"
    try:
        source = inspect.getsource(model)
    except (OSError, TypeError):  # defined in a string or a REPL: its compiled code stands in
        code = getattr(model, "__code__", None)
        source = repr(model) if code is None else repr((code.co_code, code.co_consts, code.co_names))
    return f"{name} {_digest(source.encode())}"


def _constraint(support: Constraint) -> str:
    return f"{type(support).__module__}.{type(support).__qualname__}{sorted(vars(support).items())!r}"


def _array_digest(arrays: Mapping[str, Any]) -> dict[str, str]:
    out = {}
    for name in sorted(arrays):
        value = np.ascontiguousarray(np.asarray(arrays[name]))
        out[name] = f"{value.dtype.str}{value.shape} {_digest(value.tobytes())}"
    return out


def _source_digest() -> str:
    """This package's Python source: a checkpoint of other code is another attack."""
    files = sorted(PACKAGE.rglob("*.py"))
    return _digest(b"".join(str(f.relative_to(PACKAGE)).encode() + b"\0" + f.read_bytes() for f in files))


def _version() -> str:
    try:
        return metadata.version("recon-audit")
    except metadata.PackageNotFoundError:
        return "unknown"


def fingerprint(
    model: Callable,
    theta: np.ndarray,
    shapes: Mapping[str, tuple[int, ...]],
    fixed: Mapping[str, Any],
    supports: Mapping[str, Constraint],
    n_points: int,
    seed: int,
    config: Any,
    at_once: int,
) -> dict[str, Any]:
    """What makes two runs the same attack, as JSON-able values (``theta``: the draws, flattened)."""
    device = jax.devices()[0]
    return {
        "model": _model_identity(model),
        "draws": _array_digest({"theta": theta})["theta"],
        "free": {k: list(v) for k, v in shapes.items()},
        "fixed": _array_digest(fixed),
        "support": {k: _constraint(v) for k, v in sorted(supports.items())},
        "n_points": int(n_points),
        "seed": int(seed),
        "config": {k: v for k, v in asdict(config).items() if k != "rounds_at_once"},  # alters no result
        "restarts_at_once": at_once,
        "version": _version(),
        "source": _source_digest(),
        "jax": jax.__version__,
        "device": f"{jax.default_backend()} {device.device_kind}",
    }


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint folder bound to one attack's fingerprint: its finished rounds, read and written."""

    folder: Path
    fingerprint: dict[str, Any]

    @classmethod
    def open(cls, folder: str | Path, fingerprint: dict[str, Any]) -> Checkpoint:
        """The folder's checkpoint, made if missing; refused when it belongs to another attack."""
        folder = Path(folder).expanduser()
        if folder.exists() and not folder.is_dir():
            raise ReconError(f"checkpoint {folder} is a file, not a folder; choose another path")
        record = folder / FINGERPRINT
        # The JSON round trip makes tuples lists, as in the file read back.
        expected = json.loads(json.dumps(fingerprint))
        if record.is_file():
            try:
                found = json.loads(record.read_text())
            except (OSError, ValueError) as err:
                raise ReconError(
                    f"checkpoint {folder}: cannot read {FINGERPRINT} ({err}); {_START_OVER}"
                ) from err
            if found != expected:
                differ = sorted(k for k in expected.keys() | found.keys() if found.get(k) != expected.get(k))
                raise ReconError(
                    f"checkpoint {folder} holds rounds of another attack (it differs in: "
                    f"{', '.join(differ)}); {_START_OVER}"
                )
        elif any(folder.glob("round-*.npz")):
            raise ReconError(f"checkpoint {folder} has rounds but no {FINGERPRINT}; {_START_OVER}")
        else:
            write_atomically(record, lambda path: path.write_text(json.dumps(expected, indent=1)))
        return cls(folder, expected)

    def load(self, index: int) -> dict[str, np.ndarray] | None:
        """Round ``index``'s arrays, or None when it has not finished."""
        path = self.folder / ROUND.format(index)
        if not path.is_file():
            return None
        try:
            with np.load(path) as stored:
                return {k: stored[k] for k in stored.files}
        except (OSError, ValueError) as err:
            raise ReconError(
                f"checkpoint {self.folder}: cannot read {path.name} ({err}); {_START_OVER}"
            ) from err

    def save(self, index: int, arrays: Mapping[str, np.ndarray]) -> None:
        def write(path: Path) -> None:
            with path.open("wb") as out:  # a file object: np.savez would append .npz to a path
                np.savez(out, **arrays)

        write_atomically(self.folder / ROUND.format(index), write)


_START_OVER = "start fresh (command line: --fresh) or choose another checkpoint folder (--checkpoint DIR)"


def remove(folder: str | Path, attacks: str | None = None) -> None:
    """Delete a checkpoint: its fingerprint, its rounds and any unfinished write; the folder goes too if
    nothing else is in it (files of other origin are left alone). ``attacks``: a pattern of subfolders
    that hold one attack's checkpoint each (an audit's ``draws-*``), deleted first."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        return
    for attack in folder.glob(attacks) if attacks else ():
        remove(attack)
    for pattern in (FINGERPRINT, "round-*.npz", f"{FINGERPRINT}.*.tmp", "round-*.npz.*.tmp"):
        for path in folder.glob(pattern):
            path.unlink()
    if not any(folder.iterdir()):
        folder.rmdir()
