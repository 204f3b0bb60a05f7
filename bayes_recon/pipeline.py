"""Audit one posteriordb posterior: load it, attack it with its registered model, compare with its data.

``attack_posterior`` is what ``bayes-recon reconstruct`` runs; it prints nothing. The result
holds the reconstruction and, when the database ships the posterior's data set, the true data
as a unit-weight measure, so that recovered and true statistics sit side by side in ``rows()``.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import numpy as np
from numpyro.distributions.constraints import Constraint

from bayes_recon.kernel import model_features
from bayes_recon.modelcheck import rows_as_units
from bayes_recon.models import Entry, lookup
from bayes_recon.posteriordb import database_path, load_posterior
from bayes_recon.precision import attack_numerics
from bayes_recon.pseudo import is_binary
from bayes_recon.reconstruct import ReconConfig, Reconstruction, reconstruct
from bayes_recon.supports import observed_columns
from recon_core.errors import ReconError
from recon_core.jsonio import jsonable
from recon_core.measure import WeightedMeasure

Progress = Callable[[int, int], None]
MAX_SEED = 2**62  # the attack derives seeds seed + 1, seed + 2, ...; JAX keys take 64-bit integers


@dataclass(frozen=True)
class PosteriorAttack:
    """A posterior's reconstruction next to its true data (``truth`` is None when the database has none)."""

    name: str
    entry: Entry
    reconstruction: Reconstruction
    truth: WeightedMeasure | None
    seed: int = 0
    database: Path | None = None
    # the free columns that are an observed site's values, with their supports (rows() adds their sums)
    responses: Mapping[str, Constraint] = dataclasses.field(default_factory=dict)

    @property
    def measure(self) -> WeightedMeasure:
        return self.reconstruction.measure

    def rows(self) -> list[dict[str, Any]]:
        """Total mass against the true N, the weighted mean and variance of every free column, then every
        response's sum and its sums of products with each column, Σ y and Σ y·x: where N and the means
        are left open (a Poisson or logistic regression), these, which a canonical link's likelihood
        sees, may still leak.

        Each row: ``statistic`` ("N (total mass)", "mean", "var", "sum"), ``column`` (``name`` or
        ``name[i]`` for a flattened multi-dimensional column, ``y·x`` for a product; None for the mass),
        ``recovered``, ``true`` and ``relative_error`` (|recovered − true| / |true|, for a sum over the
        true Σ_i |f(x_i)|, which is |true| where f keeps one sign; None without truth). A binary
        response's y·y is y and is left out; a class label's sums are over its codes.
        """
        measure = self.measure
        true_n = None if self.truth is None else self.truth.total_mass()
        rows = [_row("N (total mass)", None, measure.total_mass(), true_n)]
        for name in self.entry.free:
            recovered_mean, recovered_var = _flat(measure.mean(name)), _flat(measure.var(name))
            if self.truth is None:
                true_mean = true_var = [None] * len(recovered_mean)
            else:
                true_mean, true_var = _flat(self.truth.mean(name)), _flat(self.truth.var(name))
            labels = (
                [name] if len(recovered_mean) == 1 else [f"{name}[{i}]" for i in range(len(recovered_mean))]
            )
            for label, rm, tm in zip(labels, recovered_mean, true_mean, strict=True):
                rows.append(_row("mean", label, rm, tm))
            for label, rv, tv in zip(labels, recovered_var, true_var, strict=True):
                rows.append(_row("var", label, rv, tv))
        return rows + self._sum_rows()

    def _sum_rows(self) -> list[dict[str, Any]]:
        recovered = self.measure.flat_columns(self.entry.free)
        true = None if self.truth is None else self.truth.flat_columns(self.entry.free)
        responses = [label for label in recovered if label.partition("[")[0] in self.responses]
        rows, done = [], set()
        for response in responses:
            binary = is_binary(self.responses[response.partition("[")[0]])
            for other in [None, *recovered]:
                if frozenset((response, other)) in done or (binary and other == response):
                    continue  # y·z taken as z·y already; a binary y·y is y
                done.add(frozenset((response, other)))
                label = response if other is None else f"{response}·{other}"
                found = self.measure.weights @ _product(recovered, response, other)
                if true is None:
                    rows.append(_row("sum", label, found, None))
                else:
                    values = _product(true, response, other)
                    weights = self.truth.weights  # not all 1 where rows were weighed as units
                    rows.append(_row("sum", label, found, weights @ values, weights @ np.abs(values)))
        return rows

    def relative_mmd(self, max_draws: int = 1000) -> float | None:
        """MMD of the true and reconstructed measures under the model-induced kernel, over the truth's norm.

        Zero means the release cannot tell the reconstruction from the true data at all (see
        :mod:`bayes_recon.kernel`); None without truth.
        """
        if self.truth is None:
            return None
        features = model_features(self.reconstruction.setup, self.truth.points, max_draws)
        recovered = model_features(self.reconstruction.setup, self.measure.points, max_draws)
        gap = self.truth.weights @ features - self.measure.weights @ recovered
        return float(np.linalg.norm(gap) / np.linalg.norm(self.truth.weights @ features))

    def to_json(self) -> dict[str, Any]:
        """A JSON-able summary: posterior, M, seed, objective, seconds (and compiling), config and rows."""
        recon = self.reconstruction
        return {
            "posterior": self.name,
            "database": None if self.database is None else str(self.database),
            "points": len(self.measure),
            "seed": self.seed,
            "true_n": None if self.truth is None else jsonable(self.truth.total_mass()),
            "objective": jsonable(recon.objective),
            "seconds": jsonable(recon.seconds),
            "compile_seconds": jsonable(recon.compile_seconds),
            "config": jsonable(dataclasses.asdict(recon.config)),
            "relative_mmd_model_kernel": jsonable(self.relative_mmd()),
            "self_check": jsonable(recon.self_check.to_json()),
            "restart_spread": jsonable(recon.restart_spread()),
            "standard_errors": jsonable(recon.standard_errors),
            "shortfall": jsonable(recon.shortfall),
            "remaining_gain": jsonable(recon.remaining_gain),
            "bootstrap_spread": jsonable(recon.bootstrap_spread()),
            "unseen_mass": jsonable(recon.unseen_mass),
            "responses": list(self.responses),
            "converged": recon.converged(),
            "rows": [{k: jsonable(v) for k, v in row.items()} for row in self.rows()],
        }


@dataclass(frozen=True)
class PosteriorProblem:
    """A posterior as the attack sees it: its model entry, draws, free shapes and known columns.

    A registered posteriordb posterior (:func:`load_problem`) or a user's model and files
    (:func:`bayes_recon.userfiles.user_problem`). ``truth`` is the data set as a unit-weight
    measure, None without data; ``database`` the posteriordb folder read, if any.
    """

    name: str
    entry: Entry
    draws: dict[str, np.ndarray]
    free: Any  # {name: trailing shape} with data, the free names without
    fixed: dict[str, np.ndarray]
    truth: WeightedMeasure | None
    database: Path | None


Source = str | PosteriorProblem  # a registered posterior's name, or a problem already read


def load_problem(name: Source, database: str | Path | None = None) -> PosteriorProblem:
    """Read posterior ``name`` and its data from ``database`` (see :func:`attack_posterior`); a
    :class:`PosteriorProblem` is returned as it is."""
    if isinstance(name, PosteriorProblem):
        return name
    root = database_path(database)  # a bad --posteriordb is reported before anything else
    entry = lookup(name)  # unknown or out-of-scope names: a message with close names or the reason
    posterior = load_posterior(name, root)
    if posterior.data:
        data = entry.model_data(posterior.data)
    elif entry.fixed:
        raise ReconError(
            f"{name} ships no data in {root}, but its model needs the known columns {list(entry.fixed)}; "
            "use a database that includes the posterior's data"
        )
    else:
        return PosteriorProblem(name, entry, posterior.draws, entry.free, {}, None, root)
    free = {k: data[k].shape[1:] for k in entry.free}
    truth = WeightedMeasure.empirical({k: data[k] for k in entry.free}, posterior=name)
    fixed = {k: data[k] for k in entry.fixed}
    return PosteriorProblem(name, entry, posterior.draws, free, fixed, truth, root)


@attack_numerics
def attack_posterior(
    name: Source,
    database: str | Path | None = None,
    n_points: int = 50,
    seed: int = 0,
    config: ReconConfig | None = None,
    progress: Progress | None = None,
    checkpoint: str | Path | None = None,
) -> PosteriorAttack:
    """Reconstruct ``n_points`` weighted pseudo-data points from the reference draws of posterior ``name``.

    ``database``: a posteriordb ``posterior_database`` folder (or the clone holding it); None reads
    $POSTERIOR_DB_PATH or the embedded kidiq subset; ``name`` may also be a
    :class:`PosteriorProblem` read already. ``progress(done, total)`` and ``checkpoint`` are passed on
    to :func:`bayes_recon.reconstruct`.
    """
    config = _check_arguments(n_points, seed, config)
    problem = load_problem(name, database)
    check_memory(problem, n_points, config)
    reconstruction = reconstruct(
        problem.entry.model,
        problem.draws,
        free=problem.free,
        fixed=problem.fixed,
        support=problem.entry.support,
        n_points=n_points,
        seed=seed,
        config=config,
        progress=progress,
        checkpoint=checkpoint,
    )
    truth = problem.truth
    if truth is not None and (units := reconstruction.measure.meta.get("units")):
        # scored as the attack weighs it: a point a unit of trials or exposure
        values = problem.fixed[units["column"]]
        truth = WeightedMeasure(*rows_as_units(truth.points, values, units), truth.meta)
    setup = reconstruction.setup
    weighted = setup.weighted_model  # the model as the attack runs it (a row count in fixed follows the rows)
    responses = observed_columns(weighted.model, setup.layout.shapes, weighted.fixed, setup.layout.supports)
    return PosteriorAttack(
        problem.name, problem.entry, reconstruction, truth, seed, problem.database, responses
    )


def check_memory(problem: PosteriorProblem, n_points: int, config: ReconConfig) -> None:
    """Refuse, before anything is allocated, an attack whose per-point, per-draw scores alone (8 bytes ×
    points × draws × parameters × restarts at once; the run needs several times that) exceed memory."""
    lengths = [len(np.atleast_1d(v)) for v in problem.draws.values()]
    if not lengths:
        return  # no draws: check_draws says so
    draws = min(max(lengths), config.max_draws or max(lengths), config.batch_size or max(lengths))
    parameters = sum(int(np.prod(np.shape(v)[1:], dtype=int)) for v in problem.draws.values())
    need = 8 * n_points * draws * parameters * config.resolved_restarts_at_once()
    have = _memory_bytes()
    if need > have:
        raise ReconError(
            f"--points {n_points} with {draws} draws of {parameters} parameters needs at least "
            f"{need / 2**30:,.0f} GiB, more than the {have / 2**30:,.0f} GiB of memory here; use fewer "
            "points (50 is a good start), fewer draws (--max-draws) or minibatches (--batch-size)"
        )


def _memory_bytes() -> int:
    """The accelerator's memory, or the machine's on a CPU."""
    stats = jax.devices()[0].memory_stats() or {}
    if "bytes_limit" in stats:
        return int(stats["bytes_limit"])
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _check_arguments(n_points: Any, seed: Any, config: ReconConfig | None) -> ReconConfig:
    if isinstance(n_points, bool) or not isinstance(n_points, (int, np.integer)) or n_points < 1:
        raise ReconError(
            f"the number of pseudo-data points must be a whole number of at least 1, got {n_points!r}; "
            "50 is a good start (the true N also works)"
        )
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed <= MAX_SEED:
        raise ReconError(f"the seed must be a whole number from 0 to 2**62 = {MAX_SEED}, got {seed!r}")
    if config is None:
        return ReconConfig()
    if not isinstance(config, ReconConfig):
        raise ReconError(f"config must be a bayes_recon.ReconConfig, got a {type(config).__name__}")
    return config  # ReconConfig checks its own fields


def _row(
    statistic: str, column: str | None, recovered: float, true: float | None, scale: float | None = None
) -> dict[str, Any]:
    """A table row; its relative error is over ``scale``, by default |true|."""
    recovered = float(recovered)
    true = None if true is None else float(true)
    scale = None if true is None else abs(true) if scale is None else scale
    error = None
    if scale and math.isfinite(scale):
        error = abs(recovered - true) / scale
    return {
        "statistic": statistic,
        "column": column,
        "recovered": recovered,
        "true": true,
        "relative_error": error,
    }


def _flat(values: Any) -> list[float]:
    return [float(v) for v in np.asarray(values, dtype=float).reshape(-1)]


def _product(columns: dict[str, np.ndarray], first: str, second: str | None) -> np.ndarray:
    """The values of ``first`` per point, times those of ``second`` (if any)."""
    return columns[first] * (1.0 if second is None else columns[second])
