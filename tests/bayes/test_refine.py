"""The Frank–Wolfe rounds: exact weights, the first variation as the objective's derivative in a new
point's weight, and a measure with its points in the wrong place repaired."""

from __future__ import annotations

import importlib
from dataclasses import replace

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.distributions import constraints
from scipy.optimize import minimize

import bayes_recon as br
from bayes_recon import refine as fw
from bayes_recon.objective import ScoreMatching
from bayes_recon.optimise import OptimiserConfig
from bayes_recon.precision import attack_numerics
from bayes_recon.stages import make_start

RNG = np.random.default_rng(0)
# about the posterior of 100 observations from Normal(1, 1)
DRAWS = {"mu": RNG.normal(1.0, 0.1, 300), "sigma": np.exp(RNG.normal(0.0, 0.07, 300))}


def model(y=None):
    mu = numpyro.sample("mu", dist.Normal(0, 10))
    sigma = numpyro.sample("sigma", dist.HalfNormal(5))
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("y", dist.Normal(mu, sigma), obs=y)


def refiner_of(n_points: int) -> fw.Refiner:
    """The refiner of the attack on DRAWS (its problem and draws as the attack sets them up)."""
    setup = br.reconstruct(model, DRAWS, free=["y"], n_points=n_points, config=br.ReconConfig(
        coarse_steps=0, steps=3, restarts=1, rescue_restarts=0, refine_rounds=0)).setup  # fmt: skip
    problem = ScoreMatching(setup.weighted_model, setup.layout, setup.coordinates, "exact", 4)
    return fw.build_refiner(problem, setup.draws, 0, n_points, OptimiserConfig("lbfgs"), 100)


def test_the_weights_are_the_exact_non_negative_optimum():
    """KKT: w ≥ 0, the gradient Aw + b ≥ 0, and 0 where the weight is positive; A of rank 3 of 6, b in
    its range (as the objective's: a combination of points whose scores vanish at every draw has no
    curvature there either)."""
    rng = np.random.default_rng(1)
    f = rng.normal(size=(3, 6))
    a, b = f.T @ f, f.T @ rng.normal(size=3)
    w = fw._weights_solved(a, b)
    gradient = a @ w + b
    assert np.all(w >= 0) and np.all(gradient >= -1e-9) and np.allclose(gradient[w > 1e-9], 0, atol=1e-9)
    bounded = minimize(lambda v: 0.5 * v @ a @ v + b @ v, np.ones(6), jac=lambda v: a @ v + b,
                       bounds=[(0, None)] * 6, method="L-BFGS-B").x  # fmt: skip
    assert 0.5 * w @ a @ w + b @ w <= 0.5 * bounded @ a @ bounded + b @ bounded + 1e-9


@attack_numerics
def test_the_first_variation_is_the_objectives_derivative_in_a_new_points_weight():
    """The objective is exactly quadratic in a weight u at a new point x: J(u) = J(0) + u φ(x) + ½ u² a."""
    refiner = refiner_of(4)
    z = jnp.asarray([[0.5], [1.0], [1.5], [3.0]])  # the last is x, with weight u
    objective = {u: float(refiner.current(z, jnp.asarray([30.0, 40.0, 30.0, u]))[1]) for u in (0.0, 1.0, 2.0)}
    g = refiner.current(z, jnp.asarray([30.0, 40.0, 30.0, 0.0]))[0]
    phi = float(refiner.screen(z[3:], jnp.zeros((1, 0)), g)[0])  # the screen's draws are all 300 here
    curvature = objective[2.0] - 2 * objective[1.0] + objective[0.0]
    assert np.isclose(objective[1.0] - objective[0.0] - 0.5 * curvature, phi, rtol=1e-8, atol=1e-10)
    assert phi < 0 < curvature  # the data's mean is about 1: weight at 3 helps a measure centred there


@attack_numerics
def test_rounds_repair_a_measure_with_its_points_in_the_wrong_place():
    """Points at 4 to 7 and far too little mass: the rounds lower the objective each round they keep,
    and end where no point would gain, near the stages' own optimum."""
    refiner = refiner_of(4)
    found = fw.refine(refiner, np.arange(4.0, 8.0)[:, None], np.ones(4), rounds=6)
    assert found.converged and len(found.objectives) > 1  # a round was kept: it lowered the objective
    settled = br.reconstruct(
        model, DRAWS, free=["y"], n_points=4, config=br.ReconConfig(rescue_restarts=0, refine_rounds=0)
    )
    assert abs(found.objectives[-1] - settled.objective) < 1e-3 * abs(settled.objective)
    assert abs(found.weights.sum() - settled.measure.total_mass()) < 0.02 * settled.measure.total_mass()


def test_the_rounds_run_only_where_the_stages_result_fails_the_self_check(monkeypatch):
    """Where the stages' result reproduces the release, it is returned with its check; where the check
    fails (here: made to), the rounds run from it and the result is theirs."""
    reconstruct_module = importlib.import_module(
        "bayes_recon.reconstruct"
    )  # the package's name is the function

    config = br.ReconConfig(coarse_steps=0, steps=3, restarts=1, rescue_restarts=0)
    passed = br.reconstruct(model, DRAWS, free=["y"], n_points=4, config=config)
    assert (
        passed.checked is not None and passed.self_check is passed.checked[1] and passed.self_check.reproduces
    )
    # the check describes the measure it checked, not one put in its place
    truth = replace(passed, measure=br.WeightedMeasure({"y": np.full(100, 9.0)}, np.ones(100)))
    assert not truth.self_check.reproduces
    assert "refine_objectives" not in passed.history

    checked = reconstruct_module.round_trip
    monkeypatch.setattr(
        reconstruct_module,
        "round_trip",
        lambda *a, **k: replace(checked(*a, **k), reproduces=False, reasons=("made to",)),
    )
    built = reconstruct_module.build_refiner
    responds = []
    monkeypatch.setattr(reconstruct_module, "build_refiner", lambda *a: responds.append(a[-1]) or built(*a))
    failed = br.reconstruct(model, DRAWS, free=["y"], n_points=4, config=config)
    assert responds and responds[0] is not None  # y is a response: candidates get it from the predictive
    objectives = failed.history["refine_objectives"]
    assert objectives[0] == pytest.approx(passed.objective) and failed.objective == objectives[-1]
    # the rounds ran (the stages' optimum leaves them nothing to gain here) and their result was checked
    assert len(failed.history["refine_gaps"]) >= 1 and failed.self_check is failed.checked[1]
    assert not failed.self_check.reproduces and failed.self_check.reasons == ("made to",)


@pytest.mark.parametrize("rescue_passes", [True, False])
def test_where_the_rounds_result_fails_too_the_rescues_restarts_run(tmp_path, monkeypatch, rescue_passes):
    """The checks of the best restart and of the Frank–Wolfe rounds' result fail (made to): the rescue's
    two restarts run after the first, from starts of their own, and the best of them is checked: taken
    where it passes, else the one of lower objective, it or the rounds' result (their floors, the
    objective less the same Gaussian's, compare them); run again on its checkpoint, the attack reads the
    choice back. Where the first check passes, none of this runs."""
    reconstruct_module = importlib.import_module("bayes_recon.reconstruct")
    checked, verdicts, measures = reconstruct_module.round_trip, iter([False, False, rescue_passes]), []
    floors = []

    def made_to(setup, points, weights, floor):
        measures.append(weights)
        floors.append(floor[0])
        return replace(checked(setup, points, weights, floor=floor), reproduces=next(verdicts))

    monkeypatch.setattr(reconstruct_module, "round_trip", made_to)
    config = br.ReconConfig(coarse_steps=0, steps=3, restarts=1, rescue_restarts=2)
    result = br.reconstruct(model, DRAWS, free=["y"], n_points=4, config=config, checkpoint=tmp_path)
    objectives = result.restart_objectives
    assert len(measures) == 3 and len(objectives) == 3 and result.rescued() == 2
    assert len(set(objectives.tolist())) == 3  # three starts, three ends
    assert result.self_check is result.checked[1] and result.self_check.reproduces == rescue_passes
    monkeypatch.setattr(reconstruct_module, "round_trip", None)  # a run that reached a check would fail
    again = br.reconstruct(model, DRAWS, free=["y"], n_points=4, config=config, checkpoint=tmp_path)
    assert again.best_restart == result.best_restart and again.objective == result.objective
    assert np.array_equal(again.measure.weights, result.measure.weights) and again.rescued() == 2
    if rescue_passes:
        rescued_best = 1 + int(np.argmin(objectives[1:]))
        assert result.best_restart == rescued_best and result.objective == objectives[rescued_best]
        assert (
            np.array_equal(measures[2], result.measure.weights) and "refine_objectives" not in result.history
        )
        monkeypatch.setattr(reconstruct_module, "round_trip", checked)
        alone = br.reconstruct(model, DRAWS, free=["y"], n_points=4, config=config)
        assert alone.restart_objectives.tolist() == [objectives[0]] and alone.self_check.reproduces
    elif floors[1] <= floors[2]:
        assert result.best_restart == 0 and np.array_equal(measures[1], result.measure.weights)
        assert result.objective == result.history["refine_objectives"][-1]
    else:
        assert result.best_restart == 1 + int(np.argmin(objectives[1:]))
        assert np.array_equal(measures[2], result.measure.weights)
        assert "refine_objectives" not in result.history


def test_the_heaviest_points_of_each_stratum_are_kept_stratum_by_stratum():
    """Two strata of M = 3 points, then K = 2 candidates each: the union's rows are the points stratum by
    stratum, then the candidates stratum by stratum."""
    w = np.array([5.0, 0.0, 1.0, 2.0, 3.0, 0.0, 4.0, 0.5, 0.0, 9.0])
    kept = fw._heaviest(w, c=2, m=3)
    np.testing.assert_array_equal(kept, [0, 6, 2, 9, 4, 3])


def test_a_checkpoint_keeps_the_rounds_result(tmp_path, monkeypatch):
    """Run again on its checkpoint, an attack whose rounds ran reads their result back: no rounds run (and
    no rescue, whose best of lower objective would stand in their place)."""
    reconstruct_module = importlib.import_module("bayes_recon.reconstruct")
    checked = reconstruct_module.round_trip
    monkeypatch.setattr(
        reconstruct_module, "round_trip", lambda *a, **k: replace(checked(*a, **k), reproduces=False)
    )
    config = br.ReconConfig(coarse_steps=0, steps=3, restarts=1, rescue_restarts=0)
    first = br.reconstruct(model, DRAWS, free=["y"], n_points=4, config=config, checkpoint=tmp_path)
    monkeypatch.setattr(fw, "refine", None)  # a second run that reached the rounds would fail
    monkeypatch.setattr(reconstruct_module, "refine", None)
    again = br.reconstruct(model, DRAWS, free=["y"], n_points=4, config=config, checkpoint=tmp_path)
    assert again.objective == first.objective and np.array_equal(again.measure.weights, first.measure.weights)
    for key in ("refine_objectives", "refine_gaps", "refine_converged"):
        np.testing.assert_array_equal(again.history[key], first.history[key])


def regression(x, y=None):
    a = numpyro.sample("a", dist.Normal(0, 10))
    b = numpyro.sample("b", dist.Normal(0, 10))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Normal(a + b * x, 0.1), obs=y)


def test_every_other_candidate_of_the_clouds_has_its_response_from_the_models_predictive():
    """The screen's candidates at every width: half as the cloud draws them, half with y drawn from the
    model at the posterior mean (a = 1, b = 2) given x: there y - (1 + 2x) has the model's sd 0.1."""
    rng = np.random.default_rng(2)
    draws = {"a": rng.normal(1.0, 0.01, 200), "b": rng.normal(2.0, 0.01, 200)}
    config = br.ReconConfig(coarse_steps=0, steps=3, restarts=1, rescue_restarts=0, refine_rounds=0)
    setup = br.reconstruct(regression, draws, free=["x", "y"], n_points=4, config=config).setup
    theta = setup.coordinates.to_model(setup.draws)
    estimator = config.resolved_estimator(theta.shape[1])
    begin = make_start(setup.weighted_model, setup.layout, theta, 4, estimator, config)
    z = rng.normal(size=(4, 2))  # y unrelated to x
    pool = fw._pool(z, np.ones(4), setup.layout.strata, 4, rng, begin.respond)[0][0]
    (ix,), (iy,) = setup.layout.coordinates_of({"x"}), setup.layout.coordinates_of({"y"})
    cloud = pool[: len(fw.SCREEN_WIDTHS) * fw.SCREEN_PER_WIDTH]
    residual = cloud[:, iy] - (1 + 2 * cloud[:, ix])
    assert np.std(residual[1::2]) == pytest.approx(0.1, rel=0.2)
    assert np.std(residual[::2]) > 1.0
    np.testing.assert_array_equal(pool[len(cloud) :].shape, (4, 2))  # then one around each point


def test_each_strata_candidates_get_responses_at_its_values_and_keep_the_clouds_where_none_is_drawn():
    """Two strata: ``respond`` sees every other cloud candidate with its stratum's discrete values; where
    it returns a non-finite coordinate, the candidate keeps the cloud's."""
    strata = jnp.asarray([[0.0], [1.0]])
    seen = []

    def respond(z, bits, key):
        seen.append(np.asarray(bits))
        return jnp.asarray(z).at[:, 1].set(jnp.where(jnp.arange(len(z)) % 3 == 0, jnp.nan, 7.0))

    z, w = np.random.default_rng(3).normal(size=(6, 2)), np.ones(6)
    pool, predicted = fw._pool(z, w, strata, 3, np.random.default_rng(4), respond)
    size = len(fw.SCREEN_WIDTHS) * fw.SCREEN_PER_WIDTH
    assert np.flatnonzero(predicted).tolist() == list(range(1, size, 2))
    assert [b.shape for b in seen] == [(size // 2, 1)] * 2
    assert np.all(seen[0] == 0.0) and np.all(seen[1] == 1.0)
    drawn = pool[:, 1:size:2, 1]
    assert np.all(drawn[:, 1::3] == 7.0) and not np.any(drawn[:, ::3] == 7.0)  # NaN rows keep the cloud's
    assert np.all(pool[:, 0:size:2, 1] != 7.0)


def test_half_the_starts_are_the_best_of_the_candidates_with_predicted_responses():
    """φ favours the cloud's own candidates (the even rows) throughout; K = 2 starts of M = 4: the best of
    each kind, not the two best overall."""
    pool = np.arange(8.0)[None, :, None]
    predicted = np.arange(8) % 2 == 1

    def screen(points, bits, g):
        return jnp.where(points[:, 0] % 2 == 0, -10.0, 0.0) - points[:, 0]

    starts = fw._screened(screen, pool, predicted, jnp.zeros((1, 0)), None, 4)
    assert sorted(starts[:, 0].tolist()) == [6.0, 7.0]
    alone = fw._screened(screen, pool, np.zeros(8, dtype=bool), jnp.zeros((1, 0)), None, 4)
    assert sorted(alone[:, 0].tolist()) == [4.0, 6.0]


def grouped(g, x, y=None):
    a = numpyro.sample("a", dist.Normal(0, 10))
    b = numpyro.sample("b", dist.Normal(0, 10).expand([2]).to_event(1))
    sigma = numpyro.sample("sigma", dist.HalfNormal(5))
    with numpyro.plate("data", g.shape[0]):
        numpyro.sample("y", dist.Normal(a + b[0] * g + b[1] * x, sigma), obs=y)


@attack_numerics
def test_rounds_bring_back_a_stratum_the_stages_lost():
    """60 rows at g = 0, 40 at g = 1; the measure starts with g = 0's mean and spread and a negligible mass
    at x = y = 40 for g = 1 (earnings-logearn_interaction_z's stages ended so). That stratum's cloud is a
    point far away, where the model's predictive responses do not help; Newton's candidates from the whole
    measure's cloud sit near the few best points. One round brings the stratum back, from g = 0's points
    moved into it, the exact weights deciding (before, from Newton's candidates alone, its mass was 10.5
    after one round and 39 only after four)."""
    rng = np.random.default_rng(5)
    g, x = (np.arange(100) >= 60).astype(float), rng.normal(size=100)
    design = np.c_[np.ones(100), g, x]
    y = design @ [1.0, 2.0, 0.5] + rng.normal(size=100)
    fit, residual = np.linalg.lstsq(design, y)[:2]
    s = np.sqrt(residual[0] / 97)  # the posterior under flat priors, to a normal approximation
    beta = rng.multivariate_normal(fit, s**2 * np.linalg.inv(design.T @ design), 500)
    draws = {"a": beta[:, 0], "b": beta[:, 1:], "sigma": s * np.exp(rng.normal(0.0, 1 / np.sqrt(194), 500))}
    config = br.ReconConfig(coarse_steps=0, steps=3, restarts=1, rescue_restarts=0, refine_rounds=0)
    free, support = ["g", "x", "y"], {"g": constraints.boolean}
    setup = br.reconstruct(grouped, draws, free=free, support=support, n_points=4, config=config).setup
    problem = ScoreMatching(setup.weighted_model, setup.layout, setup.coordinates, "exact", 4)
    refiner = fw.build_refiner(problem, setup.draws, 0, 4, OptimiserConfig("lbfgs"), 100)
    (ix,), (iy,) = setup.layout.coordinates_of({"x"}), setup.layout.coordinates_of({"y"})
    z = np.full((8, 2), 40.0)
    z[:4, ix], z[:4, iy] = [-1.0, -0.3, 0.3, 1.0], [0.0, 1.5, 0.5, 2.0]
    w = np.array([15.0, 15, 15, 15, 1e-3, 1e-3, 1e-3, 1e-3])
    found = fw.refine(refiner, z, w, rounds=1)
    se = float(refiner.current(jnp.asarray(z), jnp.asarray(w))[2])
    assert found.gaps[0] > 10 * se
    assert found.weights[:4].sum() == pytest.approx(60, rel=0.25)
    assert found.weights[4:].sum() == pytest.approx(40, rel=0.25)
    lost = found.weights[4:] / found.weights[4:].sum()
    assert lost @ found.z[4:, iy] == pytest.approx(y[60:].mean(), abs=0.5)


def test_each_stratum_gets_the_other_strata_heaviest_points_and_one_stratum_none():
    z, w = np.arange(12.0).reshape(6, 2), np.array([1.0, 5, 3, 2, 4, 6])
    moved = fw._moved(z, w, 3, 2)  # strata of points {0, 1}, {2, 3}, {4, 5}
    np.testing.assert_array_equal(moved, z[[[5, 4], [5, 1], [1, 2]]])
    assert fw._moved(z, w, 1, 6).shape == (1, 0, 2)


def test_a_collapsed_strata_candidates_come_half_from_the_whole_measures_cloud():
    """Stratum 1 is four copies of one point far away: at every width, every other block of candidates is
    spread like the whole measure (here, stratum 0's), the others sit on that point."""
    z = np.r_[np.random.default_rng(6).normal(size=(40, 2)), np.full((40, 2), 50.0)]
    w = np.r_[np.ones(40), np.full(40, 1e-6)]
    pool = fw._pool(z, w, jnp.asarray([[0.0], [1.0]]), 40, np.random.default_rng(7), None)[0][1]
    half = fw.SCREEN_PER_WIDTH // 2
    blocks = pool[: len(fw.SCREEN_WIDTHS) * 2 * half].reshape(len(fw.SCREEN_WIDTHS), 2, half, 2)
    for width, (own, whole) in zip(fw.SCREEN_WIDTHS, blocks, strict=True):
        assert np.all(np.abs(own - 50.0) < 1e-3)
        spread = width * z[:40].std(axis=0)
        assert np.all(np.abs(whole.mean(axis=0) - z[:40].mean(axis=0)) < 0.3 * spread)
        np.testing.assert_allclose(whole.std(axis=0), spread, rtol=0.2)
