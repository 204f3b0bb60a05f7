"""What a posterior file gives away besides the draws, and a copy with the draws alone.

Published posterior files often carry more than the posterior draws:

* ArviZ's ``observed_data`` and ``constant_data`` groups are the data set itself;
* ``log_likelihood`` holds log p(x_i | θ_s) for every row i and draw s: through the model, each row's
  values follow from a handful of draws (:func:`recover_from_loglik`);
* ``posterior_predictive`` and ``predictions`` are draws of the data: their per-row means are close
  to each row's fitted value; ``prior_predictive``'s row means follow the covariates;
* per-row generated quantities or deterministic sites (CmdStan's ``log_lik[i]``, ``y_rep[i]``,
  ``mu[i]``; a NumPyro ``deterministic("mu", ...)`` in the ``posterior`` group; per-row arrays in
  an ``.npz``) reveal each row through the model as well.

:func:`read_release` reads a draws file as it is (netCDF or zarr InferenceData / DataTree,
CmdStan CSV files, ``.npz``, posteriordb JSON), :func:`find_leaks` lists what it holds beyond the draws and
:func:`strip` writes a copy without it. Nothing here prints.

**Which variables are per row.** A variable is per row when one of its axes (after the draws axis,
for a sampled variable) has length N, the number of data rows, taken from (in this order):

1. the ``observed_data`` group, when the file has one (the common leading length of its variables);
2. ``n_rows`` (the command line's ``--data``, or ``strip --rows``);
3. the variables that are per row by their group (``log_likelihood``, ``posterior_predictive``)
   or by their name (``log_lik``, ``y_rep``, ``y_pred``, ``y_hat``, ``mu``, ...): the length their
   first axis after the draws shares most often;
4. the length that the first axis after the draws of at least two other vector variables shares
   (the model's parameters excluded, when they are known), the longest such length if several.

Without any of these, N is unknown: whole groups that are data or draws of the data are still
flagged, single variables are not (``strip --rows N`` says it).
"""

from __future__ import annotations

import dataclasses
import re
import warnings
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from bayes_recon.draws import from_stan_names, group_stan_names
from bayes_recon.precision import attack_numerics
from recon_core.errors import ReconError
from recon_core.jsonio import jsonable

if TYPE_CHECKING:
    from bayes_recon.pipeline import PosteriorProblem

Severity = Literal["high", "medium"]
Format = Literal["netcdf", "zarr", "cmdstan", "npz", "json"]
Kind = Literal["data", "log_likelihood", "predictive", "per_row"]

DATA_GROUPS = ("observed_data", "constant_data", "predictions_constant_data")
LOGLIK_GROUPS = ("log_likelihood",)
PREDICTIVE_GROUPS = {
    "posterior_predictive": "draws of the data (posterior predictive)",
    "predictions": "draws of the data at new inputs (predictions)",
    "prior_predictive": "draws of the data from the prior (prior predictive; their row means follow the "
    "covariates)",
}
KEPT_GROUPS = ("posterior", "sample_stats")  # what strip keeps of an InferenceData
ROWS_GROUPS = ("log_likelihood", "posterior_predictive")  # per row by their group (rule 3)
CSV_GROUP = "columns"  # CmdStan CSV, .npz and JSON files have no groups: their variables sit here
SAMPLER_GROUP = "sample_stats"
_LOGLIK_NAME = re.compile(r"^(log_?lik(elihood)?|loglik|ll)(_\w*)?$", re.IGNORECASE)
_ROW_NAME = re.compile(
    r"^(y_?(rep|pred|hat|new|sim|tilde|ppc)|mu|eta|yhat|yrep|fitted(_\w*)?|linpred)$", re.IGNORECASE
)
FIT_DRAWS = 40  # draws the least squares of a row's log-likelihood is fitted on (and as many held out)
RECOVERED_BELOW = 1e-3  # held-out residual, relative to the log-likelihood's spread over draws
EXACT_WITHIN = 1e-6  # a recovered value within this (relative; absolute below 1) counts as exact


@dataclass(frozen=True)
class Variable:
    """One array of a draws file: ``values`` is (S, ...) with the draws first when ``sampled``, else
    as stored (a data group's (N, ...))."""

    group: str
    name: str
    values: np.ndarray
    sampled: bool

    @property
    def label(self) -> str:
        return self.name if self.group == CSV_GROUP else f"{self.group}/{self.name}"

    @property
    def row_axes(self) -> tuple[int, ...]:
        """The lengths of the axes that can be rows: those after the draws axis."""
        return self.values.shape[1:] if self.sampled else self.values.shape

    def is_loglik(self) -> bool:
        return self.group in LOGLIK_GROUPS or bool(_LOGLIK_NAME.match(self.name))


@dataclass(frozen=True)
class Release:
    """A draws file as stored: its format and every variable of every group."""

    paths: tuple[Path, ...]
    format: Format
    variables: tuple[Variable, ...]

    def groups(self) -> list[str]:
        return list(dict.fromkeys(v.group for v in self.variables))


@dataclass(frozen=True)
class Finding:
    """One group or variable of a draws file that reveals rows of the data, and what it reveals."""

    group: str
    variable: str
    shape: tuple[int, ...]
    reveals: str
    severity: Severity
    kind: Kind
    rows_recovered: int | None = None
    max_error: float | None = None

    @property
    def label(self) -> str:
        return self.variable if self.group == CSV_GROUP else f"{self.group}/{self.variable}"

    def to_json(self) -> dict[str, Any]:
        return jsonable(
            {
                "group": self.group,
                "variable": self.variable,
                "shape": self.shape,
                "reveals": self.reveals,
                "severity": self.severity,
                "rows_recovered": self.rows_recovered,
                "max_error": self.max_error,
            }
        )


def read_release(paths: Sequence[str | Path]) -> Release:
    """Every variable of a draws file (netCDF, zarr, CmdStan CSV files, .npz, posteriordb JSON), chains
    joined."""
    files = tuple(Path(p).expanduser() for p in paths)
    missing = [str(f) for f in files if not f.exists()]
    if missing:
        raise ReconError(f"no file {', '.join(missing)}; give a .nc, .zarr, CmdStan .csv, .npz or .json file")
    kind = _format(files)
    if kind == "cmdstan":
        return Release(files, kind, tuple(_cmdstan_variables(files)))
    if len(files) > 1:
        raise ReconError(f"several files are read as CmdStan CSV files, one per chain; got {len(files)}")
    if kind == "npz":
        return Release(files, kind, tuple(_arrays(_npz(files[0]))))
    if kind == "json":
        return Release(files, kind, tuple(_arrays(_json_draws(files[0]))))
    return Release(files, kind, tuple(_tree_variables(files[0], kind)))


def _format(files: Sequence[Path]) -> Format:
    suffixes = {f.suffix.lower() for f in files}
    if suffixes == {".csv"}:
        return "cmdstan"
    if suffixes == {".npz"}:
        return "npz"
    if suffixes == {".json"}:
        return "json"
    if suffixes == {".zarr"}:
        return "zarr"
    if suffixes <= {".nc", ".nc4", ".netcdf"}:
        return "netcdf"
    raise ReconError(
        f"cannot tell the format of {', '.join(map(str, files))}; give ArviZ .nc or .zarr, CmdStan .csv "
        "file(s), a NumPy .npz or posteriordb .json"
    )


def _open_tree(file: Path, kind: str) -> Any:
    import xarray

    try:
        return xarray.open_datatree(file, engine="zarr" if kind == "zarr" else None)
    except ImportError as err:
        raise ReconError(f"reading {kind} needs {err.name}: pip install {err.name}") from None
    except (OSError, ValueError, KeyError) as err:
        raise ReconError(f"cannot read {file} as ArviZ {kind} ({err})") from None


def _tree_variables(file: Path, kind: str) -> list[Variable]:
    out = []
    with _open_tree(file, kind) as tree:
        for group in tree.children:
            for name, var in tree[group].to_dataset().data_vars.items():
                values = np.asarray(var.values)
                sampled = tuple(var.dims[:2]) == ("chain", "draw")
                if sampled:
                    values = values.reshape((-1, *values.shape[2:]))
                out.append(Variable(str(group), str(name), values, sampled))
    return out


def _cmdstan_variables(files: Sequence[Path]) -> list[Variable]:
    import pandas

    try:
        frame = pandas.concat([pandas.read_csv(f, comment="#") for f in files], ignore_index=True)
    except (ValueError, UnicodeDecodeError, pandas.errors.ParserError) as err:
        raise ReconError(f"cannot read {', '.join(map(str, files))} as CmdStan CSV ({err})") from None
    columns = {str(c): frame[c].to_numpy(dtype=float) for c in frame.columns}
    sampler = {k: v for k, v in columns.items() if k.endswith("__")}
    grouped = from_stan_names({k: v for k, v in columns.items() if k not in sampler}, "CmdStan columns")
    return [Variable(SAMPLER_GROUP, k, v, True) for k, v in sampler.items()] + [
        Variable(CSV_GROUP, k, v, True) for k, v in grouped.items()
    ]


def _npz(file: Path) -> dict[str, np.ndarray]:
    import zipfile

    try:
        with np.load(file, allow_pickle=False) as archive:
            return {k: np.asarray(archive[k]) for k in archive.files}
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as err:
        raise ReconError(f"{file} is not a NumPy .npz archive ({err}); save it with numpy.savez") from None


def _json_draws(file: Path) -> dict[str, np.ndarray]:
    """posteriordb's reference draws (a list of chains), or a JSON object {name: values}."""
    import json

    from bayes_recon.posteriordb import chains_to_draws

    try:
        content = json.loads(file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ReconError(f"{file} is not valid JSON ({err})") from None
    if isinstance(content, list):
        return group_stan_names(chains_to_draws(content, str(file)), f"draws in {file}")
    if not isinstance(content, dict):
        raise ReconError(f"{file} should hold a list of chains or a JSON object {{name: values}}")
    try:
        return group_stan_names({str(k): np.asarray(v, dtype=float) for k, v in content.items()})
    except (TypeError, ValueError) as err:
        raise ReconError(f"{file} has values that are not numbers ({err})") from None


def _arrays(arrays: Mapping[str, np.ndarray]) -> list[Variable]:
    """Arrays of one file with no groups (.npz, JSON): those whose leading length is the most common
    (the number of draws) are taken as draws."""
    lengths = Counter(len(v) for v in arrays.values() if v.ndim >= 1)
    draws = max(lengths, key=lambda n: (lengths[n], n)) if lengths else 0
    return [Variable(CSV_GROUP, k, v, v.ndim >= 1 and len(v) == draws) for k, v in arrays.items()]


def row_count(release: Release, n_rows: int | None = None, parameters: Collection[str] = ()) -> int | None:
    """N, the number of data rows, by the rule in the module's docstring (None when unknown)."""
    observed = {v.values.shape[0] for v in release.variables if v.group == "observed_data" and v.values.ndim}
    if len(observed) == 1:
        return observed.pop()
    if n_rows is not None:
        return n_rows
    vectors = [v for v in release.variables if v.row_axes and v.name not in parameters]
    by_role = [v for v in vectors if v.group in ROWS_GROUPS or v.is_loglik() or _ROW_NAME.match(v.name)]
    if by_role:
        lengths = Counter(v.row_axes[0] for v in by_role)
        return max(lengths, key=lambda n: (lengths[n], n))
    others = Counter(v.row_axes[0] for v in vectors if v.group not in (SAMPLER_GROUP, *DATA_GROUPS))
    shared = [n for n, count in others.items() if count >= 2 and n > 1]
    return max(shared) if shared else None


def find_leaks(
    release: Release, n_rows: int | None = None, parameters: Collection[str] = ()
) -> list[Finding]:
    """Every group or variable of ``release`` that reveals rows of the data, most severe first.

    ``n_rows``: the number of data rows when known (rule 2 of the module's docstring);
    ``parameters``: the model's latent sites, never per-row (rule 4).
    """
    n = row_count(release, n_rows, parameters)
    found = [f for v in release.variables if (f := _finding(v, n, parameters)) is not None]
    order = {"data": 0, "log_likelihood": 1, "predictive": 2, "per_row": 3}
    return sorted(found, key=lambda f: (f.severity != "high", order[f.kind]))


def _finding(v: Variable, n: int | None, parameters: Collection[str]) -> Finding | None:
    shape = tuple(int(d) for d in v.values.shape)
    per_row = n is not None and n in v.row_axes and v.name not in parameters
    rows = n if per_row else (v.row_axes[0] if v.row_axes else 0)
    draws = f" over {shape[0]} draws" if v.sampled else ""
    if v.group in DATA_GROUPS:
        if per_row or (v.group == "predictions_constant_data" and v.row_axes):
            what = (
                "the data itself" if v.group != "predictions_constant_data" else "inputs of the predictions"
            )
            severity: Severity = "high" if v.group != "predictions_constant_data" else "medium"
            return Finding(v.group, v.name, shape, f"{what}: {rows} rows of {v.name}", severity, "data")
        return Finding(
            v.group, v.name, shape, f"a constant of the data: {v.name}, shape {shape}", "medium", "data"
        )
    if v.group in PREDICTIVE_GROUPS:
        severity = "medium" if v.group in ("prior_predictive", "predictions") else "high"
        what = PREDICTIVE_GROUPS[v.group]
        return Finding(v.group, v.name, shape, f"{what} for {rows} rows{draws}", severity, "predictive")
    if v.group in LOGLIK_GROUPS or (per_row and v.is_loglik()):
        return Finding(
            v.group, v.name, shape, f"log p(x_i|θ) for {rows} rows{draws}", "high", "log_likelihood"
        )
    if per_row:
        what = f"a per-row quantity for {rows} rows{draws} (fitted values or another function of each row)"
        return Finding(v.group, v.name, shape, what, "high", "per_row")
    return None


def loglik_matrix(
    release: Release, findings: Sequence[Finding], n_rows: int
) -> tuple[np.ndarray | None, set[tuple[str, str]]]:
    """The released log p(x_i | θ_s), (S, N), and the (group, variable) pairs it was read from.

    The ``log_likelihood`` group's variables summed (one per observed site), else the first other
    log-likelihood variable (CmdStan's ``log_lik``, an older ArviZ's ``sample_stats/log_lik``: the
    same values again, so never added); each summed over its axes after the rows. None when the file
    holds none.
    """
    wanted = {(f.group, f.variable) for f in findings if f.kind == "log_likelihood"}
    candidates = [
        v for v in release.variables if (v.group, v.name) in wanted and v.sampled and n_rows in v.row_axes
    ]
    used = [v for v in candidates if v.group in LOGLIK_GROUPS] or candidates[:1]
    if not used:
        return None, set()
    matrices = [
        np.moveaxis(v.values, 1 + v.row_axes.index(n_rows), 1).reshape(len(v.values), n_rows, -1).sum(axis=2)
        for v in used
    ]
    if len({m.shape for m in matrices}) > 1:
        raise ReconError(
            f"the log-likelihood variables have different numbers of draws ({[len(m) for m in matrices]}); "
            "write them from one fit"
        )
    return sum(matrices[1:], matrices[0]), {(v.group, v.name) for v in used}


def file_leaks(paths: Sequence[str | Path], problem: PosteriorProblem) -> list[Finding]:
    """What the draws files of ``problem`` (the user's model, read from ``paths``) give away, with the
    rows recovered from a released log-likelihood through the model and, with the data, scored."""
    release = read_release(paths)
    truth = problem.truth
    given = None if truth is None else len(truth)
    parameters = set(problem.draws)
    findings = find_leaks(release, given, parameters)
    n = row_count(release, given, parameters)
    loglik, used = (None, set()) if n is None else loglik_matrix(release, findings, n)
    if loglik is None:
        return findings
    try:
        recovery = recover_from_loglik(
            problem.entry.model,
            problem.draws,
            loglik,
            problem.free,
            problem.fixed,
            problem.entry.support,
            truth.points if truth is not None and len(truth) == n else None,
        )
    except ReconError as err:  # the model's rows cannot be solved for: the finding stands, unscored
        note = f" (rows not recovered: {err})"

        def update(f: Finding) -> Finding:
            return dataclasses.replace(f, reveals=f.reveals + note)
    else:

        def update(f: Finding) -> Finding:
            return dataclasses.replace(
                f, rows_recovered=recovery.n_recovered, max_error=recovery.worst_error()
            )

    return [update(f) if (f.group, f.variable) in used else f for f in findings]


@dataclass(frozen=True)
class Recovery:
    """Rows recovered from a released log-likelihood, and how well, per row and against the truth."""

    rows: dict[str, np.ndarray]  # the free columns, one row per data row (rounded on integer supports)
    recovered: np.ndarray  # (N,) bool: the row's values reproduce its log-likelihood on held-out draws
    residual: np.ndarray  # (N,) held-out rms residual over the log-likelihood's spread over draws
    max_error: dict[str, float] | None  # per column, max |recovered − true|; None without the truth
    share_exact: float | None  # share of rows with every value within EXACT_WITHIN of the truth

    @property
    def n_recovered(self) -> int:
        return int(self.recovered.sum())

    def worst_error(self) -> float | None:
        return None if self.max_error is None else max(self.max_error.values())


@attack_numerics
def recover_from_loglik(
    model: Callable,
    draws: Mapping[str, np.ndarray],
    loglik: np.ndarray,
    free: Mapping[str, tuple[int, ...]],
    fixed: Mapping[str, Any] | None = None,
    support: Mapping[str, Any] | None = None,
    truth: Mapping[str, np.ndarray] | None = None,
    starts: int = 12,
    steps: int = 100,
    seed: int = 0,
) -> Recovery:
    """Each row's free columns x_i from its released log-likelihood log p(x_i | θ_s), (S, N).

    For every row, least squares over ``FIT_DRAWS`` draws of the model's own per-row
    log-likelihood (:meth:`~bayes_recon.weighting.WeightedModel.loglik_per_point`) against the
    released values, by Levenberg-Marquardt from ``starts`` random starts, all rows at once (rows
    are independent given θ); the best start per row is kept. A row counts as recovered when its
    values reproduce its log-likelihood on as many other draws (held out) to ``RECOVERED_BELOW`` of
    the log-likelihood's spread over draws. ``fixed``: the columns the adversary knows (per row:
    one value per data row); ``truth``: the true free columns, to score the recovered rows.
    """
    import jax
    import jax.numpy as jnp
    from numpyro.distributions import constraints

    from bayes_recon import pseudo
    from bayes_recon.modelcheck import free_shapes, prepare_release
    from bayes_recon.supports import RowBoundedSupport, observed_columns

    free = free_shapes(free)
    loglik = np.asarray(loglik, dtype=float)
    if loglik.ndim != 2:
        raise ReconError(f"the log-likelihood has shape {loglik.shape}; it should be (draws, rows)")
    n = loglik.shape[1]
    fixed = dict(fixed or {})
    # known per-row columns are checked with the free ones (the attack's checks take free columns
    # per row only), then held at their values
    known = {k: jnp.asarray(v) for k, v in fixed.items() if np.ndim(v) and len(v) == n}
    constants = {k: v for k, v in fixed.items() if k not in known}
    columns = {**free, **{k: v.shape[1:] for k, v in known.items()}}
    support = dict(support or {})
    while True:  # a response bounded by a known column (a binomial's trials) is solved for over the reals
        try:
            release = prepare_release(model, draws, columns, constants, support)
            break
        except RowBoundedSupport as err:
            if err.column in support:
                raise
            support[err.column] = constraints.real
    theta = np.asarray(release.theta)
    if loglik.shape[0] != len(theta):
        raise ReconError(
            f"the log-likelihood has {loglik.shape[0]} draws, but the posterior has {len(theta)}; they "
            "should come from the same fit, in the same order"
        )
    labels = [
        k
        for k, s in release.layout.supports.items()
        if k in free and pseudo.is_discrete(s) and not pseudo.is_binary(s)
    ]
    if labels:
        raise ReconError(
            f"the free column(s) {labels} are class labels (a Categorical or ordinal response): rows are "
            "recovered for real, positive, 0/1 and count columns only; leave them out of --free"
        )
    # 0/1 columns move over the reals: their log-likelihood formula is linear in them
    supports = {
        k: constraints.real if pseudo.is_binary(s) else s
        for k, s in release.layout.supports.items()
        if k in free
    }
    layout = pseudo.Layout(dict(free), supports)
    weighted = release.weighted_model
    none = jnp.zeros((n, 0))

    def residuals(u: jax.Array, thetas: jax.Array, target: jax.Array) -> jax.Array:
        data = {**known, **layout.assemble(u, none)}
        return jax.vmap(lambda t: weighted.loglik_per_point(t, data))(thetas) - target

    def solve(u: jax.Array, thetas: jax.Array, target: jax.Array) -> tuple[jax.Array, jax.Array]:
        return _levenberg_marquardt(lambda v: residuals(v, thetas, target), u, steps)

    rng = np.random.default_rng(seed)
    order = rng.permutation(len(theta))
    fit, held = order[:FIT_DRAWS], order[FIT_DRAWS : 2 * FIT_DRAWS]
    held = held if len(held) else fit
    # starts: real coordinates at magnitudes 1 to 1e3 (the data's units are unknown), others spread
    # over their support as the probe points are
    real = [supports[k] is constraints.real for k, w in layout.widths(False).items() for _ in range(w)]
    spread = np.where(real, np.geomspace(1.0, 1e3, starts)[:, None], 2.0)
    u0 = rng.normal(size=(starts, n, layout.dim)) * spread[:, None, :]
    fitted, cost = jax.jit(jax.vmap(solve, in_axes=(0, None, None)))(
        jnp.asarray(u0), jnp.asarray(theta[fit]), jnp.asarray(loglik[fit])
    )
    best = np.asarray(fitted)[np.argmin(np.asarray(cost), axis=0), np.arange(n)]  # cost: inf, never NaN
    check = np.asarray(
        jax.jit(residuals)(jnp.asarray(best), jnp.asarray(theta[held]), jnp.asarray(loglik[held]))
    )
    scale = loglik[held].std(axis=0) + 1e-12 * (1 + np.abs(loglik[held]).mean(axis=0))
    residual = np.sqrt(np.mean(check**2, axis=0)) / scale
    residual = np.where(np.isfinite(residual), residual, np.inf)
    observed = observed_columns(weighted.model, columns, weighted.fixed, release.layout.supports)
    integers = {k for k, s in observed.items() if s.is_discrete} | {c for c, *_ in weighted.counted}
    assembled = {k: np.asarray(v) for k, v in layout.assemble(jnp.asarray(best), none).items()}
    rows = {k: np.round(v) if k in integers else v for k, v in assembled.items()}
    max_error = share = None
    if truth is not None:
        true = {k: np.asarray(truth[k], dtype=float) for k in rows}
        errors = {k: np.abs(rows[k] - true[k]) for k in rows}
        max_error = {k: float(e.max()) for k, e in errors.items()}
        close = [
            (e <= EXACT_WITHIN * np.maximum(np.abs(true[k]), 1.0)).reshape(n, -1).all(axis=1)
            for k, e in errors.items()
        ]
        share = float(np.mean(np.all(close, axis=0)))
    return Recovery(rows, residual < RECOVERED_BELOW, residual, max_error, share)


def _levenberg_marquardt(residuals: Callable[[Any], Any], u: Any, steps: int) -> tuple[Any, Any]:
    """Minimise Σ_s r_s(u)² for every row of ``u`` (N, D) at once; rows must be independent (r: (k, N)).

    The Jacobian is block-diagonal: D forward-mode products give every row's (k, D) block. Each row
    keeps its own damping (Marquardt's, scaled by the diagonal of JᵀJ) and takes a step only where it
    lowers that row's cost. Returns the final u and each row's cost.
    """
    import jax
    import jax.numpy as jnp

    dim = u.shape[1]

    def cost(r: Any) -> Any:
        total = jnp.sum(r**2, axis=0)
        return jnp.where(jnp.isfinite(total), total, jnp.inf)

    def blocks(v: Any) -> tuple[Any, Any]:
        r = residuals(v)
        tangents = jax.vmap(lambda e: jax.jvp(residuals, (v,), (jnp.broadcast_to(e, v.shape),))[1])(
            jnp.eye(dim)
        )
        return r, tangents  # (k, N), (D, k, N)

    def step(carry: tuple[Any, Any, Any], _: None) -> tuple[tuple[Any, Any, Any], None]:
        v, damping, current = carry
        r, jac = blocks(v)
        normal = jnp.einsum("dkn,ekn->nde", jac, jac)
        gradient = jnp.einsum("dkn,kn->nd", jac, r)
        diagonal = jnp.diagonal(normal, axis1=1, axis2=2)
        floor = 1e-12 * jnp.max(diagonal, axis=1, keepdims=True) + 1e-300
        lifted = normal + jax.vmap(jnp.diag)(damping[:, None] * (diagonal + floor))
        delta = jnp.linalg.solve(lifted, -gradient[..., None])[..., 0]
        trial = v + jnp.where(jnp.isfinite(delta), delta, 0.0)
        new = cost(residuals(trial))
        better = new < current
        damping = jnp.clip(jnp.where(better, damping / 3, damping * 4), 1e-12, 1e12)
        return (jnp.where(better[:, None], trial, v), damping, jnp.where(better, new, current)), None

    start = (u, jnp.full(u.shape[0], 1e-3), cost(residuals(u)))
    (u, _, final), _ = jax.lax.scan(step, start, None, length=steps)
    return u, final


@dataclass(frozen=True)
class Stripped:
    """What :func:`strip` removed (whole groups, then variables as ``group/name``) and kept."""

    removed_groups: list[str]
    removed_variables: list[str]
    kept: list[str]


def strip(
    source: str | Path, target: str | Path, keep: Collection[str] = (), n_rows: int | None = None
) -> Stripped:
    """Write ``target``: ``source`` with the posterior draws alone.

    InferenceData (netCDF, zarr): the ``posterior`` group and ``sample_stats``, without their per-row
    variables; CmdStan CSV: the columns that are not per row (sampler columns included), the comment
    lines as they were; .npz: the arrays that are not per row. ``keep``: variable names kept even so;
    ``n_rows``: N when the file does not say (see the module's docstring).
    """
    source, target = Path(source).expanduser(), Path(target).expanduser()
    release = read_release([source])
    if release.format == "json":
        raise ReconError(
            f"strip writes .nc, .zarr, CmdStan .csv and .npz files, not JSON; convert {source} first "
            "(numpy.savez of its draws)"
        )
    if _format([target]) != release.format:
        raise ReconError(
            f"{target} is not a {release.format} file name as {source} is; give OUT the same suffix "
            f"({source.suffix})"
        )
    whole = [g for g in release.groups() if g not in (*KEPT_GROUPS, CSV_GROUP)]  # InferenceData groups
    if release.format in ("netcdf", "zarr") and "posterior" not in release.groups():
        raise ReconError(
            f"{source} has no 'posterior' group ({', '.join(release.groups()) or 'no groups'}): there are no "
            "draws to keep; give the InferenceData of the fit"
        )
    names = {v.name for v in release.variables if v.group not in whole}
    unknown = sorted(set(keep) - names)
    if unknown:
        raise ReconError(
            f"--keep {', '.join(unknown)}: no such variable among the draws of {source} (only "
            f"{' and '.join(KEPT_GROUPS)} are kept of an InferenceData); its variables: "
            f"{', '.join(sorted(names))}"
        )
    flagged = {(f.group, f.variable) for f in find_leaks(release, n_rows)}
    dropped = {
        (v.group, v.name)
        for v in release.variables
        if v.group not in whole and (v.group, v.name) in flagged and v.name not in keep
    }
    variables = [v.label for v in release.variables if (v.group, v.name) in dropped]
    kept = [v.label for v in release.variables if v.group not in whole and (v.group, v.name) not in dropped]
    if release.format == "cmdstan":
        _strip_csv(source, target, {name for group, name in dropped})
    elif release.format == "npz":
        with np.load(source, allow_pickle=False) as archive:
            np.savez(target, **{k: archive[k] for k in archive.files if (CSV_GROUP, k) not in dropped})
    else:
        _strip_tree(source, target, release.format, dropped)
    return Stripped(whole, variables, kept)


def _strip_csv(source: Path, target: Path, dropped: set[str]) -> None:
    """The CmdStan CSV without the columns of the ``dropped`` variables; comment lines kept."""
    lines = source.read_text(encoding="utf-8").splitlines()
    keep: list[int] | None = None
    out = []
    for line in lines:
        if line.startswith("#") or not line.strip():
            out.append(line)
            continue
        cells = line.split(",")
        if keep is None:
            keep = [
                i for i, name in enumerate(cells) if re.split(r"[.\[]", name, maxsplit=1)[0] not in dropped
            ]
        out.append(",".join(cells[i] for i in keep))
    target.write_text("\n".join(out) + "\n", encoding="utf-8")


def _strip_tree(source: Path, target: Path, kind: str, dropped: set[tuple[str, str]]) -> None:
    import xarray

    with _open_tree(source, kind) as tree:
        parts = {
            f"/{group}": tree[group].to_dataset().drop_vars([n for g, n in dropped if g == group]).load()
            for group in tree.children
            if group in KEPT_GROUPS  # every other group goes whole
        }
        stripped = xarray.DataTree.from_dict({"/": tree.to_dataset().load(), **parts})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if kind == "zarr":
            stripped.to_zarr(target, mode="w-")
        else:
            stripped.to_netcdf(target)
