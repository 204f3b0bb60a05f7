"""The attack: posterior draws + an unmodified NumPyro model → a weighted pseudo-data measure.

Pipeline: check the model and draws → map draws to unconstrained (and standardised) coordinates
→ build the score-matching objective of the weighted posterior (:mod:`bayes_recon.objective`) →
start: responses drawn from the model's predictive at the posterior mean, orders of magnitude of
the covariates and the mass from a grid → optimise the pseudo-data in two stages (the cloud alone
by Newton, then every point and weight by L-BFGS; the start and the stages are
:mod:`bayes_recon.stages`), the restarts in rounds of one compiled program each (one restart per
round on a CPU, all batched by ``vmap`` on an accelerator; on a CPU the rounds run side by side,
one fewer than the cores as memory allows; each round can be kept in a checkpoint)
→ keep the restart with the lowest objective among those whose measure carries no more information
than a release can (all of them where none does) → return a :class:`WeightedMeasure` with its history;
how tightly the release determines every statistic are its Monte Carlo standard errors, widened where
flat directions or equally good restarts reach further (:attr:`Reconstruction.standard_errors`), and
the same program can run again on bootstrap resamples of the draws (:meth:`Reconstruction.bootstrap_spread`).
This module holds that orchestration: the configuration, the rounds, the result.
"""

from __future__ import annotations

import itertools
import os
import time
import warnings
from collections.abc import Callable, Mapping
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, replace
from functools import cached_property, partial
from pathlib import Path
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.diagnostics import effective_sample_size
from numpyro.distributions.constraints import Constraint

from bayes_recon import programs, pseudo
from bayes_recon.checkpoint import Checkpoint, fingerprint, remove
from bayes_recon.divergence import ESTIMATORS, Coordinates, Estimator, gaussian_terms, score_matching_terms
from bayes_recon.modelcheck import Free, prepare_release
from bayes_recon.objective import (
    GRADIENT_BUDGET,
    Objectives,
    ScoreMatching,
    build_hessian,
    build_mass_quadratic,
    build_objective,
    build_objective_error,
    build_point_derivatives,
    draw_slices,
    information_penalty,
    kink_bandwidths,
    point_information,
    value_size,
    within_information_bound,
)
from bayes_recon.optimise import OptimiserConfig
from bayes_recon.precision import attack_numerics
from bayes_recon.refine import GAP, build_refiner, refine
from bayes_recon.selfcheck import SELF_CHECK_DRAWS, SelfCheck, round_trip
from bayes_recon.stages import FINE_GAIN, LAST_STAGE_STRETCH, make_start, run_stages
from bayes_recon.standard_errors import (
    CLOSING_STEPS,
    FLATTER,
    Sandwich,
    closing_steps,
    moment_errors,
    moment_moves,
    moment_shortfall,
    sandwich_builder,
    statistic_covariance,
    statistic_shortfall,
    tilted_moves,
)
from bayes_recon.weighting import Bandwidths, WeightedModel
from recon_core.errors import ReconError
from recon_core.measure import WeightedMeasure
from recon_core.memory import available_memory

Array = jax.Array


@dataclass(frozen=True)
class ReconConfig:
    """How the attack runs. The defaults work for models with up to a few dozen parameters.

    ``estimator``: "exact" Fisher divergence (full Hessian trace; the default up to 20
    parameters), "sliced" or "sliced_vr" (Hessian-vector products, ``n_slices`` per draw, fixed
    for the run so the objective is deterministic). ``coordinates``: "standardised" (θ whitened by
    the draws' mean and covariance; affine-invariant) or "unconstrained" (NumPyro's raw
    unconstrained space).

    Four stages (:meth:`stage_steps`): ``coarse_steps`` of saddle-free Newton move the pseudo-data
    *cloud* alone (see :mod:`bayes_recon.pseudo`) on a random subset of ``coarse_draws`` draws —
    its location and scale at fixed mass, then with the total mass — which needs no knowledge of
    the data's scale (Newton is affine-invariant); ``coarse_steps`` more polish the cloud on every
    draw; then up to ``steps`` of ``method`` (L-BFGS, or Adam) move every point and weight, and L-BFGS
    more, up to ``stages.LAST_STAGE_STRETCH`` times as many, while it still gains what the draws can tell
    (``stages.FINE_GAIN`` of the objective's Monte Carlo standard error every ``optimise.GAIN_WINDOW``
    steps). Where the best restart's last stage was still moving after ``steps``, Newton steps that the
    objective confirms carry it on (:meth:`Reconstruction.with_closing_steps`).
    ``batch_size``: minibatches of draws in that last stage (forces Adam; no polish); ``max_draws``
    keeps the first draws only. Every stage stops early once the objective stops changing.
    ``grid_at_once``: the grid search's candidates scored together (default: as many as
    :data:`bayes_recon.objective.VALUE_BUDGET` allows); fewer take less memory for the same result.

    ``restarts_at_once``: restarts batched together (``vmap``) in one round; the rounds are calls
    of one compiled program. Default: all at once on an accelerator, one at a time on a CPU, where
    batching gains no arithmetic speed, makes every early-stopping loop run until the slowest
    restart stops, and takes longer to trace and compile (kidiq at M = 50: 7.6 s to run and 21.9 s
    to compile one at a time, 10.3 s and 26.7 s batched). On a CPU the rounds run side by side
    instead, each in a thread: ``rounds_at_once`` of them, by default one fewer than the cores as memory
    allows (so one round at a time on two cores; more than that can hang: see ``_rounds_side_by_side``);
    the result is the same (it is left out of the checkpoint's fingerprint).

    ``bootstrap``: replicates of the attack on draws resampled with replacement, after the restarts
    (the same compiled program, so no compilation). Each runs the best restart's last two stages
    again on its resample, from where they began: Newton on the cloud on every draw, then every
    point and weight. The grid and the Newton stages on the subset are not repeated: a replicate takes
    about a third of a restart's time. Off by default: replicates started there barely move along the
    directions the objective leaves nearly flat, which are what the draws do not determine, so their
    spread understates it (a logistic regression: Σ y·x 14 % off, replicates within 6 %);
    :attr:`Reconstruction.standard_errors` measures it from the draws without refits.

    ``rescue_restarts``: restarts run when the best restart's measure fails the self-check and so does
    the result of the Frank–Wolfe rounds (below) run from it, or none could run; the best of them is
    checked and taken if it passes (or, failing, see below). The stages can settle in a basin above the
    true data's objective: a Poisson regression (N = 100, covariates at 0.01 to 1,000) ended both
    restarts of seed 0 with the covariates aligned so that the linear predictor barely varied, 4.5
    Monte Carlo tolerances above the truth, and two of six restarts of that seed reached the truth's
    objective. The rounds only move the measure they are given (there, to below the truth's objective
    on the draws' noise, still failing the check); a restart starts afresh. Where the rescue's best
    fails too, the one of lower objective stands, it or the rounds' result (or the best restart), if
    NUTS could sample it: a logistic regression with eight covariates (M = 50) ended its rounds 0.29
    above the rescue's best, with a posterior sd 7.6 times the release's (stop 75). Their keys come
    apart from the first restarts', which are the same whatever their number.

    ``refine_rounds``: Frank–Wolfe rounds (:mod:`bayes_recon.refine`) on the best restart's measure
    when it fails the self-check: points added where weight would lower the objective, the weights
    solved exactly, every point polished by up to ``steps`` of ``method``. The stages move their points
    locally and can end with points in the wrong places (a gamma regression with a covariate collapsed,
    3.2 Monte Carlo tolerances above the true data's objective and failing the self-check; after the
    rounds, below it and passing). Where the stages' result passes, the rounds are not run (and the
    check is kept for :attr:`Reconstruction.self_check`): every attack runs the self-check (NUTS, seconds).
    Not without continuous columns. Neither repair (nor the check during the attack) runs with
    minibatches, on fewer than 4 draws, or with both ``rescue_restarts`` and ``refine_rounds`` at 0.

    ``information_start``: the last of the first restarts (with two or more, and ``coarse_steps``)
    begins its Newton stage on every draw at its cloud refitted so that the pseudo-data's information
    matches the one the release's precision holds (:mod:`bayes_recon.information`), where that matches
    better. The grid sizes one covariate at a time and loses their correlations: diamonds (26
    parameters, near-collinear covariates) ended every restart far above the true data's objective with
    17 covariates 35 times too wide.
    """

    estimator: Literal["auto"] | Estimator = "auto"
    n_slices: int = 4
    coordinates: Literal["standardised", "unconstrained"] = "standardised"
    method: Literal["lbfgs", "adam"] = "lbfgs"
    learning_rate: float = 0.02
    coarse_draws: int = 1000
    coarse_steps: int = 40
    steps: int = 150
    restarts: int = 2
    rescue_restarts: int = 2
    restarts_at_once: int | None = None
    rounds_at_once: int | None = None
    batch_size: int | None = None
    max_draws: int | None = None
    grid_at_once: int | None = None
    bootstrap: int = 0
    refine_rounds: int = 4
    information_start: bool = True

    def __post_init__(self) -> None:
        at_least_one = (
            "n_slices", "coarse_draws", "steps", "restarts", "restarts_at_once", "rounds_at_once",
            "batch_size", "max_draws", "grid_at_once",
        )  # fmt: skip
        for name in at_least_one:
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ReconError(
                    f"{name} must be at least 1 (a whole number), got {value!r} "
                    f"(command line: --{name.replace('_', '-')} 1 or more)"
                )
        for name in ("coarse_steps", "bootstrap", "rescue_restarts", "refine_rounds"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ReconError(
                    f"{name} must be a whole number ≥ 0, got {value!r} "
                    f"(command line: --{name.replace('_', '-')} 0 or more)"
                )
        if not isinstance(self.information_start, bool):
            raise ReconError(f"information_start must be true or false, got {self.information_start!r}")
        rate = self.learning_rate
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not rate > 0:
            raise ReconError(f"learning_rate must be positive, got {rate!r}")
        for name, allowed in (
            ("estimator", ("auto", *ESTIMATORS)),
            ("coordinates", ("standardised", "unconstrained")),
            ("method", ("lbfgs", "adam")),
        ):
            if getattr(self, name) not in allowed:
                raise ReconError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")

    def resolved_estimator(self, dim: int) -> Estimator:
        if self.estimator == "auto":
            return "exact" if dim <= 20 else "sliced_vr"
        return self.estimator

    def resolved_restarts_at_once(self) -> int:
        if self.restarts_at_once is not None:
            return min(self.restarts_at_once, self.restarts)
        return 1 if jax.default_backend() == "cpu" else self.restarts

    def stage_steps(self, located: bool, minibatched: bool) -> tuple[int, int, int, int]:
        """Step caps of the four stages: cloud shape (only with covariates of unknown location), cloud
        with mass on the subset, cloud on every draw (not with minibatches), every point and weight (L-BFGS:
        past ``steps`` only while still gaining what the draws can tell, up to ``LAST_STAGE_STRETCH`` times
        as many; Adam: ``steps``)."""
        coarse = self.coarse_steps
        last = self.steps if minibatched or self.method == "adam" else LAST_STAGE_STRETCH * self.steps
        return (coarse if located else 0, coarse, 0 if minibatched else coarse, last)


class AttackSetup(NamedTuple):
    """What the attack worked with, for checks against it (the oracle, identifiability, tests)."""

    weighted_model: WeightedModel
    layout: pseudo.Layout
    coordinates: Coordinates
    draws: Array  # (S, d), in the attack's coordinates
    estimator: Estimator = "exact"
    seed: int = 0  # the attack's: its objective's slices on all draws are those of seed + 1


@dataclass(frozen=True)
class Reconstruction:
    """The best restart's measure, its objective, and the convergence history of every restart.

    ``history`` holds per-step arrays with a leading restart axis (the first restarts, then the rescue's
    where they ran: :meth:`rescued`): ``objective``, ``total_mass``
    and, per free column (flattened), ``mean`` and ``var`` of the weighted pseudo-data; after a
    stage converges its rows repeat the final values. ``stage_steps`` (4,) is each stage's length
    in those arrays (cloud shape, cloud with mass on the subset of draws, cloud on every draw,
    all points) and ``steps_taken`` (restarts, 4) the steps each ran before it converged;
    ``information`` (restarts,) the Fisher information of each restart's final measure,
    Σ_j w_j E_s |∇ log p(x_j | θ_s)|² in the attack's coordinates: the best restart is the one of lowest
    objective among those where it is within the bound (:func:`reconstruct`);
    ``information_fit`` (restarts, 2) the mismatch between the pseudo-data's information and the
    release's, relative to the release's, before and after the information fit of the restart it ran in
    (NaN elsewhere; see ``ReconConfig.information_start``).
    ``bootstrap`` holds every bootstrap replicate's final ``objective`` (on its own resample),
    ``weights`` and ``points/NAME`` (a leading replicate axis; see ``ReconConfig.bootstrap``).
    """

    measure: WeightedMeasure
    objective: float
    restart_objectives: np.ndarray
    best_restart: int
    history: dict[str, np.ndarray]
    bootstrap: dict[str, np.ndarray]
    config: ReconConfig
    seconds: float  # wall time of the whole attack, compilation included
    compile_seconds: float
    setup: AttackSetup
    # the last self-check the attack ran, of the measure it returns (None when resumed past its repairs)
    checked: tuple[WeightedMeasure, SelfCheck] | None = None
    # the sandwich where the closing steps stopped, of the measure they return (None where none ran)
    closing_sandwich: tuple[WeightedMeasure, Sandwich] | None = None

    @cached_property
    def self_check(self) -> SelfCheck:
        """The round trip without the true data: does the posterior of the recovered weighted
        pseudo-data (NUTS on the user's model) reproduce the released draws? Computed the first time
        it is read (seconds), then kept. See :mod:`bayes_recon.selfcheck`."""
        if self.checked is not None and _same_measure(self.checked[0], self.measure):
            return self.checked[1]  # not for a measure put in its place (dataclasses.replace)
        return self._round_trip(self.measure)

    def converged(self) -> bool | None:
        """Whether the Frank–Wolfe rounds stopped on their own (their gap, or a round's gain, under what the
        draws can tell: :data:`bayes_recon.refine.GAP`), not at ``config.refine_rounds``; without rounds,
        whether the best restart's last stage stopped because its objective stopped changing, or past
        ``config.steps`` stopped gaining what the draws can tell, not at its step cap
        (:meth:`ReconConfig.stage_steps`), or, where closing steps followed it and took any
        (:meth:`with_closing_steps`), whether they stopped on their own; None with minibatches of draws
        (Adam runs every step)."""
        batch = self.config.batch_size
        if batch is not None and batch < self.measure.meta["n_draws"]:
            return None
        if "refine_converged" in self.history:
            return bool(self.history["refine_converged"])
        if len(self.history.get("closing_gains", ())):  # none taken: the last stage's word stands
            return len(self.history["closing_gains"]) < CLOSING_STEPS
        return bool(self.history["steps_taken"][self.best_restart, 3] < self.history["stage_steps"][3])

    def short_of_optimum(self) -> bool | None:
        """Whether the result is short of the optimum: its last step (the Frank–Wolfe rounds where they
        ran, else the last stage) stopped at its cap (:meth:`converged` False), or stopped on its own
        while the objective still falls along the sandwich's confirmed step by more than that step had
        to gain to go on (:attr:`remaining_gain` against :meth:`stopping_gain`); None with minibatches
        of draws."""
        converged = self.converged()
        if converged is None:
            return None
        return not converged or self.remaining_gain > self.stopping_gain()

    def stopping_gain(self) -> float:
        """What the attack's last step had to gain to go on, in Monte Carlo errors of the objective: a
        Frank–Wolfe round's (:data:`bayes_recon.refine.GAP`) where they ran, else what the last stage
        asks of :data:`bayes_recon.optimise.GAIN_WINDOW` steps (:data:`bayes_recon.stages.FINE_GAIN`)."""
        return GAP if "refine_converged" in self.history else FINE_GAIN

    def at_best(self) -> np.ndarray:
        """Which restarts ended within 1 % (of its magnitude) of the best restart's objective (restarts,),
        among those whose measure is within the information bound (see :func:`reconstruct`)."""
        final, best = self.restart_objectives, self.restart_objectives[self.best_restart]
        return self.admissible() & (final <= best + 0.01 * max(abs(best), 1e-12))

    def admissible(self) -> np.ndarray:
        """Which restarts' measures carry no more information than a release can (restarts,); all of them
        where none does (see :func:`reconstruct`)."""
        return _admissible(self.history["information"], self.setup.draws.shape[1])

    def rescued(self) -> int:
        """How many restarts were added because the best of the first failed the self-check and so did the
        Frank–Wolfe rounds' result (see ``ReconConfig.rescue_restarts``); they follow the first in
        :attr:`restart_objectives`, and are the result only where their best passed its check, or failed it
        with an objective below the Frank–Wolfe rounds' result (see ``ReconConfig.rescue_restarts``)."""
        return len(self.restart_objectives) - self.config.restarts

    def passed_over(self) -> int:
        """How many restarts were passed over for carrying more information than a release can."""
        return int((~self.admissible()).sum())

    def restart_spread(self) -> dict[str, float]:
        """How far apart the restarts whose final objective is within 1 % (of its magnitude) of the best
        end, statistic by statistic (:func:`statistics_spread`): restarts that reach the same objective
        with different statistics show what the release leaves open."""
        close = self.at_best()
        mass, mean, var = (self.history[k][:, -1][close] for k in ("total_mass", "mean", "var"))
        return statistics_spread(mass, mean, var)

    def bootstrap_spread(self) -> dict[str, float] | None:
        """How far apart the result and the bootstrap replicates are, statistic by statistic
        (:func:`statistics_spread`, covariances of every two coordinates included: for a canonical
        link the sums Σ y·x the likelihood sees): how tightly the release determines each; None without
        replicates. A replicate whose objective is not finite counts as an infinite spread."""
        replicates = self.bootstrap
        if not len(replicates["objective"]):
            return None
        measures = [self.measure]
        if np.isfinite(replicates["objective"]).all() and np.isfinite(replicates["weights"]).all():
            measures += [_measure_of(replicates, b) for b in range(len(replicates["objective"]))]
        mass = np.array([m.total_mass() for m in measures])
        mean = np.stack([m.expect(m.matrix()) for m in measures])
        cov = np.stack([m.cov() for m in measures])
        spread = statistics_spread(mass, mean, np.diagonal(cov, axis1=1, axis2=2), cov)
        return spread if len(measures) > 1 else dict.fromkeys(spread, np.inf)

    @cached_property
    @attack_numerics
    def unseen_mass(self) -> float:
        """The largest share of the recovered mass whose weight barely moves the posterior. Weighting a
        group of points tilts the posterior by exp(Σ_group w_j log p(x_j | θ)); where that sum hardly
        varies over the draws, its weight could be anything. The points are taken from the one whose
        log-likelihood varies least over the draws up, while the variance of their weighted sum stays
        under ``UNSEEN_TILT`` of the whole data's. A group matters through its sum, not point by
        point: each of many points on a gamma regression's mean barely moves the posterior, and
        together they set its width. A logistic regression with its covariate at 1,000 ± 10 put 1,226
        of a recovered mass of 1,504 (true N 300) deep in the saturated tail (y = 0 at x = -2,000),
        with the truth bar met and a bootstrap that moved N by 13 % only."""
        setup = self.setup
        draws = setup.draws[:: max(1, len(setup.draws) // UNSEEN_DRAWS)]
        theta = setup.coordinates.to_model(draws)
        data = {k: jnp.asarray(v) for k, v in self.measure.points.items()}
        loglik = np.asarray(
            jax.jit(jax.vmap(lambda th: setup.weighted_model.loglik_per_point(th, data)))(theta)
        )
        w = np.asarray(self.measure.weights, dtype=float)
        order = np.argsort(loglik.var(axis=0))
        tilt = np.cumsum(loglik[:, order] * w[order], axis=1).var(axis=0)  # of each least-moving group
        unseen = order[tilt < UNSEEN_TILT * tilt[-1]]
        return float(w[unseen].sum() / w.sum())

    @attack_numerics
    def objective_terms(self, points: Mapping[str, Any], weights: Any) -> np.ndarray:
        """The attack's objective at any measure, one term per draw (S,) with the information penalty
        (:func:`bayes_recon.objective.information_penalty`, zero for real data) added to each: their
        mean is the objective there (``objective_terms(measure.points, measure.weights).mean() ==
        objective``), so the true data's value and its Monte Carlo error come from the same draws and
        slices."""
        data = self.setup.layout.typed(points)
        return np.asarray(jax.jit(self._measure_terms())(data, jnp.asarray(weights)))

    @cached_property
    @attack_numerics
    def standard_errors(self) -> dict[str, float]:
        """How tightly the release's draws determine N and every free coordinate's mean, sd and
        pairwise covariance: their Monte Carlo standard errors at the result (the sandwich covariance
        of the attack's optimum, :mod:`bayes_recon.standard_errors`), in the units and under the keys
        of :func:`statistics_spread`. Each is at least half of how far the objective's flat directions
        move it unseen by the draws (:func:`bayes_recon.standard_errors.flat_reach`), and N's and every
        mean's and sd's at least half of how far apart the restarts that reached the best objective end
        (:meth:`restart_spread`; the covariances are not recorded per restart): both are lower bounds
        where the objective's flat set is curved. A linear regression with its design matrix's column of
        ones free sees the data only through (N, XᵀX, Xᵀy, yᵀy), a quadric along which every column's
        mean moves: flat_reach's straight probes were told at their first (0.25 sd), while two restarts
        at the same objective differed by 0.2–0.6 sd (the truth 0.56–0.59 sd away). The restarts are
        compared as :meth:`at_best` takes them (within 1 % of the best objective), also where the
        Frank–Wolfe rounds replaced the best restart's measure: the errors err on the wide side. Computed
        the first time it is read, then kept: seconds, up to about as long as the attack (nes1972 at
        M = 50, 1,400 parameters: 28 s at stop 57, 5 s of it on the flat directions)."""
        errors = moment_errors(self._sandwich, self.measure.points, self._terms_at_phi())
        apart = self.restart_spread()
        return {k: max(error, apart.get(k, 0.0) / 2) for k, error in errors.items()}

    @attack_numerics
    def statistic_covariance(
        self, statistic: Callable[[Mapping[str, Array], Array], Array]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Any differentiable statistic of the measure, ``statistic(points, weights)`` (K,) in JAX,
        at the result, and its Monte Carlo covariance (K, K) (see :attr:`standard_errors`)."""
        return statistic_covariance(self._sandwich, statistic)

    @cached_property
    @attack_numerics
    def shortfall(self) -> dict[str, float]:
        """How far N and every free coordinate's mean, sd and pairwise covariance still have to go to the
        optimum that :attr:`standard_errors` describe, in their units and under their keys: the move
        along the quadratic model's step to it, as far as the objective confirms that step
        (:func:`bayes_recon.standard_errors.moment_shortfall`); zero at an optimum. The optimiser's
        error, not the release's: the result's whole error is √(standard error² + shortfall²)
        (:attr:`result_errors`). An estimate the objective bears out (:attr:`remaining_gain`), not a
        bound."""
        return moment_shortfall(self._sandwich, self.measure.points)

    @property
    @attack_numerics
    def remaining_gain(self) -> float:
        """How much the objective still falls along the step :attr:`shortfall` measures, in Monte Carlo
        standard errors of the objective: zero at an optimum; a lower bound on what reaching it gains.
        Beyond what the last step had to gain to go on (:meth:`stopping_gain`) the attack stopped short,
        whatever the statistics' shortfall. A normal mixture regression (N = 1,000, three covariates,
        M = 50) stopped with 0.26, over the rule's 0.25 by a hair: the step took N from 876.9 to 893.9,
        while four times the steps gained about 0.8 and took N to 933.0 (the truth 1,000). Where the last
        stage was still moving after ``config.steps``, as there, the attack now goes on by such steps
        (:meth:`with_closing_steps`; that mixture: eight, to N = 982.4, then 0.019)."""
        return self._sandwich.gain

    @property
    def result_errors(self) -> dict[str, float]:
        """The result's whole error, the draws' and the optimiser's: each of :attr:`standard_errors` and
        :attr:`shortfall` in quadrature."""
        shortfall = self.shortfall
        return {k: float(np.hypot(e, shortfall[k])) for k, e in self.standard_errors.items()}

    @attack_numerics
    def statistic_shortfall(self, statistic: Callable[[Mapping[str, Array], Array], Array]) -> np.ndarray:
        """Any differentiable statistic's :attr:`shortfall` (K,), signed, in its own units."""
        return statistic_shortfall(self._sandwich, statistic)

    @cached_property
    @attack_numerics
    def error_moves(self) -> dict[str, float]:
        """:attr:`standard_errors` checked one error out: how far each statistic moved, in its standard
        errors, when the objective was tilted to move it by one (:func:`bayes_recon.standard_errors.
        moment_moves`; about 1 where the errors hold, NaN where the check told nothing, infinite where
        the tilt ran off). The sandwich is a quadratic model of the objective at the optimum; along a
        long, curved valley (a binomial regression's Σ y·x) it understates, and this says by how much.
        Costs 2K + 1 runs of up to 200 L-BFGS steps on every draw, K the number of statistics (1 + 2d +
        d(d − 1)/2 for d coordinates): kidiq at M = 50, K = 6, 18.3 s (its attack: 22.5 s)."""
        return moment_moves(self._sandwich, self.measure.points, self._objective_at_phi())

    @property
    def tilted_standard_errors(self) -> dict[str, float]:
        """:attr:`standard_errors`, each times its :attr:`error_moves` where that is beyond
        ``standard_errors.FLATTER`` (the objective is flatter than the errors say); unchanged elsewhere,
        and where the check told nothing."""
        moves = self.error_moves
        return {k: e * (moves[k] if moves[k] > FLATTER else 1.0) for k, e in self.standard_errors.items()}

    @attack_numerics
    def statistic_tilt_moves(self, statistic: Callable[[Mapping[str, Array], Array], Array]) -> np.ndarray:
        """Any statistic's standard errors (:meth:`statistic_covariance`) checked one error out
        (:func:`bayes_recon.standard_errors.tilted_moves`): (2, K), each statistic's move, in its standard
        errors, when the objective is tilted to move it by one (up, then down); ±1 where the errors hold,
        NaN where the check told nothing."""
        return tilted_moves(self._sandwich, self._objective_at_phi(), statistic)

    def _objective_at_phi(self) -> Callable[[Array], Array]:
        """The attack's objective as a function of the sandwich's parameters φ (points and log-weights)."""
        terms_at = self._terms_at_phi()
        return lambda phi: jnp.mean(terms_at(phi))

    def _terms_at_phi(self) -> Callable[[Array], Array]:
        """The attack's per-draw terms, the information penalty added to each, as a function of φ."""
        terms, unpack = self._measure_terms(), self._sandwich.unpack
        return lambda phi: terms(*unpack(phi))

    @cached_property
    def _sandwich(self) -> Sandwich:
        if self.closing_sandwich is not None and _same_measure(self.closing_sandwich[0], self.measure):
            return self.closing_sandwich[1]
        phi, sandwich_at = self._sandwich_builder()
        return sandwich_at(phi)

    def _sandwich_builder(self) -> tuple[Array, Callable[[Array], Sandwich]]:
        setup = self.setup
        problem = ScoreMatching(
            setup.weighted_model, setup.layout, setup.coordinates, setup.estimator, self.config.n_slices
        )
        # on the attack's draws and slices (seed + 1: those of its objective on every draw)
        derivatives = build_point_derivatives(problem, setup.draws, setup.seed + 1)
        points = {k: jnp.asarray(v) for k, v in self.measure.points.items()}
        return sandwich_builder(
            derivatives, setup.layout, points, jnp.asarray(self.measure.weights), self._measure_terms()
        )

    @attack_numerics
    def with_closing_steps(self) -> Reconstruction:
        """The result moved on by the sandwich's confirmed steps while they gain what the last stage asked
        of its steps (:func:`bayes_recon.standard_errors.closing_steps`), their gains in
        ``history["closing_gains"]``; where they took any, :meth:`converged` says whether they stopped on
        their own, and where the attack checked its result, the moved measure is checked again (the check
        the CLI's exit status reads is of the measure returned). The restarts' records (objectives,
        ``history``) stay where their last stages ended. :func:`reconstruct` takes them where the best
        restart's last stage went on past ``config.steps``."""
        phi, sandwich_at = self._sandwich_builder()
        closing = closing_steps(sandwich_at, phi, self.stopping_gain())
        sandwich, measure, objective = closing.sandwich, self.measure, self.objective
        if len(closing.gains):
            points, weights = sandwich.unpack(jnp.asarray(sandwich.phi))
            objective = sandwich.objective
            measure = WeightedMeasure(
                {k: np.asarray(v) for k, v in points.items()},
                np.asarray(weights),
                measure.meta | {"objective": objective},
            )
        checked = self.checked
        if checked is not None and not _same_measure(checked[0], measure):
            checked = measure, self._round_trip(measure)
        return replace(
            self,
            measure=measure,
            objective=objective,
            history=self.history | {"closing_gains": closing.gains},
            checked=checked,
            closing_sandwich=(measure, sandwich),
        )

    def _measure_terms(self) -> Callable[[Mapping[str, Array], Array], Array]:
        """The objective as the attack computes it, on its draws and slices (:func:`measure_terms`)."""
        return measure_terms(self.setup, self.config.n_slices)

    @cached_property
    def _floor(self) -> Callable[[WeightedMeasure], tuple[float, float]]:
        return floor_check(self.setup, self.config.n_slices)

    @attack_numerics
    def _round_trip(self, measure: WeightedMeasure) -> SelfCheck:
        return round_trip(self.setup, measure.points, measure.weights, floor=self._floor(measure))


def attack_slices(setup: AttackSetup, n_slices: int) -> Array | None:
    """The slices of the attack's objective on every draw (those of its seed + 1; None where exact)."""
    n_draws, dim = setup.draws.shape
    return draw_slices(setup.estimator, jax.random.PRNGKey(setup.seed + 1), n_draws, n_slices, dim)


def measure_terms(setup: AttackSetup, n_slices: int) -> Callable[[Mapping[str, Array], Array], Array]:
    """The objective as the attack computes it, on its draws and slices: its per-draw terms (S,) at a
    measure (points, weights), the information penalty at its points added to each."""
    dim, estimator, slices = setup.draws.shape[1], setup.estimator, attack_slices(setup, n_slices)
    size = dim * value_size(estimator, dim, n_slices)

    def terms(data: Mapping[str, Array], weights: Array, bandwidths: Bandwidths) -> Array:
        log_q = setup.coordinates.pull_back(
            lambda th: setup.weighted_model.log_density(th, data, weights, bandwidths)
        )
        at_once = max(1, GRADIENT_BUDGET // (len(weights) * setup.weighted_model.copies * size))
        return score_matching_terms(log_q, setup.draws, slices, estimator, at_once)

    def with_penalty(data: Mapping[str, Array], weights: Array) -> Array:
        weighted, coordinates, draws = setup.weighted_model, setup.coordinates, setup.draws
        bandwidths = kink_bandwidths(weighted, coordinates, data, draws)
        return terms(data, weights, bandwidths) + information_penalty(
            weighted, coordinates, draws, data, bandwidths
        )

    return with_penalty


def floor_check(setup: AttackSetup, n_slices: int) -> Callable[[WeightedMeasure], tuple[float, float]]:
    """A measure's objective above the Gaussian's fitted to the draws (:func:`gaussian_terms`, the same
    draws and slices) less that Gaussian's in-sample advantage, and the gap's Monte Carlo standard error
    (the draws counted by their effective size, in their order, as NumPyro counts them): the self-check's
    floor (:func:`bayes_recon.selfcheck.round_trip`).

    Fitted to the draws it is scored on, the Gaussian scores better there than the one it estimates: by
    d(d + 2) / (2 S) on average where the posterior is Gaussian (in the standardised coordinates: ½|m̂|²
    and ½ tr(Σ̂ − I)², its mean's and covariance's errors), S the draws' effective size. Uncorrected, the
    true data of a Gaussian posterior of d parameters sat about (d + 2) / (2√2) errors above it whatever
    S, failing from d ≈ 12 on (the stop 75 review's simulation)."""
    n_draws, dim = setup.draws.shape
    slices = attack_slices(setup, n_slices)
    gaussian = np.asarray(jax.jit(gaussian_terms, static_argnums=2)(setup.draws, slices, setup.estimator))
    effective = np.clip(np.mean(effective_sample_size(np.asarray(setup.draws)[None])), 1.0, n_draws)
    optimism = dim * (dim + 2) / (2 * effective)
    terms = jax.jit(measure_terms(setup, n_slices))

    def floor(measure: WeightedMeasure) -> tuple[float, float]:
        data = setup.layout.typed(measure.points)
        gap = np.asarray(terms(data, jnp.asarray(measure.weights))) - gaussian
        size = np.clip(effective_sample_size(gap[None, :, None])[0], 1.0, len(gap))
        return float(gap.mean() - optimism), float(gap.std(ddof=1) / np.sqrt(size))

    return floor


@attack_numerics
def reconstruct(
    model: Callable,
    draws: Any,
    free: Free,
    fixed: Mapping[str, Any] | None = None,
    support: Mapping[str, Constraint | str] | None = None,
    n_points: int = 50,
    seed: int = 0,
    config: ReconConfig | None = None,
    progress: Callable[[int, int], None] | None = None,
    checkpoint: str | Path | None = None,
) -> Reconstruction:
    """Reconstruct ``n_points`` weighted pseudo-data points from posterior draws of ``model``.

    ``free``: the model's data arguments to reconstruct, as names (scalar per data point) or
    ``{name: trailing shape}`` (a whole number n is the shape (n,)). ``fixed``: arguments the adversary
    knows, passed as is.
    ``support``: NumPyro constraints per free column, or their names ("positive", "interval(0, 200)"; default
    real). ``draws``: a dict of
    arrays, a NumPyro MCMC or an ArviZ object.

    The restarts run in rounds of ``config.restarts_at_once``, each a call of one compiled program
    (which holds no host callback, so JAX's persistent compilation cache can keep it), followed by
    ``config.bootstrap`` rounds on resampled draws, started from the best restart; the rescue's rounds
    run before those where the best restart and the Frank–Wolfe rounds' result fail the self-check
    (``config.rescue_restarts``).
    ``progress(done, total)``: rounds done out of all, called once the program is compiled (the
    rounds run from then on) and after every round; the total grows by the rescue's rounds when they run.
    ``checkpoint``: a folder where every finished round is kept; a run with the same folder and
    the same attack takes the rounds found there and runs only the rest, to the bitwise same
    result (see :mod:`bayes_recon.checkpoint`; a folder of another attack is refused). It is left
    in place at the end: remove it with :func:`bayes_recon.checkpoint.remove` once the result is
    safe.

    On a CPU, a round too large for the memory available (XLA's count of the compiled program) scores
    the grid search's candidates one at a time instead, and where that is still too large runs on the
    first draws that fit, each with a warning; ``config.grid_at_once`` and ``config.max_draws`` of the
    result say so. With a ``checkpoint`` (whose attack is fixed when it starts) it is refused with those
    settings named, and so is one where fewer than :data:`FEWEST_DRAWS` draws would fit.
    """
    config, started, refused = config or ReconConfig(), time.perf_counter(), False
    while True:
        try:
            found = _reconstruct(
                model, draws, free, fixed, support, n_points, seed, config, progress, checkpoint
            )
            # seconds: from the first attempt, the refused compilations included
            return replace(found, seconds=time.perf_counter() - started) if refused else found
        except RoundTooLarge as large:
            if checkpoint is not None or (large.grid_at_once is None and large.draws is None):
                raise
            if large.grid_at_once is not None:  # the cheaper remedy first: the same draws, the same result
                config = replace(config, grid_at_once=large.grid_at_once)
                instead = "scoring the grid search's candidates one at a time"
            else:
                config = replace(config, max_draws=large.draws)
                instead = f"running on the first {large.draws} draws"
            warnings.warn(f"{large}: {instead} instead", stacklevel=3)
            refused = True


def _reconstruct(
    model: Callable,
    draws: Any,
    free: Free,
    fixed: Mapping[str, Any] | None,
    support: Mapping[str, Constraint | str] | None,
    n_points: int,
    seed: int,
    config: ReconConfig,
    progress: Callable[[int, int], None] | None,
    checkpoint: str | Path | None,
) -> Reconstruction:
    """:func:`reconstruct`, refusing a round too large for memory (:class:`RoundTooLarge`)."""
    if isinstance(n_points, bool) or not isinstance(n_points, int | np.integer) or n_points < 1:
        raise ReconError(f"n_points must be at least 1 (a whole number), got {n_points!r}")
    release = prepare_release(model, draws, free, fixed, support)
    weighted, layout, fixed = release.weighted_model, release.layout, release.weighted_model.fixed
    started = time.perf_counter()
    theta = jnp.asarray(release.theta)
    if config.max_draws is not None:
        theta = theta[: config.max_draws]
    at_once = config.resolved_restarts_at_once()
    rounds = -(-config.restarts // at_once)
    attack = fingerprint(model, release.theta, layout.shapes, fixed, dict(layout.supports), n_points,
                         seed, config, at_once)  # fmt: skip
    store = None if checkpoint is None else Checkpoint.open(checkpoint, attack)
    coordinates = (
        Coordinates.standardised(theta)
        if config.coordinates == "standardised"
        else Coordinates.identity(theta.shape[1])
    )
    z = coordinates.to_attack(theta)
    estimator = config.resolved_estimator(theta.shape[1])
    subset = jax.random.permutation(jax.random.PRNGKey(seed + 2), z.shape[0])[: config.coarse_draws]
    minibatch = (
        config.batch_size if config.batch_size is not None and config.batch_size < z.shape[0] else None
    )

    problem = ScoreMatching(weighted, layout, coordinates, estimator, config.n_slices)
    # the repairs' gate is the self-check, which needs SELF_CHECK_DRAWS draws
    checking = (
        bool(config.rescue_restarts or config.refine_rounds)
        and minibatch is None
        and len(z) >= SELF_CHECK_DRAWS
    )
    refining = checking and bool(config.refine_rounds) and layout.dim > 0
    # Rounds by index: the restarts, the rescue's, the bootstrap replicates; then the repairs' record.
    rescue = range(rounds, rounds + (-(-config.rescue_restarts // at_once) if checking else 0))
    replicates = range(rescue.stop, rescue.stop + config.bootstrap)
    repairs = replicates.stop
    # for progress: the self-check and the Frank–Wolfe rounds count as one round; the rescue's, once they run
    units = rounds + config.bootstrap + checking

    def objectives(draws: Array, coarse_draws: Array) -> Objectives:
        """Built inside the compiled function, so that the draws are arguments, not embedded constants.
        Those on the subset of draws share its slices (from seed + 3), those on all draws theirs."""
        return Objectives(
            coarse=build_objective(problem, coarse_draws, seed + 3),
            full=build_objective(problem, draws, seed + 1),
            full_error=build_objective_error(problem, draws, seed + 1),
            minibatch=None if minibatch is None else build_objective(problem, draws, seed + 1, minibatch),
            coarse_in_mass=build_mass_quadratic(problem, coarse_draws, seed + 3),
            coarse_hessian=build_hessian(problem, coarse_draws, seed + 3),
        )

    keys = jnp.concatenate(  # the rescue's keys apart: the first restarts' do not depend on their number
        [
            jax.random.split(jax.random.PRNGKey(seed), config.restarts),
            jax.random.split(jax.random.fold_in(jax.random.PRNGKey(seed), 1), config.rescue_restarts),
        ]
    )
    bases = jax.jit(jax.vmap(lambda k: pseudo.base_points(k, n_points, layout.dim)))(keys)
    begin = make_start(weighted, layout, theta, n_points, estimator, config)
    # the last of the first restarts refits its cloud to the release's information (see run_stages)
    refits = np.arange(len(keys)) == (config.restarts - 1 if begin.refit is not None else -1)
    stage_steps = config.stage_steps(bool(begin.located), minibatch is not None)

    def attack_round(
        bases: Array,
        keys: Array,
        refits: Array,
        draws: Array,
        coarse_draws: Array,
        warm: Array,
        starts: tuple,
    ) -> tuple:
        """One round: ``at_once`` restarts (a leading axis), batched by ``vmap`` when more than one;
        ``refits``: which of them refit their cloud to the release's information; ``warm``: bootstrap
        replicates from the clouds ``starts`` (see :func:`run_stages`). Clouds come in and go out as
        plain tuples, which a kept program (:mod:`bayes_recon.programs`) can serialise."""
        fns = objectives(draws, coarse_draws)

        round_refits = jnp.any(refits)  # outside the vmap: one flag for the round

        def attack(base: Array, key: Array, refit: Array, start: tuple) -> tuple:
            params, *rest, cloud, fit = run_stages(
                fns,
                layout,
                begin,
                base,
                key,
                config,
                stage_steps,
                warm,
                pseudo.Cloud(*start),
                refit,
                round_refits,
            )
            points, weights = pseudo.measure(layout, params, base)
            bandwidths = kink_bandwidths(weighted, coordinates, points, draws)
            information = weights @ point_information(weighted, coordinates, draws, points, bandwidths)
            return ((points, weights), *rest, tuple(cloud), information, fit)

        if at_once == 1:
            first = jax.tree_util.tree_map(lambda leaf: leaf[0], starts)
            one = attack(bases[0], keys[0], refits[0], first)
            return jax.tree_util.tree_map(lambda leaf: leaf[None], one)
        return jax.vmap(attack)(bases, keys, refits, starts)

    def broadcast(cloud: pseudo.Cloud) -> tuple:
        return tuple(jnp.broadcast_to(leaf, (at_once, *leaf.shape)) for leaf in cloud)

    cold = (jnp.asarray(False), broadcast(begin.params.cloud))

    coarse_draws = z[subset]
    resamples = jax.random.randint(
        jax.random.PRNGKey(seed + 4), (config.bootstrap, z.shape[0]), 0, z.shape[0]
    )
    finished = {} if store is None else {i: found for i in range(repairs) if (found := store.load(i))}
    if any(i in finished for i in rescue):
        units += len(rescue)
    cpu = jax.default_backend() == "cpu"
    compiled, compile_seconds = None, 0.0

    def compile_once() -> None:
        """Compiles the attack's program, once, when a round is first to run (a resumed attack may need
        none)."""
        nonlocal compiled, compile_seconds
        if compiled is not None:
            return
        compiling = time.perf_counter()

        def model_calls() -> tuple:
            """Where the program calls into the user's model, derivative rules included, at its sizes
            (shapes only: a jaxpr holds no argument's value)."""
            data, weights = jax.eval_shape(partial(pseudo.measure, layout), begin.params, bases[0])
            draw = jax.ShapeDtypeStruct(theta.shape[1:], theta.dtype)
            return (
                (weighted.log_density, (draw, data, weights)),
                (jax.hessian(weighted.log_density), (draw, data, weights)),
                (jax.hessian(weighted.loglik_per_point), (draw, data)),
                (begin.with_responses, (begin.params.cloud, bases[0])),
            )

        inputs = (bases[:at_once], keys[:at_once], jnp.asarray(refits[:at_once]), z, coarse_draws, *cold)
        lowered = programs.lower(attack_round, inputs, attack, model_calls)
        compiled = lowered.compile(CPU_COMPILER_OPTIONS if cpu else None)
        compile_seconds = time.perf_counter() - compiling
        try:
            if cpu:  # XLA's count is of the device's buffers: on a CPU, the process's memory
                grid_shrinks = bool(begin.searched) and begin.grid_at_once > 1
                _check_round_memory(compiled, n_points, len(z), grid_shrinks)
        except RoundTooLarge as large:
            if store is not None and not finished:  # a checkpoint of no rounds: the rerun it asks for
                remove(store.folder)  # (other draws, another attack) is not refused as a stranger
            elif store is not None:
                raise RoundTooLarge(
                    f"{large}. Each of these makes another attack, which the rounds kept in {store.folder} "
                    "would refuse: start it afresh (--fresh; bayes_recon.checkpoint.remove)",
                    None,
                    None,
                ) from None
            raise

    if any(i not in finished for i in (*range(rounds), *replicates)):
        compile_once()
    _report(progress, len(finished), units)  # compiled (or all found): running

    def run(index: int, start: tuple[Array, tuple]) -> dict[str, np.ndarray]:
        # The last round of the restarts (or of the rescue's) is filled up with restarts again and cut
        # back: one compiled shape. A bootstrap round takes the base points and keys of the restarts of
        # the round of its number, on its own resample, all from the best restart's cloud (``start``).
        replicate = index - replicates.start
        if index in rescue:
            first = (index - rescue.start) * at_once
            batch = config.restarts + np.arange(first, first + at_once) % config.rescue_restarts
        else:
            first = (index if replicate < 0 else replicate) * at_once
            batch = np.arange(first, first + at_once) % config.restarts
        draws = z if replicate < 0 else z[resamples[replicate]]
        coarse = coarse_draws if replicate < 0 else draws[subset]
        inputs = (bases[batch], keys[batch], jnp.asarray(refits[batch] & (replicate < 0)), draws, coarse)
        return _round_arrays(_run_round(compiled, (*inputs, *start), at_once, n_points))

    def keep(index: int, arrays: dict[str, np.ndarray]) -> None:
        finished[index] = arrays
        if store is not None:
            store.save(index, arrays)

    def run_all(indices: range, start: tuple[Array, tuple]) -> None:
        pending = [i for i in indices if i not in finished]
        if not pending:
            return
        compile_once()  # the rescue's rounds may be the first to run in a resumed attack
        # A round starts only when one ends, so that a stop (an error, an interrupt, the progress
        # callback raising) leaves no round started after it; those running finish and are kept.
        pool, waiting = ThreadPoolExecutor(len(pending)), iter(pending)
        first = next(waiting)
        running = {pool.submit(run, first, start): first}  # the memory count is taken while it runs
        side_by_side = _rounds_side_by_side(compiled, len(pending), cpu, config.rounds_at_once)
        running |= {pool.submit(run, i, start): i for i in itertools.islice(waiting, side_by_side - 1)}
        try:
            while running:
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    keep(running.pop(future), future.result())
                    _report(progress, len(finished), units)
                    if (index := next(waiting, None)) is not None:
                        running[pool.submit(run, index, start)] = index
        finally:
            pool.shutdown()
            for future, index in running.items():
                if future.exception() is None:
                    keep(index, future.result())

    def restarts_run(rescued: bool) -> dict[str, np.ndarray]:
        """The first restarts' arrays, and the rescue's after them (``rescued``)."""
        groups = [(range(rounds), config.restarts)] + ([(rescue, config.rescue_restarts)] if rescued else [])
        return {
            k: np.concatenate([np.concatenate([finished[i][k] for i in r])[:count] for r, count in groups])
            for k in finished[0]
        }

    def best_of(arrays: dict[str, np.ndarray], first: int = 0) -> int:
        """The restart of lowest objective from ``first`` on, among those within the information bound and
        finite (the first restarts' must be: :func:`_check_finite`).

        A restart whose measure carries more information than a release can, the Frank–Wolfe rounds'
        own bound (refine.py), is passed over where another is within it: on a probit regression
        (N = 100, covariates at 0.01 to 1,000) one restart ended at the true data's objective with mass
        110, the other on saturated points of mass 5e17 whose information was 1.4e8 (the truth's 4.5,
        the bound 40) and whose objective, -1.1e8, the draws cannot check."""
        final, information = arrays["final"][first:], arrays["information"][first:]
        admissible = _admissible(information, z.shape[1]) & np.isfinite(final)
        return first + int(np.argmin(np.where(admissible, final, np.inf)))

    def refined_measure(record: Mapping[str, np.ndarray]) -> WeightedMeasure:
        points = layout.assemble(jnp.asarray(record["z"]), jnp.repeat(layout.strata, n_points, axis=0))
        return WeightedMeasure({k: np.asarray(v) for k, v in points.items()}, record["weights"])

    def repair(measure: WeightedMeasure, gate: SelfCheck) -> tuple[dict[str, np.ndarray], tuple]:
        """Where the best restart's measure fails the self-check: Frank–Wolfe rounds from it, then, where
        their result fails too (or none can run), the rescue's restarts, whose best is taken if it passes
        or, failing too, has the lower objective.
        The record the checkpoint keeps (the rounds' result, whether the rescue's best was taken) and the
        final measure with its check.

        The rounds come first: they move the measure they are given (a mixture regression, N = 100, k = 3:
        from 5 Monte Carlo tolerances above the true data's objective to below it, passing), the
        restarts start afresh (there, the rescue's ended above it, passing)."""
        nonlocal units
        record, checked = {"rescued": np.asarray(False)}, (measure, gate)
        if gate.reproduces:
            return record, checked
        start = layout.unconstrain({k: jnp.asarray(v) for k, v in measure.points.items()})
        if refining and np.all(np.isfinite(start)):  # a saturated point has no coordinates
            optimiser = OptimiserConfig(config.method, config.learning_rate)
            refiner = build_refiner(problem, z, seed, n_points, optimiser, config.steps, begin.respond)
            found = refine(refiner, start, measure.weights, config.refine_rounds)
            record |= {k: np.asarray(v) for k, v in found._asdict().items()}
            refined = refined_measure(record)
            checked = refined, gate_of(refined)
        if checked[1].reproduces or not rescue:
            return record, checked
        units = rounds + len(rescue) + config.bootstrap + checking
        run_all(rescue, cold)
        arrays = restarts_run(True)
        final, information = arrays["final"][config.restarts :], arrays["information"][config.restarts :]
        if not np.any(np.isfinite(final) & within_information_bound(information, z.shape[1])):
            return record, checked  # none the draws can check
        rescuer = best_of(arrays, config.restarts)
        rescued = _measure_of(arrays, rescuer)
        rescued_gate = gate_of(rescued)
        # where neither passes, the lower objective (the attack's own measure of a result), if NUTS could
        # sample the rescue's posterior (an improper one is no better for a lower objective)
        failed = float(record["objectives"][-1]) if "z" in record else float(arrays["final"][best])
        sampled = np.isfinite(rescued_gate.statistic)
        if rescued_gate.reproduces or (sampled and arrays["final"][rescuer] < failed):
            return record | {"rescued": np.asarray(True)}, (rescued, rescued_gate)
        return record, checked

    run_all(range(rounds), cold)
    arrays = restarts_run(False)
    _check_finite(arrays["objective"], arrays["final"], config)
    best = best_of(arrays)
    measure, setup = _measure_of(arrays, best), AttackSetup(weighted, layout, coordinates, z, estimator, seed)
    floor = floor_check(setup, config.n_slices) if checking else None

    def gate_of(measure: WeightedMeasure) -> SelfCheck:
        return round_trip(setup, measure.points, measure.weights, floor=floor(measure))

    repaired, checked = None if store is None else store.load(repairs), None
    if checking and repaired is None:
        repaired, checked = repair(measure, gate_of(measure))
        if store is not None:
            store.save(repairs, repaired)
    if rescue and all(i in finished for i in rescue):  # the rescue ran: its restarts join the history
        arrays = restarts_run(True)
    objective = float(arrays["final"][best])
    history = {
        "objective": arrays["objective"],
        "total_mass": arrays["total_mass"],
        "mean": arrays["mean"],
        "var": arrays["var"],
        "stage_steps": np.asarray(stage_steps),
        "steps_taken": arrays["steps_taken"],
        "information": arrays["information"],
        "information_fit": arrays["information_fit"],
    }
    if repaired is not None and bool(repaired["rescued"]):
        best = best_of(arrays, config.restarts)
        measure, objective = _measure_of(arrays, best), float(arrays["final"][best])
    elif repaired is not None and "z" in repaired:
        measure, objective = refined_measure(repaired), float(repaired["objectives"][-1])
        history |= {f"refine_{k}": repaired[k] for k in ("objectives", "gaps", "converged")}
    warm_start = pseudo.Cloud(*(arrays[f"warm_start/{field}"][best] for field in pseudo.Cloud._fields))
    run_all(replicates, (jnp.asarray(True), broadcast(warm_start)))
    _report(progress, units, units)  # the check and the repairs, run before the replicates, count last
    bootstrapped = [_best_of_round(finished[i], z.shape[1]) for i in replicates]
    bootstrap = (
        {k: np.stack([r[k] for r in bootstrapped]) for k in bootstrapped[0]}
        if bootstrapped
        else {"objective": np.zeros(0)}
    )
    measure = WeightedMeasure(
        measure.points,
        measure.weights,
        {
            "attack": "bayes_recon.reconstruct",
            "estimator": estimator,
            "seed": seed,
            "objective": objective,
            "config": asdict(config),
            "n_draws": int(z.shape[0]),
            # trials or an exposure that differ by row: the weights count their units, a pseudo-row each
            "units": release.units,
        },
    )
    found = Reconstruction(
        measure,
        objective,
        arrays["final"],
        best,
        history,
        bootstrap,
        config,
        0.0,
        compile_seconds,
        setup,
        checked,
    )
    # The last stage was still moving after its first steps, crawling (L-BFGS along a curved valley):
    # Newton steps the objective confirms carry it on (see closing_steps).
    if "refine_converged" not in history and history["steps_taken"][best, 3] > config.steps:
        found = found.with_closing_steps()
    return replace(found, seconds=time.perf_counter() - started)


# The attack is one program of about a thousand small fusions (derivatives up to the fourth
# order). XLA's newer CPU fusion emitters compile it about 3 s slower than the elemental emitter
# and run it no faster (kidiq at M = 50: 19-20 s → 15-16 s to compile, same result to 1e-7;
# nes2000 at M = 10, ten parameters: no gain, 64 s against 58 s in one measurement). jaxlib 0.10
# also hands some fusions to the YNNPACK library by default; its reductions run the program's many
# small sums over draws and points about twice as slowly as the emitter's loops. The empty list
# turns every library fusion off (the option takes enum names; XLA_FLAGS' "-reduce" form is not
# accepted here): a kidiq round at M = 50 runs in 0.9 s against 1.9 s, a logistic regression's
# (N = 100) rounds in 8.3 s against 12.5 s, to the same objectives up to the order of the sums,
# for about 1 s more compiling.
CPU_COMPILER_OPTIONS = {"xla_cpu_use_fusion_emitters": False, "xla_cpu_experimental_ynn_fusion_type": ""}


def _same_measure(a: WeightedMeasure, b: WeightedMeasure) -> bool:
    return np.array_equal(a.weights, b.weights) and all(
        np.array_equal(a.points[k], b.points[k]) for k in a.points
    )


def _report(progress: Callable[[int, int], None] | None, done: int, total: int) -> None:
    if progress is not None:
        progress(min(done, total), total)


def _run_round(compiled: Callable, inputs: tuple, at_once: int, n_points: int) -> tuple:
    """One compiled round, waited for (dispatch is asynchronous); running out of memory is said in words.
    ``inputs``: the bases, keys, information fits, draws, subset of draws, and warm start (see
    ``attack_round``)."""
    draws = inputs[3]
    try:
        return jax.block_until_ready(compiled(*inputs))
    except jax.errors.JaxRuntimeError as err:
        if "RESOURCE_EXHAUSTED" not in str(err):
            raise
        raise ReconError(
            f"out of memory: {at_once} restart(s) at once × {n_points} points per stratum × "
            f"{draws.shape[0]} draws × {draws.shape[1]} parameters did not fit "
            f"({str(err).splitlines()[0]}). Use fewer points (--points), fewer draws (--max-draws), "
            "one restart at a time (--restarts-at-once 1 --rounds-at-once 1), or minibatches of draws "
            "(--batch-size)."
        ) from err


def _rounds_side_by_side(compiled: Any, pending: int, cpu: bool, asked: int | None) -> int:
    """How many rounds run at once, each in its own thread: ``asked`` if given; else on a CPU one fewer
    than the cores this process may use, as many as fit in half the memory available now by XLA's own
    count of the program's working memory (one where XLA gives no count); one on an accelerator. The
    result does not depend on it: every round is the same program on its own inputs.

    One core is left free because XLA runs each round on a thread of its CPU pool (one per core), and a
    batched factorisation in it (jaxlib's LAPACK kernels: a Cholesky of every grid candidate's cloud)
    waits on that same pool for its parts: with every thread a waiting round, nothing runs them, and
    diamonds-diamonds (25 covariates) hung at 0 % CPU with two rounds on two cores. One round uses more
    than one core anyway: on two cores, one at a time took 55.2 s for mesquite-logmesquite (M = 10)
    against 54.4 s two at a time."""
    if asked is not None:
        return min(asked, pending)
    need = _round_memory(compiled)
    if not cpu or need is None:
        return 1
    fits = available_memory() // (2 * need) if need > 0 else pending
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return int(max(1, min(pending, cores - 1, fits)))


def _round_memory(compiled: Any) -> int | None:
    """Bytes one round of the compiled attack works in, by XLA's own count; None where it gives none."""
    try:
        stats = compiled.memory_analysis()
        return stats.temp_size_in_bytes + stats.argument_size_in_bytes + stats.output_size_in_bytes
    except (AttributeError, NotImplementedError, RuntimeError):  # None, or a backend without the count
        return None


class RoundTooLarge(ReconError):
    """One round of the attack needs more memory than is available now; ``grid_at_once``: the grid
    search's candidates to score together instead (None where they are not what to change);
    ``draws``: how many of the first draws would fit (None where fewer than :data:`FEWEST_DRAWS`)."""

    def __init__(self, message: str, grid_at_once: int | None, draws: int | None) -> None:
        super().__init__(message)
        self.grid_at_once, self.draws = grid_at_once, draws


# Below this many draws the objective's Monte Carlo error (∝ 1/√draws) swamps what a release shows.
FEWEST_DRAWS = 200
# The share of the memory available a round may count on: the rest of the process (the draws, the
# self-check's sampler) takes some more. The beta-binomial's 50 points on 616 draws, a 16.3 GiB round
# against 20.4 GiB available, peaked at 20.6 GB of the machine's 24.
ROUND_SHARE = 2 / 3


def _check_round_memory(compiled: Any, n_points: int, draws: int, grid_shrinks: bool) -> None:
    """Refuse a round that cannot fit in its share of the memory available now, before it runs: the
    program's working memory grows with points × draws and with the order of the likelihood's
    derivatives (a beta-binomial regression's, 50 points: 6.7, 13.3 and 26.5 GiB on 250, 500 and 1,000
    draws; a binomial's, 20 points on 1,000 draws: 1.5 GiB), beyond what
    :func:`bayes_recon.pipeline.check_memory` can size before compiling. Where the grid search scores
    several candidates together (``grid_shrinks``), one at a time is the first remedy: the memory budget
    that sizes its batch counts the objective's numbers, not the intermediates of the model's special
    functions, and at 20 points the beta-binomial's 59 candidates at once took 9.9 of the round's
    10.6 GiB (8 at once: 4.4 GB peak against 14.3, as fast, the same result). Then fewer draws, counted
    in proportion, less a twentieth: part of the count does not shrink with the draws (the
    beta-binomial's 513 draws counted 13.7 GiB where the proportion gave 13.6, and a third compilation
    followed)."""
    need, have = _round_memory(compiled), ROUND_SHARE * available_memory()
    if need is None or have <= 0 or need <= have:
        return
    fit = int(0.95 * draws * have / need)
    fewer = (
        f"fewer draws (ReconConfig(max_draws={fit}), --max-draws {fit})"
        if fit >= FEWEST_DRAWS
        else "fewer draws (ReconConfig.max_draws, --max-draws)"
    )
    one_at_a_time = (
        "score the grid search's candidates one at a time first (ReconConfig(grid_at_once=1), "
        "--grid-at-once 1: less memory, the same result); where that is not enough, "
        if grid_shrinks
        else ""
    )
    raise RoundTooLarge(
        f"one round of this attack needs {need / 2**30:,.1f} GiB of working memory (XLA's count for "
        f"{n_points} points on {draws} draws), more than the {have / 2**30:,.1f} GiB it may take of the "
        f"memory available now; {one_at_a_time}use {fewer}, fewer points (n_points, --points) or "
        "minibatches of draws (ReconConfig.batch_size, --batch-size)",
        1 if grid_shrinks else None,
        fit if fit >= FEWEST_DRAWS else None,
    )


def moment_namer(points: Mapping[str, Any]) -> Callable[[str], str]:
    """The name of a statistic of :func:`statistics_spread` ("N", "the mean of X[0]", "the covariance of
    X[0] and y") from its key, for a measure's ``points``."""
    labels = [  # the coordinates: the free columns flattened, in the measure's order
        name if len(np.shape(v)) == 1 else f"{name}[{j}]"
        for name, v in points.items()
        for j in range(int(np.prod(np.shape(v)[1:], dtype=int)))
    ]

    def named(key: str) -> str:
        if key == "total_mass":
            return "N"
        statistic, index = key.rstrip("]").split("[")
        if statistic == "cov":
            first, second = (labels[int(i)] for i in index.split(","))
            return f"the covariance of {first} and {second}"
        return f"the {statistic} of {labels[int(index)]}"

    return named


def statistics_spread(
    mass: np.ndarray, mean: np.ndarray, var: np.ndarray, cov: np.ndarray | None = None
) -> dict[str, float]:
    """How far apart several ends of the attack are (a leading axis): the total mass's and each free
    coordinate's sd's range over their largest value, each coordinate's mean's range in units of its
    largest sd, and with ``cov`` (ends × coordinates × coordinates) each pair's covariance's range
    over the largest product of their sds (correlation units); unchanged by the columns' units and
    origins."""

    def relative(values: np.ndarray, scale: float) -> float:
        if not np.isfinite(values).all():  # an end that left the finite numbers determines nothing
            return np.inf
        return float(np.ptp(values) / scale) if scale > 0 else 0.0

    sd = np.sqrt(np.maximum(var, 0.0))
    out = {"total_mass": relative(mass, np.abs(mass).max())}
    for i in range(mean.shape[1]):
        out[f"mean[{i}]"] = relative(mean[:, i], sd[:, i].max())
        out[f"sd[{i}]"] = relative(sd[:, i], sd[:, i].max())
    if cov is not None:
        for i, j in itertools.combinations(range(mean.shape[1]), 2):
            out[f"cov[{i},{j}]"] = relative(cov[:, i, j], (sd[:, i] * sd[:, j]).max())
    return out


# A statistic whose two standard errors (Reconstruction.standard_errors, in statistics_spread's units) reach
# this is not determined by the release.
DETERMINED_WITHIN = 0.25
# Mass whose weighted log-likelihood varies over the draws by under UNSEEN_TILT of the whole data's is
# mass the release barely sees (Reconstruction.unseen_mass; draws thinned to about UNSEEN_DRAWS). With
# UNSEEN_LEAVES_N_OPEN or more of the mass so, the release does not determine N.
UNSEEN_TILT = 0.01
UNSEEN_DRAWS = 1000
UNSEEN_LEAVES_N_OPEN = 0.2


def _admissible(information: np.ndarray, dim: int) -> np.ndarray:
    """Which restarts' measures carry no more information than a release can (the bound of
    :mod:`bayes_recon.refine`'s rounds); all of them where none does."""
    within = within_information_bound(information, dim)
    return within | ~within.any()


def _best_of_round(arrays: dict[str, np.ndarray], dim: int) -> dict[str, np.ndarray]:
    """A bootstrap round's replicate: the final objective, weights and points of its best restart (among
    those within the information bound, as the restarts'; ``dim``: the number of parameters)."""
    final = np.where(_admissible(arrays["information"], dim), arrays["final"], np.inf)
    best = int(np.argmin(np.nan_to_num(final, nan=np.inf)))
    kept = {k: v[best] for k, v in arrays.items() if k == "weights" or k.startswith("points/")}
    return {"objective": arrays["final"][best], **kept}


def _measure_of(
    arrays: dict[str, np.ndarray], index: int, meta: Mapping[str, Any] | None = None
) -> WeightedMeasure:
    """The measure at ``index`` of arrays with a leading restart (or replicate) axis."""
    points = {k.removeprefix("points/"): v[index] for k, v in arrays.items() if k.startswith("points/")}
    return WeightedMeasure(points, arrays["weights"][index], meta or {})


def _round_arrays(outputs: tuple) -> dict[str, np.ndarray]:
    """A round's outputs as named host arrays with a leading restart axis (what a checkpoint keeps)."""
    (points, weights), values, (mass, mean, var), final, steps_taken, warm_start, information, fit = outputs
    named = {"weights": weights, "objective": values, "total_mass": mass, "mean": mean, "var": var,
             "final": final, "steps_taken": steps_taken, "information": information,
             "information_fit": fit}  # fmt: skip
    return {
        **{f"points/{k}": np.asarray(v) for k, v in points.items()},
        **{f"warm_start/{k}": np.asarray(v) for k, v in zip(pseudo.Cloud._fields, warm_start, strict=True)},
        **{k: np.asarray(v) for k, v in named.items()},
    }


def _check_finite(values: np.ndarray, final: np.ndarray, config: ReconConfig) -> None:
    if np.all(np.isfinite(final)):
        return
    if not np.isfinite(values[:, 0]).any():
        raise ReconError(
            "the objective is not finite at the initial pseudo-data (all points at the centre of each "
            "column's support); check the supports given for the free columns and that the draws "
            "come from this model"
        )
    bad = np.argwhere(~np.isfinite(values))
    where = f" (first at step {int(bad[0][1])} of restart {int(bad[0][0])})" if len(bad) else ""
    raise ReconError(
        f"the objective became non-finite during optimisation{where}. Usually the pseudo-data left "
        "the region where the likelihood is defined, or a step was too large: give the free columns "
        "their supports (support=...), keep coordinates='standardised', lower learning_rate "
        f"(now {config.learning_rate}) or use method='lbfgs', and check the draws for outliers."
    )
