"""Self-check of an attack without the true data: does the pseudo-data's posterior reproduce the release?

The weighted pseudo-data define a posterior q(θ) ∝ p(θ) Π_j p(x_j | θ)^{w_j}. :func:`round_trip`
samples it with NUTS and compares its draws with the released draws p, in NumPyro's unconstrained
coordinates: per coordinate, the standardised mean difference (mean_q − mean_p) / sd_p and the sd
ratio sd_q / sd_p; jointly, the unbiased MMD² with a Gaussian kernel.

NUTS runs on θ = m + L z, where m and L Lᵀ are the released draws' mean and covariance (a linear
change of variables, so the target is still q; it amounts to the release's covariance as NUTS's
mass matrix, adapted on the diagonal during warm-up). It starts at z = 0, the released draws' mean.
Regression posteriors are strongly correlated in θ (kidiq's intercept and slope at −0.99): there,
600 draws after 300 warm-up steps had an effective size of 130–290 per coordinate with NUTS on θ
(diagonal mass matrix, 22–31 leapfrog steps a draw), 400–800 on z (5 steps a draw).

NUTS is kept to a region: ``margin`` (10) posterior sd beyond the released draws' range in every
coordinate, by a quadratic wall outside it. Beyond it lies nothing the release can speak to, and
something a few heavy points can make improper: a normal mixture's component collapsing onto one point
of weight w has density σ^(2−w) as σ → 0, integrable for the true data (w = 1), not for w ≥ 2. On a
two-component mixture of 1,000 points (M = 50) an unrestricted chain went 53 sd down that spike. A
share of draws beyond the region (over ``max_outside``) is a failure of its own: q has mass where the
release has none.

A mixture whose components are exchangeable has K! copies of every mode, and a release drawn by MCMC may
visit several while the check's chain keeps one: both are compared with their components in one order
(:mod:`bayes_recon.relabel`; ``relabel=False``: as labelled), and the chain starts at and is whitened by
the release so ordered, inside one copy of the mode rather than at the release's mean between copies.
On the model-styles suite's mixture-labels-switch (1,000 NUTS draws switching labels six times) the true
data now reproduce the release at 17 of 20 NUTS seeds, 4 of 20 as labelled (16 with a component's mean
over 0.3 sd off, up to 1.5); its wrong measures (as below) pass at 0–8 of 20, weights ×0.8 at 8
(``benchmarks/bayes_selfcheck_calibration.py``, stop 60).

The MMD² (the unbiased U-statistic) is computed in the whitened coordinates z, with the bandwidth
the median pairwise distance of (up to 1,000 of) the released draws, on n ≈ min(samples, S // 2)
draws from each side. Its critical value comes from ``splits`` random splits of the released
draws into two disjoint halves of n, cut from blocks of about n / ``HALF_BLOCKS`` contiguous draws in
their given order: the ``level`` quantile of the same statistic there, times ``slack`` (default 2).
Blocks, because released draws may come from a chain: two interleaved random halves of 1,000 NUTS
draws with an effective size of about 200 look far more alike than two such chains do (posteriordb's
thinned reference draws are nearly independent, and there blocks and random halves give the same
critical value). So the draws are to be given in the order they were drawn, chains one after
another, as every reader here keeps them: draws sorted by a parameter would make each block a slice
of the posterior, the critical value large, and the MMD² blind (the mean and sd comparisons would
still hold). The slack is for the check's own chain: 600 NUTS draws on kidiq have an effective size
of 400–800 for the means but 210–380 for the squares, so the statistic's spread under "q = p" is
about (1/(n/2) + 1/n) / (2/n) = 1.5 times the splits'; and a 0.99 quantile of 50 splits is itself
noisy.

Thresholds, against runs of the true data (all weights one): ``max_mean_shift`` 0.3 posterior sd
and ``sd_ratio_range`` (0.8, 1.25), symmetric in log. NUTS targets an acceptance rate of 0.9, not
NumPyro's 0.8: at 0.8 an eight-group hierarchical model's true data left over 2 % of transitions
divergent (the allowed share) in 4 of 20 chains (stop 57's code), at 0.9 none over 0.7 %.
``benchmarks/bayes_selfcheck_calibration.py`` (20 NUTS seeds per measure; stop 57's random halves
and 0.8 in brackets):

* the hierarchical model's true data reproduce in 20 of 20 (15: 4 chains divergent, the statistic up
  to 6.0 times its critical value, a mean 0.66 sd off); kidiq's in 20 of 20 (20). The worst seen:
  the statistic 0.21 and 0.46 of its critical value, a mean 0.25 and 0.12 sd off (allowed 0.3), an sd
  ratio of e^±0.21 and e^±0.11 (allowed about e^±0.22). The hierarchical model's true data pass its
  mean and sd bands by a small margin.
* kidiq's wrong measures are rejected: the response moved by 0.05 of its sd (0.15 posterior sd of
  the intercept, far off the intercept–slope ridge) in 20 of 20 (20), the data's weight ×0.7 in 19
  (18), ×1.5 in 17 (19), ×0.8 in 5 (5); the hierarchical model's (its release autocorrelated) in 16,
  18, 18 and 1 of 20. Weights ×0.8 (20 % off) mostly pass; ×0.7 and ×1.5 are caught in 17–19 of 20.

The floor. NUTS sees a few hundred draws of q; the attack's objective sees every released draw. The
release's posterior p minimises the Fisher divergence from p, so on average over the draws the true data
score no worse than any measure, and no worse than a Gaussian
(:func:`bayes_recon.divergence.gaussian_terms`).
``round_trip`` takes the measure's objective above that of the Gaussian with the draws' mean and
covariance, less what that Gaussian gains from being fitted to the same draws, with the gap's Monte Carlo
error (:func:`bayes_recon.reconstruct.floor_check`), and fails a measure more than ``max_floor_errors``
(3, as the benchmarks' truth bar) errors above it: the attack stopped short of what the true data reach.
A logistic regression with eight covariates (N = 2,000, M = 50, stop 75) ended 3.6 errors above the true
data's objective with every comparison passing, and 3.7 above the floor; kidiq's true rows at weight
0.85 pass every comparison (sd ratios 1.08) and fail the floor. On kidiq
(``benchmarks/bayes_selfcheck_calibration.py``, 20 seeds, stop 75) the truth passes at every seed, 4.3
errors below the floor; weights ×0.8, which the comparisons alone pass at 15 of 20 seeds, lie 10.3 errors
above it and fail at every seed. The floor adds a compilation of the objective on every draw to the
attack's first check.

A check takes 2.0–2.5 s on two CPU cores, compiling its NUTS chain included (1.9–2.4 s at stop 57); the
label-switching mixture's 3.4–4.2 s.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import ndtri
from numpyro.diagnostics import effective_sample_size, gelman_rubin
from numpyro.infer import NUTS
from scipy.stats import rankdata

from bayes_recon.divergence import Coordinates
from bayes_recon.precision import attack_numerics
from bayes_recon.relabel import find_relabelling, relabel
from recon_core.errors import ReconError

if TYPE_CHECKING:
    from bayes_recon.reconstruct import AttackSetup

BANDWIDTH_DRAWS = 1000  # released draws whose median pairwise distance sets the kernel's bandwidth


REGION_WALL = 0.1  # posterior sd over which the region's wall takes away half a unit of log density
HALF_BLOCKS = 10  # contiguous blocks of released draws in each half of the two-sample statistic's splits
SELF_CHECK_DRAWS = 4  # the fewest released draws the two-sample statistic's split can work with


MIXING_BLOCKS = 4  # the released draws, in their order, are cut into this many blocks, each taken as a chain
# the fewest released draws whose mixing is judged: 100 a block, as R̂ is trusted only beyond an effective
# size of 400 (Vehtari et al. 2021); at 40, independent draws of 20 coordinates were called unconverged
# in 82 % of trials (the review of stop 74)
MIXING_DRAWS = 400
UNCONVERGED_RHAT = 1.1  # above: the blocks of the release disagree (Gelman et al., Bayesian Data Analysis)
FEW_EFFECTIVE = 100  # below: too few effective draws for the Monte Carlo errors (Vehtari et al. 2021)


def release_mixing(theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per coordinate of the released draws (S, d), in the order given: the rank-normalised R̂ (the larger
    of the bulk's and the folded draws' |θ − median|) and the bulk effective sample size of Vehtari et al.
    (2021), both over split chains: the draws cut into MIXING_BLOCKS blocks taken as chains, each split in
    half. NaN for a coordinate constant in the draws."""
    halves = 2 * MIXING_BLOCKS
    n = len(theta) // halves * halves
    theta = np.asarray(theta[:n], dtype=float)

    def split_scores(x: np.ndarray) -> np.ndarray:  # normal scores of the pooled ranks, (halves, n/halves, d)
        scores = np.asarray(ndtri((rankdata(x, axis=0) - 0.375) / (n + 0.25)))
        return scores.reshape(halves, n // halves, -1)

    bulk = split_scores(theta)
    folded = split_scores(np.abs(theta - np.median(theta, axis=0)))
    with np.errstate(invalid="ignore", divide="ignore"):
        rhat = np.maximum(np.asarray(gelman_rubin(bulk), float), np.asarray(gelman_rubin(folded), float))
        return rhat, np.asarray(effective_sample_size(bulk), float)


def mixing_note(theta: np.ndarray, names: tuple[str, ...]) -> str:
    """What a user must know about the release's own mixing ("" when nothing): the attack and the round
    trip assume draws from the posterior, and a release cut short of it is matched by no data set.

    A Dirichlet regression's NUTS run (500 warm-up steps from NumPyro's default start, a slope's prior sd
    0.05) released draws with R̂ 1.97 and an effective size of 6 of 1,000; the attack ended 422 units
    of its objective below the true data's (mass 7.5 of 250) and its check failed, which read as the
    attack's failure. From the prior's median, 1,000 warm-up steps, the same model's draws (R̂ 1.01, size
    377) were reconstructed to the truth bar (mass 267.9) and reproduced (README, stop 74). The
    model-styles releases have R̂ up to 1.063 and sizes down to 61 (that one noted), posteriordb's
    reference draws R̂ ≤ 1.001 (``benchmarks/bayes_release_mixing.py``)."""
    if len(theta) < MIXING_DRAWS:
        return ""
    rhat, effective = release_mixing(theta)
    if not (np.isfinite(rhat).any() and np.isfinite(effective).any()):
        return ""
    worst, fewest = int(np.nanargmax(rhat)), int(np.nanargmin(effective))
    size = f"effective size {effective[fewest]:.0f} of {len(theta)} for {names[fewest]}"
    if rhat[worst] > UNCONVERGED_RHAT:
        return (
            f"The released draws themselves look unconverged: R̂ {rhat[worst]:.2f} for {names[worst]} over "
            f"{MIXING_BLOCKS} blocks of the draws in their order (above {UNCONVERGED_RHAT:g}), {size}. The "
            "attack and this check assume draws from the posterior, which no data set reproduces otherwise: "
            "sample longer (more warm-up, a start near the mode) before auditing or releasing."
        )
    if effective[fewest] < FEW_EFFECTIVE:
        return (
            f"The released draws mix slowly ({size}, under {FEW_EFFECTIVE}): what is estimated from them "
            "carries more Monte Carlo error than their number suggests."
        )
    return ""


@dataclass(frozen=True)
class SelfCheckConfig:
    """How :func:`round_trip` samples the pseudo-data's posterior and when it says it reproduces the release.

    ``max_mean_shift``: the largest |mean_q − mean_p| / sd_p allowed per coordinate.
    ``sd_ratio_range``: the allowed band of sd_q / sd_p. ``splits``, ``level`` and ``slack``: the
    MMD²'s critical value is ``slack`` times the ``level`` quantile of the statistic over ``splits``
    random halvings of the released draws (by contiguous blocks). ``max_divergent``: the largest share
    of divergent NUTS transitions (after warm-up) whose draws are still trusted. ``margin``: how far,
    in posterior sd, beyond the released draws' range in each coordinate NUTS may go (see the module's
    docstring); ``max_outside``: the largest share of its draws that may lie there.
    ``target_accept``: NUTS's target acceptance rate during warm-up (its step size); NumPyro's default
    0.8 left too many transitions divergent on a hierarchical posterior (see the module's docstring).
    ``relabel``: compare a mixture's exchangeable components in one order (:mod:`bayes_recon.relabel`).
    ``max_floor_errors``: how many Monte Carlo errors the pseudo-data's objective may lie above that of a
    Gaussian fitted to the draws (the truth scores no worse: :func:`~bayes_recon.reconstruct.floor_check`).
    """

    warmup: int = 300
    samples: int = 600
    target_accept: float = 0.9
    max_mean_shift: float = 0.3
    sd_ratio_range: tuple[float, float] = (0.8, 1.25)
    splits: int = 50
    level: float = 0.99
    slack: float = 2.0
    max_divergent: float = 0.02
    margin: float = 10.0
    max_outside: float = 0.01
    relabel: bool = True
    max_floor_errors: float = 3.0
    seed: int = 0

    def __post_init__(self) -> None:
        for name, least in (("warmup", 1), ("samples", 2), ("splits", 1), ("seed", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ReconError(f"{name} must be a whole number ≥ {least}, got {value!r}")
        # checked before the comparisons below, which a string would fail with a TypeError
        numbers = (
            "target_accept",
            "max_mean_shift",
            "level",
            "slack",
            "max_divergent",
            "margin",
            "max_outside",
            "max_floor_errors",
        )
        for name in numbers:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ReconError(f"{name} must be a number, got {value!r}")
        if not isinstance(self.relabel, bool):
            raise ReconError(f"relabel must be True or False, got {self.relabel!r}")
        if not 0 < self.target_accept < 1:
            raise ReconError(
                f"target_accept must be NUTS's target acceptance rate, strictly between 0 and 1 (e.g. 0.9), "
                f"got {self.target_accept!r}"
            )
        if not self.max_mean_shift > 0:
            raise ReconError(f"max_mean_shift must be positive (e.g. 0.3), got {self.max_mean_shift!r}")
        low, high = self.sd_ratio_range
        if not 0 < low < 1 < high:
            raise ReconError(
                f"sd_ratio_range must be (low, high) with 0 < low < 1 < high (e.g. (0.8, 1.25)), "
                f"got {self.sd_ratio_range!r}"
            )
        if not 0 < self.level < 1:
            raise ReconError(
                f"level must be a quantile strictly between 0 and 1 (e.g. 0.99), got {self.level!r}"
            )
        if not self.slack >= 1:
            raise ReconError(f"slack must be ≥ 1 (1: the pure split calibration), got {self.slack!r}")
        for name in ("max_divergent", "max_outside"):
            if not 0 <= getattr(self, name) <= 1:
                raise ReconError(f"{name} must be a share between 0 and 1, got {getattr(self, name)!r}")
        if not self.max_floor_errors > 0:
            raise ReconError(
                f"max_floor_errors must be a positive number of Monte Carlo errors (e.g. 3), got "
                f"{self.max_floor_errors!r}"
            )
        if not self.margin > 0:
            raise ReconError(
                f"margin must be a positive number of posterior sd (e.g. 10), got {self.margin!r}"
            )


@dataclass(frozen=True)
class SelfCheck:
    """The verdict, the comparisons behind it (per unconstrained coordinate ``names``), and why it failed.

    When NUTS could not sample the weighted posterior the comparisons are NaN. NUTS is kept within
    ``margin`` sd beyond the released draws, so a mean shift far out reads as about that distance.
    """

    reproduces: bool
    mean_shift: np.ndarray  # (d,) (mean_q − mean_p) / sd_p
    sd_ratio: np.ndarray  # (d,) sd_q / sd_p
    statistic: float  # unbiased MMD² between q's NUTS draws and the released draws
    critical: float
    names: tuple[str, ...]
    reasons: tuple[str, ...]
    relabelled: str = ""  # how label switching was undone before comparing (bayes_recon.relabel), if it was
    mixing: str = ""  # the release's own mixing, where a user must know of it (:func:`mixing_note`)
    # the pseudo-data's objective above the floor (a Gaussian fitted to the draws, less what the fit gains on
    # them) and the gap's Monte Carlo error (round_trip; None where no floor was given)
    floor: tuple[float, float] | None = None

    def summary(self) -> str:
        relabelled = f" ({self.relabelled})" if self.relabelled else ""
        mixing = f" {self.mixing}" if self.mixing else ""
        if self.reproduces:
            worst = float(np.max(np.abs(self.mean_shift)))
            low, high = float(np.min(self.sd_ratio)), float(np.max(self.sd_ratio))
            return (
                "The pseudo-data's posterior reproduces the release: means within "
                f"{worst:.2f} posterior sd, sd ratios {low:.2f}–{high:.2f}, and the MMD² "
                f"({self.statistic:.3g}) below its critical value ({self.critical:.3g}){relabelled}.{mixing}"
            )
        reasons = "; ".join(self.reasons)
        return f"The pseudo-data's posterior does NOT reproduce the release: {reasons}{relabelled}.{mixing}"

    def to_json(self) -> dict[str, Any]:
        """Plain numbers for ``json.dumps`` (NaN as None)."""

        def plain(x: float) -> float | None:
            return float(x) if np.isfinite(x) else None

        return {
            "reproduces": bool(self.reproduces),
            "mean_shift": [plain(x) for x in self.mean_shift],
            "sd_ratio": [plain(x) for x in self.sd_ratio],
            "statistic": plain(self.statistic),
            "critical": plain(self.critical),
            "names": list(self.names),
            "reasons": list(self.reasons),
            "relabelled": self.relabelled,
            "mixing": self.mixing,
            "floor": None if self.floor is None else [plain(x) for x in self.floor],
        }


@attack_numerics
def round_trip(
    setup: AttackSetup,
    points: Mapping[str, np.ndarray],
    weights: np.ndarray,
    config: SelfCheckConfig | None = None,
    floor: tuple[float, float] | None = None,
) -> SelfCheck:
    """Sample the posterior of the weighted pseudo-data ``points``, ``weights``; compare it with the release.
    A relaxed count's posterior is that of a data set, its count split between the integers around it
    (:func:`bayes_recon.weighting.between_counts`).

    ``floor``: the attack's objective at this measure above that of a Gaussian fitted to the draws, and the
    gap's Monte Carlo error (:func:`bayes_recon.reconstruct.floor_check`). The true data score no worse
    than that Gaussian, so a gap of more than ``config.max_floor_errors`` errors fails the check: NUTS on
    a few hundred draws misses what the objective on all of them shows (a logistic regression with
    eight covariates, M = 50: 3.7 errors above, every comparison passing).

    ``setup``: the attack's :class:`~bayes_recon.reconstruct.AttackSetup` (its weighted model,
    coordinates and draws). Never raises because the weighted posterior is improper or NUTS fails:
    the verdict is then False, with the reason.
    """
    config = config or SelfCheckConfig()
    coordinates = setup.coordinates
    theta_p = np.asarray(coordinates.to_model(setup.draws))
    if len(theta_p) < SELF_CHECK_DRAWS:
        raise ReconError(
            f"the self-check needs at least {SELF_CHECK_DRAWS} released draws, got {len(theta_p)}"
        )
    names = setup.weighted_model.coordinate_names
    data = {k: jnp.asarray(v) for k, v in points.items()}
    w = jnp.asarray(weights, dtype=float)

    # The chain starts at and is whitened by the release with a mixture's components in one order
    # (bayes_recon.relabel): inside one copy of the mode, not between. The region holds the release both
    # as drawn and so ordered (a release that never switched may hold only the other copy).
    drawn = theta_p
    relabelling = find_relabelling(setup.weighted_model, data, theta_p) if config.relabel else None
    if relabelling is not None:
        theta_p = relabel(setup.weighted_model, data, relabelling, theta_p)
    sd_p = theta_p.std(axis=0, ddof=1)
    sd_region = np.maximum(drawn.std(axis=0, ddof=1), sd_p)
    low_p = np.minimum(drawn.min(axis=0), theta_p.min(axis=0)) - config.margin * sd_region
    high_p = np.maximum(drawn.max(axis=0), theta_p.max(axis=0)) + config.margin * sd_region
    release = Coordinates.standardised(jnp.asarray(theta_p))

    def beyond(theta: jax.Array) -> jax.Array:
        """How far θ lies outside the region, per coordinate, in posterior sd (0 inside)."""
        return jnp.maximum(jnp.maximum(low_p - theta, theta - high_p), 0.0) / sd_region

    def log_q(z: jax.Array, data: Mapping[str, jax.Array], w: jax.Array) -> jax.Array:
        theta = release.to_model(z)
        wall = 0.5 * jnp.sum((beyond(theta) / REGION_WALL) ** 2)
        return setup.weighted_model.log_density(theta, data, w) - wall

    nan = np.full(theta_p.shape[1], np.nan)
    sampled = _nuts(log_q, (data, w), theta_p.shape[1], config)
    relabelled = "" if relabelling is None else relabelling.describe()
    mixing = mixing_note(theta_p, names)
    if sampled.failure:
        return SelfCheck(
            False, nan, nan, float("nan"), float("nan"), names, (sampled.failure,), relabelled, mixing, floor
        )
    theta_q = np.asarray(release.to_model(sampled.z))
    outside = np.asarray(beyond(jnp.asarray(theta_q)) > 0)
    if relabelling is not None:
        theta_q = relabel(setup.weighted_model, data, relabelling, theta_q)
    mean_shift = (theta_q.mean(axis=0) - theta_p.mean(axis=0)) / sd_p
    sd_ratio = theta_q.std(axis=0, ddof=1) / sd_p
    statistic, critical = _two_sample(
        *(np.asarray(release.to_attack(jnp.asarray(t))) for t in (theta_q, theta_p)), config
    )

    reasons = []
    worst = int(np.argmax(np.abs(mean_shift)))
    if abs(mean_shift[worst]) > config.max_mean_shift:
        reasons.append(
            f"the posterior mean of {names[worst]} moves by {mean_shift[worst]:+.2f} posterior sd "
            f"(allowed ±{config.max_mean_shift:g})"
        )
    low, high = config.sd_ratio_range
    with np.errstate(divide="ignore"):  # a chain stuck at its start has sd ratio 0
        worst = int(np.argmax(np.abs(np.log(sd_ratio))))
    if not low <= sd_ratio[worst] <= high:
        reasons.append(
            f"the posterior sd of {names[worst]} is {sd_ratio[worst]:.2f} times the release's "
            f"(allowed {low:g}–{high:g})"
        )
    if statistic > critical:
        reasons.append(
            f"the joint distribution of the draws differs from the release (MMD² {statistic:.3g} "
            f"above its critical value {critical:.3g})"
        )
    if outside.any(axis=1).mean() > config.max_outside:
        worst = int(np.argmax(outside.mean(axis=0)))
        reasons.append(
            f"{outside.any(axis=1).mean():.0%} of the draws lie over {config.margin:g} posterior sd beyond "
            f"the released draws (most often in {names[worst]}): the pseudo-data's posterior has mass "
            "where the release has none"
        )
    if sampled.divergent > config.max_divergent:
        reasons.append(
            f"{sampled.divergent:.0%} of NUTS transitions diverged (allowed {config.max_divergent:.0%}): "
            "the weighted posterior is too irregular for its draws to be trusted"
        )
    if floor is not None and floor[0] > config.max_floor_errors * floor[1]:
        reasons.append(
            f"the attack's objective lies {floor[0]:.3g} ({floor[0] / floor[1]:.1f} Monte Carlo errors) "
            "above that of a Gaussian fitted to the draws (less what the fit gains on them), which the true "
            "data's posterior, the draws' own, scores no worse than: the attack stopped short of what the "
            "true data reach"
        )
    dim = setup.layout.dim if setup.layout is not None else 0
    if reasons and len(w) <= dim:  # diamonds-diamonds at M = 10: 25 coordinates, mass 63 of 5,000
        reasons.append(
            f"{len(w)} pseudo-points cannot spread in all {dim} continuous data coordinates (a covariance "
            f"of rank below {dim}): try n_points (--points) of at least {dim + 1}"
        )
    verdict = not reasons, mean_shift, sd_ratio, statistic, critical, names, tuple(reasons)
    return SelfCheck(*verdict, relabelled, mixing, floor)


class Sampled(NamedTuple):
    z: np.ndarray  # (samples, d) NUTS draws in the release's whitened coordinates
    divergent: float  # share of divergent transitions after warm-up
    failure: str  # why there are no usable draws ("" when there are)


def _nuts(log_q: Callable[..., jax.Array], args: tuple, dim: int, config: SelfCheckConfig) -> Sampled:
    """NUTS on the whitened coordinates, one chain from z = 0 (the released draws' mean): what NumPyro's
    ``MCMC.run`` does, as one compiled program (its eager start alone was about a hundred small
    programs). ``log_q(z, *args)``: the pseudo-data are arguments, not constants, so that another
    reconstruction of the same release and shapes finds the compiled chain in the persistent cache."""
    start = jnp.zeros(dim)
    if not np.isfinite(float(jax.jit(log_q)(start, *args))):
        return Sampled(
            np.empty((0, dim)),
            1.0,
            "the pseudo-data's posterior density is not finite at the released draws' mean "
            "(the weights or points leave the model's support)",
        )

    @jax.jit
    def chain(key: jax.Array, args: tuple) -> tuple[jax.Array, jax.Array]:
        kernel = NUTS(potential_fn=lambda z: -log_q(z, *args), target_accept_prob=config.target_accept)
        state = kernel.init(key, config.warmup, init_params=start, model_args=(), model_kwargs={})

        def transition(state: Any, _: None) -> tuple[Any, tuple[jax.Array, jax.Array]]:
            state = kernel.sample(state, (), {})
            return state, (state.z, state.diverging)

        _, (z, diverging) = jax.lax.scan(transition, state, length=config.warmup + config.samples)
        return z[config.warmup :], diverging[config.warmup :]

    z, diverging = (np.asarray(a) for a in chain(jax.random.PRNGKey(config.seed), args))
    divergent = float(np.mean(diverging))
    if not np.all(np.isfinite(z)):
        return Sampled(
            z,
            divergent,
            "NUTS drew non-finite values: the pseudo-data's posterior is improper (too little weight "
            "to pin every parameter down) or numerically broken",
        )
    return Sampled(z, divergent, "")


def _two_sample(z_q: np.ndarray, z_p: np.ndarray, config: SelfCheckConfig) -> tuple[float, float]:
    """Unbiased MMD² between n of q's draws and n released draws, and its critical value from splits of p
    into halves of contiguous blocks (see the module's docstring)."""
    rng = np.random.default_rng(config.seed)
    length = max(min(len(z_q), len(z_p) // 2) // HALF_BLOCKS, 1)
    blocks = np.arange(len(z_p) // length * length).reshape(-1, length)
    n = min(len(z_q), blocks.size // 2)
    pool = z_p[rng.permutation(len(z_p))[:BANDWIDTH_DRAWS]]
    distances = np.sqrt(np.asarray(_squared_distances(jnp.asarray(pool), jnp.asarray(pool))))
    bandwidth = float(np.median(distances[np.triu_indices(len(pool), k=1)]))
    q_rows = rng.permutation(len(z_q))[:n]
    orders = np.stack([blocks[rng.permutation(len(blocks))].ravel() for _ in range(config.splits + 1)])
    halves = np.concatenate([orders[:, :n], orders[:, -n:]], axis=1)
    statistics = np.asarray(
        _mmd2_all(jnp.asarray(z_q[q_rows]), jnp.asarray(z_p), jnp.asarray(halves), bandwidth)
    )
    return float(statistics[0]), config.slack * float(np.quantile(statistics[1:], config.level))


@jax.jit
def _mmd2_all(x_q: jax.Array, z_p: jax.Array, halves: jax.Array, bandwidth: jax.Array) -> jax.Array:
    """MMD² of q's draws against the first half of ``halves[0]``, then of each further row's two halves."""
    n = x_q.shape[0]

    def one(half: jax.Array) -> jax.Array:
        return _mmd2(z_p[half[:n]], z_p[half[n:]], bandwidth)

    return jnp.concatenate([_mmd2(x_q, z_p[halves[0, :n]], bandwidth)[None], jax.lax.map(one, halves[1:])])


def _squared_distances(x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.maximum((x**2).sum(1)[:, None] + (y**2).sum(1)[None, :] - 2 * x @ y.T, 0.0)


def _mmd2(x: jax.Array, y: jax.Array, bandwidth: jax.Array) -> jax.Array:
    """The unbiased (U-statistic) MMD² of two equal-sized samples under a Gaussian kernel."""
    n = x.shape[0]

    def mean_off_diagonal(k: jax.Array) -> jax.Array:
        return (k.sum() - jnp.trace(k)) / (n * (n - 1))

    def kernel(a: jax.Array, b: jax.Array) -> jax.Array:
        return jnp.exp(-_squared_distances(a, b) / (2 * bandwidth**2))

    return mean_off_diagonal(kernel(x, x)) + mean_off_diagonal(kernel(y, y)) - 2 * kernel(x, y).mean()
