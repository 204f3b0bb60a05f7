"""What a release pins down, before any attack: the data statistics the model-induced kernel sees.

Two data sets give the same weighted posterior exactly when Σ_i s(x_i, θ) agrees at every draw θ,
with s(x, θ) = ∇_θ log p(x|θ) (see :mod:`bayes_recon.kernel`). When each feature x ↦ s(x, θ) is a
polynomial in the data columns, s(x, θ) = A(θ) m(x) over the monomials m(x) of the columns, the
release determines A(θ) Σ_i m(x_i): the statistics c·Σ_i m(x_i) for c in the span of the rows of
all A(θ). That span is found numerically, without any data: the features at a few hundred draws
are evaluated at random probe points of the columns' supports, projected on the monomials of
degree ≤ ``max_degree`` (a projection residual above the tolerance means the features are not
such polynomials), and the span of their coefficients is written in reduced row-echelon form
over the monomials ordered by degree, so each statistic is named by its leading monomial:
N, Σ x, Σ x², Σ x·y, ... For a Gaussian linear regression these are exactly the entries of N,
XᵀX, Xᵀy and yᵀy in terms of the data columns.

Monomials that coincide on the support are one statistic: x² = x for a binary column, so only
the lower one is kept and the other is listed as an alias. Columns with positive support whose
features are polynomial only in their logarithm (mesquite's log volume) are tried as logs.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.distributions import constraints
from numpyro.distributions.constraints import Constraint
from numpyro.infer.util import constrain_fn

from bayes_recon import pseudo
from bayes_recon.divergence import Coordinates
from bayes_recon.draws import spread_rows
from bayes_recon.kernel import model_features
from bayes_recon.modelcheck import Free, prepare_release
from bayes_recon.models import LinearGaussian
from bayes_recon.oracle import pack
from bayes_recon.precision import attack_numerics
from bayes_recon.reconstruct import AttackSetup
from bayes_recon.stages import response_predictor
from bayes_recon.supports import observed_columns
from recon_core.errors import ReconError
from recon_core.measure import WeightedMeasure

Monomial = tuple[int, ...]  # a power per variable


@dataclass(frozen=True)
class IdentifiabilityConfig:
    """``max_degree`` of the monomials tried; ``max_draws`` draws, spread over the chains; probe points
    (``probe_factor`` times the number of monomials); ``tolerance``: the relative size below which
    a singular value or a projection residual counts as zero."""

    max_degree: int = 4
    max_draws: int = 200
    probe_factor: int = 3
    tolerance: float = 1e-8
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("max_degree", "max_draws", "probe_factor"):
            if getattr(self, name) < 1:
                option = name.replace("_", "-")
                raise ReconError(
                    f"{name} must be at least 1, got {getattr(self, name)}; pass --{option} 1 or more"
                )


@dataclass(frozen=True)
class Variable:
    """One scalar coordinate of a free column (entry ``index`` of a shaped column), or its logarithm."""

    column: str
    index: int | None
    log: bool
    binary: bool

    @property
    def label(self) -> str:
        name = self.column if self.index is None else f"{self.column}[{self.index}]"
        return f"log {name}" if self.log else name

    def values(self, points: Mapping[str, Any]) -> np.ndarray:
        column = np.asarray(points[self.column], dtype=float)
        value = column.reshape(len(column), -1)[:, self.index or 0]
        return np.log(value) if self.log else value


@dataclass(frozen=True)
class Statistic:
    """Σ_i f(x_i) for the polynomial f = Σ_k c_k m_k over the variables: ``terms`` pairs monomials and c_k."""

    variables: tuple[Variable, ...]
    terms: tuple[tuple[Monomial, float], ...]

    @property
    def name(self) -> str:
        if len(self.terms) == 1 and not any(self.terms[0][0]):
            return "N"
        body = _polynomial(self.variables, self.terms)
        return f"Σ {body}" if len(self.terms) == 1 else f"Σ ({body})"

    @property
    def degree(self) -> int:
        return max(sum(m) for m, _ in self.terms)

    def per_point(self, points: Mapping[str, Any]) -> np.ndarray:
        """f(x_i) for every point."""
        return sum(c * _monomial_values(self.variables, [m], points)[:, 0] for m, c in self.terms)

    def of(self, measure: WeightedMeasure) -> float:
        """The statistic of a (weighted) data measure: Σ_j w_j f(x_j)."""
        return float(measure.integrate(self.per_point(measure.points)))


@dataclass(frozen=True)
class Identifiability:
    """The statistics a release pins down, as found from the model and its draws alone.

    ``rank``: the number of independent statistics the features see (None when they are not
    polynomials: then no finite list in this basis holds all they see). ``polynomial``: whether the
    features are polynomials of degree ``degree`` (the lowest that fits; the largest tried when
    none does) in ``variables`` (where none fits, the columns themselves, not their logs); only then
    are the ``statistics`` named (otherwise empty).
    ``aliases``: monomials equal on the support to a lower one, e.g. ``mom_hs² = mom_hs`` for a binary column.
    ``kernel_effective_rank``: the effective rank exp(H) of the model-induced kernel on the probe
    points (H the entropy of its normalised eigenvalues): about how many independent directions of
    the data the release sees, polynomial features or not. Zero only when the likelihood does not
    depend on the free columns at all: then, and only then, the release reveals nothing of them.
    ``linear_in_response``: when the features are not polynomials, the statistics Σ y·f(x) through
    which a response y enters the likelihood linearly with a polynomial f of the other columns (a
    GLM with its canonical link: Σ y, Σ y·x_j); the rest of the likelihood sees the covariates
    through non-polynomial functions, which a release may pin down only loosely (see
    :meth:`bayes_recon.reconstruct.Reconstruction.restart_spread`).
    """

    statistics: tuple[Statistic, ...]
    variables: tuple[Variable, ...]
    rank: int | None
    polynomial: bool
    degree: int
    aliases: tuple[str, ...]
    n_draws: int
    seconds: float
    kernel_effective_rank: float = 0.0
    linear_in_response: tuple[str, ...] = ()

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.statistics]

    def to_json(self) -> dict[str, Any]:
        return {
            "variables": [v.label for v in self.variables],
            "rank": self.rank,
            "polynomial": self.polynomial,
            "degree": self.degree,
            "statistics": [
                {
                    "name": s.name,
                    "terms": [{"powers": list(m), "coefficient": c} for m, c in s.terms],
                }
                for s in self.statistics
            ],
            "aliases": list(self.aliases),
            "kernel_effective_rank": self.kernel_effective_rank,
            "linear_in_response": list(self.linear_in_response),
            "n_draws": self.n_draws,
            "seconds": self.seconds,
        }


@attack_numerics
def identifiable_statistics(
    model: Callable,
    draws: Any,
    free: Free,
    fixed: Mapping[str, Any] | None = None,
    support: Mapping[str, Constraint | str] | None = None,
    config: IdentifiabilityConfig | None = None,
) -> Identifiability:
    """The data statistics that posterior ``draws`` of ``model`` pin down; no data needed.

    ``free``, ``fixed``, ``support`` and ``draws`` are as for :func:`bayes_recon.reconstruct`.
    """
    config = config or IdentifiabilityConfig()
    return identify(feature_setup(model, draws, free, fixed, support, config.max_draws), config)


@attack_numerics
def identify(
    setup: AttackSetup, config: IdentifiabilityConfig, points: Mapping[str, np.ndarray] | None = None
) -> Identifiability:
    """The lowest degree, raw columns before logs, at which the features are polynomials, and their span.

    ``points``: probe points (default :func:`probe_points`, as many as :func:`probe_size` says).
    """
    started = time.perf_counter()
    raw, logged = _variables(setup.layout, logs=False), _variables(setup.layout, logs=True)
    try:
        points = probe_points(setup, probe_size(setup, config), config.seed) if points is None else points
        features = model_features(setup, points, setup.draws.shape[0])  # (n, S·d), once for every degree
    except (TypeError, ValueError, IndexError) as err:  # the model on probe data of other lengths
        raise ReconError(
            f"the model failed on probe data: {err}. "
            "A fixed argument with one value per data point (a column the adversary knows) is not "
            "supported: the statistics would pair known and unknown rows; declare the column free."
        ) from err
    effective_rank = kernel_effective_rank(features)
    for degree in range(1, config.max_degree + 1):
        for variables in [raw, logged] if logged != raw else [raw]:
            found = _identify(setup, variables, degree, points, features, config)
            if found.polynomial:
                break
            if variables is raw:
                unfit = found  # the columns as they are, not their logs, name what no polynomial fits
        else:
            continue
        break
    else:
        found = unfit
    linear = () if found.polynomial else _linear_in_response(setup, raw, points, config)
    return dataclasses.replace(
        found,
        seconds=time.perf_counter() - started,
        kernel_effective_rank=effective_rank,
        linear_in_response=linear,
    )


def _response_slopes(setup: AttackSetup, points: Mapping[str, np.ndarray], response: str) -> np.ndarray:
    """∂/∂y ∇_θ log p(x_j | θ) for the response y at every point and draw, (M, S·d) like the features:
    by differentiation, not a difference of features that can be 10⁵⁰ (exp(η) at a far probe point)."""
    draws, coordinates, model = setup.draws, setup.coordinates, setup.weighted_model
    data = {k: jnp.asarray(v) for k, v in points.items()}
    y = jnp.asarray(points[response], dtype=float)

    def per_draw(z: jax.Array) -> jax.Array:
        def slope(theta: jax.Array) -> jax.Array:  # each point's log-likelihood sees only its own y
            return jax.grad(lambda v: jnp.sum(model.loglik_per_point(theta, {**data, response: v})))(y)

        return jax.jacfwd(slope)(coordinates.to_model(z)) @ coordinates.scale

    slopes = jax.jit(jax.vmap(per_draw))(draws)  # (S, M, d)
    return np.asarray(jnp.transpose(slopes, (1, 0, 2)).reshape(slopes.shape[1], -1))


def _linear_in_response(
    setup: AttackSetup,
    variables: tuple[Variable, ...],
    points: Mapping[str, np.ndarray],
    config: IdentifiabilityConfig,
) -> tuple[str, ...]:
    """Σ y·f(x) for every response y whose slope ∂s/∂y of the features is a polynomial f of the other
    columns, the same at every draw: the response enters the log-likelihood as y·η(x, θ), η linear
    in θ (a canonical link), and those sums are what it contributes."""
    layout, weighted = setup.layout, setup.weighted_model
    responses = observed_columns(weighted.model, layout.shapes, dict(weighted.fixed), layout.supports)
    names = []
    for response in responses:
        levels = pseudo.levels(layout.support(response))
        if layout.shapes[response] != () or (levels is not None and len(levels) > 2):
            continue  # a class label plus one is another class, not a unit step
        step = _response_slopes(setup, points, response)
        others = tuple(v for v in variables if v.column != response)
        for degree in range(1, config.max_degree + 1):
            found = _identify(setup, others, degree, points, step, config)
            if found.polynomial:
                names += [
                    f"Σ {response}" if s.name == "N" else f"Σ {response}·{s.name.removeprefix('Σ ')}"
                    for s in found.statistics
                ]
                break
    return tuple(names)


def kernel_effective_rank(features: np.ndarray) -> float:
    """exp(entropy) of the normalised eigenvalues of the kernel φφᵀ of the features φ (n, S·d), each
    point's features scaled to unit norm first: a probe point far out in a covariate (exp(η) of a
    large η) would otherwise make the spectrum its own, whatever the covariate's units."""
    features = np.nan_to_num(features)
    norms = np.linalg.norm(features, axis=1, keepdims=True)
    features = features / np.where(norms > 0, norms, 1.0)
    eigenvalues = np.linalg.svd(features, compute_uv=False) ** 2
    if not eigenvalues.sum() > 0:
        return 0.0
    p = eigenvalues / eigenvalues.sum()
    p = p[p > 0]
    return float(np.exp(-np.sum(p * np.log(p))))


def feature_setup(
    model: Callable,
    draws: Any,
    free: Free,
    fixed: Mapping[str, Any] | None,
    support: Mapping[str, Constraint | str] | None,
    max_draws: int,
) -> AttackSetup:
    """What :func:`bayes_recon.kernel.model_features` needs: the model, the free columns and up to
    ``max_draws`` draws spread over the chains, in NumPyro's unconstrained coordinates."""
    release = prepare_release(model, draws, free, fixed, support)
    rows = spread_rows(len(release.theta), max_draws)
    weighted, layout, theta = release.weighted_model, release.layout, jnp.asarray(release.theta[rows])
    try:  # whitened: features in the posterior's own units, whatever the parameters' units
        coordinates = Coordinates.standardised(theta)
    except ReconError:  # fewer draws than parameters, or a constant one: the raw coordinates
        coordinates = Coordinates.identity(theta.shape[1])
    return AttackSetup(weighted, layout, coordinates, coordinates.to_attack(theta))


def probe_size(setup: AttackSetup, config: IdentifiabilityConfig) -> int:
    """Probe points enough for every monomial of degree ≤ max_degree, ``probe_factor`` times over."""
    return (
        config.probe_factor * len(_monomials(len(_variables(setup.layout, logs=False)), config.max_degree))
        + 50
    )


def probe_points(setup: AttackSetup, n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """n random points of the columns' supports (binary columns 0/1), in the model's own units.

    Responses (columns an observed site generates) are drawn from the model at the posterior
    mean instead: a coefficient 1/σ² next to β²/σ² is lost to rounding unless they have the
    model's own scale (earnings in dollars). Covariates on the real line or the positive one are
    spread by the scales of :func:`covariate_scales`, so that a model that multiplies a column by 10³
    inside (its data in thousandths) is probed where that column moves its features.
    """
    layout, weighted = setup.layout, setup.weighted_model
    data = {**weighted.fixed, **layout.example(1)}
    theta = setup.coordinates.to_model(jnp.mean(setup.draws, axis=0))
    mean = constrain_fn(weighted.model, (), data, weighted.unravel(theta))
    responses, predict = response_predictor(weighted.model, layout, dict(weighted.fixed), mean)
    kinds = _scalable_coordinates(layout, responses)

    @partial(jax.jit, static_argnames="rows")
    def draw(key: jax.Array, log_scales: jax.Array, rows: int) -> tuple[jax.Array, jax.Array]:
        k1, k2, k3 = jax.random.split(key, 3)
        z, bits = jax.random.normal(k1, (rows, layout.dim)), layout.random_bits(k2, rows)
        spread, shift = (jnp.where(kinds == kind, log_scales, 0.0) for kind in (_REAL, _POSITIVE))
        z = z * jnp.exp(spread) + shift  # c·x for x on the real line, c·exp(z) on the positive one
        if predict is not None:
            z = predict(z, bits, jax.random.normal(k3, (rows, len(responses))))
        return z, bits

    key = jax.random.PRNGKey(seed)
    log_scales = covariate_scales(setup, lambda s: draw(key, s, min(n, SCALE_POINTS)), kinds)
    z, bits = draw(key, log_scales, n)
    return {k: np.asarray(v) for k, v in layout.assemble(z, bits).items()}


_REAL, _POSITIVE = 1, 2
SCALE_ROUNDS = 8  # covariate_scales' rounds at most, each one evaluation of the features on the probes
SCALE_DRAWS, SCALE_POINTS = 50, 200
SCALE_BOUND = 8 * np.log(10.0)


def _scalable_coordinates(layout: pseudo.Layout, responses: Sequence[int]) -> np.ndarray:
    """Per continuous coordinate: _REAL or _POSITIVE for a covariate on that support, else 0 (responses
    and bounded columns, whose probes are the model's own or the support's). A response without a
    predictor (no quantile function) counts as a covariate."""
    kinds = []
    for name, width in layout.widths(False).items():
        support = layout.support(name)
        kind = _REAL if support in (constraints.real, constraints.real_vector) else 0
        kinds += [_POSITIVE if support is constraints.positive else kind] * width
    return np.asarray([0 if d in responses else k for d, k in enumerate(kinds)], dtype=int)


def covariate_scales(
    setup: AttackSetup, draw: Callable[[jax.Array], tuple[jax.Array, jax.Array]], kinds: np.ndarray
) -> jax.Array:
    """The log-scale c of every covariate coordinate (0 for the others) at which one step of it moves the
    model's features by about their own size, so that monomials of the probes are of one size in the
    features' units: a regression whose model takes 10³·x1 and 10⁻³·x2, probed at unit scale, named 4
    of the 10 statistics its features span, each a mixture of monomials 10¹² apart.

    R is the median over probes (``draw``, given the log-scales) of |φ(x + step) − φ(x)| / |φ(x)|, a step
    of c on the real line and a factor e on the positive one, the responses held; probes whose features
    are not finite are left out. Each round moves log c by −r·log R, r = 2/3 at first: where the
    features are of degree p in the covariate and the rest of them dominate, R ∝ c^p and the error in
    log R shrinks by 1 − 2p/3 (p = 1, 2); where log R changes sign (an overshoot, p ≥ 3), r halves. R can
    stay put over a range of c (responses drawn given the covariate: both |φ| and its change grow with
    c until the rest of φ dominates; that regression's x1 went R = 37, 34, 8, 2.5, 1.4), and never move
    (features in the covariate's logarithm, which its units only shift): c stays within 10^±8. A
    covariate the features do not depend on keeps its scale. The rounds stop when every R is within a
    factor 2 of 1, or after ``SCALE_ROUNDS``."""
    scaled = np.flatnonzero(kinds)
    log_scales = np.zeros(len(kinds))
    rate, active = np.full(len(scaled), 2.0 / 3.0), np.ones(len(scaled), dtype=bool)
    thinned = setup._replace(draws=setup.draws[spread_rows(len(setup.draws), SCALE_DRAWS)])
    last_change = None
    for _ in range(SCALE_ROUNDS if len(scaled) else 0):
        change = _log_changes(thinned, draw(jnp.asarray(log_scales)), kinds, scaled, log_scales)
        active &= np.isfinite(change)  # NaN: the features do not depend on it (or nowhere finite)
        if last_change is not None:
            rate = np.where(np.sign(change) != np.sign(last_change), rate / 2, rate)
        if not np.any(active & (np.abs(np.nan_to_num(change)) >= np.log(2.0))):
            break
        last_change = change
        step = np.where(active, -rate * np.nan_to_num(change), 0.0)
        log_scales[scaled] = np.clip(log_scales[scaled] + step, -SCALE_BOUND, SCALE_BOUND)
    return jnp.asarray(log_scales)


def _log_changes(
    setup: AttackSetup, probes: tuple[jax.Array, jax.Array], kinds: np.ndarray, scaled: np.ndarray,
    log_scales: np.ndarray,
) -> np.ndarray:  # fmt: skip
    """log R of :func:`covariate_scales` for every scaled coordinate; NaN where R is 0 or nowhere finite."""
    z, bits = probes
    steps = np.where(kinds == _REAL, np.exp(log_scales), 1.0)
    moved = [z.at[:, d].add(steps[d]) for d in scaled]
    stacked = setup.layout.assemble(jnp.concatenate([z, *moved]), jnp.tile(bits, (len(scaled) + 1, 1)))
    features = model_features(setup, {k: np.asarray(v) for k, v in stacked.items()})
    blocks = features.reshape(len(scaled) + 1, len(z), -1)
    with np.errstate(all="ignore"):
        change = np.linalg.norm(blocks[1:] - blocks[0], axis=2) / np.linalg.norm(blocks[0], axis=1)
        change[~np.isfinite(change)] = np.nan
        counted = np.isfinite(change).any(axis=1)
        median = np.full(len(scaled), np.nan)
        median[counted] = np.nanmedian(change[counted], axis=1)
        return np.where(median > 0, np.log(median), np.nan)


def same_span(a: np.ndarray, b: np.ndarray, tolerance: float = 1e-8) -> bool:
    """Whether the columns of a and b (per-point values of statistics) span the same functions."""
    ranks = [_rank(m, tolerance) for m in (a, b, np.concatenate([a, b], axis=1))]
    return ranks[0] == ranks[1] == ranks[2]


def linear_model_functions(spec: LinearGaussian, points: Mapping[str, np.ndarray]) -> np.ndarray:
    """The per-point sufficient statistics of a Gaussian linear model, (n, stats): 1, x xᵀ, x y, y²."""
    x, y = spec.design(points)
    per_point = [
        pack({"N": 1.0, "XtX": np.outer(a, a), "Xty": a * b, "yty": b * b}) for a, b in zip(x, y, strict=True)
    ]
    return np.stack(per_point)


@dataclass(frozen=True)
class PosteriorCheck:
    """A registered posterior's identifiable statistics next to its closed form, where the registry has
    one (a Gaussian linear model): ``known``, the number of independent entries of its N, XᵀX, Xᵀy,
    yᵀy, and ``exact``, whether the statistics found span exactly those (both None without one)."""

    name: str
    identifiability: Identifiability
    known: int | None
    exact: bool | None
    probe: Mapping[str, np.ndarray]  # the probe points they were found on (:func:`probe_points`)

    def to_json(self) -> dict[str, Any]:
        return {
            "posterior": self.name,
            "known_sufficient_statistics": self.known,
            "matches_sufficient_statistics": self.exact,
            **self.identifiability.to_json(),
        }


@attack_numerics
def check_posterior(
    name: Any, database: str | Path | None = None, config: IdentifiabilityConfig | None = None
) -> PosteriorCheck:
    """:func:`identifiable_statistics` for a registered posteriordb posterior (or a
    :class:`~bayes_recon.pipeline.PosteriorProblem`), checked against its closed form on probe points."""
    from bayes_recon.pipeline import load_problem

    problem = load_problem(name, database)
    name, entry, config = problem.name, problem.entry, config or IdentifiabilityConfig()
    setup = feature_setup(
        entry.model, problem.draws, problem.free, problem.fixed, entry.support, config.max_draws
    )
    points = probe_points(setup, probe_size(setup, config), config.seed)
    found = identify(setup, config, points)
    spec = entry.linear_given(problem.fixed)
    if spec is None:
        return PosteriorCheck(name, found, None, None, points)
    known = linear_model_functions(spec, points)
    if not found.polynomial:
        return PosteriorCheck(name, found, _rank(known, config.tolerance), False, points)
    named = np.stack([s.per_point(points) for s in found.statistics], axis=1)
    exact = same_span(named, known, config.tolerance)
    return PosteriorCheck(name, found, _rank(known, config.tolerance), exact, points)


def _variables(layout: pseudo.Layout, logs: bool) -> tuple[Variable, ...]:
    """The scalar coordinates of the free columns; with ``logs``, those of positive columns and of
    compositions (a simplex: a Dirichlet's statistics are its shares' logs) as logs."""
    out = []
    for name, shape in layout.shapes.items():
        support = layout.support(name)
        log = logs and support in (constraints.positive, constraints.simplex)
        width = int(np.prod(shape, dtype=int))
        out += [Variable(name, i if shape else None, log, pseudo.is_binary(support)) for i in range(width)]
    return tuple(out)


def _monomials(n_variables: int, max_degree: int) -> list[Monomial]:
    """All monomials of total degree ≤ max_degree, by degree, then with the first variables first."""
    return [
        tuple(combo.count(i) for i in range(n_variables))
        for degree in range(max_degree + 1)
        for combo in itertools.combinations_with_replacement(range(n_variables), degree)
    ]


def _monomial_values(
    variables: Sequence[Variable], monomials: Sequence[Monomial], points: Mapping[str, Any]
) -> np.ndarray:
    rows = len(next(iter(points.values())))
    # (n, V); no variables at all for a response whose slope is checked against the other columns, of
    # which there are none (a mixture of y alone): only the constant monomial
    values = np.stack([v.values(points) for v in variables], axis=1) if variables else np.ones((rows, 0))
    return np.stack([np.prod(values ** np.asarray(m), axis=1) for m in monomials], axis=1)


def _identify(
    setup: AttackSetup,
    variables: tuple[Variable, ...],
    degree: int,
    probe: Mapping[str, np.ndarray],
    probe_features: np.ndarray,
    config: IdentifiabilityConfig,
) -> Identifiability:
    monomials = _monomials(len(variables), degree)
    n = config.probe_factor * len(monomials) + 50
    points = {k: v[:n] for k, v in probe.items()}
    raw = _monomial_values(variables, monomials, points)
    n_draws = int(setup.draws.shape[0])
    if not np.isfinite(raw).all():  # the log of a column that reaches 0 (a zero-inflated count): no basis
        return Identifiability((), variables, None, False, degree, (), n_draws, 0.0)
    scale = np.linalg.norm(raw, axis=0)
    scale[scale == 0] = 1.0  # zero on the support (two dummies of one variable): an alias of 0, never kept
    basis = raw / scale  # equilibrated: the statistics' units differ by orders of magnitude
    # A monomial that is a combination of lower ones on the support (x² = x for binary x) is no new
    # statistic: the diagonal of R in an unpivoted QR is the norm of what it adds to the lower ones.
    kept = np.flatnonzero(np.abs(np.diag(np.linalg.qr(basis, mode="r"))) > config.tolerance)
    aliases = _aliases(variables, monomials, basis, kept, points)
    q, r = np.linalg.qr(basis[:, kept])

    norms = np.linalg.norm(probe_features[:n], axis=0)
    features = probe_features[:n, norms > 0] / norms[norms > 0]
    coefficients = q.T @ features  # the features in the orthonormal basis of the kept monomials
    residual = np.linalg.norm(features - q @ coefficients, axis=0).max(initial=0.0)
    if residual > 1e-6:  # not polynomials of this degree: no finite list of statistics in this basis
        return Identifiability((), variables, None, False, degree, aliases, n_draws, 0.0)
    u, singular, _ = np.linalg.svd(coefficients, full_matrices=False)
    rank = int(np.sum(singular > singular[0] * config.tolerance)) if singular.size else 0
    # The span in (equilibrated) monomial coordinates, in reduced row-echelon form: one statistic per
    # leading monomial, the lowest-degree ones first. Back in raw units, each leading coefficient is 1.
    statistics = []
    for row in _row_echelon(np.linalg.solve(r, u[:, :rank]).T, config.tolerance):
        present = np.flatnonzero(np.abs(row) > 1e-6)
        in_units = row[present] / scale[kept[present]]
        terms = tuple(
            (monomials[kept[k]], _tidy(c / in_units[0])) for k, c in zip(present, in_units, strict=True)
        )
        statistics.append(Statistic(variables, terms))
    return Identifiability(tuple(statistics), variables, rank, True, degree, aliases, n_draws, 0.0)


def moments_outside(
    found: Identifiability, points: Mapping[str, np.ndarray], names: Sequence[str], tolerance: float = 1e-8
) -> list[str]:
    """The attack's moments (the keys of :func:`bayes_recon.standard_errors.moment_errors`: N, ``mean[i]``,
    ``sd[i]``, ``cov[i,j]`` of the columns ``names`` flattened) that are no function of what the release
    determines: a sum they are made of (Σ 1, Σ x_i, Σ x_i², Σ x_i·x_j) is outside the span of
    ``found.statistics`` on the probe ``points``, so measures with every statistic the likelihood sees
    equal differ in it. Empty where the features are not polynomials (no finite list holds all they see),
    or where fewer statistics are named than the span's rank: a regression whose covariates the model
    scales by 10³ and 10⁻³ has a span of rank 10 of which the row echelon named 4, and every moment would
    have been called undetermined.

    A bivariate normal response with a covariate and no intercept sees N, Σ x², Σ x·y and Σ y·yᵀ: no mean
    and no sd is determined, though the attack's Monte Carlo errors, a quadratic model at its optimum,
    put the first response's mean within 0.14 of its sd while it was 0.7 sd off."""
    if not found.polynomial or len(found.statistics) != found.rank:
        return []  # not polynomials, or their span named only in part (see identify's row echelon)
    n = len(np.asarray(points[names[0]]))
    seen = np.stack([s.per_point(points) for s in found.statistics] or [np.zeros(n)], axis=1)
    x = np.concatenate([np.asarray(points[k], dtype=float).reshape(n, -1) for k in names], axis=1)
    sums = {"total_mass": [np.ones(n)]}
    for i in range(x.shape[1]):
        sums[f"mean[{i}]"] = [np.ones(n), x[:, i]]
        sums[f"sd[{i}]"] = [np.ones(n), x[:, i], x[:, i] ** 2]
    for i, j in itertools.combinations(range(x.shape[1]), 2):
        sums[f"cov[{i},{j}]"] = [np.ones(n), x[:, i], x[:, j], x[:, i] * x[:, j]]
    rank = _rank(seen, tolerance)
    return [
        key for key, functions in sums.items() if _rank(np.column_stack([seen, *functions]), tolerance) > rank
    ]


def undetermined_moments(
    setup: AttackSetup, names: Sequence[str], config: IdentifiabilityConfig
) -> list[str]:
    """:func:`moments_outside` for an attack's ``setup`` (its draws thinned to ``config.max_draws``) and the
    columns ``names`` of its measure, on fresh probe points."""
    thinned = setup._replace(draws=setup.draws[spread_rows(len(setup.draws), config.max_draws)])
    points = probe_points(thinned, probe_size(thinned, config), config.seed)
    return moments_outside(identify(thinned, config, points), points, names, config.tolerance)


def moment_statistics(
    variables: Sequence[Variable], points: Mapping[str, Any], tolerance: float = 1e-8
) -> tuple[Statistic, ...]:
    """N, the sum of every variable and of every product of two: the moments an attack is scored on
    where the features are not polynomials (a GLM's link, a mixture). They are neither all the release
    sees nor all pinned down by it. A product equal on the ``points`` to lower ones (x² = x for binary x,
    two dummies of one variable) is left out, as :func:`identify` leaves it out."""
    monomials = _monomials(len(variables), 2)
    basis = _monomial_values(variables, monomials, points)
    scale = np.linalg.norm(basis, axis=0)
    basis = basis / np.where(scale > 0, scale, 1.0)
    kept = np.flatnonzero(np.abs(np.diag(np.linalg.qr(basis, mode="r"))) > tolerance)
    return tuple(Statistic(tuple(variables), ((monomials[k], 1.0),)) for k in kept)


def _rank(matrix: np.ndarray, tolerance: float) -> int:
    """Numerical rank with every column scaled to unit norm first (zero columns dropped)."""
    norms = np.linalg.norm(matrix, axis=0)
    singular = np.linalg.svd(matrix[:, norms > 0] / norms[norms > 0], compute_uv=False)
    return int(np.sum(singular > singular[0] * tolerance)) if singular.size else 0


def _row_echelon(rows: np.ndarray, tolerance: float) -> np.ndarray:
    """Reduced row-echelon form of independent rows, pivoting on the first column that has an entry."""
    a = np.array(rows, dtype=float)
    size = np.abs(a).max(initial=0.0)
    done = 0
    for column in range(a.shape[1]):
        if done == len(a):
            break
        best = done + int(np.argmax(np.abs(a[done:, column])))
        if abs(a[best, column]) <= 1e3 * tolerance * size:
            continue
        a[[done, best]] = a[[best, done]]
        a[done] /= a[done, column]
        others = np.arange(len(a)) != done
        a[others] -= np.outer(a[others, column], a[done])
        done += 1
    return a[:done]


def _tidy(value: float) -> float:
    """Six significant digits, and whole numbers exactly (the 2 of 2·x·y)."""
    rounded = float(f"{value:.6g}")
    return float(round(rounded)) if abs(rounded - round(rounded)) < 1e-6 else rounded


SUPERSCRIPTS = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")


def _monomial_name(variables: Sequence[Variable], monomial: Monomial) -> str:
    factors = [
        v.label if p == 1 else f"{v.label}{str(p).translate(SUPERSCRIPTS)}"
        for v, p in zip(variables, monomial, strict=True)
        if p
    ]
    return "·".join(factors) or "1"


def _polynomial(variables: Sequence[Variable], terms: Sequence[tuple[Monomial, float]]) -> str:
    """Σ_k c_k m_k as text: ``mom_iq + 2·kid_score``, coefficients of one left out."""
    text = ""
    for i, (monomial, c) in enumerate(terms):
        name = _monomial_name(variables, monomial)
        size = abs(c)
        body = name if size == 1 and name != "1" else (f"{size:g}" if name == "1" else f"{size:g}·{name}")
        sign = ("−" if c < 0 else "") if i == 0 else (" − " if c < 0 else " + ")
        text += sign + body
    return text


def _aliases(
    variables: Sequence[Variable],
    monomials: Sequence[Monomial],
    basis: np.ndarray,
    kept: np.ndarray,
    points: Mapping[str, Any],
) -> tuple[str, ...]:
    """Each dropped monomial as the combination of kept ones it equals on the support (x² = x)."""
    dropped = np.setdiff1d(np.arange(len(monomials)), kept)
    if not len(dropped):
        return ()
    raw = _monomial_values(variables, monomials, points)
    solution = np.linalg.lstsq(raw[:, kept], raw[:, dropped], rcond=None)[0]
    out = []
    for j, k in enumerate(dropped):
        tidied = [(monomials[kept[i]], _tidy(c)) for i, c in enumerate(solution[:, j])]
        terms = [(monomial, c) for monomial, c in tidied if c != 0]
        out.append(f"{_monomial_name(variables, monomials[k])} = {_polynomial(variables, terms) or '0'}")
    return tuple(out)
