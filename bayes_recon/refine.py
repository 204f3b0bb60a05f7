"""Frank–Wolfe rounds on the attack's measure: new points where the objective wants mass, exact weights.

The stages move a fixed set of M points per stratum by local steps, and end where no small move
helps. But the objective is a convex quadratic in the measure μ = Σ_j w_j δ_{x_j}: at a draw θ_s its
term is c_s + Σ_j w_j t_j(s) + ½ |√M G_s|² with G_s = prior score + Σ_j w_j g_j(s)
(:func:`bayes_recon.objective.point_terms`), and the information penalty depends on the points
alone. Its derivative in the weight at any point x, the first variation

    φ(x) = mean_s [t_x(s) + (√M g_x(s)) · (√M G_s)],

is what a little weight at x gains per unit: at the optimum over all measures, φ ≥ 0 everywhere and
φ = 0 where the weight is. A local end with points in the wrong places has φ < 0 somewhere else: a
gamma regression with three covariates (N = 1,000) ended with a covariate collapsed on its mean, its
objective 3.2 Monte Carlo tolerances above the true data's, and the true points' own φ as low as
-0.04 while the stages' points all had |φ| < 10⁻⁴.

Each round (:func:`refine`) is a fully corrective Frank–Wolfe step followed by a sliding one:
  1. candidates of most negative φ: a screen of points drawn, half and half, from each stratum's weighted
     cloud and the whole measure's at several widths (every other one with its continuous responses drawn
     from the model's predictive given its covariates) and around its points, on a subset of the draws,
     then saddle-free Newton on every draw from the best K = M/2 of each stratum (on that gamma regression
     the screen's best had φ = -0.3, Newton from it -4.9);
  2. the weights of the points, the candidates and, with several strata, the other strata's heaviest
     points moved into each (a stratum the stages lost needs a whole measure back, which Newton's
     candidates, all near the few best points, are not) solved exactly (non-negative least squares: the
     objective is quadratic in them), the M heaviest of each stratum kept;
  3. every point and weight polished by L-BFGS on the objective, from there.
A round is kept only if it lowers the objective, and its measure carries no more information than
a release can (about d in the attack's standardised coordinates, the default, with the margin
INFORMATION_BOUND):
along points whose scores barely move over the draws the estimated objective can fall without end (a
Student-t regression went to mass 1.3e7 and an objective of -9e11; a probit regression whose stages
had ended on a wall of mass 1e18, to -3e8 below the true data's).
The rounds stop when the Frank–Wolfe gap, the measure's mass times the most negative φ found (zero if
none is), is under the objective's Monte Carlo standard error (the measure is then optimal, up to what
the draws can tell, among measures of its mass on every point the search tried), when a round gains less
than that (the search found nothing that gains what the draws can tell), or after ``rounds``. They run
only where the stages' own result fails the self-check (:func:`bayes_recon.reconstruct.reconstruct`):
where it passes, they found points the release does not see (a logistic regression's Σ y·x went from 3 %
to 81 % off, the self-check still passing).
The search is a local one from random starts: it can miss where weight would help, and it can lower the
objective with points the draws barely tell apart (a negative binomial regression with three covariates,
N = 1,000, whose stages ended with a covariate's mean 5.9 sd from the truth's: the rounds went below the
true data's objective with that mean still 6.5 sd off and six times the mass); the self-check
(:mod:`bayes_recon.selfcheck`) tells either from a reconstruction that holds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from scipy.optimize import nnls

from bayes_recon import pseudo
from bayes_recon.divergence import map_in_chunks
from bayes_recon.objective import (
    GRADIENT_BUDGET,
    INFORMATION_BOUND,
    ScoreMatching,
    build_objective,
    draw_slices,
    gram_in_chunks,
    kink_bandwidths,
    metric_root,
    penalty_of,
    point_terms,
    prior_terms,
    value_size,
    within_information_bound,
)
from bayes_recon.optimise import OptimiserConfig, minimise

Array = jax.Array

SCREEN_WIDTHS = (0.5, 1.0, 2.0, 3.0)  # candidates from the clouds (see _pool), their spread times these
SCREEN_PER_WIDTH = 512  # half from the stratum's cloud, half from the whole measure's
SCREEN_DRAWS = 1000  # the screen runs on this many of the draws
AROUND_POINTS = 0.3  # candidates around each point, the cloud's spread times this
NEWTON_STEPS = 20
# Candidates searched for and added to each stratum's M points per round, as a share of M: the weights
# are solved on both, and the M heaviest kept. With M of them every point could be displaced at once
# (a gamma regression's second round ended above its start), and the search took twice as long
# (kidiq-kidscore_momiq at M = 50: 36 s in all, against 29 s).
ADDED_PER_ROUND = 0.5
# The rounds stop once the Frank–Wolfe gap, -min φ times the measure's mass (to first order, what moving
# all of it onto the best candidate gains; for this convex objective a bound on how far the measure is
# from the best of its mass), or what a round gains, is under this many Monte Carlo se of the objective:
# what the draws can tell. What one point gains alone (φ²/2a at its best weight) understates what many
# gain together: that rule (under a tenth of an se) stopped the rounds at once on
# earnings-logearn_interaction_z, where the stages had lost the men's stratum (each true point alone
# would gain 1e-7, the whole stratum gained 0.57, 36 se).
GAP = 1.0
# Candidates stay within the information bound of a real point (objective.INFORMATION_BOUND): a
# quadratic barrier on the excess, steep against φ's scale (the mean over draws of one point's terms).
BARRIER = 1e3
KEY = jax.random.PRNGKey(0)  # the optimisers' (deterministic objectives: unused)


class Refinement(NamedTuple):
    """The refined measure (points unconstrained (C·M, D), stratum by stratum) and the rounds' record."""

    z: np.ndarray
    weights: np.ndarray
    objectives: np.ndarray  # at the start and after every round kept: the last is the refined measure's
    # every round's Frank–Wolfe gap: the measure's mass times the most negative φ found, zero if none is
    # (NaN: every point found is one the likelihood rules out)
    gaps: np.ndarray
    converged: bool  # stopped before ``rounds``: the gap, or a round's gain, under what the draws can tell


class Refiner(NamedTuple):
    """The jitted pieces of a refinement (:func:`build_refiner`) and what they work on."""

    problem: ScoreMatching
    n_points: int
    seed: int
    # (z, w) → G, the objective, its se, the measure's information Σ_j w_j E_s |∇ log p(x_j | θ_s)|²
    current: Callable[[Array, Array], tuple[Array, Array, Array, Array]]
    screen: Callable[[Array, Array, Array], Array]  # (M points, their discrete values, G) → φ on a subset
    # (C·K starts, G) → the points found, φ at them (NaN: a point the likelihood rules out)
    descend: Callable[[Array, Array], tuple[Array, Array]]
    quadratic: Callable[[Array, Array], tuple[Array, Array]]  # (points, their bits) → A, b (in the weights)
    polish: Callable[[pseudo.Pseudo], tuple[Array, Array]]  # → the points z and weights w after it
    # (points, their bits, key) → the points with their responses from the predictive (stages.Start.respond)
    respond: Callable[[Array, Array, Array], Array] | None


def build_refiner(
    problem: ScoreMatching,
    draws: Array,
    seed: int,
    n_points: int,
    config: OptimiserConfig,
    steps: int,
    respond: Callable[[Array, Array, Array], Array] | None = None,
) -> Refiner:
    """The pieces of :func:`refine` for M = ``n_points`` per stratum, on the objective of
    :func:`bayes_recon.objective.build_objective` with slices from ``seed + 1`` (the attack's own on all
    draws); each round's polish takes up to ``steps`` of ``config``; ``respond`` draws candidates'
    responses from the model's predictive (:class:`bayes_recon.stages.Start`)."""
    layout, estimator = problem.layout, problem.estimator
    n_draws, dim = draws.shape
    c, m = len(layout.strata), n_points
    bits = jnp.repeat(layout.strata, m, axis=0)
    added_bits = jnp.repeat(layout.strata, added(m), axis=0)
    slices = draw_slices(estimator, jax.random.PRNGKey(seed + 1), n_draws, problem.n_slices, dim)
    prior, root = prior_terms(problem), metric_root(estimator)
    # draws at once, for the union of the points and the candidates (the most points at once)
    at_once = max(
        1,
        GRADIENT_BUDGET
        // (
            c
            * (m + added(m) + moved_in(c, m))
            * problem.weighted.copies
            * dim
            * value_size(estimator, dim, problem.n_slices)
        ),
    )

    def prior_at(pair: tuple) -> tuple[Array, Array]:
        draw, v = pair
        score, curvature = prior(draw, v)
        return root(score, v), curvature

    def point_terms_at(
        z: Array, point_bits: Array, on: Array
    ) -> Callable[[tuple], tuple[Array, Array, Array]]:
        """(draw, slices) → every point's √M-score (n, K), curvature term (n,) and information (n,) there,
        kinks smoothed by bandwidths from the draws ``on``."""
        data = layout.assemble(z, point_bits)
        bandwidths = kink_bandwidths(problem.weighted, problem.coordinates, data, on)

        def at(pair: tuple) -> tuple[Array, Array, Array]:
            draw, v = pair
            scores, curvature = point_terms(problem, data, draw, v, bandwidths)
            return root(scores.T, v).T, curvature, jnp.sum(scores**2, axis=1)

        return at

    def current(z: Array, w: Array) -> tuple[Array, Array, Array, Array]:
        """G at every draw (S, K), the objective, its Monte Carlo se, and the measure's information."""
        at = point_terms_at(z, bits, draws)

        def one(pair: tuple) -> tuple[Array, Array, Array]:
            r, t, information = at(pair)
            score, curvature = prior_at(pair)
            g = score + w @ r
            return g, curvature + t @ w + 0.5 * g @ g, information

        g, each, information = map_in_chunks(one, (draws, slices), at_once)
        information = jnp.mean(information, axis=0)
        value = jnp.mean(each) + penalty_of(information, dim)
        return g, value, jnp.std(each) / jnp.sqrt(n_draws), w @ information

    def first_variation(z: Array, point_bits: Array, g: Array, on: Array, on_slices: Array | None) -> Array:
        """φ at the points z (n,) over the draws ``on`` (G at them: ``g``), with the barrier."""
        at = point_terms_at(z, point_bits, on)

        def one(triple: tuple) -> tuple[Array, Array]:
            draw, v, g_at = triple
            r, t, information = at((draw, v))
            return t + r @ g_at, information

        value, information = map_in_chunks(one, (on, on_slices, g), at_once)
        excess = jnp.maximum(jnp.mean(information, axis=0) / (INFORMATION_BOUND * dim) - 1.0, 0.0)
        return jnp.mean(value, axis=0) + BARRIER * excess**2

    search_rows = jax.random.permutation(jax.random.PRNGKey(seed + 5), n_draws)[:SCREEN_DRAWS]
    screen_slices = None if slices is None else slices[search_rows]

    def screen(candidates: Array, candidate_bits: Array, g: Array) -> Array:
        on = (g[search_rows], draws[search_rows], screen_slices)
        return first_variation(candidates, candidate_bits, *on)

    def descend(starts: Array, g: Array) -> tuple[Array, Array]:
        """Saddle-free Newton on φ from every start (K per stratum), on every draw: the points found, and
        φ at each (NaN: a point the likelihood rules out). On a subset of the draws it found points whose
        likelihood is sharp between them (a Poisson regression: the objective far below the true data's,
        the self-check failed). Exact Hessians in the points' own coordinates: a stratum's cloud can have a
        coordinate collapsed, so its scale is no guide to difference steps. On a CPU one start at a time,
        each stopping on its own (batched, every start ran as long as the slowest: 20 steps where most
        needed 12-16), once φ changes by under 1e-6 (absolute: |φ| < 1 here); the gap needs φ to about
        se / mass (1.3e-5 on earnings-logearn_interaction_z: se 0.016, mass 1,200)."""

        def one(start: Array, point_bits: Array) -> Array:
            def objective(x: Array, key: Array) -> Array:
                return first_variation(x[None], point_bits[None], g, draws, slices)[0]

            newton = OptimiserConfig("newton")
            return minimise(objective, start, KEY, NEWTON_STEPS, newton, tol=1e-6, patience=2)[0].params

        pairs = (starts, added_bits)
        cpu = jax.default_backend() == "cpu"
        found = jax.lax.map(lambda pair: one(*pair), pairs) if cpu else jax.vmap(one)(*pairs)
        phi = first_variation(found, added_bits, g, draws, slices)
        return found, jnp.where(jnp.isfinite(phi) & jnp.all(jnp.isfinite(found), axis=1), phi, jnp.nan)

    def quadratic(z: Array, point_bits: Array) -> tuple[Array, Array]:
        """The objective in the weights of the points z: ½ wᵀAw + bᵀw + a constant. A is accumulated over
        chunks of draws: the points' scores at every draw are never all held."""
        at = point_terms_at(z, point_bits, draws)
        a = gram_in_chunks(lambda pair: at(pair)[0].T, (draws, slices), at_once) / n_draws

        def linear(pair: tuple) -> Array:
            r, t, _ = at(pair)
            return t + r @ prior_at(pair)[0]

        return a, jnp.mean(map_in_chunks(linear, (draws, slices), at_once), axis=0)

    full = build_objective(problem, draws, seed + 1)
    base = jnp.zeros((m, layout.dim))

    def polish(params: pseudo.Pseudo) -> tuple[Array, Array]:
        final = minimise(lambda p, key: full(p, base, key), params, KEY, steps, config, tol=1e-9)[0]
        z, _, w = pseudo.coordinates(layout, final.params, base)
        return z, w

    jitted = (jax.jit(f) for f in (current, screen, descend, quadratic, polish))
    return Refiner(problem, n_points, seed, *jitted, None if respond is None else jax.jit(respond))


def refine(refiner: Refiner, z: np.ndarray, weights: np.ndarray, rounds: int) -> Refinement:
    """Up to ``rounds`` Frank–Wolfe rounds (see the module) from the measure of unconstrained points ``z``
    (C·M, D) and ``weights``."""
    layout, m = refiner.problem.layout, refiner.n_points
    strata = layout.strata
    c = len(strata)
    rng = np.random.default_rng(refiner.seed)
    z, w = np.asarray(z, dtype=float), np.asarray(weights, dtype=float)
    g, value, se, _ = refiner.current(jnp.asarray(z), jnp.asarray(w))
    dim = refiner.problem.coordinates.scale.shape[0]
    k = added(m)
    union_bits = jnp.concatenate(
        [jnp.repeat(strata, m, axis=0), jnp.repeat(strata, k + moved_in(c, m), axis=0)]
    )
    objectives, gaps, converged = [float(value)], [], False
    for _ in range(rounds):
        pool, predicted = _pool(z, w, strata, m, rng, refiner.respond)
        starts = _screened(refiner.screen, pool, predicted, strata, g, m)
        candidates, phi = (np.asarray(v) for v in refiner.descend(jnp.asarray(starts), g))
        usable = np.isfinite(phi)
        if not usable.any():  # every point found is one the likelihood rules out: nothing to tell
            gaps.append(np.nan)
            continue
        gaps.append(float(w.sum() * max(-phi[usable].min(), 0.0)))
        if gaps[-1] < GAP * se:  # no measure of this mass gains what the draws can tell from noise
            converged = True
            break
        # an unusable candidate stands in as a copy of its stratum's first point (the weights share it)
        found = np.where(usable[:, None], candidates, np.repeat(z[::m], k, axis=0)).reshape(c, k, -1)
        candidates = np.concatenate([found, _moved(z, w, c, m)], axis=1).reshape(-1, z.shape[1])
        union = np.concatenate([z, candidates])
        a, b = (np.asarray(v) for v in refiner.quadratic(jnp.asarray(union), union_bits))
        # a point the likelihood rules out (one moved into a stratum whose values it cannot have) gets none
        finite = np.isfinite(np.diag(a)) & np.isfinite(b)
        if not (finite[: c * m].all() and np.isfinite(a[np.ix_(finite, finite)]).all()):
            continue
        try:
            solved = np.full(len(b), -1.0)  # below any weight: a stratum's own M points are kept first
            solved[finite] = _weights_solved(a[np.ix_(finite, finite)], b[finite])
            kept = _heaviest(solved, c, m)
            w_kept = _weights_solved(a[np.ix_(kept, kept)], b[kept])
        except RuntimeError:  # NNLS ran out of iterations: the next round searches afresh
            continue
        z_new, w_new = refiner.polish(_encoded(union[kept], w_kept, c, m, layout))
        g_new, value_new, se_new, information = refiner.current(z_new, w_new)
        drop = objectives[-1] - float(value_new)
        if drop < GAP * se:  # what the gap promised, the round did not gain: the search has no better
            converged = True
        if drop > 0 and within_information_bound(float(information), dim):
            z, w, g, se = np.asarray(z_new), np.asarray(w_new), g_new, se_new
            objectives.append(float(value_new))
        if converged:
            break
    return Refinement(z, w, np.asarray(objectives), np.asarray(gaps), converged)


def _pool(
    z: np.ndarray,
    w: np.ndarray,
    strata: Array,
    m: int,
    rng: np.random.Generator,
    respond: Callable[[Array, Array, Array], Array] | None,
) -> tuple[np.ndarray, np.ndarray]:
    """Candidates per stratum (C, P, D): at every width, half from its own weighted cloud and half from the
    whole measure's, every other one with its responses drawn by ``respond`` given its covariates, and
    around each of its points; and which of the P have their responses drawn. A Gaussian cloud rarely
    reaches the joint tail where a response follows its covariates (a Poisson regression's count of 40 at
    a covariate 2.2 sd out, where the stages' counts ended below 8); the predictive does. A stratum the
    stages lost has no cloud of its own to search from (earnings-logearn_interaction_z: the men's stratum
    ended with mass 0.14 at a height of 243 inches, its spread 1e-5); the whole measure's cloud, in the
    same columns, reaches where its data are."""
    whole, half = _weighted_cloud(z, w), SCREEN_PER_WIDTH // 2
    pools = []
    for zs, ws, bits in zip(z.reshape(len(strata), m, -1), w.reshape(len(strata), m), strata, strict=True):
        mean, root = _weighted_cloud(zs, ws)
        cloud = np.concatenate([
            centre + width * rng.standard_normal((half, len(mean))) @ spread.T
            for width in SCREEN_WIDTHS
            for centre, spread in ((mean, root), whole)
        ])  # fmt: skip
        if respond is not None:
            drawn_for = jnp.asarray(cloud[1::2])
            key = jax.random.PRNGKey(rng.integers(2**31))
            drawn = np.asarray(respond(drawn_for, jnp.broadcast_to(bits, (len(drawn_for), len(bits))), key))
            cloud[1::2] = np.where(np.isfinite(drawn), drawn, cloud[1::2])
        pools.append(np.concatenate([cloud, zs + AROUND_POINTS * rng.standard_normal(zs.shape) @ root.T]))
    predicted = np.zeros(pools[0].shape[0], dtype=bool)
    predicted[1 : len(SCREEN_WIDTHS) * 2 * half : 2] = respond is not None
    return np.stack(pools), predicted


def _moved(z: np.ndarray, w: np.ndarray, c: int, m: int) -> np.ndarray:
    """For each of the C strata, the :func:`moved_in` (C, M) heaviest points of the others (C, ·, D), to take
    its discrete values. Newton on φ sends every start to the few points where one point gains most,
    and a stratum the stages lost needs a whole spread measure back: on earnings-logearn_interaction_z
    the first round, from five of six random pools, gave the men's stratum a mass of 0.15 to 4.8 (true
    505) at the men's best points, and gained under an se while the gap was 210 se. The other strata's
    points, in the same columns, are a spread measure to start from; the exact weights take what helps."""
    zs, ws = z.reshape(c, m, -1), w.reshape(c, m)
    moved = []
    for s in range(c):
        others = np.arange(c) != s
        points, weights = zs[others].reshape(-1, z.shape[1]), ws[others].reshape(-1)
        moved.append(points[np.argsort(-weights, kind="stable")[: moved_in(c, m)]])
    return np.stack(moved)


def _weighted_cloud(z: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The weighted mean (D,) and a Cholesky root (D, D) of the weighted covariance of points ``z`` (n, D)."""
    p = w / w.sum()
    mean = p @ z
    cov = ((z - mean) * p[:, None]).T @ (z - mean)
    return mean, np.linalg.cholesky(cov + np.diag(1e-9 * np.diag(cov) + 1e-12))


def _screened(
    screen: Callable[[Array, Array, Array], Array],
    pool: np.ndarray,
    predicted: np.ndarray,
    strata: Array,
    g: Array,
    m: int,
) -> np.ndarray:
    """The K = :func:`added` (M) candidates of each stratum of ``pool`` (C, P, D) with the most negative φ
    on the screen's draws (C·K, D), half of them among those with ``predicted`` responses where there are
    any: the screen's φ is noisy, and one kind of candidate can crowd out the other (a negative binomial
    regression's rounds stopped at once where, without the predictive's candidates, they had gone on).
    ``screen(points, their discrete values, G)`` gives φ, M points at a time."""
    c, size, _ = pool.shape
    rows = -(-size // m) * m  # one compiled shape for every chunk
    padded = np.concatenate([pool, np.repeat(pool[:, :1], rows - size, axis=1)], axis=1)
    best = []
    for s in range(c):
        bits = jnp.broadcast_to(strata[s], (m, strata.shape[1]))
        phi = np.concatenate(
            [np.asarray(screen(jnp.asarray(padded[s, i : i + m]), bits, g)) for i in range(0, rows, m)]
        )[:size]  # the padding repeats a candidate
        order = np.argsort(np.where(np.isfinite(phi), phi, np.inf), kind="stable")
        k = added(m)
        if predicted.any():
            share = k // 2
            order = np.concatenate([order[predicted[order]][:share], order[~predicted[order]][: k - share]])
        best.append(pool[s, order[:k]])
    return np.concatenate(best)


def _weights_solved(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """argmin over w ≥ 0 of ½ wᵀAw + bᵀw, as non-negative least squares ½|Fw + e|² with FᵀF = A, Fᵀe = b
    (A positive semi-definite: its negligible eigenvalues are left out)."""
    values, vectors = np.linalg.eigh((a + a.T) / 2)
    keep = values > 1e-12 * values.max()
    f = np.sqrt(values[keep])[:, None] * vectors[:, keep].T
    e = (vectors[:, keep].T @ b) / np.sqrt(values[keep])
    return nnls(f, -e, maxiter=50 * len(b))[0]


def added(m: int) -> int:
    """Candidates added to each stratum's M points per round (see ADDED_PER_ROUND)."""
    return max(1, round(ADDED_PER_ROUND * m))


def moved_in(c: int, m: int) -> int:
    """Points of the other strata moved into each of C strata of M points per round (:func:`_moved`)."""
    return m if c > 1 else 0


def _heaviest(w: np.ndarray, c: int, m: int) -> np.ndarray:
    """Indices into the union (the C·M points, then each stratum's candidates, as many for each) of the M
    heaviest of each stratum, stratum by stratum."""
    k = (len(w) - c * m) // c
    kept = []
    for s in range(c):
        rows = np.concatenate([s * m + np.arange(m), c * m + s * k + np.arange(k)])
        kept.append(rows[np.argsort(-w[rows], kind="stable")[:m]])
    return np.concatenate(kept)


def _encoded(z: np.ndarray, w: np.ndarray, c: int, m: int, layout: pseudo.Layout) -> pseudo.Pseudo:
    """Pseudo-data parameters (base points at zero) that stand for the points ``z`` with weights ``w``;
    a zero weight becomes a negligible one, which the polish may grow again."""
    w = np.maximum(w, 1e-8 * w.max()).reshape(c, m)
    unit = pseudo.initial(m, layout).cloud
    cloud = pseudo.fit_cloud(unit, jnp.asarray(z.reshape(c, m, -1)), jnp.asarray(w))
    cloud = cloud._replace(log_mass=jnp.log(jnp.asarray(w.sum(axis=1)) / m))
    residual = pseudo.whiten(cloud, jnp.asarray(z.reshape(c, m, -1)))
    return pseudo.Pseudo(cloud, pseudo.Points(residual, jnp.log(jnp.asarray(w))))
