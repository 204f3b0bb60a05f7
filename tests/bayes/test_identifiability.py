"""The identifiable statistics: what the model's features see, named, and checked against closed forms.

The defining property is checked directly: two data sets with the same identified statistics have
the same summed features Σ_i s(x_i, θ) at every draw (so the same weighted posterior), and one
that differs in a single identified statistic does not.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.distributions import constraints

from bayes_recon.cli import main
from bayes_recon.identifiability import (
    IdentifiabilityConfig,
    Statistic,
    Variable,
    check_posterior,
    feature_setup,
    identifiable_statistics,
    identify,
    moment_statistics,
    moments_outside,
    probe_points,
    undetermined_moments,
)
from bayes_recon.kernel import model_features
from bayes_recon.models import REGISTRY
from recon_core.errors import ReconError
from recon_core.measure import WeightedMeasure


def quadratic_regression(x, y=None):
    beta = numpyro.sample("beta", dist.Normal(0.0, 1.0).expand([3]).to_event(1))
    sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Normal(beta[0] + beta[1] * x + beta[2] * x**2, sigma), obs=y)


def poisson_regression(x, y=None):
    beta = numpyro.sample("beta", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Poisson(jnp.exp(beta[0] + beta[1] * x)), obs=y)


def zip_regression(x, y=None):
    beta = numpyro.sample("beta", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.ZeroInflatedPoisson(0.3, jnp.exp(beta[0] + beta[1] * x)), obs=y)


def two_normals(y=None):
    mu = numpyro.sample("mu", dist.Normal(0.0, 3.0).expand([2]).to_event(1))
    with numpyro.plate("data", y.shape[0]):
        mixing = dist.Categorical(jnp.array([0.4, 0.6]))
        numpyro.sample("y", dist.MixtureSameFamily(mixing, dist.Normal(mu, 1.0)), obs=y)


def logistic_regression(x, y=None):
    beta = numpyro.sample("beta", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Bernoulli(logits=beta[0] + beta[1] * x), obs=y)


def _draws(rng: np.random.Generator, n: int = 300) -> dict[str, np.ndarray]:
    """Spread-out parameter values: the span of the features does not need a posterior's concentration."""
    return {"beta": rng.normal(size=(n, 3)), "sigma": rng.lognormal(0.0, 0.3, size=n)}


def test_polynomial_features_reveal_the_first_four_moments():
    found = identifiable_statistics(quadratic_regression, _draws(np.random.default_rng(0)), free=["x", "y"])
    assert found.polynomial and found.degree == 4 and found.rank == 9
    # design (1, x, x²): XᵀX holds Σ x⁰…x⁴, Xᵀy holds Σ y, Σ x y, Σ x² y, and yᵀy
    expected = {"N", "Σ x", "Σ x²", "Σ x³", "Σ x⁴", "Σ y", "Σ x·y", "Σ x²·y", "Σ y²"}
    assert set(found.names) == expected


def rescaled_regression(x1, x2, y=None, units=(1.0, 1.0)):
    """A regression whose model takes its covariates in other units than its data's (x1 in thousandths)."""
    beta = numpyro.sample("beta", dist.Normal(0.0, 1.0).expand([3]).to_event(1))
    sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
    with numpyro.plate("data", x1.shape[0]):
        mean = beta[0] + beta[1] * x1 * units[0] + beta[2] * x2 * units[1]
        numpyro.sample("y", dist.Normal(mean, sigma), obs=y)


@pytest.mark.parametrize(
    ("units", "support"),
    [((1.0, 1.0), None), ((1e3, 1e-3), None), ((1e-4, 1e4), None), ((1e-4, 1e4), "positive")],
)
def test_statistics_do_not_depend_on_the_units_the_model_takes(units, support):
    """Unit probes of a model that multiplies x1 by 10³ and x2 by 10⁻³ named 4 of the 10 statistics,
    each a mixture of monomials 10¹² apart (and on these draws, of rank 9 and 7 for the two rescalings);
    probed in the model's units, every one is named, x2 on the real line or the positive one."""
    found = identifiable_statistics(
        rescaled_regression, _draws(np.random.default_rng(0)), free=["x1", "x2", "y"], fixed={"units": units},
        support=None if support is None else {"x2": support}, config=IdentifiabilityConfig(max_degree=2),
    )  # fmt: skip
    assert found.rank == 10
    assert found.names == [
        "N",
        "Σ x1",
        "Σ x2",
        "Σ y",
        "Σ x1²",
        "Σ x1·x2",
        "Σ x1·y",
        "Σ x2²",
        "Σ x2·y",
        "Σ y²",
    ]


def test_data_sets_with_equal_statistics_have_equal_features():
    rng = np.random.default_rng(1)
    draws = _draws(rng, 50)
    found = identifiable_statistics(quadratic_regression, draws, free=["x", "y"])
    setup = feature_setup(quadratic_regression, draws, ["x", "y"], None, None, 50)

    # Same Σ xᵃ (a ≤ 4), Σ y, Σ x y, Σ x² y and Σ y², different rows: keep x and y's projection p on
    # the rows (1, x, x²), and rotate its residual r within their orthogonal complement.
    x, y = rng.normal(size=12), rng.normal(size=12)
    q = np.linalg.qr(np.stack([np.ones_like(x), x, x**2], axis=1))[0]
    p = q @ (q.T @ y)
    r = y - p
    d = rng.normal(size=12)
    d -= q @ (q.T @ d) + r * (r @ d) / (r @ r)
    y_other = p + np.cos(0.7) * r + np.sin(0.7) * np.linalg.norm(r) * d / np.linalg.norm(d)
    a, b = WeightedMeasure.empirical({"x": x, "y": y}), WeightedMeasure.empirical({"x": x, "y": y_other})
    assert not np.allclose(y, y_other)
    for statistic in found.statistics:
        assert statistic.of(b) == pytest.approx(statistic.of(a), rel=1e-9, abs=1e-9)

    def summed(measure: WeightedMeasure) -> np.ndarray:
        return measure.weights @ model_features(setup, measure.points, 50)

    np.testing.assert_allclose(summed(b), summed(a), rtol=1e-8, atol=1e-8)
    shifted = WeightedMeasure.empirical({"x": x, "y": y + 0.1})  # changes Σ y (and more)
    assert np.abs(summed(shifted) - summed(a)).max() > 1e-3


def test_binary_columns_count_equal_monomials_once():
    check = check_posterior("kidiq-kidscore_momhs")  # the embedded database
    found = check.identifiability
    assert check.exact is True
    assert set(found.names) == {"N", "Σ mom_hs", "Σ kid_score", "Σ mom_hs·kid_score", "Σ kid_score²"}
    assert "mom_hs² = mom_hs" in found.aliases


@pytest.mark.parametrize("name", ["kidiq-kidscore_momiq", "kidiq-kidscore_interaction"])
def test_embedded_kidiq_lists_exactly_the_sufficient_statistics(name):
    check = check_posterior(name)
    assert check.exact is True
    # every entry of XᵀX, Xᵀy, yᵀy, once: 6 for [1, iq], 11 for [1, hs, iq, hs·iq] with hs² = hs
    assert check.identifiability.rank == {"kidiq-kidscore_momiq": 6, "kidiq-kidscore_interaction": 11}[name]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(n for n, e in REGISTRY.items() if e.linear is not None))
def test_shared_posteriors_list_exactly_the_sufficient_statistics(name, shared_db):
    assert check_posterior(name, shared_db).exact is True


def test_mesquite_statistics_are_named_in_the_logs(shared_db):
    found = check_posterior("mesquite-logmesquite_logvolume", shared_db).identifiability
    assert "Σ (log diam1 + log diam2 + log canopy_height)" in found.names
    assert "Σ log weight²" in found.names and found.rank == 6


def no_intercept_regression(x, y=None):
    beta = numpyro.sample("beta", dist.Normal(0.0, 1.0))
    sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Normal(beta * x, sigma), obs=y)


def test_moments_outside_what_the_likelihood_sees_are_named():
    """Without an intercept the likelihood sees N, Σ x², Σ x·y and Σ y²: no mean, sd or covariance is a
    function of those (two data sets, x and y negated, share them), while N is. With the intercept the
    quadratic regression sees every moment up to the second."""
    rng = np.random.default_rng(0)
    draws = {"beta": rng.normal(size=300), "sigma": rng.lognormal(0.0, 0.3, size=300)}
    config = IdentifiabilityConfig(max_degree=2)
    setup = feature_setup(no_intercept_regression, draws, ["x", "y"], None, None, config.max_draws)
    points = probe_points(setup, 60)
    found = identify(setup, config, points)
    assert set(found.names) == {"N", "Σ x²", "Σ x·y", "Σ y²"}
    assert moments_outside(found, points, ["x", "y"]) == ["mean[0]", "sd[0]", "mean[1]", "sd[1]", "cov[0,1]"]
    assert undetermined_moments(setup, ["x", "y"], config) == moments_outside(found, points, ["x", "y"])
    # a span named only in part (its rank above the statistics named) is no ground to call anything open
    partly = dataclasses.replace(found, rank=found.rank + 1)
    assert moments_outside(partly, points, ["x", "y"]) == []
    full = feature_setup(quadratic_regression, _draws(np.random.default_rng(0)), ["x", "y"], None, None, 200)
    points = probe_points(full, 200)
    assert moments_outside(identify(full, IdentifiabilityConfig(), points), points, ["x", "y"]) == []
    logistic = feature_setup(logistic_regression, {"beta": draws["beta"][:, None] * [1, 1]}, ["x", "y"], None,
                             {"y": constraints.boolean}, 200)  # fmt: skip
    points = probe_points(logistic, 100)
    assert moments_outside(identify(logistic, config, points), points, ["x", "y"]) == []  # not polynomial


def test_non_polynomial_features_name_nothing():
    rng = np.random.default_rng(2)
    draws = {"beta": rng.normal(size=(100, 2))}
    found = identifiable_statistics(
        logistic_regression,
        draws,
        free=["x", "y"],
        support={"y": constraints.boolean},
        config=IdentifiabilityConfig(max_degree=3),
    )
    assert not found.polynomial and found.statistics == () and found.rank is None


def test_where_no_polynomial_fits_the_audit_scores_the_columns_own_moments():
    """A Poisson regression's features are polynomials neither in y nor in log y: the variables named are
    the columns themselves (log y is -inf at a zero count), and the moments scored are N and the sums of
    every column and product of two; y² is y for a binary y, so a logistic regression scores it once."""
    rng = np.random.default_rng(2)
    draws = {"beta": rng.normal(size=(100, 2))}
    config = IdentifiabilityConfig(max_degree=2)
    found = identifiable_statistics(poisson_regression, draws, free=["x", "y"], config=config)
    assert not found.polynomial and [v.label for v in found.variables] == ["x", "y"]
    setup = feature_setup(logistic_regression, draws, ["x", "y"], {}, {"y": constraints.boolean}, 100)
    found = identifiable_statistics(
        logistic_regression, draws, free=["x", "y"], support={"y": constraints.boolean}, config=config
    )
    scored = moment_statistics(found.variables, probe_points(setup, 200))
    zero_inflated = identifiable_statistics(zip_regression, draws, free=["x", "y"], config=config)
    alone = identifiable_statistics(two_normals, {"mu": rng.normal(size=(100, 2))}, free=["y"], config=config)
    assert not alone.polynomial and alone.linear_in_response == ()  # y was the only column: a crash
    assert not zero_inflated.polynomial  # its probe counts reach 0, whose log crashed the alias names
    assert [s.name for s in scored] == ["N", "Σ x", "Σ y", "Σ x²", "Σ x·y"]
    truth = WeightedMeasure.empirical({"x": np.array([0.5, -1.0, 2.0]), "y": np.array([1.0, 0.0, 1.0])})
    assert [s.of(truth) for s in scored] == pytest.approx([3.0, 1.5, 2.0, 5.25, 2.5])


def test_statistic_of_a_weighted_measure_is_the_weighted_sum():
    x, y = Variable("x", None, False, False), Variable("y", None, True, False)
    statistic = Statistic((x, y), (((1, 1), 1.0), ((2, 0), -2.0)))
    measure = WeightedMeasure({"x": np.array([1.0, 2.0]), "y": np.array([np.e, 1.0])}, np.array([0.5, 3.0]))
    assert statistic.name == "Σ (x·log y − 2·x²)"
    assert statistic.of(measure) == pytest.approx(0.5 * (1.0 - 2.0) + 3.0 * (0.0 - 8.0))


def test_check_command_prints_the_statistics(capsys, tmp_path):
    assert main(["check", "--posterior", "kidiq-kidscore_momiq", "--json", str(tmp_path / "c.json")]) == 0
    out = capsys.readouterr().out
    assert "pin down 6 statistics" in out and "Σ mom_iq·kid_score" in out and "exactly" in out
    assert (tmp_path / "c.json").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["check", "--max-degree", "0"], "max_degree must be at least 1"),
        (["check", "--posterior", "eight_schools-eight_schools_noncentered"], "out of scope"),
    ],
)
def test_check_bad_input_exits_2(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("bayes-recon: error: ") and message in err and "Traceback" not in err


def scaled_regression(x, y=None, scale=1.0):
    beta = numpyro.sample("beta", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Normal(beta[0] + beta[1] * scale * x, 1.0), obs=y)


def test_fixed_arguments_are_constants_and_per_point_ones_are_refused():
    draws = {"beta": np.random.default_rng(3).normal(size=(50, 2))}
    # a known constant that switches the covariate off: x's statistics vanish from the list
    found = identifiable_statistics(scaled_regression, draws, free=["x", "y"], fixed={"scale": 0.0})
    assert set(found.names) == {"N", "Σ y"}
    found = identifiable_statistics(scaled_regression, draws, free=["x", "y"], fixed={"scale": 2.0})
    assert set(found.names) == {"N", "Σ x", "Σ y", "Σ x²", "Σ x·y"}  # σ = 1 is known: no Σ y²
    with pytest.raises(ReconError, match=r"fixed 'x' holds one value per data row.*Make 'x' free"):
        identifiable_statistics(scaled_regression, draws, free=["y"], fixed={"x": np.linspace(0, 1, 20)})
    with pytest.raises(ReconError, match="fixed 'x' has one value per data row"):  # x counts the rows
        identifiable_statistics(scaled_regression, draws, free=["y"], fixed={"x": np.ones(20)})


@pytest.mark.slow
def test_dummies_of_one_variable_have_no_product_statistic(shared_db):
    """nes2000's age indicators (Dummy): a product of two is 0 on the support, an alias and no statistic."""
    check = check_posterior("nes2000-nes", shared_db)
    assert check.exact is True
    assert "age30_44·age45_64 = 0" in check.identifiability.aliases
    assert not any("age30_44·age45_64" in name for name in check.identifiability.names)


def shares(y=None):
    concentration = numpyro.sample("concentration", dist.Gamma(2.0, 1.0).expand([3]).to_event(1))
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("y", dist.Dirichlet(concentration), obs=y)


def test_a_compositions_statistics_are_the_logs_of_its_shares():
    """A Dirichlet's sufficient statistics are the sums of its shares' logs: its features are polynomials
    of degree 1 in the logs of a composition (support simplex), as in those of a positive column."""
    draws = {"concentration": np.random.default_rng(0).gamma(2.0, 1.0, size=(300, 3))}
    found = identifiable_statistics(shares, draws, {"y": (3,)})
    assert found.polynomial and found.degree == 1 and found.rank == 4
    assert set(found.names) == {"N", "Σ log y[0]", "Σ log y[1]", "Σ log y[2]"}
