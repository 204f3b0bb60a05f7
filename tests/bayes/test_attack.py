"""The attack's math: the truth is stationary, the optimiser reaches the oracle, its parts do their job."""

from __future__ import annotations

import dataclasses

import arviz
import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.distributions import constraints
from row_models import attack_setup

import bayes_recon as br
from bayes_recon import pseudo
from bayes_recon.divergence import Coordinates, score_matching_objective
from bayes_recon.draws import as_draws
from bayes_recon.models import lookup
from bayes_recon.objective import point_information
from bayes_recon.optimise import OptimiserConfig, minimise, newton_optimiser
from bayes_recon.oracle import oracle_for
from bayes_recon.posteriordb import load_posterior
from bayes_recon.reconstruct import _admissible, _best_of_round
from bayes_recon.weighting import WeightedModel

KIDIQ = "kidiq-kidscore_momiq"


@pytest.fixture(scope="module")
def kidiq():
    entry, posterior = lookup(KIDIQ), load_posterior(KIDIQ)
    data = entry.model_data(posterior.data)
    return entry, posterior, {k: jnp.asarray(data[k]) for k in entry.free}


def test_true_data_is_a_stationary_point_of_the_divergence(kidiq):
    """d/dα J at the true data scaled by α vanishes at α = 1 within Monte Carlo error, and not at α = 1.3."""
    entry, posterior, data = kidiq
    n = len(data["mom_iq"])
    draws = {k: jnp.asarray(v) for k, v in as_draws(posterior.draws).items()}
    model = WeightedModel(entry.model, entry.free, {}, {k: v[0] for k, v in draws.items()})
    theta = jnp.asarray(model.to_unconstrained(draws, data))
    coordinates = Coordinates.standardised(theta)
    z = coordinates.to_attack(theta)

    def objective(alpha, shift, batch):
        shifted = {**data, "mom_iq": data["mom_iq"] + shift}
        log_q = coordinates.pull_back(lambda th: model.log_density(th, shifted, alpha * jnp.ones(n)))
        return score_matching_objective(log_q, batch, None, "exact")

    batches = z.reshape(20, -1, z.shape[1])
    slope = jax.jit(jax.vmap(jax.grad(objective, argnums=(0, 1)), in_axes=(None, None, 0)))

    def z_scores(alpha: float, shift: float) -> np.ndarray:
        """Mean over draw batches of (∂J/∂α, ∂J/∂shift) in units of its Monte Carlo standard error."""
        per_batch = np.stack([np.asarray(d) for d in slope(alpha, shift, batches)], axis=1)
        return per_batch.mean(0) / (per_batch.std(0, ddof=1) / np.sqrt(len(per_batch)))

    assert np.all(np.abs(z_scores(1.0, 0.0)) < 4)  # the truth: stationary in mass and location
    assert abs(z_scores(1.3, 0.0)[0]) > 10  # too much mass: the mass derivative is far from zero
    assert abs(z_scores(1.0, 3.0)[1]) > 10  # mom_iq shifted: the location derivative is far from zero


@pytest.fixture(scope="module")
def kidiq_result(kidiq):
    entry, posterior, _ = kidiq
    by_site = as_draws(posterior.draws)  # Stan names → sites
    idata = arviz.from_dict(posterior={k: np.asarray(v)[None, :2000] for k, v in by_site.items()})
    return br.reconstruct(entry.model, idata, free=list(entry.free), support=entry.support, n_points=10,
                          seed=0, config=br.ReconConfig(restarts=1, rescue_restarts=0,
                                                        refine_rounds=0))  # fmt: skip


def test_attack_lands_on_the_oracle_from_arviz_draws(kidiq, kidiq_result):
    """No optimiser can beat the oracle on the same draws; a working one reaches it (here to 0.1 %)."""
    entry, result = kidiq[0], kidiq_result
    x, y = entry.linear.design(dict(result.measure.points))
    estimate = result.measure.linear_model_statistics(x, y)
    oracle = oracle_for(result, entry.linear).statistics
    assert max(br.linear_model_errors(estimate, oracle).values()) < 1e-3
    assert result.measure.total_mass() == pytest.approx(float(oracle["N"]), rel=1e-3)
    assert np.isfinite(result.history["objective"]).all() and result.history["steps_taken"].shape == (1, 4)


def test_standard_errors_match_the_oracle_refitted_on_resampled_draws(kidiq, kidiq_result):
    """Two ways to the same quantity: the sandwich at the attack's optimum, and the spread of the exact
    optimum (the oracle, a closed form) over 300 bootstrap resamples of the draws (whose own spread is
    known to about 4 %)."""
    entry, result = kidiq[0], kidiq_result

    def sums(points, weights):  # N, Σ y, Σ y·x
        y, x = points["kid_score"], points["mom_iq"]
        return jnp.stack([weights.sum(), weights @ y, weights @ (x * y)])

    _, covariance = result.statistic_covariance(sums)
    sandwich = np.sqrt(np.diag(covariance))
    boots = oracle_for(result, entry.linear, n_bootstrap=300).bootstrap
    spread = np.stack([np.r_[b["N"], np.ravel(b["Xty"])] for b in boots]).std(axis=0, ddof=1)
    np.testing.assert_allclose(sandwich, spread, rtol=0.2)
    # a Gaussian model's objective is a quadratic in its sufficient statistics, these among them: tilted
    # by one error, each moves by one
    np.testing.assert_allclose(result.statistic_tilt_moves(sums), [[1.0] * 3, [-1.0] * 3], atol=0.05)
    relative = result.standard_errors
    assert relative["total_mass"] == pytest.approx(sandwich[0] / result.measure.total_mass(), rel=1e-6)
    # the attack stopped at its optimum: the quadratic model's step to it (the objective's own gradient,
    # through sandwich_builder) moves nothing by a tenth of its error
    shortfall = result.statistic_shortfall(sums)
    assert np.all(np.abs(shortfall) < 0.1 * sandwich)  # 7e-5 of it here
    assert set(result.shortfall) == set(relative)
    assert all(result.shortfall[k] < 0.1 * error for k, error in relative.items())


def test_binary_columns_stratify_the_pseudo_data():
    """Each 0/1 combination gets M points with exact binary values and a cloud and mass of its own."""
    layout = pseudo.Layout({"hs": (), "x": ()}, {"hs": constraints.boolean})
    params = pseudo.initial(4, layout)
    cloud = params.cloud._replace(shift=jnp.array([[-5.0], [5.0]]), log_mass=jnp.log(jnp.array([0.25, 0.75])))
    base = pseudo.base_points(jax.random.PRNGKey(0), 4, layout.dim)
    points, weights = pseudo.measure(layout, pseudo.Pseudo(cloud, params.points), base)
    hs, x = np.asarray(points["hs"]), np.asarray(points["x"])
    assert hs.tolist() == [0.0] * 4 + [1.0] * 4
    np.testing.assert_allclose([weights[:4].sum(), weights[4:].sum()], [1.0, 3.0])  # masses per stratum
    np.testing.assert_allclose([x[:4].mean(), x[4:].mean()], [-5.0, 5.0], atol=1e-12)  # clouds per stratum
    with pytest.raises(br.ReconError, match="binary"):
        pseudo.Layout({f"b{i}": () for i in range(5)}, {f"b{i}": constraints.boolean for i in range(5)})


def test_dummies_of_one_variable_exclude_each_other():
    """Three age indicators and one binary column: 4 age groups × 2, not 2⁴ combinations."""
    ages = {f"age{i}": pseudo.Dummy("age") for i in range(3)}
    shapes = {**dict.fromkeys(ages, ()), "hs": (), "x": ()}
    layout = pseudo.Layout(shapes, {**ages, "hs": constraints.boolean})
    strata = np.asarray(layout.strata)
    assert strata.shape == (8, 4)
    assert strata[:, :3].sum(axis=1).max() == 1
    assert {tuple(row) for row in strata} == {
        (*age, hs) for age in [(0, 0, 0), (1, 0, 0), (0, 1, 0), (0, 0, 1)] for hs in (0, 1)
    }
    points = layout.example(2)
    assert bool(jnp.all(ages["age0"](points["age0"])))


def test_base_points_are_whitened_from_dim_plus_one_points():
    base = pseudo.base_points(jax.random.PRNGKey(3), 10, 9)
    np.testing.assert_allclose(base.mean(0), 0.0, atol=1e-12)
    np.testing.assert_allclose(base.T @ base / 10, np.eye(9), atol=1e-10)


def test_fit_cloud_reproduces_weighted_moments_exactly():
    z = jax.random.normal(jax.random.PRNGKey(1), (40, 3)) * jnp.array([1.0, 1e4, 1e-3]) + jnp.array(
        [5.0, 2e4, 0.0]
    )
    weights = jnp.linspace(0.5, 2.0, 40)
    layout = pseudo.Layout({"a": (3,)}, {})
    cloud = pseudo.fit_cloud(pseudo.initial(200, layout).cloud, z[None], weights[None])
    base = pseudo.base_points(jax.random.PRNGKey(2), 200, 3)
    points, _ = pseudo.measure(layout, pseudo.Pseudo(cloud, pseudo.initial(200, layout).points), base)
    points = points["a"]
    p = weights / weights.sum()
    np.testing.assert_allclose(points.mean(0), p @ z, rtol=1e-9)
    np.testing.assert_allclose(
        jnp.cov(points.T, bias=True), ((z - p @ z) * p[:, None]).T @ (z - p @ z), rtol=1e-6
    )


def test_scale_search_finds_the_order_of_magnitude_and_the_mass_in_closed_form():
    """The objective is a quadratic in the mass (as the score-matching objective is): the profile is exact."""
    layout = pseudo.Layout({"a": (2,)}, {})
    cloud = pseudo.initial(5, layout).cloud
    target = jnp.array([7.0, -1.0])

    def in_mass(c):  # J(t m) = m² t² + m (Σ (s − target)² − 2 (30 + Σ s)) t at the cloud's mass m
        m, shape = jnp.exp(c.log_mass[0]), c.log_diag[0]
        return m**2, m * (jnp.sum((shape - target) ** 2) - 2.0 * (30.0 + jnp.sum(shape))), 0.0

    # At its best mass 30 + Σ s − Σ (s − target)² / 2 the objective is −(that mass)²: best at s = target + 1.
    found = pseudo.search_scales(in_mass, cloud, [0, 1])
    np.testing.assert_allclose(found.log_diag[0], target + 1.0)
    np.testing.assert_allclose(np.exp(found.log_mass[0]), 37.0, rtol=1e-9)


def test_scale_search_locates_each_coordinate_of_unknown_location_on_its_own():
    """Two coordinates located, orders of magnitude apart and of both signs: each search puts its value in
    its own coordinate (one loop serves every coordinate), the scales exactly, the locations to the grid."""
    layout = pseudo.Layout({"a": (2,)}, {})
    cloud = pseudo.initial(5, layout).cloud
    target, centre = jnp.array([7.0, -1.0]), jnp.array([1e3, -0.02])

    def in_mass(c):
        m, shape = jnp.exp(c.log_mass[0]), c.log_diag[0]
        misplaced = jnp.sum(jnp.log1p(((c.shift[0] - centre) / centre) ** 2))
        return m**2, m * (jnp.sum((shape - target) ** 2) + misplaced - 2.0 * (30.0 + jnp.sum(shape))), 0.0

    found = pseudo.search_scales(in_mass, cloud, [0, 1], located=[0, 1])
    np.testing.assert_allclose(found.log_diag[0], target + 1.0)
    np.testing.assert_allclose(found.shift[0], centre, rtol=0.14)  # refined to a tenth of the spread: e^±0.25


def test_the_mass_profile_keeps_to_its_range_when_the_objective_falls_without_end():
    layout = pseudo.Layout({"a": (1,)}, {})
    cloud = pseudo.initial(5, layout).cloud
    value, found = pseudo.at_best_mass(lambda c: (0.0, -jnp.exp(c.log_mass[0]), 0.0), cloud)
    np.testing.assert_allclose(found.log_mass[0], pseudo.LOG_MASS_RANGE[1])
    np.testing.assert_allclose(value, -np.exp(pseudo.LOG_MASS_RANGE[1]), rtol=1e-9)


@pytest.mark.parametrize("method", ["newton", "lbfgs"])
def test_optimisers_solve_a_badly_scaled_problem_and_stop_early(method):
    """Scales 10⁴ apart: Newton (affine-invariant) and L-BFGS both converge, and the loop stops once done."""

    def objective(x, key):
        return (1e4 * x["a"] - 3.0) ** 2 + (1e-2 * x["b"] - 2.0) ** 2 + 0.1 * (x["a"] * x["b"]) ** 2

    start = {"a": jnp.asarray(1.0), "b": jnp.asarray(1.0)}
    state, values, _, steps = jax.jit(
        lambda p: minimise(objective, p, jax.random.PRNGKey(0), 300, OptimiserConfig(method))
    )(start)
    grad = jax.grad(objective)(state.params, None)
    assert abs(float(grad["a"])) < 1e-4 and abs(float(grad["b"])) < 1e-4
    assert int(steps) < 300 and values.shape == (300,) and float(values[-1]) == float(state.value)
    assert np.all(
        np.diff(np.asarray(values)[: int(steps)]) <= 1e-12
    )  # monotone: refused steps change nothing


def test_subsampled_newton_converges_to_the_full_objectives_minimum():
    """A Hessian from another (subset-like) quadratic only preconditions: the fixed point is the full one."""
    a = jnp.array([[4e4, 20.0], [20.0, 2e-2]])
    target = jnp.array([3.0, -700.0])

    def full(x, key):
        return 0.5 * (x - target) @ a @ (x - target)

    def subset(x, key):  # 20 % off in curvature, a different minimum
        return 0.5 * x @ (a * jnp.array([[1.2, 0.9], [0.9, 0.8]])) @ x + x[0]

    state, _, _, steps = jax.jit(
        lambda p: minimise(
            full, p, jax.random.PRNGKey(0), 100, OptimiserConfig("newton"), hessian=jax.hessian(subset)
        )
    )(jnp.zeros(2))
    np.testing.assert_allclose(state.params, target, rtol=1e-7)
    assert int(steps) < 100


def test_newton_shrinks_its_step_lengths_after_a_refusal_instead_of_stalling():
    """A wall 10⁻⁴ ahead that the Hessian cannot see: every length of the first set overshoots it.

    The refused step keeps the point and shrinks the lengths by 2⁻⁹; the next step then lowers
    the objective and restores the full lengths. (Before, a refusal repeated itself until the loop
    stopped, which left sblrc-blr's cloud mass 28 % off the oracle.)
    """

    def objective(x, key):
        return (x - 1.0) ** 2 + 1e6 * jax.nn.relu(x + 1.0 - 1e-4) ** 2

    newton = newton_optimiser(objective)
    start = newton.init(jnp.asarray(-1.0), jax.random.PRNGKey(0))
    refused = newton.step(start)
    assert float(refused.params) == -1.0 and float(refused.opt_state) == 2.0**-9
    accepted = newton.step(refused)
    assert float(accepted.value) < float(start.value) and float(accepted.opt_state) == 1.0


def test_restarts_are_vmapped_through_minimise():
    def objective(x, key):
        return jnp.sum((x - 3.0) ** 2)

    starts = jnp.array([[0.0, 1.0], [10.0, -4.0], [2.0, 2.0]])
    final, _, _, _ = jax.jit(jax.vmap(lambda p: minimise(objective, p, jax.random.PRNGKey(0), 20,
                                                         OptimiserConfig("lbfgs"))))(starts)  # fmt: skip
    np.testing.assert_allclose(final.params, 3.0, atol=1e-6)


def test_bad_inputs_name_the_problem(kidiq):
    entry, posterior, _ = kidiq
    with pytest.raises(br.ReconError, match="takes no argument"):
        br.reconstruct(entry.model, posterior.draws, free=["mom_iq", "height"])
    with pytest.raises(br.ReconError, match="at least 1"):
        br.reconstruct(entry.model, posterior.draws, free=list(entry.free), n_points=0)

    def per_point(x, y=None):
        mu = numpyro.sample("mu", dist.Normal(0, 1))
        with numpyro.plate("data", x.shape[0]):
            effect = numpyro.sample("effect", dist.Normal(mu, 1))
            numpyro.sample("y", dist.Normal(effect + x, 1), obs=y)

    with pytest.raises(br.ReconError, match="per-point latent"):
        br.reconstruct(per_point, {"mu": np.zeros(100), "effect": np.zeros((100, 3))}, free=["x", "y"])


def test_model_kernel_mmd_is_the_fisher_divergence_between_weighted_posteriors(kidiq):
    """½ E_θ||∇log q_a − ∇log q_b||² over the draws equals ½ MMD² under the model kernel, exactly."""
    from bayes_recon.kernel import model_kernel

    entry, posterior, data = kidiq
    draws = {k: jnp.asarray(v)[:300] for k, v in as_draws(posterior.draws).items()}
    model = WeightedModel(entry.model, entry.free, {}, {k: v[0] for k, v in draws.items()})
    theta = jnp.asarray(model.to_unconstrained(draws, data))
    setup = attack_setup(model, theta, pseudo.Layout({k: () for k in entry.free}, entry.support))
    truth = br.WeightedMeasure.empirical({k: np.asarray(v) for k, v in data.items()})
    other = br.WeightedMeasure({"mom_iq": np.array([90.0, 110.0]), "kid_score": np.array([80.0, 95.0])},
                               np.array([200.0, 250.0]))  # fmt: skip
    mmd = truth.mmd(other, model_kernel(setup))

    def score(measure: br.WeightedMeasure, z: jax.Array) -> jax.Array:
        log_q = setup.coordinates.pull_back(
            lambda th: model.log_density(
                th, {k: jnp.asarray(v) for k, v in measure.points.items()}, jnp.asarray(measure.weights)
            )
        )
        return jax.grad(log_q)(z)

    gap = jax.vmap(lambda z: score(truth, z) - score(other, z))(setup.draws)
    np.testing.assert_allclose(mmd**2, float(jnp.mean(jnp.sum(gap**2, axis=1))), rtol=1e-8)
    assert truth.mmd(truth, model_kernel(setup)) < 1e-6 * mmd


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"steps": 0}, "steps must be at least 1"),
        ({"restarts": 1.5}, "restarts must be at least 1"),
        ({"coarse_steps": -1}, "coarse_steps must be a whole number"),
        ({"bootstrap": -2}, "bootstrap must be a whole number"),
        ({"learning_rate": 0.0}, "learning_rate must be positive"),
        ({"learning_rate": "fast"}, "learning_rate must be positive"),
        ({"method": "sgd"}, "method must be one of"),
        ({"estimator": "exactly"}, "estimator must be one of"),
    ],
)
def test_recon_config_refuses_bad_settings_when_made(settings, message):
    """From Python too, not only through the CLI: before, steps=0 failed later as a non-finite objective."""
    with pytest.raises(br.ReconError, match=message):
        br.ReconConfig(**settings)


def test_out_of_memory_is_a_clear_error_that_names_the_remedies(monkeypatch):
    def model(y=None):
        mu = numpyro.sample("mu", dist.Normal(0, 10))
        with numpyro.plate("data", y.shape[0]):
            numpyro.sample("y", dist.Normal(mu, 1), obs=y)

    def exhausted(_):
        raise jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: Out of memory allocating 31856209152 bytes.")

    monkeypatch.setattr(jax, "block_until_ready", exhausted)
    draws = {"mu": np.random.default_rng(0).normal(1.0, 0.1, 200)}
    config = br.ReconConfig(coarse_steps=1, steps=1, restarts=1, rescue_restarts=0, refine_rounds=0)
    with pytest.raises(br.ReconError, match=r"out of memory.*--points.*--max-draws.*--batch-size"):
        br.reconstruct(model, draws, free=["y"], n_points=3, config=config)


def test_a_round_larger_than_the_memory_available_is_refused_before_it_runs(monkeypatch):
    """XLA's count of the compiled round's working memory is checked against the memory available: a
    beta-binomial regression's round needed 11.4 GB for 20 points on 1,000 draws, which only a program's
    own count sees."""
    import sys

    def model(y=None):
        mu = numpyro.sample("mu", dist.Normal(0, 10))
        with numpyro.plate("data", y.shape[0]):
            numpyro.sample("y", dist.Normal(mu, 1), obs=y)

    attack = sys.modules["bayes_recon.reconstruct"]  # the package's name `reconstruct` is the function
    monkeypatch.setattr(attack, "available_memory", lambda: 1)
    ran = []
    monkeypatch.setattr(attack, "_run_round", lambda *args: ran.append(args))
    draws = {"mu": np.random.default_rng(0).normal(1.0, 0.1, 200)}
    config = br.ReconConfig(coarse_steps=1, steps=1, restarts=1, rescue_restarts=0, refine_rounds=0)
    message = r"needs [\d.]+ GiB of working memory .*3 points on 200 draws.*max_draws.*batch_size"
    with pytest.raises(br.ReconError, match=message):
        br.reconstruct(model, draws, free=["y"], n_points=3, config=config)
    assert ran == []


def test_a_round_too_large_runs_on_the_draws_that_fit_and_says_so(monkeypatch, tmp_path):
    """Memory for half the round (a round may take two thirds of it): the attack runs again on the first
    draws that fit, with a warning, and its config says how many; with a checkpoint (an attack fixed
    when it starts) it is refused instead, naming that number, and its folder of no rounds is gone."""
    import sys

    def model(y=None):
        mu = numpyro.sample("mu", dist.Normal(0, 10))
        with numpyro.plate("data", y.shape[0]):
            numpyro.sample("y", dist.Normal(mu, 1), obs=y)

    attack = sys.modules["bayes_recon.reconstruct"]  # the package's name `reconstruct` is the function
    needs, count = [], attack._round_memory
    monkeypatch.setattr(attack, "_round_memory", lambda compiled: needs.append(count(compiled)) or needs[-1])
    monkeypatch.setattr(attack, "available_memory", lambda: needs[0] // 2)
    draws = {"mu": np.random.default_rng(0).normal(1.0, 0.1, 1000)}
    config = br.ReconConfig(coarse_steps=2, steps=2, restarts=1, rescue_restarts=0, refine_rounds=0)
    with pytest.warns(UserWarning, match=r"GiB of working memory .* on the first \d+ draws instead"):
        found = br.reconstruct(model, draws, free=["y"], n_points=3, config=config)
    assert attack.FEWEST_DRAWS <= found.config.max_draws <= 333
    assert needs[-1] <= attack.ROUND_SHARE * (needs[0] // 2)
    with pytest.raises(br.ReconError, match=r"ReconConfig\(max_draws=(3[0-3]\d)\), --max-draws \1\)"):
        br.reconstruct(model, draws, free=["y"], n_points=3, config=config, checkpoint=tmp_path / "run")
    assert not (tmp_path / "run").exists()  # no rounds kept: the rerun with --max-draws is not refused


def test_a_round_too_large_scores_the_grid_one_candidate_at_a_time_first_for_the_same_result(
    monkeypatch, tmp_path
):
    """A regression's covariate is searched on a grid of 59 candidates, scored together by default: with
    memory for half that round, the attack scores them one at a time instead (a seventh of the memory
    here), on every draw, with a warning, and ends where the unrefused attack ends; with a checkpoint it
    is refused, naming the setting, and where the checkpoint holds a round, saying to start afresh."""
    import sys

    def model(x=None, y=None):
        a = numpyro.sample("a", dist.Normal(0, 10))
        b = numpyro.sample("b", dist.Normal(0, 10))
        with numpyro.plate("data", y.shape[0]):
            numpyro.sample("y", dist.Normal(a + b * x, 1), obs=y)

    rng = np.random.default_rng(0)
    draws = {"a": rng.normal(1.0, 0.1, 1000), "b": rng.normal(0.5, 0.1, 1000)}
    config = br.ReconConfig(coarse_steps=2, steps=2, restarts=1, rescue_restarts=0, refine_rounds=0)
    unrefused = br.reconstruct(model, draws, free=["x", "y"], n_points=3, config=config)
    attack = sys.modules["bayes_recon.reconstruct"]  # the package's name `reconstruct` is the function
    needs, count = [], attack._round_memory
    monkeypatch.setattr(attack, "_round_memory", lambda compiled: needs.append(count(compiled)) or needs[-1])
    monkeypatch.setattr(attack, "available_memory", lambda: needs[0] // 2)
    with pytest.warns(UserWarning, match=r"GiB of working memory .* candidates one at a time instead"):
        found = br.reconstruct(model, draws, free=["x", "y"], n_points=3, config=config)
    assert found.config.grid_at_once == 1 and found.config.max_draws is None
    assert needs[-1] <= attack.ROUND_SHARE * (needs[0] // 2)
    for name in ("x", "y"):
        np.testing.assert_array_equal(found.measure.points[name], unrefused.measure.points[name])
    np.testing.assert_array_equal(found.measure.weights, unrefused.measure.weights)
    first = r"one at a time first \(ReconConfig\(grid_at_once=1\), --grid-at-once 1:"
    with pytest.raises(br.ReconError, match=first):
        br.reconstruct(model, draws, free=["x", "y"], n_points=3, config=config, checkpoint=tmp_path / "run")
    assert not (tmp_path / "run").exists()

    def stop_after_a_round(done: int, total: int) -> None:
        if done == 1:
            raise KeyboardInterrupt

    two = dataclasses.replace(config, restarts=2)
    kept = tmp_path / "kept"
    monkeypatch.setattr(attack, "available_memory", lambda: 2**50)
    with pytest.raises(KeyboardInterrupt):
        br.reconstruct(
            model, draws, ["x", "y"], n_points=3, config=two, progress=stop_after_a_round, checkpoint=kept
        )
    monkeypatch.setattr(attack, "available_memory", lambda: needs[0] // 2)
    with pytest.raises(br.ReconError, match=first + r".*rounds kept in .*kept would refuse: start it afresh"):
        br.reconstruct(model, draws, free=["x", "y"], n_points=3, config=two, checkpoint=kept)
    assert kept.exists()  # a round of it is kept: the user decides


def test_every_restart_reports_its_measures_information_near_d_at_the_truths_optimum(kidiq_result):
    """The compiled round's information is Σ_j w_j E_s |∇ log p(x_j | θ_s)|² of its measure (the same sum
    computed apart), and at the oracle, as at the true data, about d (the information identity in the
    attack's whitened coordinates)."""
    setup, measure = kidiq_result.setup, kidiq_result.measure
    points = {k: jnp.asarray(v) for k, v in measure.points.items()}
    apart = measure.weights @ np.asarray(
        point_information(setup.weighted_model, setup.coordinates, setup.draws, points)
    )
    (reported,) = kidiq_result.history["information"]
    assert reported == pytest.approx(apart, rel=1e-9)
    assert 0.5 * setup.draws.shape[1] < reported < 2 * setup.draws.shape[1]


def test_a_restart_beyond_the_information_bound_is_passed_over_unless_all_are():
    """Restart 0 of lower objective carries 1e8 (a probit regression's saturated wall), restart 1 about d."""
    arrays = {"final": np.array([-1e8, -2.0]), "information": np.array([1e8, 4.0]),
              "weights": np.ones((2, 3)), "points/y": np.arange(6.0).reshape(2, 3)}  # fmt: skip
    assert _best_of_round(arrays, 4)["objective"] == -2.0
    assert list(_admissible(arrays["information"], 4)) == [False, True]
    beyond = {**arrays, "information": np.array([1e8, 1e3])}
    assert _best_of_round(beyond, 4)["objective"] == -1e8 and _admissible(beyond["information"], 4).all()


def test_each_bootstrap_replicate_is_the_exact_optimum_on_its_own_resample_of_the_draws():
    """y ~ Normal(mu, 1), mu ~ Normal(0, 10): a weighted posterior of mu is Gaussian with precision
    0.01 + Σ w, and score matching recovers a Gaussian's variance exactly, so a replicate's mass is
    1 / var(its resampled draws) − 0.01 — different for every resample, and far from the others only
    as far as the draws allow."""

    def model(y=None):
        mu = numpyro.sample("mu", dist.Normal(0, 10))
        with numpyro.plate("data", y.shape[0]):
            numpyro.sample("y", dist.Normal(mu, 1), obs=y)

    mu = np.random.default_rng(0).normal(1.0, 0.1, 400)
    config = br.ReconConfig(restarts=1, bootstrap=3, rescue_restarts=0, refine_rounds=0)
    recon = br.reconstruct(model, {"mu": mu}, free=["y"], n_points=3, seed=5, config=config)
    resamples = np.asarray(jax.random.randint(jax.random.PRNGKey(5 + 4), (3, 400), 0, 400))
    expected = 1 / np.var(mu[resamples], axis=1) - 0.01
    np.testing.assert_allclose(recon.bootstrap["weights"].sum(axis=1), expected, rtol=1e-3)
    np.testing.assert_allclose(recon.measure.total_mass(), 1 / np.var(mu) - 0.01, rtol=1e-3)
    assert len(set(np.round(expected, 3))) == 3
    spread = recon.bootstrap_spread()
    assert 0 < spread["total_mass"] < 0.25 and spread["total_mass"] == pytest.approx(
        np.ptp([recon.measure.total_mass(), *expected]) / max(recon.measure.total_mass(), *expected), rel=1e-2
    )


def test_statistics_spread_is_unit_free_and_measures_covariances_in_correlation_units():
    from bayes_recon.reconstruct import statistics_spread

    mass = np.array([100.0, 80.0])
    mean = np.array([[0.0, 10.0], [1.0, 10.0]])
    cov = np.array([[[4.0, 0.5], [0.5, 1.0]], [[1.0, 0.9], [0.9, 1.0]]])
    var = np.diagonal(cov, axis1=1, axis2=2)
    spread = statistics_spread(mass, mean, var, cov)
    expected = {
        "total_mass": 0.2,
        "mean[0]": 0.5,
        "sd[0]": 0.5,
        "mean[1]": 0.0,
        "sd[1]": 0.0,
        "cov[0,1]": 0.2,
    }
    assert spread == pytest.approx(expected)
    scale, shift = np.array([1e3, 1e-4]), np.array([-5e3, 7.0])  # other units and origins
    rescaled = statistics_spread(mass, mean * scale + shift, var * scale**2, cov * np.outer(scale, scale))
    assert rescaled == pytest.approx(expected)
    assert "cov[0,1]" not in statistics_spread(mass, mean, var)  # restarts: no covariances recorded
    assert statistics_spread(mass, mean + np.array([[0.0, 0.0], [np.nan, 0.0]]), var)["mean[0]"] == np.inf


def test_restarts_at_the_best_objective_that_differ_widen_the_standard_errors(kidiq_result):
    """Two restarts that reach the same objective are equally good reconstructions: a statistic on which
    they differ is determined no tighter than half their gap, whatever the sandwich says; those on which
    they agree keep the sandwich's errors."""
    result, history = kidiq_result, kidiq_result.history
    twice = {
        k: np.concatenate([v, v])
        for k, v in history.items()
        if k in ("total_mass", "mean", "var", "information")
    }
    sd = np.sqrt(history["var"][0, -1, 0])
    twice["mean"][1, -1, 0] += sd  # the second restart's mom_iq mean one sd higher, at the same objective
    objectives = np.concatenate([result.restart_objectives] * 2)
    two = dataclasses.replace(result, history={**history, **twice}, restart_objectives=objectives)
    two.__dict__["_sandwich"] = result._sandwich  # the same measure's: not built again
    assert result.standard_errors["mean[0]"] < 0.1
    assert two.restart_spread()["mean[0]"] == pytest.approx(1.0, rel=1e-9)
    assert two.standard_errors["mean[0]"] == pytest.approx(0.5, rel=1e-9)

    def others(errors: dict[str, float]) -> dict[str, float]:
        return {k: v for k, v in errors.items() if k != "mean[0]"}

    assert others(two.standard_errors) == pytest.approx(others(result.standard_errors), rel=1e-12)
