"""The self-check: the true data's posterior reproduces the release, a wrong measure's does not."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC, NUTS
from row_models import attack_setup

import bayes_recon as br
from bayes_recon.modelcheck import prepare_release
from bayes_recon.models import lookup
from bayes_recon.posteriordb import load_posterior
from bayes_recon.reconstruct import floor_check
from bayes_recon.selfcheck import SelfCheckConfig, _two_sample, mixing_note, release_mixing, round_trip
from bayes_recon.weighting import WeightedModel
from recon_core.measure import WeightedMeasure

KIDIQ = "kidiq-kidscore_momiq"


@pytest.fixture(scope="module")
def kidiq():
    """The setup of a one-step attack (round_trip uses its model, coordinates and draws) and the data."""
    entry, posterior = lookup(KIDIQ), load_posterior(KIDIQ)
    data = entry.model_data(posterior.data)
    config = br.ReconConfig(coarse_steps=0, steps=1, restarts=1, rescue_restarts=0, refine_rounds=0)
    result = br.reconstruct(entry.model, posterior.draws, free=list(entry.free), n_points=5, config=config)
    return result.setup, {k: data[k] for k in entry.free}


def test_the_true_data_reproduces_the_release(kidiq):
    setup, data = kidiq
    check = round_trip(setup, data, np.ones(len(data["kid_score"])))
    assert check.reproduces, check.reasons
    assert check.reasons == () and check.names == ("beta[0]", "beta[1]", "sigma")
    assert np.all(np.abs(check.mean_shift) < 0.2) and np.all(np.abs(check.sd_ratio - 1) < 0.15)
    assert check.statistic < check.critical
    assert check.summary().startswith("The pseudo-data's posterior reproduces the release")


def test_a_posterior_too_wide_or_shifted_does_not_reproduce_the_release(kidiq):
    setup, data = kidiq
    n, sd_y = len(data["kid_score"]), float(np.std(data["kid_score"]))

    light = round_trip(setup, data, np.full(n, 0.3))
    assert not light.reproduces and light.reasons
    # A flat-prior regression's posterior sd grows as 1/√w: beta's sds by 1/√0.3 = 1.83.
    np.testing.assert_allclose(light.sd_ratio[:2], 1 / np.sqrt(0.3), rtol=0.12)
    assert any("posterior sd of" in reason for reason in light.reasons)
    assert light.statistic > light.critical

    shifted = round_trip(setup, {**data, "kid_score": data["kid_score"] + 2 * sd_y}, np.ones(n))
    assert not shifted.reproduces and shifted.reasons
    # Adding c to every response moves the intercept's posterior by exactly c and leaves the slope.
    theta = np.asarray(setup.coordinates.shift + setup.draws @ setup.coordinates.scale.T)
    expected = 2 * sd_y / theta[:, 0].std(ddof=1)
    assert shifted.mean_shift[0] == pytest.approx(expected, abs=0.3)
    assert abs(shifted.mean_shift[1]) < 0.3
    assert any(reason.startswith("the posterior mean of beta[0] moves by") for reason in shifted.reasons)
    summary = shifted.summary()
    assert "does NOT reproduce the release" in summary and "beta[0]" in summary


def test_the_floor_fails_light_weights_that_every_comparison_passes_and_not_the_truth(kidiq):
    """The true data score no worse than the Gaussian of the draws (kidiq's posterior is near Gaussian:
    within the Monte Carlo errors); the true rows at weight 0.85 widen the posterior by 1/√0.85 = 1.08,
    inside every comparison's band, and score far above it."""
    setup, data = kidiq
    floor, n = floor_check(setup, 4), len(data["kid_score"])
    gap, error = floor(WeightedMeasure(data, np.ones(n)))
    assert gap < SelfCheckConfig().max_floor_errors * error
    light = np.full(n, 0.85)
    assert round_trip(setup, data, light).reproduces
    gap, error = floor(WeightedMeasure(data, light))
    check = round_trip(setup, data, light, floor=(gap, error))
    assert gap > SelfCheckConfig().max_floor_errors * error and not check.reproduces
    assert check.reasons == (
        f"the attack's objective lies {gap:.3g} ({gap / error:.1f} Monte Carlo errors) above that of a "
        "Gaussian fitted to the draws (less what the fit gains on them), which the true data's posterior, "
        "the draws' own, scores no worse than: the attack stopped short of what the true data reach",
    )
    assert check.to_json()["floor"] == [gap, error]


def test_the_floor_passes_the_true_data_of_a_gaussian_posterior_of_sixteen_parameters():
    """A regression of 16 coefficients with known noise: its posterior is Gaussian, drawn exactly (1,000
    draws). A Gaussian fitted to those draws scores better on them than the posterior by about
    d(d + 2) / (2 S) = 0.144, which put the true data some six errors above an uncorrected floor;
    corrected, they pass."""
    rng, n, d = np.random.default_rng(0), 200, 16
    x = rng.normal(size=(n, d))
    y = x @ rng.normal(size=d) + rng.normal(size=n)

    def model(x, y=None):
        beta = numpyro.sample("beta", dist.Normal(0, 10).expand([d]).to_event(1))
        with numpyro.plate("rows", x.shape[0]):
            numpyro.sample("y", dist.Normal(x @ beta, 1.0), obs=y)

    precision = x.T @ x + np.eye(d) / 100
    draws = {
        "beta": rng.multivariate_normal(np.linalg.solve(precision, x.T @ y), np.linalg.inv(precision), 1000)
    }
    release = prepare_release(model, draws, {"x": (d,), "y": ()})
    setup = attack_setup(release.weighted_model, jnp.asarray(release.theta), release.layout)
    gap, error = floor_check(setup, 4)(WeightedMeasure({"x": x, "y": y}, np.ones(n)))
    allowed = SelfCheckConfig().max_floor_errors * error
    assert gap < allowed < gap + d * (d + 2) / (2 * 1000)


def test_fewer_points_than_data_coordinates_are_named_in_a_failed_check(kidiq):
    """Two points in the plane of (mom_iq, kid_score) lie on a line: beta is unidentified along it."""
    setup, data = kidiq
    pair = {k: v[:2] for k, v in data.items()}
    check = round_trip(setup, pair, np.full(2, len(data["kid_score"]) / 2))
    assert not check.reproduces
    assert check.reasons[-1].startswith("2 pseudo-points cannot spread in all 2 continuous data coordinates")
    assert "at least 3" in check.reasons[-1]
    assert not any("pseudo-points" in reason for reason in round_trip(setup, data, np.full(434, 0.3)).reasons)


def test_an_undefined_posterior_is_a_verdict_not_an_error(kidiq):
    setup, data = kidiq
    check = round_trip(setup, data, np.full(len(data["kid_score"]), np.nan))
    assert not check.reproduces and "not finite" in check.reasons[0]
    assert json.loads(json.dumps(check.to_json()))["statistic"] is None


def normal_model(y=None):
    loc = numpyro.sample("loc", dist.Normal(0.0, 10.0))
    scale = numpyro.sample("scale", dist.HalfNormal(5.0))
    numpyro.sample("y", dist.Normal(loc, scale), obs=y)


@pytest.fixture(scope="module")
def small_release():
    """A normal model's NUTS draws of 40 points, and the attack setup on them (round_trip needs no layout)."""
    y = jnp.asarray(np.random.default_rng(3).normal(2.0, 1.5, 40))
    mcmc = MCMC(NUTS(normal_model), num_warmup=500, num_samples=2000, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(1), y=y)
    draws = mcmc.get_samples()
    model = WeightedModel(normal_model, ("y",), {}, {k: v[0] for k, v in draws.items()})
    return attack_setup(model, jnp.asarray(model.to_unconstrained(draws, {"y": y}))), y


def test_a_small_model_of_our_own_reproduces_its_nuts_draws_and_not_double_the_data(small_release):
    setup, y = small_release
    truth = round_trip(setup, {"y": y}, np.ones(40), SelfCheckConfig(seed=1))
    assert truth.reproduces, truth.reasons
    assert truth.names == ("loc", "scale")
    record = json.loads(json.dumps(truth.to_json()))
    assert record["reproduces"] is True and len(record["sd_ratio"]) == 2

    doubled = round_trip(setup, {"y": y}, np.full(40, 2.0), SelfCheckConfig(seed=1))
    assert not doubled.reproduces
    np.testing.assert_allclose(doubled.sd_ratio, 1 / np.sqrt(2), rtol=0.12)  # twice the data: sd / √2


def test_a_posterior_far_from_the_release_is_sampled_up_to_the_region_and_named(small_release):
    """Data shifted by 30 (the loc's posterior sd is about 0.24): q lies ~125 sd away. NUTS stays within
    the margin beyond the released draws' range, and the check says that q's mass lies out there."""
    setup, y = small_release
    far = round_trip(setup, {"y": y + 30.0}, np.ones(40), SelfCheckConfig(seed=1))
    assert not far.reproduces
    assert any(
        r.endswith("the pseudo-data's posterior has mass where the release has none") for r in far.reasons
    )
    theta = np.asarray(setup.coordinates.to_model(setup.draws))
    mean, sd = theta.mean(axis=0), theta.std(axis=0, ddof=1)
    reach = np.maximum(theta.max(axis=0) - mean, mean - theta.min(axis=0)) / sd + 10.0  # the region's edge
    assert np.all(np.abs(far.mean_shift) < reach + 1) and np.max(np.abs(far.mean_shift) - reach) > -2
    # loc is pressed to its wall: it is not at its 125 sd


def _autocorrelated(rng: np.random.Generator, n: int, rho: float) -> np.ndarray:
    """n draws of a chain whose stationary law is the 3-dimensional standard normal; lag-1 correlation rho."""
    z = np.empty((n, 3))
    z[0] = rng.normal(size=3)
    for t in range(1, n):
        z[t] = rho * z[t - 1] + np.sqrt(1 - rho**2) * rng.normal(size=3)
    return z


def test_the_two_sample_statistic_is_calibrated_on_a_release_drawn_by_a_chain():
    """Released draws from a chain with an effective size of a twentieth of their number, and the check's
    chain from the same law: the MMD² stays under its critical value because the splits take contiguous
    blocks of the release (with random halves, which interleave, it exceeded it in 9 of these 10 runs).
    Moved by 1 sd, the check's chain is told apart."""
    rng = np.random.default_rng(0)
    same, moved = [], []
    for seed in range(10):
        release, chain = _autocorrelated(rng, 2000, 0.9), _autocorrelated(rng, 600, 0.9)
        statistic, critical = _two_sample(chain, release, SelfCheckConfig(seed=seed))
        same.append(statistic > critical)
        statistic, critical = _two_sample(chain + 1.0, release, SelfCheckConfig(seed=seed))
        moved.append(statistic > critical)
    assert sum(same) <= 1 and sum(moved) >= 8


def test_the_release_mixing_tells_independent_slow_and_unconverged_draws_apart():
    """Independent draws: R̂ 1 and the full size, nothing said (nor of 80: too few to judge). A chain with
    lag-1 correlation 0.98 (an effective size near 2000 · 0.02 / 1.98 = 20): said. A release whose
    first half sits 3 sd off in one coordinate (a chain cut before it converged), or whose first block
    has a fifth of the others' spread (told by the folded draws' R̂ alone): unconverged, that coordinate
    named. Shuffled, the same draws look independent: the check reads the order they were drawn in. A
    coordinate that never moves leaves the others judged."""
    rng = np.random.default_rng(0)
    names = ("a", "b", "c")
    independent = rng.normal(size=(2000, 3))
    rhat, effective = release_mixing(independent)
    assert np.all(rhat < 1.01) and np.all(effective > 1500)
    assert mixing_note(independent, names) == "" and mixing_note(independent[:80], names) == ""
    slow = mixing_note(_autocorrelated(rng, 2000, 0.98), names)
    assert "effective size" in slow
    drifted = independent + np.where(np.arange(2000) < 1000, 3.0, 0.0)[:, None] * np.array([0.0, 1.0, 0.0])
    note = mixing_note(drifted, names)
    assert note.startswith("The released draws themselves look unconverged") and " for b " in note
    assert mixing_note(rng.permutation(drifted), names) == ""
    narrow = independent * np.where(np.arange(2000) < 500, 0.2, 1.0)[:, None] ** np.array([0, 1, 0])
    assert " for b over" in mixing_note(narrow, names)
    stuck = np.column_stack([drifted[:, 1], np.ones(2000)])
    assert " for a over" in mixing_note(stuck, ("a", "b"))


def test_a_release_out_of_order_is_named_in_the_round_trip(small_release):
    """The same draws sorted by loc (each block of the release a slice of the posterior, as a chain that
    drifts): the round trip's summary says the release looks unconverged; as drawn, it says nothing."""
    setup, y = small_release
    check = round_trip(setup, {"y": y}, np.ones(40), SelfCheckConfig(seed=1))
    assert check.mixing == "" and "unconverged" not in check.summary()
    theta = np.asarray(setup.coordinates.to_model(setup.draws))
    drifting = setup._replace(draws=setup.draws[np.argsort(theta[:, 0])])
    check = round_trip(drifting, {"y": y}, np.ones(40), SelfCheckConfig(seed=1))
    assert "look unconverged: R̂" in check.summary() and " for loc over" in check.mixing
    assert json.loads(json.dumps(check.to_json()))["mixing"] == check.mixing


def test_the_config_refuses_settings_that_cannot_work():
    with pytest.raises(br.ReconError, match="sd_ratio_range"):
        SelfCheckConfig(sd_ratio_range=(1.2, 0.8))
    with pytest.raises(br.ReconError, match="samples"):
        SelfCheckConfig(samples=1)
    with pytest.raises(br.ReconError, match="level"):
        SelfCheckConfig(level=1.0)
    with pytest.raises(br.ReconError, match="margin"):
        SelfCheckConfig(margin=0.0)
    with pytest.raises(br.ReconError, match="max_floor_errors must be a positive"):
        SelfCheckConfig(max_floor_errors=0)
    with pytest.raises(br.ReconError, match="target_accept"):
        SelfCheckConfig(target_accept=1.0)
    with pytest.raises(br.ReconError, match="target_accept must be a number"):
        SelfCheckConfig(target_accept="high")
    with pytest.raises(br.ReconError, match="max_outside"):
        SelfCheckConfig(max_outside=1.5)
