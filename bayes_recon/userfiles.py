"""What ``bayes-recon --model FILE.py:NAME`` reads: the user's NumPyro model, draws and data files.

:func:`load_model` runs the user's Python file, as ``python FILE.py`` would: it is the user's own
code, so only pass files you trust. Draws: ArviZ netCDF (``.nc``) or zarr (``.zarr``), CmdStan
CSV files (one per chain; ``beta.1`` or ``beta[1]`` columns), NumPy ``.npz`` ({site or Stan name:
(S, ...) array}) or posteriordb JSON (a list of chains). Data: CSV (one column per data column,
``X.1``/``X[1]`` for the coordinates of a column with a shape), JSON (posteriordb's layout:
{column: list}) or ``.npz``. Every mistake is a :class:`ReconError` naming the file and the fix.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib.util
import inspect
import json
import re
import sys
import traceback
import warnings
import zipfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpyro.distributions.constraints import Constraint

from bayes_recon.draws import as_draws, group_stan_names
from bayes_recon.modelcheck import check_data_support, check_free, prepare_release
from bayes_recon.models import Entry
from bayes_recon.pipeline import PosteriorProblem
from bayes_recon.posteriordb import chains_to_draws, load_posterior
from bayes_recon.supports import constraint_named
from recon_core.errors import ReconError
from recon_core.measure import WeightedMeasure

DRAWS_SUFFIXES = (".nc", ".nc4", ".netcdf", ".zarr", ".csv", ".npz", ".json")
DRAWS_FORMATS = ".nc (ArviZ netCDF), .zarr (ArviZ zarr), .csv (CmdStan), .npz (NumPy) or .json (posteriordb)"
DATA_FORMATS = ".csv, .json (posteriordb's {column: list}) or .npz"
_FREE = re.compile(r"^(?P<name>[A-Za-z_]\w*)(:(?P<shape>[1-9][0-9]*(x[1-9][0-9]*)*))?$")


def user_problem(
    model: str,
    draws: Sequence[str],
    free: str,
    data: str | None = None,
    fixed: Sequence[str] = (),
    support: Sequence[str] = (),
    database: str | Path | None = None,
) -> PosteriorProblem:
    """The problem ``--model FILE.py:NAME --draws ... --free ...`` poses, every file read and checked.

    ``draws``: files, or one posteriordb posterior name (its reference draws, and its data unless
    ``data`` is given). ``fixed``: column names taken from the data and passed to the model as they
    are; ``support``: "COLUMN=CONSTRAINT" items. With data, the free columns' shapes are the data's
    and the data become the truth the audit scores against.
    """
    function = load_model(model)
    wanted = parse_free(free)
    supports = parse_support(support)
    fixed_names = [n.strip() for item in fixed for n in item.split(",") if n.strip()]
    check_free(function, list(wanted), dict.fromkeys(fixed_names))
    not_free = sorted(set(supports) - set(wanted))
    if not_free:
        raise ReconError(f"--support names {not_free}, which are not --free columns ({', '.join(wanted)})")
    columns = None if data is None else read_data(data)
    root = None
    if _is_posterior_name(draws):
        posterior = load_posterior(draws[0], database)
        release, root = posterior.draws, posterior.database
        columns = posterior.data if columns is None else columns
    else:
        release = read_draws(draws)
    if fixed_names and columns is None:
        raise ReconError(
            f"--fixed {','.join(fixed_names)}: the known columns are read from --data; pass --data"
        )
    absent = [n for n in fixed_names if columns is not None and n not in columns]
    if absent:
        raise ReconError(
            f"--fixed {absent}: no such column in the data; its columns: {', '.join(sorted(columns or {}))}"
        )
    known = {n: np.asarray(columns[n]) for n in fixed_names} if columns is not None else {}
    _check_finite({n: v for n, v in known.items() if np.issubdtype(v.dtype, np.number)})
    shapes = free_shapes_in_data(wanted, columns)
    name = f"{Path(model.rpartition(':')[0]).name}:{model.rpartition(':')[2]}"
    truth = None
    if columns is not None:
        points = _truth_columns(columns, shapes)
        check_data_support(function, points, known, supports)
        truth = WeightedMeasure.empirical(points, posterior=name)
    checked = prepare_release(function, release, shapes, known, supports).draws  # refused here, not mid-run
    entry = Entry(name, function, tuple(shapes), supports, tuple(fixed_names))
    return PosteriorProblem(name, entry, checked, shapes, known, truth, root)


def _is_posterior_name(draws: Sequence[str]) -> bool:
    """One argument that names no file and has no file's suffix: a posteriordb posterior."""
    (first, *rest) = draws
    path = Path(first)
    return not rest and not path.exists() and path.suffix.lower() not in DRAWS_SUFFIXES and "/" not in first


def _truth_columns(
    columns: Mapping[str, np.ndarray], shapes: Mapping[str, tuple[int, ...]]
) -> dict[str, np.ndarray]:
    """The free columns of the data as floats, one row per data point, all finite."""
    try:
        points = {k: np.asarray(columns[k], dtype=float) for k in shapes}
    except (TypeError, ValueError) as err:
        raise ReconError(f"--data: the free columns must hold numbers ({err})") from None
    rows = {k: len(v) for k, v in points.items()}
    if len(set(rows.values())) != 1:
        raise ReconError(
            f"--data: the free columns have different numbers of rows {rows}; one row per data point"
        )
    if 0 in rows.values():
        raise ReconError("--data holds no rows; the audit needs the data set the draws were fitted to")
    _check_finite(points)
    return points


def _check_finite(columns: Mapping[str, np.ndarray]) -> None:
    for k, v in columns.items():
        bad = np.argwhere(~np.isfinite(v))
        if len(bad):
            raise ReconError(
                f"--data: column {k!r} has NaN or inf (first in row {bad[0][0]}); drop or fill those rows"
            )


def load_model(spec: str) -> Callable:
    """The function NAME defined in FILE.py, for ``spec`` = "FILE.py:NAME"; runs the file."""
    path, colon, name = spec.rpartition(":")
    if not colon or not path or not name.isidentifier():
        raise ReconError(f"--model {spec!r}: expected FILE.py:NAME, e.g. my_model.py:model")
    file = Path(path).expanduser()
    if not file.is_file():
        raise ReconError(f"--model: no file {file}; give the path of the Python file defining {name}")
    module_name = f"bayes_recon_user_model_{abs(hash(str(file.resolve())))}"
    module_spec = importlib.util.spec_from_file_location(module_name, file)
    if module_spec is None or module_spec.loader is None:
        raise ReconError(f"--model: cannot load {file} as Python; give a .py file")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_name] = module  # dataclasses and pickling in the file look themselves up here
    try:
        with _on_path(file.parent):  # the file may import its neighbours
            module_spec.loader.exec_module(module)
    except SyntaxError as err:
        del sys.modules[module_name]
        raise ReconError(f"--model: {file} line {err.lineno}: syntax error: {err.msg}") from None
    except Exception as err:
        del sys.modules[module_name]
        frames = [f for f in traceback.extract_tb(err.__traceback__) if Path(f.filename) == file]
        where = f" line {frames[-1].lineno}" if frames else ""
        raise ReconError(
            f"--model: running {file} failed at{where}: {type(err).__name__}: {err}; "
            f"check that `python {file}` runs"
        ) from None
    found = getattr(module, name, None)
    if found is None:
        functions = sorted(
            k for k, v in vars(module).items() if inspect.isfunction(v) and not k.startswith("_")
        )
        close = difflib.get_close_matches(name, functions, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ReconError(
            f"--model: {file} defines no {name!r}.{hint} Its functions: {', '.join(functions) or 'none'}"
        )
    if not callable(found):
        raise ReconError(f"--model: {name} in {file} is a {type(found).__name__}, not a model function")
    return found


@contextlib.contextmanager
def _on_path(folder: Path) -> Iterator[None]:
    sys.path.insert(0, str(folder))
    try:
        yield
    finally:
        sys.path.remove(str(folder))


def read_draws(paths: Sequence[str]) -> dict[str, np.ndarray]:
    """Posterior draws from files, as {site or Stan name: (S, ...)} with chains joined."""
    files = [Path(p).expanduser() for p in paths]
    for file in files:
        if not file.exists():
            raise ReconError(
                f"--draws: no file {file}; give {DRAWS_FORMATS}, or a posteriordb posterior name"
            )
    suffixes = {f.suffix.lower() for f in files}
    if len(files) > 1 and suffixes != {".csv"}:
        raise ReconError(
            "--draws: several files are read as CmdStan CSV files, one per chain; "
            f"got {', '.join(map(str, files))}"
        )
    file = files[0]
    suffix = file.suffix.lower()
    if suffix == ".csv":
        return _cmdstan(files)
    if suffix in (".nc", ".nc4", ".netcdf", ".zarr"):
        return _datatree(file, "zarr" if suffix == ".zarr" else None)
    if suffix == ".npz":
        return as_draws(_npz(file, "--draws"))
    if suffix == ".json":
        content = _json(file, "--draws")
        if isinstance(content, list):
            return as_draws(chains_to_draws(content, f"--draws {file}"))
        return as_draws(_columns(content, file, "--draws"))
    raise ReconError(f"--draws: cannot tell the format of {file}; give {DRAWS_FORMATS}")


def _cmdstan(files: Sequence[Path]) -> dict[str, np.ndarray]:
    import arviz

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            inference = arviz.from_cmdstan([str(f) for f in files])
    except Exception as err:  # arviz raises what pandas and its own parser raise
        raise ReconError(
            f"--draws: cannot read {', '.join(map(str, files))} as CmdStan CSV ({err})"
        ) from None
    if "posterior" not in inference.groups():
        raise ReconError(
            f"--draws: {', '.join(map(str, files))} hold no draws (a CmdStan CSV has a header line of "
            "parameter names, then one line per draw)"
        )
    return as_draws(inference)


def _datatree(file: Path, engine: str | None) -> dict[str, np.ndarray]:
    import xarray

    kind = "zarr" if engine else "netCDF"
    try:
        with xarray.open_datatree(file, engine=engine) as tree:
            if "posterior" not in tree.children:
                raise ReconError(
                    f"--draws: {file} has no 'posterior' group ({sorted(tree.children) or 'no groups'}); "
                    f"write it with arviz: InferenceData.to_{'zarr' if engine else 'netcdf'}"
                )
            return as_draws(tree)
    except ImportError as err:
        raise ReconError(f"--draws: reading {kind} needs {err.name}: pip install {err.name}") from None
    except (OSError, ValueError, KeyError) as err:
        raise ReconError(f"--draws: cannot read {file} as ArviZ {kind} ({err})") from None


def _npz(file: Path, option: str) -> dict[str, np.ndarray]:
    try:
        with np.load(file, allow_pickle=False) as archive:
            return {k: archive[k] for k in archive.files}
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as err:
        raise ReconError(
            f"{option}: {file} is not a NumPy .npz archive ({err}); save it with numpy.savez"
        ) from None


def _json(file: Path, option: str) -> Any:
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ReconError(f"{option}: {file} is not valid JSON ({err})") from None


def _columns(content: Any, file: Path, option: str) -> dict[str, np.ndarray]:
    if not isinstance(content, dict):
        raise ReconError(f"{option}: {file} should hold a JSON object {{name: list of values}}")
    try:
        return {str(k): _numbers(v) for k, v in content.items()}
    except (TypeError, ValueError) as err:
        raise ReconError(f"{option}: {file} has values that are not numbers ({err})") from None


def _numbers(values: Any) -> np.ndarray:
    """A data column as the file wrote it: whole numbers keep their integer type (a group index given as
    --fixed must index the model's vector: alpha[g] refuses floats), everything else is float."""
    array = np.asarray(values)
    return array if array.dtype.kind in "iu" else array.astype(float)


def read_data(path: str) -> dict[str, np.ndarray]:
    """A data set as {column: (N, ...)} (and scalars, as posteriordb's JSON holds N)."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise ReconError(f"--data: no file {file}; give {DATA_FORMATS}")
    suffix = file.suffix.lower()
    if suffix == ".csv":
        import pandas

        try:
            frame = pandas.read_csv(file)
        except (ValueError, UnicodeDecodeError, pandas.errors.ParserError) as err:
            raise ReconError(f"--data: cannot read {file} as CSV ({err})") from None
        text = [c for c in frame.columns if not pandas.api.types.is_numeric_dtype(frame[c])]
        if text:
            raise ReconError(f"--data: column(s) {text} of {file} are not numbers; code them as numbers")
        columns = {str(c): _numbers(frame[c].to_numpy()) for c in frame.columns}
        return group_stan_names(columns, f"data in {file}")
    if suffix == ".json":
        return _columns(_json(file, "--data"), file, "--data")
    if suffix == ".npz":
        return {k: _numbers(v) for k, v in _npz(file, "--data").items()}
    raise ReconError(f"--data: cannot tell the format of {file}; give {DATA_FORMATS}")


def parse_free(text: str) -> dict[str, tuple[int, ...] | None]:
    """ "x,y,X:3" → {"x": None, "y": None, "X": (3,)}; None: the shape comes from the data, else ()."""
    out: dict[str, tuple[int, ...] | None] = {}
    for part in (p.strip() for p in text.split(",")):
        match = _FREE.match(part)
        if match is None:
            raise ReconError(
                f"--free: cannot read {part!r}; give column names, each optionally with its shape per "
                "data point, e.g. --free x,y or --free X:3,y"
            )
        shape = match["shape"]
        out[match["name"]] = None if shape is None else tuple(int(d) for d in shape.split("x"))
    return out


def parse_support(items: Sequence[str]) -> dict[str, Constraint]:
    """["y=positive", "x=interval(0,200)"] → {"y": positive, "x": interval(0, 200)} (NumPyro constraints)."""
    out = {}
    for item in items:
        column, equals, name = (s.strip() for s in item.partition("="))
        if not equals or not column or not name:
            raise ReconError(f"--support {item!r}: expected COLUMN=CONSTRAINT, e.g. --support y=positive")
        if "," in name and "=" in name:
            raise ReconError(
                f"--support {item!r}: one column per --support; repeat the flag for each, e.g. "
                "--support x=positive --support y=unit_interval"
            )
        try:
            out[column] = constraint_named(name)
        except ReconError as err:
            raise ReconError(f"--support {item!r}: {err}") from None
    return out


def free_shapes_in_data(
    free: Mapping[str, tuple[int, ...] | None], data: Mapping[str, np.ndarray] | None
) -> dict[str, tuple[int, ...]]:
    """Each free column's shape per data point: the data's, checked against the one given with --free."""
    shapes = {}
    for name, given in free.items():
        if data is None:
            shapes[name] = given or ()
            continue
        if name not in data:
            raise ReconError(
                f"the data have no column {name!r} for the free column {name!r}; their columns: "
                f"{', '.join(sorted(data))}"
            )
        found = np.shape(data[name])[1:]
        if np.ndim(data[name]) == 0:
            raise ReconError(
                f"--data: the free column {name!r} is a single number, not one value per data point"
            )
        if given is not None and tuple(given) != found:
            raise ReconError(
                f"--free {name}:{'x'.join(map(str, given))}, but --data holds {name} with shape "
                f"{found} per data point; give --free {name} (the shape is read from the data)"
            )
        shapes[name] = found
    return shapes
