"""The audit a data owner runs before publishing posterior draws: what they can reveal, and what leaks.

1. Identifiable statistics (:mod:`bayes_recon.identifiability`): what the release pins down at all.
   Where the model's features are not polynomials (a GLM's link, a mixture) there is no finite list of
   them, and the attack is scored on N and the columns' first and second moments instead
   (:func:`bayes_recon.identifiability.moment_statistics`).
2. Measured leakage: the attack (:func:`bayes_recon.pipeline.attack_posterior`) on the release,
   and per scored statistic its true and recovered value, the scale-free error
   |recovered − true| / Σ_i |f(x_i)| (= the relative error when f keeps one sign) and a verdict:
   *recovered* below ``recovered_below``, *partly* below ``partly_below``, else *not*; the MMD
   between the true and reconstructed data under the model kernel; and the same for releases of
   fewer draws (the first 100, 1,000, ...). For Gaussian linear regressions those smaller releases
   are scored by the attack's exact optimum, the oracle (one linear solve instead of another
   compiled attack; a converged attack lands on it, see benchmarks/bayes_posteriordb.py, and the
   full release's self-check says whether this one did); for other models the attack is run on each.
3. For Gaussian linear regressions with ``epsilons``: the leakage left when the posterior is
   released from noisy sufficient statistics instead (:mod:`bayes_recon.mitigation`).

The report (:mod:`bayes_recon.report`) renders an :class:`Audit`; ``to_json`` holds the same numbers.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from bayes_recon.divergence import Coordinates
from bayes_recon.identifiability import (
    IdentifiabilityConfig,
    PosteriorCheck,
    Statistic,
    check_posterior,
    linear_model_functions,
    moment_statistics,
)
from bayes_recon.kernel import model_features
from bayes_recon.mitigation import Perturbation, remaining_leakage
from bayes_recon.models import LinearGaussian
from bayes_recon.oracle import PROBE_POINTS, linear_gaussian_oracle, pack
from bayes_recon.pipeline import PosteriorAttack, Source, attack_posterior, load_problem
from bayes_recon.precision import attack_numerics
from bayes_recon.reconstruct import ReconConfig
from recon_core.errors import ReconError
from recon_core.jsonio import jsonable
from recon_core.measure import WeightedMeasure, linear_model_errors

Verdict = Literal["recovered", "partly", "not"]


@dataclass(frozen=True)
class AuditConfig:
    """How the audit runs: the attack's settings, the draw counts of the leakage curve (the attack on
    every draw is always run), the verdict thresholds and, optionally, the mitigation's ε values."""

    n_points: int = 50
    seed: int = 0
    draw_counts: tuple[int, ...] = (100, 1000)
    recovered_below: float = 0.05
    partly_below: float = 0.5
    epsilons: tuple[float, ...] = ()
    mechanism: Literal["laplace", "gaussian"] = "laplace"
    delta: float = 1e-5
    recon: ReconConfig = field(default_factory=ReconConfig)
    identifiability: IdentifiabilityConfig = field(default_factory=IdentifiabilityConfig)

    def __post_init__(self) -> None:
        if any(n < 1 for n in self.draw_counts):
            raise ReconError(f"draw counts must be at least 1, got {list(self.draw_counts)}")
        if not 0 < self.recovered_below <= self.partly_below:
            raise ReconError("the verdict thresholds need 0 < recovered_below ≤ partly_below")
        for epsilon in self.epsilons:
            Perturbation(
                epsilon, self.mechanism, self.delta
            )  # refuses a bad ε or δ now, not after the attack

    def verdict(self, error: float) -> Verdict:
        if error < self.recovered_below:
            return "recovered"
        return "partly" if error < self.partly_below else "not"


@dataclass(frozen=True)
class DrawsPoint:
    """A release of the first ``draws`` draws, attacked by ``method``: "attack" (the reconstruction) or
    "oracle" (its exact optimum, for Gaussian linear models); relative MMD, and per statistic its error
    and verdict."""

    draws: int
    method: str
    relative_mmd: float
    rows: list[dict[str, Any]]


@dataclass(frozen=True)
class Audit:
    name: str
    check: PosteriorCheck
    # what the rows score: the identifiable statistics, or where the features are not polynomials (no
    # such list) N and the columns' first and second moments (see :func:`scored_statistics`)
    statistics: tuple[Statistic, ...]
    attack: PosteriorAttack  # on every draw
    rows: list[dict[str, Any]]  # per scored statistic: true, recovered, error, verdict
    curve: list[DrawsPoint]  # by number of draws, the last on every draw
    oracle_errors: dict[str, float] | None  # the attack's exact optimum, with the mitigation only
    mitigation: list[dict[str, Any]]
    config: AuditConfig
    seconds: float
    file_leaks: list[dict[str, Any]] = field(default_factory=list)  # bayes_recon.leaks.Finding.to_json()

    @property
    def truth(self) -> WeightedMeasure:
        assert self.attack.truth is not None
        return self.attack.truth

    def to_json(self) -> dict[str, Any]:
        config = self.config
        return jsonable(
            {
                "posterior": self.name,
                "database": str(self.attack.database),
                "seconds": self.seconds,
                "release": {
                    "draws": int(self.curve[-1].draws),
                    "parameters": int(self.attack.reconstruction.setup.draws.shape[1]),
                    "free_columns": list(self.attack.entry.free),
                    "known_columns": list(self.attack.entry.fixed),
                    "data_points": self.truth.total_mass(),
                },
                "identifiable": self.check.to_json(),
                "attack": self.attack.to_json(),
                "thresholds": {
                    "recovered_below": config.recovered_below,
                    "partly_below": config.partly_below,
                },
                "scored_on": "identifiable statistics"
                if self.check.identifiability.polynomial
                else "moments (the features are not polynomials: no finite list of identifiable statistics)",
                "statistics": self.rows,
                "draws_curve": [dataclasses.asdict(point) for point in self.curve],
                "oracle_errors": self.oracle_errors,
                "mitigation": self.mitigation,
                "history": _best_history(self.attack),
                "file_leaks": self.file_leaks,
            }
        )


ATTACK_CHECKPOINT = "draws-*"  # the audit's checkpoint: one subfolder per attack, * its draws or "all"


@attack_numerics
def audit_posterior(
    source: Source,
    database: str | Path | None = None,
    config: AuditConfig | None = None,
    progress: Callable[[int, int], None] | None = None,
    checkpoint: str | Path | None = None,
) -> Audit:
    """Audit posterior ``source`` of the database, or a problem read already (see
    :func:`bayes_recon.pipeline.attack_posterior`). ``checkpoint``: a folder for the attacks' rounds,
    one subfolder per attack (``draws-all``, ``draws-N``), so an interrupted audit resumes."""
    config = config or AuditConfig()
    started = time.perf_counter()
    problem = load_problem(source, database)
    name = problem.name
    if problem.truth is None:
        where = "" if problem.database is None else f" in {problem.database}"
        raise ReconError(
            f"{name} has no data{where}: the audit compares with the true data (command line: --data)"
        )
    check = check_posterior(problem, database, config.identifiability)
    statistics = scored_statistics(check)

    def kept(draws: str) -> Path | None:
        return None if checkpoint is None else Path(checkpoint) / ATTACK_CHECKPOINT.replace("*", draws)

    full = attack_posterior(
        problem, database, config.n_points, config.seed, config.recon, progress, kept("all")
    )
    truth = full.truth  # a row of n trials (or exposure n) is n of the units the attack reconstructs
    assert truth is not None
    spec = full.entry.linear_given(problem.fixed)
    total = int(full.reconstruction.setup.draws.shape[0])
    counts = [n for n in config.draw_counts if n < total]
    last = DrawsPoint(
        total, "attack", float(full.relative_mmd() or 0.0), _rows(statistics, truth, full.measure, config)
    )
    # no closed form, or statistics that are not its span (a --max-degree too low): attack every smaller
    # release too
    if spec is None or not check.identifiability.polynomial:
        # The curve reads each release's errors against the truth: no bootstrap needed there.
        recon = [dataclasses.replace(config.recon, max_draws=n, bootstrap=0) for n in counts]
        smaller = [
            attack_posterior(problem, database, config.n_points, config.seed, r, progress, kept(str(n)))
            for n, r in zip(counts, recon, strict=True)
        ]
        curve = [
            DrawsPoint(
                n, "attack", float(a.relative_mmd() or 0.0), _rows(statistics, truth, a.measure, config)
            )
            for n, a in zip(counts, smaller, strict=True)
        ]
        mitigation, baseline = [], None
    else:
        oracle = _OracleCurve(full, spec, check)
        curve = [oracle.point(n, truth, config) for n in counts]
        mitigation = [
            remaining_leakage(
                full.reconstruction.setup,
                spec,
                truth,
                Perturbation(e, config.mechanism, config.delta, seed=config.seed),
            )
            for e in config.epsilons
        ]
        baseline = oracle.errors(total, truth) if mitigation else None  # the mitigation's baseline
    return Audit(
        name,
        check,
        statistics,
        full,
        last.rows,
        [*curve, last],
        baseline,
        mitigation,
        config,
        time.perf_counter() - started,
    )


def scored_statistics(check: PosteriorCheck) -> tuple[Statistic, ...]:
    """The identifiable statistics where the features are polynomials; else N and the columns' first
    and second moments, which the release need not pin down but an attack may still recover."""
    found = check.identifiability
    return found.statistics if found.polynomial else moment_statistics(found.variables, check.probe)


@attack_numerics
def leakage_rows(
    statistics: tuple[Statistic, ...], truth: WeightedMeasure, recovered: Sequence[float], config: AuditConfig
) -> list[dict[str, Any]]:
    """Per statistic: true and recovered value, the scale-free error and its verdict."""
    rows = []
    for statistic, value in zip(statistics, recovered, strict=True):
        true = statistic.of(truth)
        scale = float(truth.integrate(np.abs(statistic.per_point(truth.points))))
        error = abs(value - true) / scale if scale > 0 else float(value != true)
        rows.append(
            {
                "statistic": statistic.name,
                "true": true,
                "recovered": float(value),
                "error": error,
                "verdict": config.verdict(error),
            }
        )
    return rows


def _rows(
    statistics: tuple[Statistic, ...], truth: WeightedMeasure, measure: WeightedMeasure, config: AuditConfig
) -> list[dict[str, Any]]:
    return leakage_rows(statistics, truth, [s.of(measure) for s in statistics], config)


class _OracleCurve:
    """The oracle on the first n draws, read through the identifiable statistics and the model kernel.

    Both the named statistics and the kernel's features are linear in the per-point sufficient
    statistics t(x) = (1, xxᵀ, xy, y²) of the design; the maps are fitted once on probe points.
    """

    def __init__(self, attack: PosteriorAttack, spec: LinearGaussian, check: PosteriorCheck) -> None:
        self.setup, self.spec = attack.reconstruction.setup, spec
        self.statistics = check.identifiability.statistics
        points = check.probe  # the statistics' own probe points: in the support, at the model's scale
        known = linear_model_functions(spec, points)
        named = np.stack([s.per_point(points) for s in self.statistics], axis=1)
        self.named = np.linalg.lstsq(known, named, rcond=None)[0]  # t ↦ the named statistics
        self.kernel = np.linalg.lstsq(known, model_features(self.setup, points), rcond=None)[0]  # t ↦ Σ φ

    def statistics_of(self, n: int) -> dict[str, np.ndarray]:
        coordinates = self.setup.coordinates
        theta = coordinates.to_model(self.setup.draws[:n])
        own = Coordinates.standardised(theta)  # as the attack on n draws would standardise them
        probe = self.setup.layout.probe(0, PROBE_POINTS)
        oracle = linear_gaussian_oracle(
            self.setup.weighted_model, self.spec, own.to_attack(theta), own, probe
        )
        return oracle.statistics

    def point(self, n: int, truth: WeightedMeasure, config: AuditConfig) -> DrawsPoint:
        recovered = pack(self.statistics_of(n))
        true = pack(truth.linear_model_statistics(*self.spec.design(truth.points)))
        gap = np.linalg.norm((true - recovered) @ self.kernel) / np.linalg.norm(true @ self.kernel)
        return DrawsPoint(
            n, "oracle", float(gap), leakage_rows(self.statistics, truth, recovered @ self.named, config)
        )

    def errors(self, n: int, truth: WeightedMeasure) -> dict[str, float]:
        return linear_model_errors(
            self.statistics_of(n), truth.linear_model_statistics(*self.spec.design(truth.points))
        )


def _best_history(attack: PosteriorAttack) -> dict[str, Any]:
    """The kept restart's per-step objective, total mass, and weighted mean and variance per column."""
    recon = attack.reconstruction
    history, best = recon.history, recon.best_restart
    labels = _coordinate_labels(attack)
    return {
        "objective": history["objective"][best],
        "total_mass": history["total_mass"][best],
        "mean": {label: history["mean"][best][:, i] for i, label in enumerate(labels)},
        "var": {label: history["var"][best][:, i] for i, label in enumerate(labels)},
        "stage_steps": [int(n) for n in history["stage_steps"]],
    }


def _coordinate_labels(attack: PosteriorAttack) -> list[str]:
    """``name`` or ``name[i]`` for every flattened coordinate of the free columns, in the history's order."""
    labels = []
    for name in attack.entry.free:
        width = int(np.prod(np.shape(attack.measure.points[name])[1:], dtype=int))
        labels += (
            [name] if np.ndim(attack.measure.points[name]) == 1 else [f"{name}[{i}]" for i in range(width)]
        )
    return labels
