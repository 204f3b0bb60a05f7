"""The weighted pseudo-posterior q(θ) ∝ p(θ) Π_j p(x_j | θ)^{w_j}, built from an unmodified NumPyro model.

Small effects do the work: the user's data arguments are replaced by pseudo-data (plain keyword
arguments), :class:`weight_likelihood` scales every observed site's log-probability by the
per-point weights (all but the prior's: a ``numpyro.factor`` of the parameters alone, an observation
of fixed data), :class:`rows_in_batch` gives rows observed as one event (``.to_event(1)``) back to the
batch, and :class:`relax_support` evaluates those log-probabilities without NumPyro's support
mask (a Poisson count at 2.5 would otherwise be −∞, with a zero gradient), interpolates a count's
between the integers (:func:`between_counts`), and smooths the kink of an
(asymmetric) Laplace likelihood by a given bandwidth when asked (:class:`_SmoothedLaplace`).
The log density is taken in NumPyro's unconstrained space, flattened to a vector, so that divergences are
plain functions of ``(vector, pseudo-data, weights)``. Where the rows' terms are not sites of their own (a
count the model's own code reads, :meth:`WeightedModel.at_counts`; a factor of the rows' sum,
:attr:`WeightedModel.summed`), it is the prior's plus the weighted rows' terms instead.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from jax.scipy.special import erf, gammaln, xlog1py, xlogy
from numpyro import handlers
from numpyro.distributions import (
    AsymmetricLaplace,
    AsymmetricLaplaceQuantile,
    Distribution,
    ExpandedDistribution,
    GammaPoisson,
    Independent,
    Laplace,
    MaskedDistribution,
    constraints,
)
from numpyro.infer.initialization import init_to_uniform
from numpyro.infer.util import constrain_fn, potential_energy, unconstrain_fn
from numpyro.primitives import Messenger

Array = jax.Array
LogDensity = Callable[[Array, Mapping[str, Array], Array], Array]
"""log q(θ_flat; pseudo-data, weights), up to a constant."""
Bandwidths = Mapping[str, Array]
"""Per observed kinked site, its kink's smoothing bandwidth in standardised residuals (batch-shaped)."""


class weight_likelihood(Messenger):
    """Multiply the log-probability of every likelihood site (an observed site of the rows) by per-point
    weights.

    Latent sites are untouched, and so are the observed sites named in ``prior_sites`` (terms that do not
    take the rows), so the prior stays the prior: with all weights one this is the model's own
    posterior density, with all weights zero it is the prior.
    """

    def __init__(
        self,
        fn: Callable | None = None,
        weights: Array | None = None,
        prior_sites: frozenset[str] = frozenset(),
    ) -> None:
        self.weights = weights
        self.prior_sites = prior_sites
        super().__init__(fn)

    def process_message(self, msg: dict[str, Any]) -> None:
        if _is_likelihood(msg, self.prior_sites):
            w = self.weights
            extra_dims = len(msg["fn"].batch_shape) - 1
            if extra_dims > 0 and jnp.ndim(w) == 1:  # the data-point axis is the leading batch axis
                w = jnp.reshape(w, (-1,) + (1,) * extra_dims)
            msg["scale"] = w if msg["scale"] is None else msg["scale"] * w


def with_rows_in_batch(fn: Any, value: Any) -> Any:
    """An observed distribution whose one event is its whole value (``.to_event(1)`` over the rows in place
    of a plate; ``.to_event(2)`` over rows of vectors) with its leading event dimension, the rows', given
    back to the batch: each row's term is then the batch's, as in a plate. Any other as it is; a
    multivariate distribution over the rows (a Gaussian process's) has no terms to give back. A term of the
    prior observed as one event (fixed data) changes its log-probability's shape, not its sum."""
    if (
        type(fn) is Independent  # a subclass of the user's keeps its own log_prob
        and fn.reinterpreted_batch_ndims >= 1
        and fn.batch_shape == ()
        and jnp.ndim(value) == len(fn.event_shape)
    ):
        kept = fn.reinterpreted_batch_ndims - 1
        return fn.base_dist.to_event(kept) if kept else fn.base_dist
    return fn


class rows_in_batch(Messenger):
    """Give an observed event over the rows back to the batch (:func:`with_rows_in_batch`), so that every
    check and every weighting sees a ``.to_event`` over the rows as the same rows in a plate."""

    def process_message(self, msg: dict[str, Any]) -> None:
        if msg["type"] == "sample" and msg["is_observed"]:
            msg["fn"] = with_rows_in_batch(msg["fn"], msg["value"])


class whole_plates(Messenger):
    """Every plate over all of its rows: a model written for SVI subsamples them
    (``plate("rows", N, subsample_size=B)``, its likelihood scaled by N / B), which NUTS cannot sample
    and the attack's pseudo-rows must not go through; its posterior is the one over all the rows."""

    def process_message(self, msg: dict[str, Any]) -> None:
        if msg["type"] == "plate":
            size = msg["args"][0]
            msg["args"], msg["value"] = (size, None), jnp.arange(size)


def probe_trace(model: Callable, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The model's trace on ``kwargs``, its latent sites at NumPyro's uniform initial values and its rows in
    the batch (:class:`rows_in_batch`): what the checks read the model's sites from."""
    initial = handlers.substitute(handlers.seed(model, 0), substitute_fn=init_to_uniform)
    return handlers.trace(rows_in_batch(initial)).get_trace(**kwargs)


class relax_support(Messenger):
    """Evaluate observed sites' log-probabilities without the support mask, counts between the integers.

    NumPyro validates supports by default: ``log_prob`` of an out-of-support value is −∞, and its
    gradient in θ is exactly zero, so a pseudo-count at 2.5 would silently drop out of the
    posterior. Pseudo-data of a count column move over the reals of the relaxed support
    (:func:`bayes_recon.supports.column_supports`), and a count's log-probability is interpolated
    between the integers (:func:`between_counts`), where it is the model's own (a negative binomial's
    by the formula of :class:`_GammaPoissonByLgamma`); a rate's or a probability's formula is
    evaluated as it is. An event over the rows is given back to the batch, as :class:`rows_in_batch` does.
    A kinked site (Laplace, asymmetric Laplace) named in ``bandwidths`` gets its kink smoothed by that
    bandwidth (:class:`_SmoothedLaplace`, :class:`_SmoothedAsymmetricLaplace`).
    The user's distribution is not modified: the site gets an unvalidated copy.
    """

    def __init__(self, fn: Callable | None = None, bandwidths: Bandwidths | None = None) -> None:
        self.bandwidths = bandwidths or {}
        super().__init__(fn)

    def process_message(self, msg: dict[str, Any]) -> None:
        if msg["type"] == "sample" and msg["is_observed"]:
            msg["fn"] = between_counts(unvalidated(with_rows_in_batch(msg["fn"], msg["value"])))
            if msg["name"] in self.bandwidths:
                msg["fn"] = _smoothed(msg["fn"], self.bandwidths[msg["name"]])


def _smooth_abs(z: Array, h: Array) -> Array:
    """E|z + hε| for a standard normal ε: |z| smoothed by a normal kernel of sd h; its second derivative
    is 2φ_h(z)."""
    u = z / h
    return z * erf(u / jnp.sqrt(2.0)) + h * jnp.sqrt(2.0 / jnp.pi) * jnp.exp(-0.5 * u**2)


class _SmoothedLaplace(Laplace):
    """A Laplace density whose |z| (z the standardised residual, :func:`kink_residual`) is smoothed by
    a normal kernel of the site's ``bandwidth`` (:func:`_smooth_abs`).

    The score-matching objective is an expectation of the log-likelihood's curvature over the draws,
    and |z|'s curvature is a Dirac delta at the kink, which no finite set of draws meets: unsmoothed,
    the objective of a Laplace regression rewards pseudo-points whose kinks fall between the draws
    (stop 30: far below the true data's objective, and the self-check rejected it). Smoothed, the
    kink's curvature 2φ_h(z) averaged over the draws is a kernel density estimate of the draws'
    residual at zero (:func:`bayes_recon.objective.kink_bandwidths` takes h by Silverman's rule), and
    the kink is seen wherever the draws put it. At z far from 0 it is the Laplace density. (Smoothing
    the curvature alone, with the exact value and score, leaves the objective's gradient in the
    pseudo-data jumping wherever a kink crosses a draw: stop 32 measured mass 3.1 for 100 that way.)
    """

    bandwidth: Array

    def log_prob(self, value: Array) -> Array:
        return -jnp.log(2.0 * self.scale) - _smooth_abs(kink_residual(self, value), self.bandwidth)


class _SmoothedAsymmetricLaplace(AsymmetricLaplace):
    """An asymmetric Laplace density (a quantile regression's) smoothed as :class:`_SmoothedLaplace`:
    its log falls by r / right_scale above the kink and by |r| / left_scale below it, that is by
    (1/right + 1/left)/2 · |r| + (1/right − 1/left)/2 · r, and the |r| is smoothed."""

    bandwidth: Array

    def log_prob(self, value: Array) -> Array:
        left, right = self.left_scale, self.right_scale
        z = kink_residual(self, value)
        slopes = (1 / right + 1 / left) / 2 * _smooth_abs(z, self.bandwidth) + (1 / right - 1 / left) / 2 * z
        return -jnp.log(left + right) - (left + right) / 2 * slopes


_SMOOTHED = {Laplace: _SmoothedLaplace, AsymmetricLaplace: _SmoothedAsymmetricLaplace}
_WRAPPERS = (ExpandedDistribution, Independent, MaskedDistribution)
Kinked = Laplace | AsymmetricLaplace


def kinked_within(fn: Any) -> Kinked | None:
    """The (asymmetric) Laplace distribution ``fn`` is, or wraps (by expanding, ``to_event``, masking, or
    as ``AsymmetricLaplaceQuantile`` does), else None: a log-likelihood with a kink."""
    while isinstance(fn, (*_WRAPPERS, AsymmetricLaplaceQuantile)):
        fn = fn._ald if isinstance(fn, AsymmetricLaplaceQuantile) else fn.base_dist
    return fn if type(fn) in _SMOOTHED else None


def kink_residual(fn: Kinked, value: Array) -> Array:
    """(value − loc) / scale: the kink is at 0; an asymmetric Laplace's scale is its two sides' mean."""
    scale = fn.scale if isinstance(fn, Laplace) else (fn.left_scale + fn.right_scale) / 2
    return (value - fn.loc) / scale


def _smoothed(fn: Distribution, bandwidth: Array) -> Distribution:
    """A copy of ``fn`` with its kinked distribution (:func:`kinked_within`) smoothed by ``bandwidth``."""
    copy = _copied_as(_SMOOTHED.get(type(fn), type(fn)), fn)
    if type(fn) in _SMOOTHED:
        copy.bandwidth = bandwidth
    elif isinstance(fn, AsymmetricLaplaceQuantile):  # it evaluates an AsymmetricLaplace it holds
        copy._ald = _smoothed(fn._ald, bandwidth)
    else:
        copy.base_dist = _smoothed(fn.base_dist, bandwidth)
    return copy


class _GammaPoissonByLgamma(GammaPoisson):
    """A negative binomial (NegativeBinomial2, …Probs, GammaPoisson) evaluated by log-gammas, not ``betaln``.

    The same function, and more accurate (1e-11 from SciPy's at counts up to 3,000, where JAX's
    ``betaln`` is up to 1e-6 off). The objective differentiates it four times (the score, its
    Hessian, the gradient in the pseudo-data, Newton's Hessian), and ``betaln`` evaluates and
    differentiates two formulas, one of them a series: its fourth derivative compiled 33 times
    slower and ran 8 times slower than the log-gammas'.
    """

    def log_prob(self, value: Array) -> Array:
        # a data set's counts may be integers, through which xlog1py's derivative fails
        value = jnp.asarray(value, dtype=jnp.result_type(float))
        return (
            gammaln(self.concentration + value)
            - gammaln(self.concentration)
            - gammaln(value + 1.0)
            - xlogy(self.concentration, 1.0 + 1.0 / self.rate)
            - xlog1py(value, self.rate)
        )


def between_counts(fn: Any) -> Any:
    """A count's distribution (validation off, :func:`unvalidated`) evaluated at a relaxed count y as
    (1 − u)·log p(⌊y⌋) + u·log p(⌊y⌋ + 1), u = y − ⌊y⌋; any other distribution as it is.

    At the integers it is the model's own log-probability, and a pseudo-count y of weight w is exactly
    two data rows, ⌊y⌋ of weight (1 − u)·w and ⌊y⌋ + 1 of weight u·w: a relaxed measure is a weighted
    data set. The model's own formula between the integers is not: a zero-inflated count's atom needs a
    bridge there (sinc²(y) had side lobes), and a negative binomial's features log Γ(y + φ) are not
    linear in y, so at M = 50 the attack's pseudo-counts reached features no data set has and fit the
    draws' Monte Carlo noise (a zero-inflated Poisson, N = 200: Σ y 2,222 against 384, below the true
    data's objective). A Poisson's or binomial's features are linear in y, and for them nothing changes
    but a term free of θ. The gradient in y is log p(⌊y⌋ + 1) − log p(⌊y⌋), at a count too (to the
    right; at the support's upper end, to the left), so a pseudo-count sitting on an integer still
    moves, and the audit's slopes in y (:mod:`bayes_recon.identifiability`) see a Binomial(1) at 0.
    Off the support (a count column declared real, :mod:`bayes_recon.leaks`) the line through the
    two nearest counts is extended. Labels and 0/1 values of the stratified columns (integers, or the
    boolean support) are evaluated as they are; a vector of counts (``.to_event``) per count.
    """
    if isinstance(fn, (Independent, MaskedDistribution)) and fn.event_shape != ():
        copy = _copied_as(type(fn), fn)
        copy.base_dist = between_counts(fn.base_dist)
        return copy
    support = getattr(fn, "support", None)
    if not (
        isinstance(fn, Distribution)
        and support is not None
        and support.is_discrete
        and support is not constraints.boolean
        and fn.event_shape == ()
    ):
        return fn
    return _copied_as(_between_counts_kind(type(fn)), fn)


# A count of probability 0 beside one of positive probability (a rate that underflowed to 0) makes the
# slope between them infinite: it is this steep fall instead, so that a count's value is never 0·(−∞).
STEEPEST_SLOPE = 1e8


@functools.cache
def _between_counts_kind(kind: type) -> type:
    def log_prob(self: Distribution, value: Array) -> Array:
        own = functools.partial(kind.log_prob, self)
        if not jnp.issubdtype(jnp.result_type(value), jnp.floating):
            return own(value)
        value = jnp.broadcast_to(value, jnp.broadcast_shapes(jnp.shape(value), self.batch_shape))
        lower = getattr(self.support, "lower_bound", -jnp.inf)
        upper = getattr(self.support, "upper_bound", jnp.inf)
        # off the support (a column declared real) the line through the nearest two counts goes on
        low = jnp.maximum(jnp.minimum(jnp.floor(value), upper - 1), lower)
        up = value - low
        # one evaluation at both counts (half the program to compile); a support of one count (a
        # binomial of no trials) has no next
        at_low, at_next = own(jnp.stack([low, low + (upper - lower >= 1)]))
        rise = at_next - at_low
        # The attack differentiates this four times, and every guard costs: a negative binomial's attack
        # (N = 100, three covariates, M = 50) took 118 s unguarded (NaN beside an impossible count),
        # 140 s with this one select, 156 s with a clip and a choice of the nearer count.
        return at_low + up * jnp.where(jnp.isfinite(rise), rise, -STEEPEST_SLOPE)

    return type(f"Between{kind.__name__}", (kind,), {"log_prob": log_prob, "__doc__": between_counts.__doc__})


def _relaxed_kind(fn: Distribution) -> type:
    """The class of ``fn``'s relaxed copy: its own, or one with a formula fit for the relaxed values."""
    if type(fn).log_prob is GammaPoisson.log_prob:  # not NegativeBinomialLogits: its own formula
        return _GammaPoissonByLgamma
    return type(fn)


def unvalidated(fn: Any) -> Any:
    """A shallow copy of a distribution (and of the distributions it wraps) with validation off."""
    if not isinstance(fn, Distribution):
        return fn
    kind = _relaxed_kind(fn)
    copy = _copied_as(kind, fn, unvalidated)
    copy._validate_args = False
    return copy


def _copied_as(kind: type, fn: Distribution, each: Callable[[Any], Any] = lambda v: v) -> Any:
    """A shallow copy of ``fn`` as an instance of ``kind`` (its class or a subclass), every attribute
    passed through ``each``: the user's distribution is never modified."""
    copy = object.__new__(kind)
    copy.__dict__.update({k: each(v) for k, v in fn.__dict__.items()})
    return copy


def _scaled_log_prob(site: dict[str, Any]) -> Array:
    """A site's log-probability times its scale, as NumPyro's log density takes it (a likelihood the user
    tempers or weighs by ``handlers.scale``)."""
    log_prob = site["fn"].log_prob(site["value"])
    return log_prob if site["scale"] is None else log_prob * site["scale"]


def _sites_log_prob(trace: dict[str, Any], names: frozenset[str]) -> Array:
    """The sum of the log-probabilities of the sites ``names`` of ``trace``, each summed over its shape."""
    return sum((jnp.sum(_scaled_log_prob(trace[k])) for k in names), jnp.zeros(()))


def _per_point(sites: list[dict[str, Any]], data: Mapping[str, Array]) -> Array:
    """Every point's log-likelihood summed over the likelihood ``sites`` of a trace on ``data``."""
    n = next(iter(data.values())).shape[0]
    total = jnp.zeros(n)
    for site in sites:
        total = total + jnp.reshape(_scaled_log_prob(site), (n, -1)).sum(axis=1)
    return total


def _is_likelihood(msg: dict[str, Any], prior_sites: frozenset[str]) -> bool:
    """An observed site that is a term of the rows' likelihood: not a Jacobian factor, nor a prior site."""
    return (
        msg["type"] == "sample"
        and bool(msg["is_observed"])
        and not _is_jacobian_factor(msg)
        and msg["name"] not in prior_sites
    )


def _is_jacobian_factor(msg: dict[str, Any]) -> bool:
    """The log-Jacobian of a latent site that ``potential_energy`` adds as ``factor("_<site>_log_det")``.

    It is an observed (auxiliary) site too, but belongs to the prior's change of variables: weighting it
    would count the Jacobian sum(w) times (and drop it at w = 0).
    """
    name = msg["name"]
    return bool(msg["infer"].get("is_auxiliary")) and name.startswith("_") and name.endswith("_log_det")


@dataclass(frozen=True)
class WeightedModel:
    """A NumPyro model with the data arguments to reconstruct (``free``) split from the rest.

    ``fixed`` holds arguments the adversary knows (constants, or per-point columns broadcast over
    pseudo-points); ``latent_example`` is one value of the latent sites in NumPyro's unconstrained
    space, which fixes the flattening of θ (a simplex of K entries has K − 1 coordinates there, a 2 × 2
    correlation's Cholesky factor one; for other supports the shapes are the constrained ones).
    ``reshaped``: the latent sites whose unconstrained coordinates are not their entries (those two).
    ``prior_sites``: observed sites that do not take the rows (a ``numpyro.factor`` of a prior term, an
    observation of fixed data): part of the prior, never weighted. Only
    :func:`bayes_recon.modelcheck.prepare_release` finds them; left empty, every observed site is the rows'.
    ``counted``: (column, lowest, highest count) of the free count columns no observed site takes as its
    value (:func:`bayes_recon.supports.counted_columns`): every row's log-likelihood is interpolated
    between the counts around its value (:meth:`at_counts`). ``summed``: observed sites of one term, the sum
    of the rows' (a ``numpyro.factor`` of ``log_prob(y).sum()``, Stan's vectorised ``target +=``;
    :func:`bayes_recon.modelcheck.summed_sites`): each row's is the site on that row alone.
    """

    model: Callable
    free: tuple[str, ...]
    fixed: Mapping[str, Any]
    latent_example: Mapping[str, Array]
    reshaped: frozenset[str] = frozenset()
    prior_sites: frozenset[str] = frozenset()
    counted: tuple[tuple[str, float, float], ...] = ()
    summed: frozenset[str] = frozenset()

    def _kwargs(self, data: Mapping[str, Array]) -> dict[str, Any]:
        return {**self.fixed, **data}

    @property
    def unravel(self) -> Callable[[Array], dict[str, Array]]:
        return ravel_pytree(dict(self.latent_example))[1]

    @property
    def dim(self) -> int:
        return int(ravel_pytree(dict(self.latent_example))[0].size)

    @property
    def coordinate_names(self) -> tuple[str, ...]:
        """A label per flat unconstrained coordinate, in the model's flattening: "sigma", "beta[0]", and for
        a :attr:`reshaped` site, whose coordinates are not its entries, "theta (unconstrained 0)"."""
        index = self.unravel(jnp.arange(self.dim, dtype=float))
        names = [""] * self.dim
        for site, positions in index.items():
            positions = np.asarray(positions).astype(int)
            for i, where in enumerate(np.ndindex(positions.shape)):
                entry = f"{site}[{','.join(map(str, where))}]" if where else site
                names[positions[where]] = f"{site} (unconstrained {i})" if site in self.reshaped else entry
        return tuple(names)

    @property
    def copies(self) -> int:
        """Rows the model is evaluated on per pseudo-point: 2^k for k :attr:`counted` columns, twice that
        with :attr:`summed` sites (a trace of each row alone beside the rows'; the memory budgets count
        them)."""
        return 2 ** len(self.counted) * (2 if self.summed else 1)

    def at_counts(self, data: Mapping[str, Array]) -> tuple[dict[str, Array], Array | None]:
        """The rows with each :attr:`counted` column at the two counts around its value, ⌊y⌋ and ⌊y⌋ + 1
        (2^k copies of the M rows stacked, for k such columns), and each copy's share of its row, (2^k, M):
        1 − u and u per column, u = y − ⌊y⌋; the rows as they are and None without such columns. A row's
        log-likelihood is the shares' sum of its copies': a pseudo-count y of weight w is the rows ⌊y⌋ of
        weight (1 − u)·w and ⌊y⌋ + 1 of weight u·w, as an observed count's (:func:`between_counts`) is, here
        for a count the model reads in its own code (a hurdle's ``numpyro.factor``), where NumPyro's
        validated log-probability is −∞ between the counts. Its gradient in y is the step
        log p(⌊y⌋ + 1) − log p(⌊y⌋), at a count too (to the right; at the highest count, to the left)."""
        if not self.counted:
            return dict(data), None
        rows = next(iter(data.values())).shape[0]
        copies, shares = dict(data), jnp.ones((1, rows))
        for column, lowest, highest in self.counted:
            value = data[column]
            low = jax.lax.stop_gradient(jnp.clip(jnp.floor(value), lowest, highest - 1))
            up = value - low
            copies = {k: jnp.concatenate([v, v]) for k, v in copies.items()}
            copies[column] = jnp.concatenate([jnp.tile(low, len(shares)), jnp.tile(low + 1, len(shares))])
            shares = jnp.concatenate([shares * (1 - up), shares * up])
        return copies, shares

    def log_density(
        self, theta: Array, data: Mapping[str, Array], weights: Array, bandwidths: Bandwidths | None = None
    ) -> Array:
        """Unconstrained log density of the weighted posterior at the flat vector ``theta`` (kinks
        smoothed by ``bandwidths``, if given). With :attr:`counted` columns or :attr:`summed` sites, the
        prior's plus the weighted rows' terms (:meth:`loglik_per_point`): the model runs twice, or more,
        not once."""
        if self.counted or self.summed:
            return self.log_prior(theta, data) + weights @ self.loglik_per_point(theta, data, bandwidths)
        weighted = weight_likelihood(
            relax_support(self.model, bandwidths), weights=weights, prior_sites=self.prior_sites
        )
        return -potential_energy(weighted, (), self._kwargs(data), self.unravel(theta))

    def log_prior(self, theta: Array, data: Mapping[str, Array]) -> Array:
        """Unconstrained log density of the prior alone at the flat vector ``theta``: ``log_density`` with
        the likelihood sites hidden, so that it is ``log_density(θ, x, w) − Σ_j w_j loglik_per_point(θ, x)_j``
        whatever the pseudo-data ``data`` (any points the model accepts). The model runs on the rows'
        copies at their counts (:meth:`at_counts`): its hidden likelihood code still runs, and NumPyro
        warns of a count between the integers."""

        prior = handlers.block(
            relax_support(self.model), hide_fn=lambda msg: _is_likelihood(msg, self.prior_sites)
        )
        return -potential_energy(prior, (), self._kwargs(self.at_counts(data)[0]), self.unravel(theta))

    def log_prior_sites(self, theta: Array, data: Mapping[str, Array]) -> Array:
        """The sum of the :attr:`prior_sites`' log-probabilities at the flat vector ``theta``."""
        return _sites_log_prob(self._trace(theta, data), self.prior_sites)

    def _trace(
        self, theta: Array, data: Mapping[str, Array], bandwidths: Bandwidths | None = None
    ) -> dict[str, Any]:
        """The model's trace at the flat vector ``theta`` on ``data``, supports relaxed."""
        params = constrain_fn(self.model, (), self._kwargs(data), self.unravel(theta))
        return self._trace_constrained(params, data, bandwidths)

    def _trace_constrained(
        self, params: Mapping[str, Array], data: Mapping[str, Array], bandwidths: Bandwidths | None = None
    ) -> dict[str, Any]:
        relaxed = relax_support(handlers.substitute(self.model, dict(params)), bandwidths)
        return handlers.trace(relaxed).get_trace(**self._kwargs(data))

    def _row_sites(self, trace: dict[str, Any]) -> list[dict[str, Any]]:
        """The likelihood sites of ``trace`` with a term per row: not the :attr:`summed` ones."""
        return [site for site in trace.values() if _is_likelihood(site, self.prior_sites | self.summed)]

    def _row_terms(
        self,
        trace: dict[str, Any],
        rows: Mapping[str, Array],
        trace_alone: Callable[[Mapping[str, Array]], Any],
    ) -> Array:
        """Every row's log-likelihood from ``trace``, the model's trace on ``rows``: its sites with a term
        per row, and each :attr:`summed` site on that row alone (``trace_alone(row)``, without bandwidths)."""
        terms = _per_point(self._row_sites(trace), rows)
        if not self.summed:
            return terms

        def alone(row: Mapping[str, Array]) -> Array:
            return _sites_log_prob(trace_alone(row), self.summed)

        return terms + jax.vmap(alone)({k: v[:, None] for k, v in rows.items()})

    @staticmethod
    def _per_row(terms: Array, shares: Array | None) -> Array:
        """Every row's log-likelihood from its copies' ``terms`` (:meth:`at_counts`). A copy at a count the
        model gives no probability takes between_counts' steep fall instead of −∞, so that a share of 0
        adds 0 with a finite gradient; a row with no possible copy stays −∞, and a NaN stays NaN (the
        checks refuse both)."""
        if shares is None:
            return terms
        terms = terms.reshape(shares.shape)
        impossible = terms == -jnp.inf
        row = jnp.sum(shares * jnp.where(impossible, -STEEPEST_SLOPE, terms), axis=0)
        return jnp.where(jnp.all(impossible, axis=0), -jnp.inf, row)

    def loglik_per_point(
        self, theta: Array, data: Mapping[str, Array], bandwidths: Bandwidths | None = None
    ) -> Array:
        """log p(x_j | θ) for every point j (summed over the likelihood sites), θ unconstrained flat (kinks
        smoothed by ``bandwidths``, if given)."""
        copies, shares = self.at_counts(data)
        trace = self._trace(theta, copies, bandwidths)
        terms = self._row_terms(trace, copies, lambda row: self._trace(theta, row))
        return self._per_row(terms, shares)

    def constrained_terms(self, params: Mapping[str, Array], data: Mapping[str, Array]) -> Array:
        """At the latent sites' constrained values ``params``: the prior's log density there (no Jacobian of
        NumPyro's unconstraining) and log p(x_j | θ) for every point j, (M + 1,)."""
        copies, shares = self.at_counts(data)
        trace = self._trace_constrained(params, copies)
        prior = [
            jnp.sum(_scaled_log_prob(site))
            for site in trace.values()
            if site["type"] == "sample" and not _is_likelihood(site, self.prior_sites)
        ]
        terms = self._row_terms(trace, copies, lambda row: self._trace_constrained(params, row))
        return jnp.concatenate([sum(prior, jnp.zeros(()))[None], self._per_row(terms, shares)])

    def kink_residuals(self, theta: Array, data: Mapping[str, Array]) -> dict[str, Array]:
        """The standardised residual (:func:`kink_residual`) of every likelihood site with a kink (Laplace,
        asymmetric Laplace), each the site's batch shape on the rows' copies (:meth:`at_counts`), θ
        unconstrained flat; empty without such sites."""
        trace = self._trace(theta, self.at_counts(data)[0])
        sites = [(site, kinked_within(site["fn"])) for site in self._row_sites(trace)]
        return {site["name"]: kink_residual(fn, site["value"]) for site, fn in sites if fn is not None}

    def point_scores(
        self, theta: Array, data: Mapping[str, Array], bandwidths: Bandwidths | None = None
    ) -> Array:
        """∇_θ log p(x_j | θ) for every point j, (M, d), θ unconstrained flat: the model's features (kinks
        smoothed by ``bandwidths``, if given)."""
        return jax.jacfwd(lambda th: self.loglik_per_point(th, data, bandwidths))(theta)

    def to_unconstrained(self, draws: Mapping[str, np.ndarray], data: Mapping[str, Array]) -> np.ndarray:
        """Constrained draws {site: (S, ...)} to flat unconstrained vectors (S, dim)."""

        def one(data: Mapping[str, Array], params: Mapping[str, Array]) -> Array:
            unc = unconstrain_fn(self.model, (), self._kwargs(data), dict(params))
            return ravel_pytree({k: unc[k] for k in self.latent_example})[0]

        ordered = {k: jnp.asarray(draws[k]) for k in self.latent_example}
        data = {k: jnp.asarray(v) for k, v in data.items()}  # traced: not validated as constants
        return np.asarray(jax.jit(jax.vmap(one, (None, 0)))(data, ordered))
