"""Models outside the registry: supports from the model, relaxed counts, the row guard, shapes and names."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from jax.scipy.special import ndtr
from numpyro.distributions import constraints
from row_models import logistic_regression, nuts, poisson_regression

import bayes_recon as br
from bayes_recon import pseudo
from bayes_recon.cli import describe_units
from bayes_recon.identifiability import identifiable_statistics
from bayes_recon.modelcheck import check_data_support, prepare_release, rows_as_units
from bayes_recon.supports import column_supports, constraint_named
from bayes_recon.weighting import WeightedModel


def test_responses_take_their_support_from_the_model():
    """Counts are relaxed to the positive reals, 0/1 responses stay exact, classes stratify."""

    def categorical(x, y=None):
        beta = numpyro.sample("beta", dist.Normal(0, 1).expand([3]).to_event(1))
        with numpyro.plate("rows", x.shape[0]):
            numpyro.sample("y", dist.Categorical(logits=beta * x[:, None]), obs=y)

    def gamma(x, y=None):
        a = numpyro.sample("a", dist.Normal(0, 1))
        with numpyro.plate("rows", x.shape[0]):
            numpyro.sample("y", dist.Gamma(2.0, 2.0 / jnp.exp(a * x)), obs=y)

    def binomial(x, y=None):
        a = numpyro.sample("a", dist.Normal(0, 1))
        with numpyro.plate("rows", x.shape[0]):
            numpyro.sample("y", dist.Binomial(5, logits=a * x), obs=y)

    shapes = {"x": (), "y": ()}
    assert column_supports(poisson_regression, shapes, {}, {})["y"] is constraints.positive
    trials = column_supports(binomial, shapes, {}, {})["y"]  # the count arrives broadcast to the rows
    assert pseudo.levels(trials) == (0.0, 1.0, 2.0, 3.0, 4.0, 5.0)
    assert column_supports(logistic_regression, shapes, {}, {})["y"] is constraints.boolean
    assert column_supports(gamma, shapes, {}, {})["y"] is constraints.positive
    assert column_supports(poisson_regression, shapes, {}, {})["x"] is constraints.real
    classes = column_supports(categorical, shapes, {}, {})["y"]
    assert pseudo.levels(classes) == (0.0, 1.0, 2.0)
    assert len(pseudo.Layout(shapes, {"y": classes}).strata) == 3
    # the user's word wins
    given = column_supports(poisson_regression, shapes, {}, {"y": constraints.unit_interval})
    assert given["y"] is constraints.unit_interval
    # counts given as counts are relaxed as the model's own are (this was an empty NotImplementedError)
    counted = column_supports(poisson_regression, shapes, {}, {"y": constraints.nonnegative_integer})
    assert counted["y"] is constraints.positive
    with pytest.raises(br.ReconError, match="support= says 'y' lies on the simplex, but its rows have shape"):
        column_supports(poisson_regression, shapes, {}, {"y": constraints.simplex})
    with pytest.raises(
        br.ReconError, match=r"support= says 'y' has support OrderedVector.*other than a simplex"
    ):
        column_supports(poisson_regression, shapes, {}, {"y": constraints.ordered_vector})
    # a support the response's distribution does not hold named the covariate, checked next, as the culprit
    with pytest.raises(br.ReconError, match=r"response 'y' is Boolean.*support is Positive.*\[0\.0\]"):
        column_supports(gamma, shapes, {}, {"y": constraints.boolean})
    with pytest.raises(br.ReconError, match=r"response 'y' is Real.*support is IntegerNonnegative.*-"):
        column_supports(poisson_regression, shapes, {}, {"y": constraints.real})
    assert column_supports(gamma, shapes, {}, {"y": constraints.greater_than(1.0)})["y"].lower_bound == 1.0
    # 0/1 responses relaxed to (0, 1), a count's trials to their interval, as the attack relaxes them
    assert column_supports(logistic_regression, shapes, {}, {"y": constraints.unit_interval})["y"]
    assert column_supports(binomial, shapes, {}, {"y": constraints.interval(0.0, 5.0)})["y"]
    with pytest.raises(br.ReconError, match=r"response 'y' is IntegerInterval.*values such as \[6\.0"):
        column_supports(binomial, shapes, {}, {"y": constraints.integer_interval(4, 7)})
    # a number instead of the constraint was an AttributeError from deep inside; a name, as the command
    # line takes it, is the constraint it names
    with pytest.raises(br.ReconError, match=r"column 'x' 3.0, not a NumPyro constraint.*\"positive\""):
        column_supports(poisson_regression, shapes, {}, {"x": 3.0})
    draws = {"a": np.linspace(0, 1, 100), "b": np.linspace(1, 2, 100)}
    named = prepare_release(poisson_regression, draws, ["x", "y"], support={"x": "interval(0, 200)"})
    assert named.layout.support("x").upper_bound == 200.0
    with pytest.raises(
        br.ReconError, match=r"support= for column 'x': unknown constraint 'postive'\. Did you mean positive"
    ):
        prepare_release(poisson_regression, draws, ["x", "y"], support={"x": "postive"})

    def trials_per_row(x, n, y=None):  # on real-valued trials the model fails: y was taken for real
        a = numpyro.sample("a", dist.Normal(0, 1))
        with numpyro.plate("rows", x.shape[0]):
            numpyro.sample("y", dist.Binomial(n, logits=a * x), obs=y)

    free_trials = {"x": (), "n": (), "y": ()}
    with pytest.raises(br.ReconError, match=r"'y' has support .*bounds differ from row to row"):
        column_supports(trials_per_row, free_trials, {}, {"n": constraints.integer_interval(1, 5)})
    # trials as relaxed counts fail NumPyro's validation in the probe: y had silently become real
    with pytest.raises(br.ReconError, match=r"'y' has support .*bounds differ from row to row"):
        column_supports(trials_per_row, free_trials, {}, {"n": constraints.nonnegative_integer})

    def beta_binomial(x, n, y=None):  # per-row trials that are not Bernoulli rows: fixed refuses them too
        a = numpyro.sample("a", dist.Normal(0, 1))
        with numpyro.plate("rows", x.shape[0]):
            p = jax.nn.sigmoid(a * x)
            numpyro.sample("y", dist.BetaBinomial(5 * p, 5 * (1 - p), n), obs=y)

    # the message that sends per-row trials to fixed= says where that ends, not only where it works
    with pytest.raises(br.ReconError, match=r"a beta-binomial's trials share .* are beyond this attack"):
        column_supports(beta_binomial, free_trials, {}, {"n": constraints.integer_interval(1, 5)})


def test_relaxed_count_likelihood_matches_the_model_at_integers_and_moves_between_them():
    """At integer counts the weighted density is the model's own; at 2.5 it has a gradient (not −∞, 0)."""
    model = WeightedModel(poisson_regression, ("x", "y"), {}, {"a": jnp.zeros(()), "b": jnp.zeros(())})
    theta = jnp.array([0.3, -0.2])
    x = jnp.array([0.1, 0.5, -1.0])
    y = jnp.array([1.0, 3.0, 0.0])
    rate = jnp.exp(0.3 - 0.2 * x)
    expected = dist.Normal(0, 5).log_prob(theta).sum() + dist.Poisson(rate).log_prob(y).sum()
    assert float(model.log_density(theta, {"x": x, "y": y}, jnp.ones(3))) == pytest.approx(float(expected))
    between = {"x": x, "y": jnp.array([1.0, 2.5, 0.0])}
    assert np.isfinite(float(model.log_density(theta, between, jnp.ones(3))))
    moved = jax.grad(lambda t: model.log_density(t, between, jnp.ones(3)))(theta)
    at_integer = jax.grad(lambda t: model.log_density(t, {"x": x, "y": y}, jnp.ones(3)))(theta)
    assert not np.allclose(moved, at_integer)  # the count at 2.5 counts, with its own weight


def test_a_design_matrix_named_in_a_list_takes_its_row_length_from_the_model():
    """free=["X", "y"] for y ~ Bernoulli(logits = X @ b), b of length 3: X has 3 numbers per row, as if
    given as {"X": (3,), "y": ()}; a model whose columns run as one number per row keeps them so."""

    def logistic(X, y=None):
        b = numpyro.sample("b", dist.Normal(0, 1).expand([3]).to_event(1))
        with numpyro.plate("rows", X.shape[0]):
            numpyro.sample("y", dist.Bernoulli(logits=X @ b), obs=y)

    draws = {"b": np.random.default_rng(0).normal(size=(50, 3))}
    assert prepare_release(logistic, draws, ["X", "y"]).layout.shapes == {"X": (3,), "y": ()}
    # a whole number is a shape of one axis, as numpy reads it; anything else is said to be no shape
    for shape in (3, np.int64(3), np.array([3])):
        assert prepare_release(logistic, draws, {"X": shape, "y": ()}).layout.shapes == {"X": (3,), "y": ()}
    for bad in ("3", b"3", 2.5, (3, 0), 0, None):
        with pytest.raises(
            br.ReconError, match=r"free gives \{'X': .*\} as per-row shape\(s\): a shape is a whole"
        ):
            prepare_release(logistic, draws, {"X": bad, "y": ()})
    varied = np.random.default_rng(1).normal(size=(2, 50))
    scalar = prepare_release(poisson_regression, {"a": varied[0], "b": varied[1]}, ["x", "y"])
    assert scalar.layout.shapes == {"x": (), "y": ()}

    def counted(X, y=None):  # b sized by X.shape[-1]: on one number per row, b grew with the rows
        b = numpyro.sample("b", dist.Normal(0, 1).expand([X.shape[-1]]).to_event(1))
        with numpyro.plate("rows", X.shape[0]):
            numpyro.sample("y", dist.Normal(X @ b, 1.0), obs=y)

    assert prepare_release(counted, draws, ["X", "y"]).layout.shapes == {"X": (3,), "y": ()}

    def two_lengths(X, y=None):  # X @ b needs 3 numbers per row, X @ c two: no shape runs
        b = numpyro.sample("b", dist.Normal(0, 1).expand([3]).to_event(1))
        c = numpyro.sample("c", dist.Normal(0, 1).expand([2]).to_event(1))
        with numpyro.plate("rows", X.shape[0]):
            numpyro.sample("y", dist.Bernoulli(logits=X @ b + X @ c), obs=y)

    with pytest.raises(br.ReconError, match=r"failed on pseudo-data.*free=\{'X': \(2,\)"):
        prepare_release(two_lengths, {**draws, "c": np.ones((50, 2))}, ["X", "y"])

    def either_vector(X, Z, y=None):  # X·Z per row is a 3-vector whichever of the two is the vector
        b = numpyro.sample("b", dist.Normal(0, 1).expand([3]).to_event(1))
        with numpyro.plate("rows", X.shape[0]):
            v = X.reshape(X.shape[0], -1) * Z.reshape(Z.shape[0], -1)
            numpyro.sample("y", dist.Bernoulli(logits=v @ b), obs=y)

    with pytest.raises(br.ReconError, match=r"more than one shape per row.*give free as a dict"):
        prepare_release(either_vector, draws, ["X", "Z", "y"])
    both = prepare_release(either_vector, draws, {"X": (3,), "Z": (), "y": ()})
    assert both.layout.shapes == {"X": (3,), "Z": (), "y": ()}


def correlated_pair(x, y=None):
    """Two responses per row, correlated: a multivariate normal with an LKJ correlation's Cholesky factor."""
    a = numpyro.sample("a", dist.Normal(0, 5).expand([2]).to_event(1))
    b = numpyro.sample("b", dist.Normal(0, 5).expand([2]).to_event(1))
    corr = numpyro.sample("corr", dist.LKJCholesky(2, 2.0))
    s = numpyro.sample("s", dist.HalfNormal(3).expand([2]).to_event(1))
    with numpyro.plate("rows", x.shape[0]):
        numpyro.sample("y", dist.MultivariateNormal(a + b * x[:, None], scale_tril=s[:, None] * corr), obs=y)


def three_components(y=None):
    theta = numpyro.sample("theta", dist.Dirichlet(jnp.ones(3)))
    mu = numpyro.sample("mu", dist.Normal(0, 5).expand([3]).to_event(1))
    with numpyro.plate("rows", y.shape[0]):
        numpyro.sample("y", dist.MixtureSameFamily(dist.Categorical(theta), dist.Normal(mu, 1.0)), obs=y)


def stein_z_scores(release: Any, data: Mapping[str, Any]) -> np.ndarray:
    """The posterior's score on ``data``, every row of weight 1, averaged over the release's first 600 draws,
    per coordinate in units of its Monte Carlo standard error (from batch means, which absorb NUTS's
    autocorrelation): near 0 where the draws are the posterior of these data (the Stein identity)."""
    score = jax.jit(jax.vmap(jax.grad(release.weighted_model.log_density), (0, None, None)))
    rows = {k: jnp.asarray(v) for k, v in data.items()}
    g = np.asarray(score(jnp.asarray(release.theta), rows, jnp.ones(len(rows["y"]))))
    batches = g[:600].reshape(20, 30, -1).mean(axis=1)
    return g.mean(axis=0) / (batches.std(axis=0, ddof=1) / np.sqrt(20))


def test_latent_sites_are_flattened_in_their_unconstrained_size():
    """A simplex of 3 has 2 unconstrained coordinates and a 2 × 2 correlation's Cholesky factor 1 (whose
    first row never moves in the draws); both were flattened at their constrained size, and the model
    failed on pseudo-data. Their coordinates are named as such, not as entries ("theta[0]" was not the
    simplex's first entry). The score has mean zero under the posterior (the Stein identity) in the
    unconstrained coordinates, Jacobians included; a vector response takes its entries' support."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=60)
    y = np.c_[1 + x, 2 - x] + rng.multivariate_normal([0, 0], [[1, 0.7], [0.7, 1]], 60)
    z = np.concatenate([rng.normal(-3, 1, 50), rng.normal(0, 1, 25), rng.normal(3, 1, 25)])
    for model, data, dim, names in (
        (
            correlated_pair,
            {"x": x, "y": y},
            7,
            ("a[0]", "a[1]", "b[0]", "b[1]", "corr (unconstrained 0)", "s[0]", "s[1]"),
        ),
        (
            three_components,
            {"y": z},
            5,
            ("mu[0]", "mu[1]", "mu[2]", "theta (unconstrained 0)", "theta (unconstrained 1)"),
        ),
    ):
        draws = nuts(model, **data)
        release = prepare_release(model, draws, {k: v.shape[1:] for k, v in data.items()})
        assert release.layout.support("y") is constraints.real
        assert release.weighted_model.dim == dim and release.weighted_model.coordinate_names == names
        assert np.all(np.abs(stein_z_scores(release, data)) < 4)


def dirichlet_shares(x, y=None):
    """Compositions: the shares of three parts, each one's concentration a log-linear regression."""
    a = numpyro.sample("a", dist.Normal(0, 2).expand([3]).to_event(1))
    b = numpyro.sample("b", dist.Normal(0, 2).expand([3]).to_event(1))
    with numpyro.plate("rows", x.shape[0]):
        numpyro.sample("y", dist.Dirichlet(jnp.exp(a + b * x[:, None])), obs=y)


def test_a_composition_lies_on_the_simplex_through_its_stick_breaking_bijection():
    """A Dirichlet response takes the simplex from its distribution (it was refused as a vector event):
    its K shares are K − 1 unconstrained coordinates, centred on the even composition, and the round
    trip through them is exact. The weighted model reads the compositions so put together as rows: the
    posterior's score has a mean of zero under its draws (the Stein identity), and with the same shares in
    another order it does not. A column declared a simplex needs two entries or more per row; ``"simplex"``
    is a name support= takes, and declared on the Dirichlet's response it is the response's own."""
    rng = np.random.default_rng(5)
    x = rng.normal(size=60)
    shares = np.exp(np.array([1.0, 0.5, 1.5]) + np.outer(x, [0.8, -0.5, 0.0]))
    data = {"x": x, "y": np.stack([rng.dirichlet(a) for a in shares])}
    draws = nuts(dirichlet_shares, **data)
    release = prepare_release(dirichlet_shares, draws, {"x": (), "y": (3,)})
    layout = release.layout
    assert layout.support("y") is constraints.simplex
    assert layout.widths(False) == {"x": 1, "y": 2} and layout.dim == 3 and layout.unbounded() == {"x"}
    np.testing.assert_allclose(layout.example(1)["y"], [[1 / 3, 1 / 3, 1 / 3]])
    z = layout.unconstrain({k: jnp.asarray(v) for k, v in data.items()})
    assert z.shape == (60, 3)
    back = layout.assemble(z, jnp.zeros((60, 0)))
    np.testing.assert_allclose(back["y"], data["y"], rtol=1e-9)
    np.testing.assert_allclose(back["x"], x)
    assert np.all(np.abs(stein_z_scores(release, back)) < 4)
    assert np.max(np.abs(stein_z_scores(release, {**back, "y": back["y"][:, ::-1]}))) > 10

    assert constraint_named("simplex") is constraints.simplex
    with pytest.raises(br.ReconError, match=r"'x' holds one number per row, but .*simplex.*x\.1, x\.2"):
        check_data_support(dirichlet_shares, data, {}, {"x": constraints.simplex})
    rounded = {**data, "y": np.round(data["y"], 2)}  # shares written with two digits: some sum to 0.99
    with pytest.raises(
        br.ReconError, match=r"observed site 'y' .* outside .*simplex.*divide each row by its sum"
    ):
        check_data_support(dirichlet_shares, rounded, {}, {})
    declared = prepare_release(dirichlet_shares, draws, {"x": (), "y": (3,)}, support={"y": "simplex"})
    assert declared.layout.support("y") is constraints.simplex  # was refused: checked share by share
    for shape in ((), (1,)):
        with pytest.raises(
            br.ReconError, match=rf"'x' lies on the simplex.*shape {re.escape(str(shape))}.*--free x:3"
        ):
            prepare_release(dirichlet_shares, draws, {"x": shape, "y": (3,)}, support={"x": "simplex"})


def test_a_parameter_that_never_moves_in_the_draws_is_named():
    rng = np.random.default_rng(4)
    draws = {"a": rng.normal(size=50), "b": np.full(50, 0.7)}  # b fixed: a point estimate mixed in
    with pytest.raises(br.ReconError, match="site 'b' has the same value in every draw"):
        prepare_release(poisson_regression, draws, ["x", "y"])

    def vector(x, y=None):
        b = numpyro.sample("b", dist.Normal(0, 5).expand([2]).to_event(1))
        with numpyro.plate("rows", x.shape[0]):
            numpyro.sample("y", dist.Poisson(jnp.exp(b[0] + b[1] * x)), obs=y)

    draws = {"b": np.c_[rng.normal(size=50), np.full(50, 0.7)]}
    with pytest.raises(br.ReconError, match=r"the draws of b\[1\] \(in the model's unconstrained"):
        prepare_release(vector, draws, ["x", "y"])


def test_class_labels_read_from_a_file_as_floats_index_the_model_as_integers():
    """A CSV gives every column as floats; an ordered logistic indexes its cut-points with the label, so
    the true data's features (the MMD the CLI and the audit print) crashed with take_along_axis."""
    from bayes_recon.identifiability import feature_setup
    from bayes_recon.kernel import model_features

    def ordinal(x, y=None):
        b = numpyro.sample("b", dist.Normal(0, 2))
        cuts = numpyro.sample("cuts", dist.TransformedDistribution(
            dist.Normal(0, 3).expand([2]), dist.transforms.OrderedTransform()))  # fmt: skip
        with numpyro.plate("rows", x.shape[0]):
            numpyro.sample("y", dist.OrderedLogistic(b * x, cuts), obs=y)

    rng = np.random.default_rng(5)
    draws = {"b": rng.normal(1, 0.1, 40), "cuts": np.sort(rng.normal(0, 1, (40, 2)), axis=1)}
    setup = feature_setup(ordinal, draws, ["x", "y"], {}, {}, 40)
    x, labels = rng.normal(size=6), np.array([0, 2, 1, 1, 0, 2])
    from_file = model_features(setup, {"x": x, "y": labels.astype(float)})
    np.testing.assert_allclose(from_file, model_features(setup, {"x": x, "y": labels}))


def test_a_fixed_column_known_row_by_row_is_one_value_or_refused_by_name():
    """A fixed array the model takes one value per row: a binomial's trials, the same on every row, are
    that value (its response stratified on 0..5); a negative exposure and a scale that differ by row are
    refused with the fix, and made free the exposure runs."""

    def binomial(x, n, y=None):
        a = numpyro.sample("a", dist.Normal(0, 5))
        with numpyro.plate("rows", x.shape[0]):
            numpyro.sample("y", dist.Binomial(n, logits=a * x), obs=y)

    def exposure(x, t, y=None):
        a = numpyro.sample("a", dist.Normal(0, 5))
        with numpyro.plate("rows", x.shape[0]):
            numpyro.sample("y", dist.Poisson(t * jnp.exp(a * x)), obs=y)

    def noisy(x, s, y=None):
        a = numpyro.sample("a", dist.Normal(0, 5))
        with numpyro.plate("rows", x.shape[0]):
            numpyro.sample("y", dist.Normal(a * x, s), obs=y)

    draws = {"a": np.random.default_rng(0).normal(size=50)}
    trials = prepare_release(binomial, draws, ["x", "y"], fixed={"n": np.full(30, 5)})
    assert pseudo.levels(trials.layout.support("y")) == (0.0, 1.0, 2.0, 3.0, 4.0, 5.0)
    assert trials.weighted_model.fixed["n"] == 5
    with pytest.raises(br.ReconError, match=r"fixed 't' has one value per data row \(30\).*Make 't' free"):
        prepare_release(exposure, draws, ["x", "y"], fixed={"t": np.linspace(-0.5, 2.0, 30)})
    free = prepare_release(exposure, draws, ["x", "t", "y"], support={"t": constraints.positive})
    assert free.layout.shapes == {"x": (), "t": (), "y": ()}
    # a scale per row is no exposure: a row is not s rows of scale 1
    with pytest.raises(br.ReconError, match=r"fixed 's' holds one value per data row.*weighs as u rows"):
        prepare_release(noisy, draws, ["x", "y"], fixed={"s": np.linspace(0.5, 2.0, 30)})


def test_a_group_index_known_row_by_row_is_refused_with_the_discrete_fix():
    """Group intercepts indexed by a row's group: the fix offered is the index free on its whole numbers
    (stratified, a cloud and a mass per group), and that runs; a positive support would not index."""

    def grouped(x, g, y=None):
        alpha = numpyro.sample("alpha", dist.Normal(0, 1).expand([4]))
        with numpyro.plate("rows", x.shape[0]):
            numpyro.sample("y", dist.Normal(alpha[g] + x, 1.0), obs=y)

    draws = {"alpha": np.random.default_rng(0).normal(size=(50, 4))}
    groups = np.repeat(np.arange(4), 5)
    fix = r"support=\{'g': constraints.integer_interval\(0, 3\)\}.*--support g=integer_interval\(0,3\)"
    with pytest.raises(br.ReconError, match=r"fixed 'g' holds one value per data row.*" + fix):
        prepare_release(grouped, draws, ["x", "y"], fixed={"g": groups})
    free = prepare_release(grouped, draws, ["x", "g", "y"], support={"g": constraints.integer_interval(0, 3)})
    assert pseudo.levels(free.layout.support("g")) == (0.0, 1.0, 2.0, 3.0)


def binomial_with_offset(x, c, n, y=None):
    a = numpyro.sample("a", dist.Normal(0, 5))
    with numpyro.plate("rows", x.shape[0]):
        numpyro.sample("y", dist.Binomial(n, logits=a * x + c), obs=y)


def binomial_trials_as_covariate(x, n, y=None):
    a = numpyro.sample("a", dist.Normal(0, 5))
    with numpyro.plate("rows", x.shape[0]):
        numpyro.sample("y", dist.Binomial(n, logits=a * (x + (n >= 5))), obs=y)


def beta_binomial(x, n, y=None):
    a = numpyro.sample("a", dist.Normal(0, 5))
    p = jax.nn.sigmoid(a * x)
    with numpyro.plate("rows", x.shape[0]):
        numpyro.sample("y", dist.BetaBinomial(4 * p, 4 * (1 - p), n), obs=y)


@pytest.mark.parametrize("model", [binomial_trials_as_covariate, beta_binomial])
def test_counts_per_row_whose_rows_are_not_bernoulli_rows_are_refused(model):
    """A row of n trials must weigh as n Bernoulli rows at every draw: not where n also moves the logit
    (only from 5 trials on, which n = 1 and n = 3 alone would miss), nor for a beta-binomial."""
    rng = np.random.default_rng(3)
    draws = {"a": rng.normal(size=50)}
    with pytest.raises(br.ReconError, match=r"fixed 'n' holds one value per data row.*weighs as u rows"):
        prepare_release(model, draws, ["x", "y"], fixed={"n": rng.integers(1, 9, 30)})


def units_against_rows(
    release: Any,
    points: Mapping[str, Any],
    weights: np.ndarray,
    column: str,
    values: np.ndarray,
    rows: Mapping,
) -> np.ndarray:
    """Per draw of the release: the log-likelihood of the data as its units (``rows_as_units``' points and
    weights, the model at ``column`` = 1) minus that of the data rows with ``column`` at its ``values``."""
    theta = jnp.asarray(release.theta)
    as_units = jax.vmap(release.weighted_model.loglik_per_point, in_axes=(0, None))(
        theta, {k: jnp.asarray(v) for k, v in points.items()}
    ) @ jnp.asarray(weights)
    data = dataclasses.replace(release.weighted_model, fixed={column: jnp.asarray(values)})
    as_rows = jax.vmap(data.loglik_per_point, in_axes=(0, None))(
        theta, {k: jnp.asarray(v) for k, v in rows.items()}
    )
    return np.asarray(as_units - as_rows.sum(axis=1))


def test_an_exposure_that_differs_by_row_is_reconstructed_as_its_units():
    """A Poisson count y of exposure t is, to the likelihood, t rows of exposure 1 and rate y / t (their
    log-likelihoods differ by a constant at every draw): the attack weighs units of exposure."""

    def exposure(x, t, y=None):
        a = numpyro.sample("a", dist.Normal(0, 5))
        b = numpyro.sample("b", dist.Normal(0, 5))
        with numpyro.plate("rows", x.shape[0]):
            numpyro.sample("y", dist.Poisson(t * jnp.exp(a + b * x)), obs=y)

    rng = np.random.default_rng(4)
    draws = {"a": rng.normal(size=50), "b": rng.normal(size=50)}
    x, t = rng.normal(size=30), rng.uniform(0.5, 3.0, 30)
    y = rng.poisson(t * np.exp(0.2 + 0.5 * x)).astype(float)
    release = prepare_release(exposure, draws, ["x", "y"], fixed={"t": t})
    units = {"column": "t", "response": "y", "kind": "exposure"}
    assert release.units == units and release.weighted_model.fixed["t"] == 1.0
    points, weights = rows_as_units({"x": x, "y": y}, t, units)
    np.testing.assert_allclose(weights, t)
    np.testing.assert_allclose(points["y"] * weights, y)
    gap = units_against_rows(release, points, weights, "t", t, {"x": x, "y": y})
    assert np.ptp(gap) < 1e-8 * max(1.0, np.abs(gap).max())
    # whole units of exposure are exposure too (not trials: y is a count, not a 0/1), and a row of none
    # carries nothing
    whole = prepare_release(exposure, draws, ["x", "y"], fixed={"t": rng.integers(0, 4, 30)})
    assert whole.units == units and whole.weighted_model.fixed["t"] == 1
    kept, weights = rows_as_units(
        {"x": np.arange(3.0), "y": np.array([0.0, 4.0, 3.0])}, np.array([0, 2, 3]), units
    )
    np.testing.assert_array_equal(weights, [2, 3])
    np.testing.assert_array_equal(kept["y"], [2.0, 1.0])
    assert "units of exposure" in describe_units(units) and "trials" in describe_units(
        {**units, "kind": "trials"}
    )


def test_a_weight_per_row_scaling_its_likelihood_is_reconstructed_as_its_units():
    """handlers.scale by a known weight per row (a survey weight) makes a row of weight w, to the
    posterior, w rows of weight 1: the attack weighs units of weight, the rows as they are. The check
    of this happens before the attack (the weight's length is checked against the rows where the
    likelihood is scaled); it failed in the self-check, after the whole attack, at stop 73."""

    def weighted_rows(x, w, y=None):
        b = numpyro.sample("b", dist.Normal(0, 5))
        with numpyro.plate("rows", x.shape[0]), numpyro.handlers.scale(scale=w):
            numpyro.sample("y", dist.Normal(b * x, 1.0), obs=y)

    rng = np.random.default_rng(5)
    draws = {"b": rng.normal(size=50)}
    x, w = rng.normal(size=30), rng.choice([0.25, 0.5, 2.0], 30)
    y = 0.7 * x + rng.normal(size=30)
    release = prepare_release(weighted_rows, draws, ["x", "y"], fixed={"w": w})
    units = {"column": "w", "response": "", "kind": "weight"}
    assert release.units == units and release.weighted_model.fixed["w"] == 1.0
    points, weights = rows_as_units({"x": x, "y": y}, w, units)
    np.testing.assert_array_equal(weights, w)
    np.testing.assert_array_equal(points["y"], y)
    gap = units_against_rows(release, points, weights, "w", w, {"x": x, "y": y})
    assert np.abs(gap).max() < 1e-10 * len(w)  # the same likelihood, not only the same posterior
    assert "units of w" in describe_units(units)


def test_a_binomial_whose_trials_vary_by_row_is_reconstructed_as_its_trials():
    """Trials known row by row, and different (posteriordb's GLM_Binomial): the attack weighs Bernoulli
    rows, one a trial, because to the likelihood a row of n trials and c successes is c rows of 1 and
    n − c of 0 (their log-likelihoods differ by a constant at every draw); the truth is scored that way."""

    def binomial(x, n, y=None):
        a = numpyro.sample("a", dist.Normal(0, 5))
        b = numpyro.sample("b", dist.Normal(0, 5))
        with numpyro.plate("rows", x.shape[0]):
            numpyro.sample("y", dist.Binomial(n, logits=a + b * x), obs=y)

    rng = np.random.default_rng(2)
    draws = {"a": rng.normal(size=50), "b": rng.normal(size=50)}
    x, n = rng.normal(size=30), rng.integers(1, 9, 30)
    y = rng.binomial(n, 0.4).astype(float)
    release = prepare_release(binomial, draws, ["x", "y"], fixed={"n": n})
    trials = {"column": "n", "response": "y", "kind": "trials"}
    assert release.units == trials and release.weighted_model.fixed["n"] == 1
    # beside an array of one value, in either order
    both = prepare_release(binomial_with_offset, draws, ["x", "y"], fixed={"n": n, "c": np.full(30, 0.5)})
    assert both.units == trials and both.weighted_model.fixed["c"] == 0.5
    assert pseudo.levels(release.layout.support("y")) == (0.0, 1.0)

    points, weights = rows_as_units({"x": x, "y": y}, n, trials)
    assert weights.sum() == n.sum() and weights @ points["y"] == y.sum()
    gap = units_against_rows(release, points, weights, "n", n, {"x": x, "y": y})
    assert np.ptp(gap) < 1e-8 * np.abs(gap).max()  # the same posterior: a constant apart


def test_a_parameter_per_row_is_refused_however_it_is_indexed():
    """eight_schools written with J fixed and θ indexed by row position: not one likelihood per row."""

    def eight_schools(sigma, y=None, J=8):
        mu = numpyro.sample("mu", dist.Normal(0, 5))
        tau = numpyro.sample("tau", dist.HalfCauchy(5))
        theta = numpyro.sample("theta", dist.Normal(mu, tau).expand([J]).to_event(1))
        with numpyro.plate("rows", y.shape[0]):
            numpyro.sample("obs", dist.Normal(theta[jnp.arange(y.shape[0]) % J], sigma), obs=y)

    rng = np.random.default_rng(0)
    draws = {"mu": rng.normal(size=50), "tau": rng.gamma(2, size=50), "theta": rng.normal(size=(50, 8))}
    with pytest.raises(br.ReconError, match="not the same function for every data row"):
        prepare_release(eight_schools, draws, ["sigma", "y"], support={"sigma": constraints.positive})


def test_a_discrete_latent_per_row_is_refused_with_the_mixture_that_sums_it_out():
    """NumPyro's enumerated mixture (a component drawn per row) is a latent per row to the attack, which runs
    the model without funsor's enumeration: refused, naming the MixtureSameFamily that sums it out; a
    continuous latent per row gets no such advice."""

    def enumerated(y=None):
        weights = numpyro.sample("weights", dist.Dirichlet(jnp.ones(2)))
        mu = numpyro.sample("mu", dist.Normal(0, 5).expand([2]).to_event(1))
        with numpyro.plate("rows", y.shape[0]):
            z = numpyro.sample("z", dist.Categorical(weights), infer={"enumerate": "parallel"})
            numpyro.sample("y", dist.Normal(mu[z], 1.0), obs=y)

    def effects(y=None):
        mu = numpyro.sample("mu", dist.Normal(0, 5))
        with numpyro.plate("rows", y.shape[0]):
            numpyro.sample("y", dist.Normal(numpyro.sample("effect", dist.Normal(mu, 1.0)), 1.0), obs=y)

    rng = np.random.default_rng(0)
    draws = {"weights": rng.dirichlet([1, 1], 50), "mu": rng.normal(size=(50, 2))}
    with pytest.raises(br.ReconError, match=r"\['z'\] is discrete.*dist.MixtureSameFamily"):
        prepare_release(enumerated, draws, ["y"])
    with pytest.raises(br.ReconError, match="per-point latent") as refused:
        prepare_release(effects, {"mu": rng.normal(size=50)}, ["y"])
    assert "MixtureSameFamily" not in str(refused.value)


def test_missing_responses_imputed_by_obs_mask_are_refused_with_the_complete_rows_attack():
    """NumPyro's obs_mask makes the masked entries a latent site y_unobserved, one per missing value: a
    latent per row, however the mask comes in (fixed per row, or fixed inside the model). The refusal
    says so and what works: the complete rows, the model called without the mask, which takes the same
    draws (y_unobserved ignored). A latent site of the user's that merely ends in _unobserved, without
    NumPyro's deterministic y beside it, is no such mask."""

    def masked(x, y=None, mask=None):
        b = numpyro.sample("b", dist.Normal(0, 5))
        with numpyro.plate("rows", x.shape[0]):
            numpyro.sample("y", dist.Normal(b * x, 1.0), obs=y, obs_mask=mask)

    def closure(x, y=None):
        return masked(x, y, mask=jnp.arange(x.shape[0]) % 7 != 0)

    rng = np.random.default_rng(0)
    draws = {"b": rng.normal(size=50), "y_unobserved": rng.normal(size=(50, 3))}
    mask = np.arange(20) % 7 != 0
    with pytest.raises(br.ReconError, match=r"^The model observes \['y'\] with obs_mask.*\['y_unobserved'\]"):
        prepare_release(masked, draws, ["x", "y"], {"mask": mask})
    with pytest.raises(br.ReconError, match=r"^The model observes \['y'\] with obs_mask"):
        prepare_release(closure, draws, ["x", "y"])
    assert prepare_release(masked, draws, ["x", "y"]).layout.shapes == {"x": (), "y": ()}

    def named_alike(x, y=None):  # an effect per row named as NumPyro names a mask's latent values
        b = numpyro.sample("b", dist.Normal(0, 5))
        with numpyro.plate("rows", x.shape[0]):
            effect = numpyro.sample("y_unobserved", dist.Normal(0.0, 1.0))
            numpyro.sample("y_observed", dist.Normal(b * x + effect, 1.0), obs=y)

    with pytest.raises(br.ReconError, match="per-point latent") as refused:
        prepare_release(named_alike, draws, ["x", "y"])
    assert "obs_mask" not in str(refused.value)


def test_a_model_written_for_svi_is_attacked_over_all_its_rows():
    """plate(..., subsample_size=B) scales a subsample's likelihood by N / B and needs a random key that
    NUTS has not: the attack runs every plate over all its rows, so the weighted likelihood is the full
    model's, row for row."""

    def full(x, y=None):
        b = numpyro.sample("b", dist.Normal(0, 5))
        with numpyro.plate("rows", x.shape[0]):
            numpyro.sample("y", dist.Normal(b * x, 1.0), obs=y)

    def subsampled(x, y=None):
        b = numpyro.sample("b", dist.Normal(0, 5))
        with numpyro.plate("rows", x.shape[0], subsample_size=4) as rows:
            numpyro.sample("y", dist.Normal(b * x[rows], 1.0), obs=None if y is None else y[rows])

    draws = {"b": np.random.default_rng(1).normal(size=50)}
    data = {"x": jnp.linspace(-1.0, 1.0, 10), "y": jnp.linspace(0.5, 2.0, 10)}
    weights, theta = jnp.linspace(0.5, 1.5, 10), jnp.array([0.7])
    per_row = [
        prepare_release(model, draws, ["x", "y"]).weighted_model.loglik_per_point(theta, data)
        for model in (subsampled, full)
    ]
    np.testing.assert_allclose(per_row[0], per_row[1], rtol=1e-12)
    assert per_row[0].shape == (10,)
    densities = [
        prepare_release(model, draws, ["x", "y"]).weighted_model.log_density(theta, data, weights)
        for model in (subsampled, full)
    ]
    np.testing.assert_allclose(densities[0], densities[1], rtol=1e-12)


def test_a_model_taking_its_columns_in_one_dict_is_told_the_wrapper_that_works():
    def model(data):
        b = numpyro.sample("b", dist.Normal(0, 5))
        with numpyro.plate("rows", data["x"].shape[0]):
            numpyro.sample("y", dist.Normal(b * data["x"], 1.0), obs=data.get("y"))

    draws = {"b": np.random.default_rng(2).normal(size=50)}
    wrapper = "def wrapped(x=None, y=None): return model({'x': x, 'y': y})"
    with pytest.raises(br.ReconError, match=re.escape(wrapper)):
        prepare_release(model, draws, ["x", "y"])
    with pytest.raises(
        br.ReconError, match=r"takes no argument\(s\) \['y'\]; its arguments are \['x'\]\."
    ) as one:
        prepare_release(lambda x: model({"x": x}), draws, ["x", "y"])
    assert "wrapper" not in str(one.value)  # it takes a column of its own: not a dict of them

    def wrapped(x=None, y=None):
        return model({"x": x, "y": y})

    assert prepare_release(wrapped, draws, ["x", "y"]).layout.shapes == {"x": (), "y": ()}


def _two_groups(y_t=None, y_c=None):
    p_t, p_c = numpyro.sample("p_t", dist.Beta(1, 1)), numpyro.sample("p_c", dist.Beta(1, 1))
    with numpyro.plate("treated", y_t.shape[0]):
        numpyro.sample("obs_t", dist.Bernoulli(p_t), obs=y_t)
    with numpyro.plate("control", y_c.shape[0]):
        numpyro.sample("obs_c", dist.Bernoulli(p_c), obs=y_c)


def test_two_data_sets_in_plates_of_their_own_are_refused_and_one_alone_is_taken():
    """A treatment and a control group of 500 and 300 rows: one weighted measure pairs a row of each, so
    both free were silently one data set of 367 pairs, reproducing the release (stop 75). Refused,
    naming both plates (two plates over the same rows, whose columns cannot differ in length, are one
    table); with the control group fixed, the treated rows are taken alone (reconstructed in the slow
    test below; the shares' posteriors are conjugate: exact Beta draws)."""
    rng = np.random.default_rng(0)
    y_t, y_c = (rng.random(500) < 0.12).astype(float), (rng.random(300) < 0.3).astype(float)
    k_t, k_c = y_t.sum(), y_c.sum()
    draws = {"p_t": rng.beta(1 + k_t, 1 + 500 - k_t, 2000), "p_c": rng.beta(1 + k_c, 1 + 300 - k_c, 2000)}
    with pytest.raises(
        br.ReconError, match=r"'obs_c' \(plate \['control'\]\) and 'obs_t' \(plate \['treated'\]\)"
    ):
        prepare_release(_two_groups, draws, ["y_t", "y_c"])

    def outputs(y=None):  # a plate over each row's outputs nested in the rows' is one table
        mu = numpyro.sample("mu", dist.Normal(0, 5))
        with numpyro.plate("rows", y.shape[0], dim=-2), numpyro.plate("outputs", 3, dim=-1):
            numpyro.sample("y", dist.Normal(mu, 1.0), obs=y)

    assert prepare_release(outputs, {"mu": rng.normal(size=50)}, {"y": (3,)}).layout.shapes == {"y": (3,)}

    def paired(x=None, y=None):  # a covariate's plate and its response's, named apart, over the same rows
        m, b = numpyro.sample("m", dist.Normal(0, 5)), numpyro.sample("b", dist.Normal(0, 5))
        with numpyro.plate("x_rows", x.shape[0]):
            numpyro.sample("x", dist.Normal(m, 1.0), obs=x)
        with numpyro.plate("y_rows", y.shape[0]):
            numpyro.sample("y", dist.Normal(b * x, 1.0), obs=y)

    both = {"m": rng.normal(size=50), "b": rng.normal(size=50)}
    assert prepare_release(paired, both, ["x", "y"]).layout.shapes == {"x": (), "y": ()}
    assert prepare_release(_two_groups, draws, ["y_t"], {"y_c": y_c}).layout.shapes == {"y_t": ()}


@pytest.mark.slow
def test_one_of_two_data_sets_is_reconstructed_with_the_other_fixed():
    """The treated rows of the two groups above, the control group fixed (it crashed, reshaping the 300
    fixed rows as the probe's, stop 75): N within four standard errors, the share of ones within 0.03."""
    rng = np.random.default_rng(0)
    y_t, y_c = (rng.random(500) < 0.12).astype(float), (rng.random(300) < 0.3).astype(float)
    k_t, k_c = y_t.sum(), y_c.sum()
    draws = {"p_t": rng.beta(1 + k_t, 1 + 500 - k_t, 2000), "p_c": rng.beta(1 + k_c, 1 + 300 - k_c, 2000)}
    result = br.reconstruct(_two_groups, draws, free=["y_t"], fixed={"y_c": y_c}, n_points=5, seed=0)
    w = np.asarray(result.measure.weights)
    mass, ones = w.sum(), w @ np.asarray(result.measure.points["y_t"])
    assert abs(mass - 500) < 4 * result.standard_errors["total_mass"] * mass
    assert abs(ones / mass - k_t / 500) < 0.03
    assert result.self_check.reproduces


def test_data_without_a_continuous_column_are_reconstructed_class_by_class():
    """Class labels alone (no continuous coordinate at all): the posterior of their shares is conjugate,
    Dirichlet(1 + counts), so its draws are exact. Every class's recovered weight is its count within
    four of the mass's standard errors (it crashed reshaping to a width of zero, stop 74)."""

    def shares(y=None):
        p = numpyro.sample("p", dist.Dirichlet(jnp.ones(3)))
        with numpyro.plate("rows", y.shape[0]):
            numpyro.sample("y", dist.Categorical(p), obs=y)

    counts = np.array([60, 150, 90])
    draws = {"p": np.random.default_rng(0).dirichlet(1 + counts, 1000)}
    result = br.reconstruct(shares, draws, free=["y"], n_points=5, seed=0)
    y, w = np.asarray(result.measure.points["y"]), np.asarray(result.measure.weights)
    recovered = np.array([w[y == k].sum() for k in range(3)])
    assert np.all(np.abs(recovered - counts) < 4 * result.standard_errors["total_mass"] * counts.sum())
    assert result.self_check.reproduces, result.self_check.reasons


def test_a_binary_vector_per_row_is_refused_without_listing_its_combinations():
    """64 binary entries per row make 2⁶⁴ combinations: they are counted only up to the limit (listing them
    all took the machine's memory when a row-shape guess tried a mask that long)."""
    with pytest.raises(br.ReconError, match="64 binary or discrete data coordinates make over 16"):
        pseudo.Layout({"flags": (64,)}, {"flags": constraints.boolean})


def test_counts_of_classes_per_row_are_refused_with_the_categorical_rows_of_the_same_posterior():
    """A Multinomial row of counts y is, to the posterior, y[k] Categorical rows of class k: their
    log-likelihoods differ by the multinomial coefficient alone, the same at every θ. The refusal names
    that model, which takes the same draws."""

    def counts_of(trials: Callable[[Any], Any]) -> Callable:
        def counts(x, y=None):
            b = numpyro.sample("b", dist.Normal(0, 2).expand([3]).to_event(1))
            with numpyro.plate("rows", x.shape[0]):
                numpyro.sample("y", dist.Multinomial(trials(y), logits=b * x[:, None]), obs=y)

        return counts

    rng = np.random.default_rng(0)
    b, x, y = rng.normal(size=(20, 3)), np.array([0.3, -1.2]), np.array([[2, 5, 3], [0, 1, 9]])
    rows = dist.Multinomial(10, logits=b[:, None, :] * x[:, None]).log_prob(y)  # (θ, row)
    trials = (y * jax.nn.log_softmax(b[:, None, :] * x[:, None], axis=-1)).sum(-1)
    assert np.ptp(np.asarray(rows - trials), axis=0).max() < 1e-9

    # ten trials a row, and NumPyro's idiom: each row's trials its counts' sum, a bound that differs by row
    for model in (counts_of(lambda y: 10), counts_of(lambda y: y.sum(-1))):
        with pytest.raises(
            br.ReconError, match=r"vector of counts per row.*one dist.Categorical row per trial"
        ):
            prepare_release(model, {"b": b}, {"x": (), "y": (3,)})


def test_the_number_of_rows_passed_as_fixed_follows_the_pseudo_data():
    """Stan's style, model(N, K, X, y, scale) with plate("rows", N): N takes the pseudo-data's row count at
    every call (it was a shape error), with X named in a list or given its shape, and draws kept by
    chain; K, a count that is no row count, and a prior's vector of scales stay as given. A binomial's
    trials (a count the model runs with on any number of rows) stay as given too."""

    def stan_style(N, K, X, scale, y=None):
        b = numpyro.sample("b", dist.Normal(0, scale).to_event(1))
        with numpyro.plate("rows", N):
            numpyro.sample("y", dist.Normal(X @ b[:K], 1.0), obs=y)

    draws = {"b": np.random.default_rng(0).normal(size=(50, 2))}
    known = {"N": 300, "K": 2, "scale": np.array([2.5, 10.0])}
    by_chain = {"b": draws["b"].reshape(2, 25, 2)}
    for free, released in ((["X", "y"], draws), ({"X": (2,), "y": ()}, draws), (["X", "y"], by_chain)):
        release = prepare_release(stan_style, released, free, fixed=known)
        assert release.layout.shapes == {"X": (2,), "y": ()}
        assert set(release.weighted_model.fixed) == {"K", "scale"}
        data = {"X": jnp.ones((7, 2)), "y": jnp.zeros(7)}
        assert release.weighted_model.loglik_per_point(jnp.zeros(2), data).shape == (7,)

    def binomial(trials, X, y=None):
        b = numpyro.sample("b", dist.Normal(0, 1).expand([3]).to_event(1))
        with numpyro.plate("rows", X.shape[0]):
            numpyro.sample("y", dist.Binomial(trials, logits=X @ b), obs=y)

    counts = prepare_release(
        binomial, {"b": np.ones((50, 3)) + draws["b"][:, :1]}, ["X", "y"], fixed={"trials": 10}
    )
    assert counts.weighted_model.fixed["trials"] == 10 and counts.layout.shapes == {"X": (3,), "y": ()}
    assert pseudo.levels(counts.layout.support("y")) == tuple(float(k) for k in range(11))
    quick = br.ReconConfig(restarts=1, rescue_restarts=0, refine_rounds=0, coarse_steps=2, steps=2)
    result = br.reconstruct(stan_style, draws, ["X", "y"], fixed=known, n_points=5, config=quick)
    assert result.measure.points["X"].shape == (5, 2)  # the whole attack, its start included, runs


def test_a_group_index_of_more_groups_than_strata_is_refused_as_beyond_the_attack():
    """20 groups given their discrete support: more values than the pseudo-data's strata (16), so the
    column is relaxed to an interval and the model's alpha[g] fails on it. The refusal says so; it told
    the user to give the support they had given."""

    def groups(g, x, y=None):
        alpha = numpyro.sample("alpha", dist.Normal(0, 5).expand([20]).to_event(1))
        with numpyro.plate("rows", x.shape[0]):
            numpyro.sample("y", dist.Normal(alpha[g] + x, 1.0), obs=y)

    draws = {"alpha": np.random.default_rng(3).normal(size=(50, 20))}
    support = {"g": constraints.integer_interval(0, 19)}
    with pytest.raises(br.ReconError, match=r"\['g'\] lie on an interval.*beyond this attack"):
        prepare_release(groups, draws, ["g", "x", "y"], support=support)


def test_a_group_index_needs_its_discrete_support_and_says_so():
    def groups(g, x, y=None):
        alpha = numpyro.sample("alpha", dist.Normal(0, 1).expand([4]).to_event(1))
        with numpyro.plate("rows", x.shape[0]):
            numpyro.sample("y", dist.Normal(alpha[g] + x, 1.0), obs=y)

    draws = {"alpha": np.random.default_rng(0).normal(size=(50, 4))}
    with pytest.raises(br.ReconError, match=r"indexes with .*support=\{'g': constraints.integer_interval"):
        prepare_release(groups, draws, ["g", "x", "y"])
    four = prepare_release(groups, draws, ["g", "x", "y"], support={"g": constraints.integer_interval(0, 3)})
    assert len(four.layout.strata) == 4


def test_a_likelihood_not_one_term_per_row_is_refused_with_the_reason():
    """Rows standardised by the data's own mean and sd, a factor of the mean over all rows (of a sum over
    them, :func:`test_a_factor_of_a_sum_over_the_rows_weighs_as_the_rows_observed`, the attack weighs), and
    a distribution that couples the rows (a Gaussian process's; the rows as one event of independent terms,
    :func:`test_an_event_over_the_rows_weighs_as_the_rows_in_a_plate`, it weighs): each refused up front,
    saying why (the first once passed the row checks and was blamed on y's support, by accident of a
    constant pseudo-column)."""

    def standardised(x, y=None):
        b = numpyro.sample("b", dist.Normal(0, 1))
        with numpyro.plate("rows", x.shape[0]):
            numpyro.sample("y", dist.Normal(b * (x - x.mean()) / x.std(), 1.0), obs=y)

    def averaged(x, y=None):
        b = numpyro.sample("b", dist.Normal(0, 1))
        numpyro.factor("loglik", jnp.mean(dist.Normal(b * x, 1.0).log_prob(y)))

    def coupled(x, y=None):  # a Gaussian process over the rows
        b = numpyro.sample("b", dist.Normal(0, 1))
        cov = jnp.exp(-0.5 * (x[:, None] - x[None, :]) ** 2) + jnp.eye(x.shape[0])
        numpyro.sample("y", dist.MultivariateNormal(b * x, cov), obs=y)

    draws = {"b": np.random.default_rng(0).normal(size=50)}
    with pytest.raises(br.ReconError, match="a row's log-likelihood depends on the other rows"):
        prepare_release(standardised, draws, ["x", "y"])
    with pytest.raises(br.ReconError, match=r"takes the rows one by one.*numpyro\.factor of the rows' mean"):
        prepare_release(averaged, draws, ["x", "y"])
    with pytest.raises(br.ReconError, match=r"\['y'\] take no row.*couples the rows"):
        prepare_release(coupled, draws, ["x", "y"])

    def coupled_beside_rows(x, y=None):
        coupled(x, y)
        with numpyro.plate("rows", x.shape[0]):
            numpyro.sample("x", dist.Normal(0.0, 1.0), obs=x)

    with pytest.raises(br.ReconError, match=r"\['y'\] take no row of their own but change.*couples the rows"):
        prepare_release(coupled_beside_rows, draws, ["x", "y"])


def test_a_covariate_off_its_support_is_named_with_the_fix():
    def log_covariate(x, y=None):
        b = numpyro.sample("b", dist.Normal(0, 1))
        with numpyro.plate("rows", x.shape[0]):
            numpyro.sample("y", dist.Normal(b * jnp.log(x), 1.0), obs=y)

    draws = {"b": np.random.default_rng(0).normal(size=50)}
    with pytest.raises(br.ReconError, match=r"'x'.*support=.*positive"):
        prepare_release(log_covariate, draws, ["x", "y"])
    prepare_release(log_covariate, draws, ["x", "y"], support={"x": constraints.positive})

    def log_response(x, y):  # y undeclared, so real; x, checked first, must not take the blame
        b = numpyro.sample("b", dist.Normal(0, 1))
        with numpyro.plate("rows", x.shape[0]):
            numpyro.sample("log_y", dist.Normal(b * x, 1.0), obs=jnp.log(y))

    with pytest.raises(br.ReconError, match=r"free column 'y'.*support=.*positive"):
        prepare_release(log_response, draws, ["x", "y"])


def test_draws_off_their_sites_support_are_refused_by_site_not_blamed_on_a_column():
    def scaled(x, y=None):
        b = numpyro.sample("b", dist.Normal(0, 1))
        sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
        with numpyro.plate("rows", x.shape[0]):
            numpyro.sample("y", dist.Normal(b * x, sigma), obs=y)

    rng = np.random.default_rng(0)
    draws = {"b": rng.normal(size=50), "sigma": np.abs(rng.normal(size=50)) + 0.1}
    prepare_release(scaled, draws, ["x", "y"])
    draws["sigma"][[3, 7]] *= -1.0  # the log-likelihood at these draws is NaN: 'x' took the blame
    refused = r"2 of 50 draws \(first: draw 3\).*support the model gives sigma"
    with pytest.raises(br.ReconError, match=refused):
        prepare_release(scaled, draws, ["x", "y"])


def test_check_names_the_sums_a_canonical_link_sees_and_none_for_another_link():
    """Poisson (log link) and Bernoulli (logit) see y through Σ y and Σ y·x; a probit's slope in y
    depends on θ, so no such sum is claimed for it."""
    rng = np.random.default_rng(1)
    draws = {"a": rng.normal(0.5, 0.1, 200), "b": rng.normal(0.6, 0.1, 200)}
    for model in (poisson_regression, logistic_regression):
        found = identifiable_statistics(model, draws, ["x", "y"])
        assert not found.polynomial
        assert found.linear_in_response == ("Σ y", "Σ y·x")

    def probit_regression(x, y=None):
        a = numpyro.sample("a", dist.Normal(0, 5))
        b = numpyro.sample("b", dist.Normal(0, 5))
        with numpyro.plate("rows", x.shape[0]):
            numpyro.sample("y", dist.Bernoulli(probs=ndtr(a + b * x)), obs=y)

    assert identifiable_statistics(probit_regression, draws, ["x", "y"]).linear_in_response == ()


def test_a_large_coefficient_on_a_small_covariate_is_not_refused():
    """exp(η) overflows at unit-spread probes when the covariate lives at 0.01 with a coefficient of
    1,000 (a unit choice): the support check must accept it, as it does at any scale of the column."""

    def poisson_small_covariate(x, y=None):
        b = numpyro.sample("b", dist.Normal(0, 1e4))
        with numpyro.plate("rows", x.shape[0]):
            numpyro.sample("y", dist.Poisson(jnp.exp(b * x)), obs=y)

    draws = {"b": 1000.0 + np.random.default_rng(0).normal(size=50)}
    release = prepare_release(poisson_small_covariate, draws, ["x", "y"])
    assert release.layout.support("y") is constraints.positive


def test_a_prior_written_as_a_factor_stays_the_prior_and_a_factor_of_the_rows_is_refused():
    """A numpyro.factor of the parameters alone (an ordered pair's prior, as Stan writes one) is a term of
    the prior: never weighted, kept in log_prior. A factor outside the plate that sums the rows is not."""

    def factored(y=None):
        mu = numpyro.sample("mu", dist.ImproperUniform(constraints.ordered_vector, (), (2,)))
        numpyro.factor("mu_prior", dist.Normal(0, 2).log_prob(mu).sum())
        with numpyro.plate("rows", y.shape[0]):
            numpyro.sample("y", dist.Normal(mu.sum(), 1.0), obs=y)

    def sampled(y=None):
        mu = numpyro.sample("mu", dist.ImproperUniform(constraints.ordered_vector, (), (2,)))
        numpyro.sample("mu_prior", dist.Normal(0, 2).expand([2]).to_event(1), obs=mu)  # the same term
        with numpyro.plate("rows", y.shape[0]):
            numpyro.sample("y", dist.Normal(mu.sum(), 1.0), obs=y)

    def rows_summed_aside(y=None):
        mu = numpyro.sample("mu", dist.ImproperUniform(constraints.ordered_vector, (), (2,)))
        numpyro.factor("spread", -jnp.var(y) * mu[1])
        with numpyro.plate("rows", y.shape[0]):
            numpyro.sample("y", dist.Normal(mu.sum(), 1.0), obs=y)

    def times_rows(y=None):  # Stan's target += -N * log(2): a term of the number of rows
        mu = numpyro.sample("mu", dist.ImproperUniform(constraints.ordered_vector, (), (2,)))
        numpyro.factor("per_row", -y.shape[0] * jnp.log(2.0) - mu[1])
        with numpyro.plate("rows", y.shape[0]):
            numpyro.sample("y", dist.Normal(mu.sum(), 1.0), obs=y)

    def constant_in_plate(y=None):  # a factor with no value of its own inside the plate: one per row
        mu = numpyro.sample("mu", dist.ImproperUniform(constraints.ordered_vector, (), (2,)))
        with numpyro.plate("rows", y.shape[0]):
            numpyro.factor("norm", -mu[1])
            numpyro.sample("y", dist.Normal(mu.sum(), 1.0), obs=y)

    rng = np.random.default_rng(0)
    draws = {"mu": np.sort(rng.normal(size=(50, 2)), axis=1)}
    inside = prepare_release(constant_in_plate, draws, ["y"]).weighted_model
    assert inside.prior_sites == frozenset()
    theta, two = jnp.asarray(draws["mu"][:1]), {"y": jnp.asarray([0.5, -1.0])}
    theta = jnp.asarray(inside.to_unconstrained(draws, two)[:1])
    rows = jax.vmap(inside.loglik_per_point, (0, None))(theta, two)[0]
    mu1 = draws["mu"][0, 1]
    np.testing.assert_allclose(
        rows, dist.Normal(draws["mu"][0].sum(), 1.0).log_prob(two["y"]) - mu1, rtol=1e-6
    )
    with pytest.raises(br.ReconError, match=r"\['per_row'\] take no row of their own but change"):
        prepare_release(times_rows, draws, ["y"])
    release = prepare_release(factored, draws, ["y"])
    weighted = release.weighted_model
    assert weighted.prior_sites == {"mu_prior"}
    theta, y, w = (
        jnp.asarray(release.theta[:3]),
        {"y": jnp.asarray([0.5, -1.0, 2.0])},
        jnp.asarray([3.0, 0.0, 1.5]),
    )
    one = jax.vmap(weighted.log_density, (0, None, None))(theta, y, w)
    loglik = jax.vmap(weighted.loglik_per_point, (0, None))(theta, y)
    prior = jax.vmap(weighted.log_prior, (0, None))(theta, y)
    np.testing.assert_allclose(one, prior + loglik @ w, rtol=1e-6)
    u = jax.vmap(weighted.unravel)(theta)["mu"]  # ordered: mu = (u0, u0 + exp(u1)), log Jacobian u1
    mu = jnp.stack([u[:, 0], u[:, 0] + jnp.exp(u[:, 1])], axis=1)
    by_hand = (
        dist.Normal(0, 2).log_prob(mu).sum(-1) + dist.Normal(mu.sum(-1)[:, None], 1.0).log_prob(y["y"]) @ w
    )
    np.testing.assert_allclose(one, by_hand + u[:, 1], rtol=1e-6)
    assert prepare_release(sampled, draws, ["y"]).weighted_model.prior_sites == {"mu_prior"}
    with pytest.raises(
        br.ReconError, match=r"\['spread'\] take no row of their own but change with the data"
    ):
        prepare_release(rows_summed_aside, draws, ["y"])


def test_a_measure_of_relaxed_counts_is_the_data_set_of_its_counts_split_onto_the_integers():
    """A pseudo-count y of weight w and the two rows ⌊y⌋, ⌊y⌋ + 1 of weights (1 − u)·w, u·w (u = y − ⌊y⌋)
    give the same weighted posterior, up to a constant in θ, for a zero-inflated count too, whose
    model's own formula between the integers would not (its features are not linear in y)."""

    def zero_inflated(x, y=None):
        a = numpyro.sample("a", dist.Normal(0, 5))
        b = numpyro.sample("b", dist.Normal(0, 5))
        g = numpyro.sample("g", dist.Beta(1, 1))
        with numpyro.plate("rows", x.shape[0]):
            numpyro.sample("y", dist.ZeroInflatedPoisson(g, jnp.exp(a + b * x)), obs=y)

    rng = np.random.default_rng(0)
    x, y, w = rng.normal(size=6), np.array([0.3, 1.0, 2.5, 0.0, 7.9, 3.2]), rng.uniform(1, 3, 6)
    low, up = np.floor(y), y - np.floor(y)
    split = {"x": np.concatenate([x, x]), "y": np.concatenate([low, low + 1])}
    split_weights = np.concatenate([w * (1 - up), w * up])
    for model, draws in (
        (poisson_regression, {"a": rng.normal(size=20), "b": rng.normal(size=20)}),
        (zero_inflated, {"a": rng.normal(size=20), "b": rng.normal(size=20), "g": rng.uniform(0.1, 0.9, 20)}),
    ):
        release = prepare_release(model, draws, ["x", "y"])
        density = jax.vmap(release.weighted_model.log_density, (0, None, None))
        theta = jnp.asarray(release.theta)
        moved = density(theta, split, jnp.asarray(split_weights)) - density(
            theta, {"x": x, "y": y}, jnp.asarray(w)
        )
        assert float(np.ptp(np.asarray(moved))) < 1e-8
        scores = jax.vmap(release.weighted_model.point_scores, (0, None))
        np.testing.assert_allclose(
            split_weights @ scores(theta, split), w @ scores(theta, {"x": x, "y": y}), atol=1e-9
        )


def test_a_count_read_in_the_models_own_code_weighs_as_the_same_count_observed():
    """A Poisson written as a ``numpyro.factor`` per row (as Stan translations write hurdles), its count
    given as a count: NumPyro's validated log-probability is −∞ between the counts, and the attack refused
    the column. Its rows are now interpolated between the counts, so that at any pseudo-count its
    log-likelihood, its gradient in the count and the weighted log density are those of the same Poisson
    observed (whose site the attack interpolates itself). Undeclared, or declared positive, the column is
    refused with a message that names the count's support. A count covariate the model takes at any real
    value is not interpolated, and a covariate beside the count still fails the covariates' check."""

    observed = poisson_regression

    def in_code(x, y=None):
        a = numpyro.sample("a", dist.Normal(0, 5))
        b = numpyro.sample("b", dist.Normal(0, 5))
        with numpyro.plate("rows", x.shape[0]):
            numpyro.factor("y_term", dist.Poisson(jnp.exp(a + b * x)).log_prob(y))

    rng = np.random.default_rng(0)
    draws = {"a": rng.normal(0.5, 0.1, 100), "b": rng.normal(0.3, 0.1, 100)}
    count = {"y": constraints.nonnegative_integer}
    for undeclared in ({}, {"y": constraints.positive}):  # refused, naming the support that works
        with pytest.raises(br.ReconError, match=r"at whole numbers only .*--support y=nonnegative_integer"):
            prepare_release(in_code, draws, ["x", "y"], support=undeclared)

    def two_in_code(x, y=None):  # two counts a row, read in code: refused, each a column of its own instead
        a = numpyro.sample("a", dist.Normal(0, 2))
        b = numpyro.sample("b", dist.Normal(0, 2))
        with numpyro.plate("rows", x.shape[0]):
            numpyro.factor("y_term", dist.Poisson(jnp.exp(a + b * x)[:, None]).log_prob(y).sum(-1))

    with pytest.raises(br.ReconError, match=r"rewrite the model to take each entry of 'y'"):
        prepare_release(two_in_code, draws, {"x": (), "y": (2,)}, support=count)
    plain = prepare_release(observed, draws, ["x", "y"]).weighted_model
    coded = prepare_release(in_code, draws, ["x", "y"], support=count).weighted_model
    assert plain.counted == () and coded.counted == (("y", 0.0, np.inf),)
    data = {"x": jnp.array([-1.0, 0.2, 1.5, 0.7]), "y": jnp.array([0.0, 0.3, 2.25, 7.0])}
    theta, weights = jnp.array([0.4, 0.2]), jnp.array([1.0, 2.5, 0.5, 3.0])
    for weighted in (plain, coded):
        assert np.isfinite(weighted.loglik_per_point(theta, data)).all()
    np.testing.assert_allclose(coded.loglik_per_point(theta, data), plain.loglik_per_point(theta, data))
    for derivative in (jax.grad, jax.hessian):  # in θ, and in the counts (a step between them)
        for argument in (0, 1):
            ours, theirs = (
                derivative(lambda t, d, w=w: w.log_density(t, d, weights), argnums=argument)(theta, data)
                for w in (coded, plain)
            )
            jax.tree_util.tree_map(np.testing.assert_allclose, ours, theirs)
    densities = [w.log_density(theta, data, weights) for w in (coded, plain)]
    np.testing.assert_allclose(*densities)

    def logged_in_code(x, y=None):  # log of a real x: still refused for x, the count's interpolation aside
        a = numpyro.sample("a", dist.Normal(0, 2))
        b = numpyro.sample("b", dist.Normal(0, 2))
        with numpyro.plate("rows", x.shape[0]):
            numpyro.factor("y_term", dist.Poisson(jnp.exp(a + b * jnp.log(x))).log_prob(y))

    with pytest.raises(br.ReconError, match=r"free column 'x' on its support .*constraints.positive"):
        prepare_release(logged_in_code, draws, ["x", "y"], support=count)
    covariate = {"x": constraints.nonnegative_integer}  # finite between the counts: kept smooth
    assert prepare_release(observed, draws, ["x", "y"], support=covariate).weighted_model.counted == ()


def test_a_factor_of_a_sum_over_the_rows_weighs_as_the_rows_observed():
    """Stan's vectorised ``target += normal_lpdf(y | a + b * x, 1)``, written as one ``numpyro.factor`` of
    the rows' sum: its value is the sum of its value on each row alone, so each row's term is that, and the
    per-row log-likelihood, the weighted log density and its derivatives in θ and in the pseudo-data are
    those of the same rows observed in a plate. A factor beside the plate keeps its per-row sites' terms.
    A count the factor validates (Stan's ``poisson_log_lpmf``), declared a count, is probed at whole
    numbers and interpolated between them, as the same count observed."""

    def plated(x, y=None):
        a = numpyro.sample("a", dist.Normal(0, 5))
        b = numpyro.sample("b", dist.Normal(0, 5))
        with numpyro.plate("rows", x.shape[0]):
            numpyro.sample("y", dist.StudentT(4.0, a + b * x, 1.0), obs=y)
            numpyro.sample("x", dist.Normal(0.0, 2.0), obs=x)

    def vectorised(x, y=None):
        a = numpyro.sample("a", dist.Normal(0, 5))
        b = numpyro.sample("b", dist.Normal(0, 5))
        numpyro.factor("target", dist.StudentT(4.0, a + b * x, 1.0).log_prob(y).sum())
        with numpyro.plate("rows", x.shape[0]):
            numpyro.sample("x", dist.Normal(0.0, 2.0), obs=x)

    rng = np.random.default_rng(0)
    draws = {"a": rng.normal(0.5, 0.1, 100), "b": rng.normal(0.3, 0.1, 100)}
    plain = prepare_release(plated, draws, ["x", "y"]).weighted_model
    summed = prepare_release(vectorised, draws, ["x", "y"]).weighted_model
    assert plain.summed == frozenset() and summed.summed == {"target"} and not summed.prior_sites
    data = {"x": jnp.array([-1.0, 0.2, 1.5, 0.7]), "y": jnp.array([0.0, 0.3, 2.25, 7.0])}
    theta, weights = jnp.array([0.4, 0.2]), jnp.array([1.0, 2.5, 0.5, 3.0])
    np.testing.assert_allclose(summed.loglik_per_point(theta, data), plain.loglik_per_point(theta, data))
    for derivative in (jax.grad, jax.hessian):
        for argument in (0, 1):
            ours, theirs = (
                derivative(lambda t, d, w=w: w.log_density(t, d, weights), argnums=argument)(theta, data)
                for w in (summed, plain)
            )
            jax.tree_util.tree_map(np.testing.assert_allclose, ours, theirs)

    def counts_vectorised(
        x, y=None
    ):  # target += poisson_log_lpmf(y | a + b * x): a count the factor validates
        a = numpyro.sample("a", dist.Normal(0, 5))
        b = numpyro.sample("b", dist.Normal(0, 5))
        numpyro.factor("target", dist.Poisson(jnp.exp(a + b * x)).log_prob(y).sum())

    count = {"y": constraints.nonnegative_integer}
    counted = prepare_release(counts_vectorised, draws, ["x", "y"], support=count).weighted_model
    assert counted.summed == {"target"} and counted.counted == (("y", 0.0, np.inf),)
    observed = prepare_release(poisson_regression, draws, ["x", "y"]).weighted_model
    np.testing.assert_allclose(counted.loglik_per_point(theta, data), observed.loglik_per_point(theta, data))


def test_an_event_over_the_rows_weighs_as_the_rows_in_a_plate():
    """``dist.Laplace(a + b * x, s).to_event(1)`` observed with no plate is the sum of the rows' terms: the
    attack gives the rows back to the batch, so each row's term, the kink's residuals, the weighted log
    density with the kink smoothed and its derivatives in θ and in the pseudo-data are those of the plate
    (through the summed factors' path, the kink went unsmoothed and the self-check rejected the result).
    A count's event over the rows takes the count's support from the model, and a count off it in the data
    is named by its row."""

    def plated(x, y=None):
        a = numpyro.sample("a", dist.Normal(0, 5))
        b = numpyro.sample("b", dist.Normal(0, 5))
        with numpyro.plate("rows", x.shape[0]):
            numpyro.sample("y", dist.Laplace(a + b * x, 1.5), obs=y)

    def one_event(x, y=None):
        a = numpyro.sample("a", dist.Normal(0, 5))
        b = numpyro.sample("b", dist.Normal(0, 5))
        numpyro.sample("y", dist.Laplace(a + b * x, 1.5).to_event(1), obs=y)

    rng = np.random.default_rng(0)
    draws = {"a": rng.normal(0.5, 0.1, 100), "b": rng.normal(0.3, 0.1, 100)}
    plain, evented = (prepare_release(m, draws, ["x", "y"]).weighted_model for m in (plated, one_event))
    assert evented.summed == frozenset() and evented.prior_sites == frozenset()
    data = {"x": jnp.array([-1.0, 0.2, 1.5, 0.7]), "y": jnp.array([0.0, 0.3, 2.25, 7.0])}
    theta, weights = jnp.array([0.4, 0.2]), jnp.array([1.0, 2.5, 0.5, 3.0])
    bandwidths = {"y": jnp.array([0.1, 0.2, 0.3, 0.4])}
    jax.tree_util.tree_map(
        np.testing.assert_allclose, evented.kink_residuals(theta, data), plain.kink_residuals(theta, data)
    )
    for derivative in (lambda f, argnums: f, jax.grad, jax.hessian):
        for argument in (0, 1):
            ours, theirs = (
                derivative(lambda t, d, w=w: w.log_density(t, d, weights, bandwidths), argnums=argument)(
                    theta, data
                )
                for w in (evented, plain)
            )
            jax.tree_util.tree_map(np.testing.assert_allclose, ours, theirs)

    def counts_one_event(x, y=None):
        a = numpyro.sample("a", dist.Normal(0, 5))
        b = numpyro.sample("b", dist.Normal(0, 5))
        numpyro.sample("y", dist.Poisson(jnp.exp(a + b * x)).to_event(1), obs=y)

    counted = prepare_release(counts_one_event, draws, ["x", "y"])
    observed = prepare_release(poisson_regression, draws, ["x", "y"])
    assert counted.weighted_model.summed == frozenset()
    assert counted.layout.supports == observed.layout.supports
    np.testing.assert_allclose(
        counted.weighted_model.loglik_per_point(theta, data),
        observed.weighted_model.loglik_per_point(theta, data),
    )
    wrong = {"x": np.array([0.1, 0.2, 0.3]), "y": np.array([1.0, 0.0, 2.5])}
    with pytest.raises(
        br.ReconError, match=r"'y' has 1 value\(s\) outside .*nonnegative_integer.*row 2: 2.5"
    ):
        check_data_support(counts_one_event, wrong, {}, {})


def test_rows_of_vectors_flattened_into_one_event_weigh_as_the_rows_in_a_plate():
    """Two measurements per row flattened into one vector of 2N entries and observed as one event: the
    rows are not its leading dimension, so it is no row site, but it is the sum of the rows' terms and
    is weighed as one (:func:`test_a_factor_of_a_sum_over_the_rows_weighs_as_the_rows_observed`), as the
    same rows in a plate; once, its rows were taken for the batch's entries and the weights failed inside
    the attack."""

    def plated(x, y=None):
        a = numpyro.sample("a", dist.Normal(0, 5))
        b = numpyro.sample("b", dist.Normal(0, 5))
        with numpyro.plate("rows", x.shape[0]):
            numpyro.sample(
                "y", dist.Normal((a + b * x)[:, None] + jnp.array([0.0, 1.0]), 1.5).to_event(1), obs=y
            )

    def flattened(x, y=None):
        a = numpyro.sample("a", dist.Normal(0, 5))
        b = numpyro.sample("b", dist.Normal(0, 5))
        loc = ((a + b * x)[:, None] + jnp.array([0.0, 1.0])).reshape(-1)
        numpyro.sample("y", dist.Normal(loc, 1.5).to_event(1), obs=y.reshape(-1))

    rng = np.random.default_rng(0)
    draws = {"a": rng.normal(0.5, 0.1, 100), "b": rng.normal(0.3, 0.1, 100)}
    free = {"x": (), "y": (2,)}
    plain, flat = (prepare_release(m, draws, free).weighted_model for m in (plated, flattened))
    assert plain.summed == frozenset() and flat.summed == {"y"}
    data = {"x": jnp.array([-1.0, 0.2, 1.5]), "y": jnp.array([[0.0, 0.3], [2.25, 7.0], [1.0, -1.0]])}
    theta, weights = jnp.array([0.4, 0.2]), jnp.array([1.0, 2.5, 0.5])
    np.testing.assert_allclose(flat.loglik_per_point(theta, data), plain.loglik_per_point(theta, data))
    np.testing.assert_allclose(
        flat.log_density(theta, data, weights), plain.log_density(theta, data, weights)
    )
