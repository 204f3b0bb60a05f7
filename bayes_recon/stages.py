"""The start and the optimisation stages of one restart of the attack.

The start (:func:`make_start`): continuous responses drawn from the model's predictive at the
posterior mean (:func:`response_predictor`), the strata of discrete responses given the predictive's
shares of the covariates (:func:`share_strata`), a unit cloud of pseudo-points whose covariates'
orders of magnitude and mass a grid searches. The stages (:func:`run_stages`): Newton on the
pseudo-data cloud alone (on a subset of draws, then on all), then every point and weight by L-BFGS
(or Adam), each on the objectives of :mod:`bayes_recon.objective`. :mod:`bayes_recon.reconstruct`
runs the restarts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from numpyro import handlers
from numpyro.distributions.transforms import biject_to
from numpyro.infer.util import constrain_fn

from bayes_recon import pseudo
from bayes_recon.divergence import Estimator
from bayes_recon.information import fit_information, released_information
from bayes_recon.objective import VALUE_BUDGET, Objectives, value_size
from bayes_recon.optimise import OptimiserConfig, minimise, tree_where
from bayes_recon.quantile import moment_quantile, preimage, quantile
from bayes_recon.relabel import find_relabelling, relabel
from bayes_recon.weighting import WeightedModel, probe_trace, rows_in_batch

if TYPE_CHECKING:  # reconstruct imports this module; the config is only read here
    from bayes_recon.reconstruct import ReconConfig

Array = jax.Array

Predictor = Callable[[Array, Array, Array], Array]  # (z, bits, noise) → z with the responses drawn


class StratumShares(NamedTuple):
    """How the model shares a covariate point out over the strata of its discrete responses."""

    loglik: Callable[[Mapping[str, Array]], Array]  # log p(x_j | posterior mean) for every row j
    responses: np.ndarray  # (B,) bool: which discrete coordinates are responses (the rest: covariates)


# Rows of the probe that tells responses from covariates: two binary columns agree on all of them
# with probability 2⁻¹⁶, so a binary covariate is not taken for a binary response.
PROBE_ROWS = 16


def observed_values(
    model: Callable, fixed: Mapping[str, Any]
) -> Callable[[Mapping[str, Array]], dict[str, Array]]:
    """The model's observed sites' values given the data, its latent sites at arbitrary values."""

    @jax.jit  # one compilation instead of one per operation of the model
    def values(data: Mapping[str, Array]) -> dict[str, Array]:
        trace = probe_trace(model, {**fixed, **data})
        return {name: site["value"] for name, site in trace.items() if site.get("is_observed")}

    return values


def observed_sites(model: Callable, fixed: Mapping[str, Any], probe: Mapping[str, Array]) -> dict[str, str]:
    """The free columns that are an observed site's values (responses), each with its site's name."""
    return {
        column: name
        for name, site_value in observed_values(model, fixed)(probe).items()
        for column, value in probe.items()
        if jnp.shape(site_value) == jnp.shape(value) and np.allclose(site_value, value)
    }


class Response(NamedTuple):
    """A continuous data coordinate that an observed site's element depends on alone, row by row."""

    site: str
    element: int  # within a row of the site's value, flattened
    direct: bool  # the element is the coordinate's own constrained value (kid_score), not a transform of it
    column: str  # the free column the coordinate belongs to


def response_coordinates(
    model: Callable, fixed: Mapping[str, Any], layout: pseudo.Layout, seed: int
) -> dict[int, Response]:
    """The continuous coordinates that are responses: an observed site's element, in every row, depends on
    that coordinate of its own row and on nothing else (kid_score; log(earn) for a column earn; an
    AR(K) model's last window entry).

    Found at a probe of random points from derivatives: along the coordinate, one random tangent per
    row must give the unit tangent's derivative times it (its own row only, nowhere zero), and along
    every other coordinate none.
    """
    rng = np.random.default_rng(seed)
    z, bits = layout.probe_coordinates(rng, PROBE_ROWS)
    values = observed_values(model, fixed)

    def observed(z: Array) -> dict[str, Array]:
        # integer values (a binomial count) have no derivative; a site not laid out over the rows (fixed
        # data of another plate, observed as a term of the prior) is no row's response
        sites = values(layout.assemble(z, bits)).items()
        return {
            name: v.reshape(PROBE_ROWS, -1)
            for name, v in sites
            if jnp.issubdtype(v.dtype, jnp.floating) and jnp.size(v) % PROBE_ROWS == 0
        }

    def along(tangent: Array) -> dict[str, np.ndarray]:
        return {name: np.asarray(d) for name, d in jax.jvp(observed, (z,), (tangent,))[1].items()}

    at_probe = {name: np.asarray(v) for name, v in observed(z).items()}
    constrained = {
        name: np.asarray(v).reshape(PROBE_ROWS, -1) for name, v in layout.assemble(z, bits).items()
    }
    owner = [(name, i) for name, width in layout.widths(False).items() for i in range(width)]
    row_tangent = jnp.asarray(rng.uniform(0.5, 1.5, PROBE_ROWS))
    units = [along(jnp.zeros_like(z).at[:, d].set(1.0)) for d in range(layout.dim)]
    found = {}
    for d in range(layout.dim):
        scaled = along(jnp.zeros_like(z).at[:, d].set(row_tangent))
        for name, unit in units[d].items():
            for element in range(unit.shape[1]):
                alone = all(
                    np.all(units[other][name][:, element] == 0) for other in range(layout.dim) if other != d
                )
                own_row = np.allclose(scaled[name][:, element], unit[:, element] * np.asarray(row_tangent))
                if alone and own_row and np.all(unit[:, element] != 0):
                    column, index = owner[d]
                    # a composition's coordinate is not one of its entries: solved for, as a transform is
                    direct = layout.support(column).event_dim == 0 and np.allclose(
                        at_probe[name][:, element], constrained[column][:, index]
                    )
                    found[d] = Response(name, element, bool(direct), column)
    return found


def response_predictor(
    model: Callable, layout: pseudo.Layout, fixed: Mapping[str, Any], params: Mapping[str, Array]
) -> tuple[tuple[int, ...], Predictor | None]:
    """The continuous coordinates that are responses (:func:`response_coordinates`), and a sampler of them
    given the rest.

    Responses (kid_score, earn, y) have a generative model and covariates do not. Drawing the
    responses from the model at the posterior mean ``params``, given the pseudo-covariates, puts
    the weighted posterior's location right before any optimisation, whatever the data's scale.
    The sampler takes its standard-normal noise (one column per response coordinate) and maps it
    through the distribution's quantile function (:func:`bayes_recon.quantile.quantile`; a count's is
    a smooth stand-in with its mean and variance, and so are a gamma's, a Student-t's and that of a
    response on the unit interval without second derivatives:
    :func:`bayes_recon.quantile.moment_quantile`): with noise that is exactly uncorrelated with the
    covariates, a handful of points reproduces the posterior mean instead of a noisy refit of it. A
    coordinate the model observes through a transform (log(earn)) is solved for the drawn value
    (:func:`bayes_recon.quantile.preimage`).
    """
    found = response_coordinates(model, fixed, layout, 0)
    responses = tuple(sorted(found))
    run = handlers.trace(rows_in_batch(handlers.seed(handlers.substitute(model, dict(params)), 0)))

    def predict(z: Array, bits: Array, noise: Array, quantile_of: Callable = quantile) -> Array:
        def site_of(z: Array, response: Response) -> Any:
            site = run.get_trace(**fixed, **layout.assemble(z, bits))[response.site]
            return site["fn"], jnp.reshape(site["value"], (len(z), -1))[:, response.element]

        for i, d in enumerate(responses):
            response = found[d]
            fn, _ = site_of(z, response)
            shape = fn.shape()
            score = jnp.zeros((len(z), int(np.prod(shape[1:], dtype=int))))
            score = score.at[:, response.element].set(noise[:, i])
            drawn = quantile_of(fn, score.reshape(shape))
            target = jnp.reshape(drawn, (len(z), -1))[:, response.element]
            if response.direct:
                value = biject_to(layout.support(response.column)).inv(target)
            else:

                def observed(value: Array, z: Array = z, d: int = d, response: Response = response) -> Array:
                    return site_of(z.at[:, d].set(value), response)[1]

                value = preimage(observed, target)
            z = z.at[:, d].set(value)
        return z

    if not responses:
        return (), None
    probe, bits, noise = (
        jax.ShapeDtypeStruct((PROBE_ROWS, n), jnp.result_type(float))
        for n in (layout.dim, layout.discrete_dim, len(responses))
    )
    for quantile_of in (quantile, moment_quantile):  # the model's quantile (or stand-in), else a logit-normal
        predictor = partial(predict, quantile_of=quantile_of)
        try:  # the stages differentiate the responses twice with respect to the covariates
            jax.eval_shape(jax.hessian(lambda z, b, e, p=predictor: jnp.sum(p(z, b, e))), probe, bits, noise)
        except Exception:  # no default argument, no quantile function, or one without derivatives
            continue
        return responses, predictor
    return (), None


def with_responses(
    layout: pseudo.Layout,
    responses: tuple[int, ...],
    predict: Predictor | None,
    shares: StratumShares | None,
    cloud: pseudo.Cloud,
    base: Array,
    factored: bool = True,
) -> pseudo.Pseudo:
    """The cloud refitted to its own covariates with the responses drawn from the model's predictive,
    and each point on its own draw.

    The cloud's own log-scales of the response coordinates, unused otherwise, scale the predictive's
    noise (0: the model's noise level): the residual spread is the statistic the posterior mean does
    not give, and trading it against the mass is what the cloud stage must be free to do.
    The refitted cloud has the draws' mean and covariance, and each point's residual puts it exactly
    on its draw: a response whose predictive is not Gaussian (a mixture's two modes, a skewed
    count's stand-in) keeps its shape, which a Gaussian cloud alone would lose (for a Gaussian
    response the residuals are zero). Discrete responses (``shares``) stratify the pseudo-data
    instead: see :func:`share_strata`.

    ``factored=False``: without discrete responses, the same pseudo-data on the unit cloud (each point its
    base point plus a residual z − base), for an objective, which sees only the points and weights: the
    refitted cloud's Cholesky factor and the triangular solves that undo it, differentiated three times
    in the stages, were a quarter of a normal regression's round program (kidiq: 61.2k → 46.6k lines of
    optimised HLO). An optimiser's parameters take the refit.
    """
    points = pseudo.unit_points(cloud, len(base))
    if predict is None and shares is None:
        return pseudo.Pseudo(cloud, points)
    z, bits, weights = pseudo.coordinates(layout, pseudo.Pseudo(cloud, points), base)
    strata = len(weights) // len(base)
    if predict is not None:
        columns = np.asarray(responses, dtype=int)
        noise = base[None, :, columns] * jnp.exp(cloud.log_diag[:, None, columns])
        z = predict(z, bits, noise.reshape(strata * len(base), len(columns)))
    z = jnp.where(jnp.isfinite(z), z, 0.0).reshape(strata, len(base), layout.dim)
    if shares is None and not factored:
        unit = jax.tree_util.tree_map(jnp.zeros_like, cloud)._replace(log_mass=cloud.log_mass)
        return pseudo.Pseudo(unit, points._replace(residual=z - base))
    if shares is None:
        refitted = pseudo.fit_cloud(cloud, z, weights.reshape(strata, len(base)))
        return pseudo.Pseudo(refitted, points._replace(residual=pseudo.whiten(refitted, z) - base))
    return pseudo.Pseudo(share_strata(layout, shares, cloud, z, weights.reshape(strata, len(base))), points)


def share_strata(
    layout: pseudo.Layout, shares: StratumShares, cloud: pseudo.Cloud, z: Array, weights: Array
) -> pseudo.Cloud:
    """Every stratum's cloud and mass from the points of all strata with its discrete covariates, each
    point weighted by the model's predictive probability of the stratum's responses there.

    The discrete analogue of drawing continuous responses: a binary response's two strata get the
    covariates' distribution given y = 0 and given y = 1 and the predicted share of each, instead
    of one covariate cloud split in half. Without it the grid sizes one cloud for both strata, and
    a strong covariate effect (a probit slope of 100 on a covariate at 0.01) let it settle on a
    collapsed covariate that Newton could not leave (mass 342 of 1,000, above the truth's objective).
    ``z`` (C, n, D) and ``weights`` (C, n): the points of every stratum.
    """
    strata = layout.strata
    c, n = weights.shape
    pooled = z.reshape(c * n, layout.dim)

    def loglik_at(bits: Array) -> Array:
        return shares.loglik(layout.assemble(pooled, jnp.broadcast_to(bits, (c * n, bits.shape[0]))))

    # A level the model rules out at a point (a saturated probit) gets a negligible share, not a NaN.
    loglik = jnp.clip(jnp.nan_to_num(jax.vmap(loglik_at)(strata), nan=-1e4), -1e4, 1e4)  # (C, C·n)
    covariates = strata[:, ~shares.responses]
    alike = jnp.all(covariates[:, None, :] == covariates[None, :, :], axis=-1)  # (C, C)
    predictive = loglik - jax.nn.logsumexp(
        jnp.where(alike[:, :, None], loglik[None, :, :], -jnp.inf), axis=1
    )  # log p(stratum's responses | the point's covariates)
    own = jnp.repeat(alike, n, axis=1)  # (C, C·n): the point has the stratum's discrete covariates
    log_weights = jnp.where(own, jnp.log(weights.reshape(-1))[None, :] + predictive, -jnp.inf)
    log_mass = jax.nn.logsumexp(log_weights, axis=1)
    log_mass = jnp.maximum(log_mass, jax.nn.logsumexp(log_mass) - 30.0)  # no stratum quite empty
    shared = cloud._replace(log_mass=log_mass - jnp.log(n))
    if layout.dim == 0:
        return shared
    within = jnp.exp(log_weights - jax.nn.logsumexp(log_weights, axis=1, keepdims=True))
    return pseudo.fit_cloud(shared, jnp.broadcast_to(pooled, (c, c * n, layout.dim)), within)


def stratum_shares(weighted: WeightedModel, layout: pseudo.Layout, theta_mean: Array) -> StratumShares | None:
    """The model's predictive over the strata of its discrete responses, at the draws' mean (unconstrained);
    None without discrete responses."""
    probe = layout.probe(0, PROBE_ROWS)
    responses = set(observed_sites(weighted.model, weighted.fixed, probe))
    bits = [name in responses for name, width in layout.widths(True).items() for _ in range(width)]
    if not any(bits):
        return None
    return StratumShares(partial(weighted.loglik_per_point, theta_mean), np.asarray(bits))


# The stages stop once their objective changes by less than these (relative) over two (Newton) or three
# (L-BFGS) steps in a row. The objective's own Monte Carlo error is 4e-4 to 3e-3 of it on the registry
# (the truth bar's tolerance at M = 50): steps below that change it by nothing the draws can tell.
# The cloud stages only prepare the last one, and creep (the subset's Hessian is not the full draws'):
# at 1e-7, nes1992's cloud on every draw took 33 steps to gain 2e-5 (at 1e-6, 7 steps); the last
# stage at 1e-12 took 126 L-BFGS steps to gain 5e-6 more (at 1e-9, 19); its statistics within 0.01 %
# of the oracle either way: 53 s a round against 23 s.
CLOUD_TOL = 1e-6
FINE_TOL = 1e-9
# Past ``ReconConfig.steps`` the last stage (L-BFGS) goes on, up to LAST_STAGE_STRETCH times as many,
# while every optimise.GAIN_WINDOW steps gain at least FINE_GAIN Monte Carlo se of the objective. A normal
# mixture regression (N = 1,000, three covariates) stopped at step 150 with its mass 794 (true 1,000),
# its objective 1.7 tolerances above the true data's, the self-check passed and N's standard error
# (3.7 %) a seventh of its error: the sandwich's errors describe an optimum, and this was none. Its L-BFGS
# gains in bursts (4-8 se in 25 steps) between stretches of under a tenth of one: at one se per 25 steps
# it stopped in such a stretch at step 151; at a quarter of one per 50 it went on to mass 877, 0.89
# tolerances above the true data's objective (within the truth bar), though N's standard error (3.7 %)
# was still under a third of its error (with 400 steps: mass 929, se 13.9 %). There the paired se of two
# measures' objectives on the same draws (the truth bar's) was half the objective's own. Every other row
# of that suite that ran to the old cap crept by less and stops where it did, its result unchanged.
FINE_GAIN = 0.25
LAST_STAGE_STRETCH = 4


class CloudStage(NamedTuple):
    """One of the three Newton stages on the cloud; a table of them drives one compiled loop."""

    limit: Array  # its step cap (0: skipped)
    frozen_mass: Array  # the mass stays where the grid put it
    all_draws: Array  # every draw, continuous responses free; else the subset, responses predicted


class Start(NamedTuple):
    """Where every restart starts: the unit cloud, how responses are filled in, which scales are searched."""

    params: pseudo.Pseudo
    # (cloud, base points, factored=True) → pseudo-data (:func:`with_responses`)
    with_responses: Callable[..., pseudo.Pseudo]
    searched: tuple[int, ...]  # the covariates' coordinates
    located: tuple[int, ...]  # the covariates whose support has no centre: their location is searched too
    grid_at_once: int  # grid candidates evaluated together (memory)
    stratified: bool  # discrete responses: the strata's clouds and masses come from the model's predictive
    # (points, their discrete values, key) → the points with their continuous responses drawn from the
    # model's predictive at the posterior mean; None without such responses
    respond: Callable[[Array, Array, Array], Array] | None
    # (cloud, base points) → the cloud refitted to the release's information, and the relative mismatch
    # before and after (:func:`bayes_recon.information.fit_information`); None where no restart refits
    refit: Callable[[pseudo.Cloud, Array], tuple[pseudo.Cloud, Array]] | None


def one_copy(weighted: WeightedModel, layout: pseudo.Layout, theta: Array) -> Array:
    """The draws ``theta`` (unconstrained) with the copies of the posterior's mode that an exchangeable
    symmetry makes put in one order (:mod:`bayes_recon.relabel`), as drawn where there is none. Their
    mean is then a point of one copy, not one between them: a release that visits both signs of a tanh
    network's unit averages it to nothing, and its predicted responses were one flat line (a styles
    case: mass 132 of 300, 5.2 Monte Carlo tolerances above the true data's objective, at every restart)."""
    data = layout.probe(0, PROBE_ROWS)
    try:
        found = find_relabelling(weighted, data, np.asarray(theta))
        ordered = None if found is None else relabel(weighted, data, found, np.asarray(theta))
    except Exception:  # a refinement of the start only: what the symmetry test cannot probe stays as drawn
        return theta
    # a value rounded onto its support's edge in the round trip (a simplex's) is infinite unconstrained
    return theta if ordered is None or not np.isfinite(ordered).all() else jnp.asarray(ordered)


def make_start(
    weighted: WeightedModel,
    layout: pseudo.Layout,
    theta: Array,
    n_points: int,
    estimator: Estimator,
    config: ReconConfig,
) -> Start:
    """Where every restart starts, without looking at the data: the unit cloud, the responses drawn from
    the model's predictive at the posterior mean of ``theta`` (the draws kept, unconstrained), and the
    covariates' coordinates whose scales (and, without a centre to their support, locations) the grid
    searches."""
    fixed, theta_mean = weighted.fixed, one_copy(weighted, layout, theta).mean(axis=0)
    model = weighted.model
    posterior_mean = constrain_fn(model, (), {**fixed, **layout.example(1)}, weighted.unravel(theta_mean))
    responses, predict = response_predictor(model, layout, fixed, posterior_mean)
    shares = stratum_shares(weighted, layout, theta_mean)
    searched = tuple(i for i in range(layout.dim) if i not in responses)

    def respond(z: Array, bits: Array, key: Array) -> Array:
        return predict(z, bits, jax.random.normal(key, (len(z), len(responses))))

    unit = pseudo.initial(n_points, layout)
    # each candidate is evaluated on the subset of draws (its quadratic in the mass: pseudo.at_best_mass)
    per_candidate = min(config.coarse_draws, theta.shape[0]) * unit.points.logit.size * weighted.copies
    responded = partial(with_responses, layout, responses, predict, shares)
    refit = None
    if config.information_start and config.restarts >= 2 and config.coarse_steps:
        released = jax.jit(partial(released_information, weighted, layout))(theta)
        measured = partial(responded, factored=False)  # the fit sees the pseudo-data's information only
        refit = partial(fit_information, weighted, layout, measured, searched, shares is not None, released)
    return Start(
        unit,
        responded,
        searched,
        tuple(i for i in layout.coordinates_of(layout.unbounded()) if i in searched),
        config.grid_at_once
        or max(1, VALUE_BUDGET // (per_candidate * value_size(estimator, theta.shape[1], config.n_slices))),
        shares is not None,
        None if predict is None else respond,
        refit,
    )


def run_stages(
    objectives: Objectives,
    layout: pseudo.Layout,
    begin: Start,
    base: Array,
    key: Array,
    config: ReconConfig,
    stage_steps: tuple[int, int, int, int],
    warm: Array,
    start: pseudo.Cloud,
    refit: Array,
    round_refits: Array,
) -> tuple[pseudo.Pseudo, Array, tuple[Array, Array, Array], Array, Array, pseudo.Cloud, Array]:
    """Responses from the model's predictive and a grid search of the covariates' scales and the
    mass, Newton on the cloud (on a subset of draws, then on all), then every point and weight.
    ``warm`` (traced): begin the Newton stage on every draw at the cloud ``start`` instead, skipping
    the grid and the subset's stages: a bootstrap replicate from the best restart (see
    ``ReconConfig.bootstrap``). ``refit`` (traced, not with ``warm``): begin the Newton stage on
    every draw at the cloud refitted to the release's information (``Start.refit``) instead;
    ``round_refits``: whether any restart of the round does, the same for all of them (so that restarts
    batched by ``vmap`` run the fit only where one of them needs it, not in every stage).

    Returns the final parameters, the objective after every step, the recorded total mass,
    weighted means and variances per step, the objective on all draws at the end, the steps each
    stage took before it converged, and the cloud the Newton stage on every draw began at (a cloud
    whose responses come from the predictive, as every stage's start: the ends of a stage with free
    responses are refitted clouds, whose responses' scales mean the data's spread, not the noise's).
    """
    newton = OptimiserConfig("newton")
    minibatched = objectives.minibatch is not None
    fine = OptimiserConfig("adam" if minibatched else config.method, config.learning_rate)

    def record(params: pseudo.Pseudo) -> tuple[Array, Array, Array]:
        points, w = pseudo.measure(layout, params, base)
        x = jnp.concatenate([v.reshape(v.shape[0], -1) for v in points.values()], axis=1)
        mean = w @ x / jnp.sum(w)
        return jnp.sum(w), mean, w @ (x - mean) ** 2 / jnp.sum(w)

    keys = jax.random.split(key)

    def responded(cloud: pseudo.Cloud, factored: bool = True) -> pseudo.Pseudo:
        return begin.with_responses(cloud, base, factored)

    def search(_: None) -> pseudo.Cloud:
        return pseudo.search_scales(
            lambda cloud: objectives.coarse_in_mass(responded(cloud, factored=False), base, keys[0]),
            begin.params.cloud,
            begin.searched,
            begin.located,
            at_once=begin.grid_at_once,
        )

    scaled = jax.lax.cond(warm, lambda _: start, search, None)

    # Three Newton stages on the cloud. With covariates of unknown location, their shape first, at
    # the mass the grid chose: while they are off (a ridge-like posterior needs their location to a
    # fraction of their spread), lowering the mass is the easy way down. Then with the mass. Then,
    # responses free, on every draw: the subset's optimum is a few steps from the full one (the
    # subset overfits when the cloud has dozens of parameters); the Hessian still comes from the
    # subset (subsampled Newton). One compiled loop serves all three, switched by the stage table.
    # The strata of discrete responses stay shared out by the predictive throughout: how the mass
    # splits between them is mostly what the release leaves open, and with the split free Newton
    # crept along that flat valley for its whole step cap (a binomial at N = 100: 40 steps, 29 s of a
    # 45 s round, for 0.002 of objective, a tenth of the Monte Carlo tolerance, ending at strata
    # unlike the data's); the last stage still moves every weight.
    def free(stage: CloudStage) -> Array:
        return stage.all_draws & (not begin.stratified)

    def fitted(stage: CloudStage, shape: pseudo.Points, cloud: pseudo.Cloud, factored: bool) -> pseudo.Pseudo:
        """The pseudo-data of the stage's cloud: free responses keep the shape the stage began with;
        ``factored`` for the next stage's parameters (see :func:`with_responses`), else for the objective."""
        cloud = cloud._replace(log_mass=jnp.where(stage.frozen_mass, scaled.log_mass, cloud.log_mass))
        return tree_where(free(stage), pseudo.Pseudo(cloud, shape), responded(cloud, factored))

    def cloud_objective(stage: CloudStage, shape: pseudo.Points, cloud: pseudo.Cloud, k: Array) -> Array:
        params = fitted(stage, shape, cloud, factored=False)
        return jax.lax.cond(stage.all_draws, objectives.full, objectives.coarse, params, base, k)

    def subset_hessian(stage: CloudStage, shape: pseudo.Points, cloud: pseudo.Cloud, k: Array) -> Array:
        return objectives.coarse_hessian(partial(fitted, stage, shape, factored=False), cloud, base)

    unfitted = jnp.full(2, jnp.nan)

    def refitted(cloud: pseudo.Cloud) -> tuple[pseudo.Cloud, Array]:
        informed, fit = begin.refit(cloud, base)
        return tree_where(refit, informed, cloud), jnp.where(refit, fit, unfitted)

    def cloud_stage(cloud: pseudo.Cloud, stage: CloudStage) -> tuple[pseudo.Cloud, tuple]:
        if begin.refit is not None:
            refitting = stage.all_draws & round_refits & ~warm
            cloud, fit = jax.lax.cond(refitting, refitted, lambda c: (c, unfitted), cloud)
        else:
            fit = unfitted
        begun = responded(cloud)
        final, values, records, taken = minimise(
            partial(cloud_objective, stage, begun.points),
            tree_where(free(stage), begun.cloud, cloud),
            keys[0],
            config.coarse_steps,
            newton,
            lambda c: record(fitted(stage, begun.points, c, factored=False)),
            hessian=partial(subset_hessian, stage, begun.points),
            tol=CLOUD_TOL,
            patience=2,  # Newton converges quadratically: two calm steps in a row are the end
            limit=stage.limit,
        )
        ended = fitted(stage, begun.points, final.params, factored=True)
        return final.params, (ended, values, records, taken, cloud, fit)

    table = CloudStage(
        limit=jnp.where(warm, jnp.asarray([0, 0, stage_steps[2]]), jnp.asarray(stage_steps[:3])),
        frozen_mass=jnp.asarray([True, False, False]),
        all_draws=jnp.asarray([False, False, True]),
    )
    if config.coarse_steps:
        _, (stage_ends, values, records, taken, stage_starts, fits) = jax.lax.scan(cloud_stage, scaled, table)
        polished, fit = jax.tree_util.tree_map(lambda leaf: leaf[-1], (stage_ends, fits))
        warm_start = jax.tree_util.tree_map(lambda leaf: leaf[-1], stage_starts)
        cloud_values = [values[i, : stage_steps[i]] for i in range(3)]
        cloud_records = [tuple(r[i, : stage_steps[i]] for r in records) for i in range(3)]
    else:
        warm_start, polished, cloud_values, cloud_records = scaled, responded(scaled), [], []
        taken, fit = jnp.zeros(3, int), unfitted
    last = objectives.minibatch if minibatched else objectives.full

    def needed_gain(params: pseudo.Pseudo) -> Array:
        return FINE_GAIN * objectives.full_error(params, base, keys[1])

    final, v3, r3, n3 = minimise(
        lambda params, k: last(params, base, k),
        polished,
        keys[1],
        stage_steps[3],
        fine,
        record,
        tol=FINE_TOL,
        settle=None if fine.method == "adam" else (config.steps, needed_gain),
    )
    values = jnp.concatenate([*cloud_values, v3])
    records = tuple(jnp.concatenate(parts) for parts in zip(*cloud_records, r3, strict=True))
    final_value = objectives.full(final.params, base, key) if minibatched else final.value
    taken = jnp.concatenate([taken, n3[None]])
    return final.params, values, records, final_value, taken, warm_start, fit
