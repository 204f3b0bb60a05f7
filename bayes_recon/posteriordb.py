"""posteriordb access: a user's database (path or POSTERIOR_DB_PATH) or the embedded default.

The embedded default is a subset of posteriordb (the kidiq posteriors, BSD-3, see
``data/LICENCE-posteriordb.md``) so that the tool runs with nothing downloaded.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from recon_core.errors import ReconError

EMBEDDED = Path(__file__).parent / "data" / "posterior_database"
ENV_VAR = "POSTERIOR_DB_PATH"


@dataclass(frozen=True)
class Posterior:
    """A posteriordb posterior: its data (as posteriordb stores it) and its reference draws by Stan name."""

    name: str
    data: dict[str, np.ndarray]
    draws: dict[str, np.ndarray]
    database: Path


def database_path(path: str | Path | None = None) -> Path:
    """The database to read: ``path``, else $POSTERIOR_DB_PATH, else the embedded default."""
    chosen = path or os.environ.get(ENV_VAR)
    if not chosen:
        return EMBEDDED
    root = Path(chosen).expanduser()
    if (root / "posterior_database").is_dir():  # the root of a posteriordb clone
        root = root / "posterior_database"
    if not (root / "posteriors").is_dir():
        raise ReconError(
            f"{root} is not a posteriordb database (no 'posteriors' folder). Give the path of the "
            "clone's posterior_database folder, e.g. ~/posteriordb/posterior_database."
        )
    return root


def load_posterior(name: str, path: str | Path | None = None) -> Posterior:
    from posteriordb import PosteriorDatabase

    root = database_path(path)
    names = sorted(p.stem for p in (root / "posteriors").glob("*.json"))
    if name not in names:
        close = difflib.get_close_matches(name, names, n=3, cutoff=0.4)
        hint = f" Close names: {', '.join(close)}." if close else ""
        where = "the embedded default database" if root == EMBEDDED else str(root)
        raise ReconError(
            f"no posterior {name!r} in {where}.{hint} Available: {', '.join(names)}. "
            f"Point --posteriordb (or ${ENV_VAR}) at a full posteriordb clone for others."
        )
    posterior = PosteriorDatabase(str(root)).posterior(name)
    draws_file = root / "reference_posteriors" / "draws" / "draws" / f"{name}.json.zip"
    if not draws_file.exists():
        raise ReconError(
            f"posterior {name!r} has no reference draws in {root}; the attack needs posterior draws. "
            "Sample the model yourself (e.g. NumPyro MCMC) and pass the draws from Python."
        )
    chains = posterior.reference_draws()
    draws = {k: np.concatenate([np.asarray(c[k], dtype=float) for c in chains]) for k in chains[0]}
    data = {k: np.asarray(v) for k, v in posterior.data.values().items()}
    return Posterior(name, data, draws, root)
