"""posteriordb access: a user's database (path or POSTERIOR_DB_PATH) or the embedded default.

The embedded default is a subset of posteriordb (the kidiq posteriors, BSD-3, see
``data/LICENCE-posteriordb.md``) so that the tool runs with nothing downloaded.
"""

from __future__ import annotations

import difflib
import json
import os
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
    """Posterior ``name``: its data and reference draws, every file checked to lie inside the database."""
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
    what = f"posterior {name!r}"
    info_file = root / "posteriors" / f"{name}.json"
    info = _read_object(info_file, what)
    _name_field(info, "model_name", info_file)  # not read here, but a path in it is a corrupt file
    data_info_file = root / "data" / "info" / f"{_name_field(info, 'data_name', info_file)}.info.json"
    data_file = _inside(root, _read_object(data_info_file, what).get("data_file"), data_info_file)
    draws_file = root / "reference_posteriors" / "draws" / "draws" / f"{name}.json.zip"
    if not draws_file.exists():
        raise ReconError(
            f"posterior {name!r} has no reference draws in {root}; the attack needs posterior draws. "
            "Sample the model yourself (e.g. NumPyro MCMC) and pass the draws with --model and --draws."
        )
    draws = chains_to_draws(_read_zipped_json(draws_file, what), f"{what}: {draws_file}")
    raw = _read_zipped_json(data_file.with_name(data_file.name + ".zip"), what)
    if not isinstance(raw, dict):
        raise ReconError(f"{what}: {data_file}.zip should hold a JSON object of columns; re-download it")
    data = {k: np.asarray(v) for k, v in raw.items()}
    return Posterior(name, data, draws, root)


def chains_to_draws(chains: Any, source: str) -> dict[str, np.ndarray]:
    """posteriordb's reference draws, a list of chains each {name: [values]}, as {name: (S,)}; a chain's
    arrays of values per draw ({name: (draws, ...)}) are concatenated along the draws."""
    if not isinstance(chains, list) or not all(isinstance(c, Mapping) for c in chains):
        raise ReconError(
            f"{source}: expected a list of chains, each a mapping (a JSON object) of parameter → draws"
        )
    if not chains:
        raise ReconError(f"{source} holds no chains; the attack needs posterior draws (hundreds or more)")
    names = set(chains[0])
    if any(set(c) != names for c in chains):
        raise ReconError(f"{source}: the chains name different parameters; every chain needs the same")
    try:
        arrays = [{k: np.atleast_1d(np.asarray(c[k], dtype=float)) for k in chains[0]} for c in chains]
    except (TypeError, ValueError) as err:
        raise ReconError(f"{source}: the draws are not all numbers ({err})") from None
    if not any(v.size for v in arrays[0].values()):
        raise ReconError(f"{source} holds no draws; the attack needs posterior draws (hundreds or more)")
    for k in chains[0]:
        shapes = sorted({a[k].shape[1:] for a in arrays})
        if len(shapes) > 1:
            raise ReconError(f"{source}: the chains' draws of {k!r} differ in shape per draw: {shapes}")
    return {k: np.concatenate([a[k] for a in arrays]) for k in chains[0]}


def _inside(root: Path, relative: Any, source: Path) -> Path:
    """``root / relative`` (a data file's path, as posteriordb's data info names it), refused unless
    it stays inside ``root``."""
    if not isinstance(relative, str) or not relative:
        raise ReconError(f"{source}: the field 'data_file' must be a path in the database, got {relative!r}")
    path = (root / relative).resolve()
    if not path.is_relative_to(root.resolve()):
        raise ReconError(
            f"{source}: the field 'data_file' = {relative!r} points outside the database {root}; "
            "a posteriordb database names its files inside itself. Fix or remove that file."
        )
    return path


def _name_field(info: dict[str, Any], field: str, source: Path) -> str:
    value = info.get(field)
    if not isinstance(value, str) or not value or "/" in value or "\\" in value or value in (".", ".."):
        raise ReconError(
            f"{source}: the field {field!r} = {value!r} is not a plain name; a posteriordb posterior "
            "names its model and data by name (e.g. 'kidiq'), not by path. Fix or remove that file."
        )
    return value


def _read_object(path: Path, what: str) -> dict[str, Any]:
    content = _read_json(path, what)
    if not isinstance(content, dict):
        raise ReconError(f"{what}: {path} should hold a JSON object; fix or re-download it")
    return content


def _read_json(path: Path, what: str) -> Any:
    try:
        with open(path, encoding="utf-8") as file:
            return json.load(file)
    except FileNotFoundError:
        raise ReconError(f"{what}: no file {path}; is the database complete?") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ReconError(f"{what}: {path} is not valid JSON ({err}); fix or re-download that file") from None


def _read_zipped_json(path: Path, what: str) -> Any:
    """The one JSON file inside the zip archive ``path`` (how posteriordb stores data and draws)."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            if len(names) != 1:
                raise ReconError(
                    f"{what}: {path} should hold one JSON file, it holds {len(names)}; re-download it"
                )
            with archive.open(names[0]) as file:
                return json.load(file)
    except FileNotFoundError:
        raise ReconError(f"{what}: no file {path}; is the database complete?") from None
    except zipfile.BadZipFile:
        raise ReconError(f"{what}: {path} is not a zip archive; re-download that file") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ReconError(f"{what}: {path} does not hold valid JSON ({err}); re-download it") from None
