"""Label switching: which models have exchangeable components, and the self-check of a switching release."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from row_models import attack_setup, nuts

from bayes_recon.modelcheck import prepare_release
from bayes_recon.reconstruct import AttackSetup
from bayes_recon.relabel import Relabelling, constrained_values, find_relabelling, relabel
from bayes_recon.selfcheck import SelfCheckConfig, round_trip
from bayes_recon.stages import one_copy


def two_components(y=None):  # posteriordb's low_dim_gauss_mix_collapse: nothing orders the components
    mu = numpyro.sample("mu", dist.Normal(0, 2).expand([2]).to_event(1))
    sigma = numpyro.sample("sigma", dist.HalfNormal(2).expand([2]).to_event(1))
    theta = numpyro.sample("theta", dist.Beta(5, 5))
    mix = dist.MixtureSameFamily(dist.Categorical(jnp.stack([theta, 1 - theta])), dist.Normal(mu, sigma))
    with numpyro.plate("rows", y.shape[0]):
        numpyro.sample("y", mix, obs=y)


def ordered_components(y=None):  # the same with ordered means: one labelling only
    ordered = dist.TransformedDistribution(dist.Normal(0, 2).expand([2]), dist.transforms.OrderedTransform())
    mu = numpyro.sample("mu", ordered)
    sigma = numpyro.sample("sigma", dist.HalfNormal(2).expand([2]).to_event(1))
    theta = numpyro.sample("theta", dist.Beta(5, 5))
    mix = dist.MixtureSameFamily(dist.Categorical(jnp.stack([theta, 1 - theta])), dist.Normal(mu, sigma))
    with numpyro.plate("rows", y.shape[0]):
        numpyro.sample("y", mix, obs=y)


def three_components(y=None):  # weights on the simplex, whose unconstrained coordinates are not its entries
    weights = numpyro.sample("weights", dist.Dirichlet(jnp.ones(3)))
    mu = numpyro.sample("mu", dist.Normal(0, 5).expand([3]).to_event(1))
    s = numpyro.sample("s", dist.HalfNormal(2).expand([3]).to_event(1))
    with numpyro.plate("rows", y.shape[0]):
        numpyro.sample("y", dist.MixtureSameFamily(dist.Categorical(weights), dist.Normal(mu, s)), obs=y)


def exchangeable_prior(x, y=None):  # a regression whose two coefficients have one prior: no symmetry
    beta = numpyro.sample("beta", dist.Normal(0, 10).expand([2]).to_event(1))
    with numpyro.plate("rows", x.shape[0]):
        numpyro.sample("y", dist.Normal(beta[0] + beta[1] * x, 1.0), obs=y)


def network_of(w2_prior: dist.Distribution, unused: bool = False):
    """A regression on one hidden layer of three tanh units (units exchangeable, and each unit's sign, tanh
    being odd), its outgoing weights' prior ``w2_prior``; if ``unused``, beside it a site of three entries
    that no likelihood reads, whose prior is symmetric in each sign but not in their order."""

    def network(x, y=None):
        if unused:
            numpyro.sample("z", dist.Normal(0, jnp.array([1.0, 2.0, 3.0])).to_event(1))
        w1 = numpyro.sample("w1", dist.Normal(0, 1).expand([3]).to_event(1))
        b1 = numpyro.sample("b1", dist.Normal(0, 1).expand([3]).to_event(1))
        w2 = numpyro.sample("w2", w2_prior.expand([3]).to_event(1))
        b2 = numpyro.sample("b2", dist.Normal(0, 1))
        s = numpyro.sample("s", dist.HalfNormal(1))
        with numpyro.plate("rows", x.shape[0]):
            numpyro.sample("y", dist.Normal(jnp.tanh(x[:, None] * w1 + b1) @ w2 + b2, s), obs=y)

    return network


tanh_network = network_of(dist.Normal(0, 1))
shifted_prior = network_of(dist.Normal(1, 1))  # negating an outgoing weight changes its prior
signs_apart = network_of(dist.Normal(0, 1), unused=True)


def units_unlike(x, y=None):  # two tanh units, the second's output doubled: signs exchangeable, order not
    w1 = numpyro.sample("w1", dist.Normal(0, 1).expand([2]).to_event(1))
    w2 = numpyro.sample("w2", dist.Normal(0, 1).expand([2]).to_event(1))
    with numpyro.plate("rows", x.shape[0]):
        numpyro.sample("y", dist.Normal(jnp.tanh(x[:, None] * w1) @ (w2 * jnp.array([1.0, 2.0])), 1.0), obs=y)


def random_draws(model, **data) -> tuple[Any, np.ndarray]:
    """The model's weighted form and 50 random draws of its latent sites (only their supports matter here),
    in its flat unconstrained coordinates."""
    rng = np.random.default_rng(0)
    sites = {
        two_components: {"mu": (2,), "sigma": (2,), "theta": ()},
        ordered_components: {"mu": (2,), "sigma": (2,), "theta": ()},
        three_components: {"weights": (3,), "mu": (3,), "s": (3,)},
        exchangeable_prior: {"beta": (2,)},
        tanh_network: {"w1": (3,), "b1": (3,), "w2": (3,), "b2": (), "s": ()},
        units_unlike: {"w1": (2,), "w2": (2,)},
        shifted_prior: {"w1": (3,), "b1": (3,), "w2": (3,), "b2": (), "s": ()},
        signs_apart: {"z": (3,), "w1": (3,), "b1": (3,), "w2": (3,), "b2": (), "s": ()},
    }[model]
    draws = {name: rng.normal(size=(50, *shape)) for name, shape in sites.items()}
    draws |= {k: np.abs(draws[k]) for k in ("sigma", "s") if k in draws}
    if "theta" in draws:
        draws["theta"] = rng.uniform(size=50)
    if "weights" in draws:
        draws["weights"] = rng.dirichlet(np.ones(3), 50)
    if model is ordered_components:
        draws["mu"] = np.sort(draws["mu"], axis=1)
    release = prepare_release(model, draws, list(data))
    return release.weighted_model, np.asarray(release.theta)


Y = jnp.asarray(np.random.default_rng(0).normal(size=30))


@pytest.mark.parametrize(
    ("model", "data", "found"),
    [
        (two_components, {"y": Y}, Relabelling(("mu", "sigma"), ("theta",), "mu", 2)),
        (
            tanh_network,
            {"x": Y, "y": Y},
            Relabelling(("w1", "b1", "w2"), (), "w1", 3, ("w1", "b1", "w2"), "w1"),
        ),
        (three_components, {"y": Y}, Relabelling(("weights", "mu", "s"), (), "mu", 3)),
        (units_unlike, {"x": Y, "y": Y}, Relabelling((), (), "", 2, ("w1", "w2"), "w1")),
        (shifted_prior, {"x": Y, "y": Y}, Relabelling(("w1", "b1", "w2"), (), "w1", 3)),
        # z's signs are exchangeable but z does not swap: its signs, set by a unit's key, are left alone
        (
            signs_apart,
            {"x": Y, "y": Y},
            Relabelling(("w1", "b1", "w2"), (), "w1", 3, ("w1", "b1", "w2"), "w1"),
        ),
        (ordered_components, {"y": Y}, None),
        (exchangeable_prior, {"x": Y, "y": Y}, None),
    ],
)
def test_exchangeable_components_are_found_and_nothing_else(model, data, found):
    weighted, theta = random_draws(model, **data)
    relabelling = find_relabelling(weighted, data, theta)
    if found is None:
        assert relabelling is None
    else:  # its key, on random draws where every site's components are alike, could be any site
        assert set(relabelling.sites) == set(found.sites) and relabelling.flipped == found.flipped
        assert relabelling.components == found.components
        assert (relabelling.key in found.sites) if found.sites else not relabelling.key
        assert set(relabelling.negated) == set(found.negated)  # a mixture's means have no sign symmetry
        assert (relabelling.sign_key in found.negated) if found.negated else not relabelling.sign_key


def test_relabelled_draws_are_one_order_of_the_same_components():
    """Relabelling a draw and its components swapped gives the same draw, sorted by the key; the constrained
    log density (prior and every point's likelihood) is unchanged."""
    weighted, theta = random_draws(three_components, y=Y)
    data = {"y": Y}
    by_mu = find_relabelling(weighted, data, theta)._replace(key="mu")
    swapped = relabel(weighted, data, by_mu._replace(key="s"), theta)  # another order first
    once, again = (relabel(weighted, data, by_mu, t) for t in (theta, swapped))
    np.testing.assert_allclose(again, once, atol=1e-9)
    mu = np.stack([np.asarray(weighted.unravel(jnp.asarray(t))["mu"]) for t in once])
    assert np.all(np.diff(mu, axis=1) >= 0)

    def terms(flat: np.ndarray) -> np.ndarray:
        values = constrained_values(weighted, data, flat)
        return np.asarray(jax.vmap(lambda v: weighted.constrained_terms(v, data))(values))

    np.testing.assert_allclose(terms(once), terms(theta), rtol=1e-9)


def test_a_network_draw_with_units_negated_and_swapped_relabels_to_the_same_draw():
    """Negating some hidden units (their incoming weight, bias and outgoing weight) and swapping others
    gives, relabelled, the same draw as the original: its sign key positive, its units sorted by the key;
    the prior and every point's likelihood are those of the draw as given."""
    weighted, theta = random_draws(tanh_network, x=Y, y=Y)
    data = {"x": Y, "y": Y}
    relabelling = find_relabelling(weighted, data, theta)
    values = constrained_values(weighted, data, theta)
    sign = np.where(np.random.default_rng(1).uniform(size=(len(theta), 3)) < 0.5, -1.0, 1.0)
    moved = {k: v[:, ::-1] * sign if k in ("w1", "b1", "w2") else v for k, v in values.items()}
    other = np.asarray(weighted.to_unconstrained(moved, data))
    once, again = (relabel(weighted, data, relabelling, t) for t in (theta, other))
    np.testing.assert_allclose(again, once, atol=1e-9)
    canonical = constrained_values(weighted, data, once)
    assert np.all(canonical[relabelling.sign_key] >= 0)
    assert np.all(np.diff(canonical[relabelling.key], axis=1) >= 0)

    def terms(flat: np.ndarray) -> np.ndarray:
        return np.asarray(
            jax.vmap(lambda v: weighted.constrained_terms(v, data))(constrained_values(weighted, data, flat))
        )

    np.testing.assert_allclose(terms(once), terms(theta), rtol=1e-9)


def test_the_start_takes_the_mean_of_one_copy_of_a_network_whose_units_switch_sign():
    """Every draw one network with its units' signs and order changed at random: as drawn, the outgoing
    weights average to about nothing (a flat function, from which the attack's start predicted its
    responses); put in one copy (stages.one_copy), every draw holds the same network."""
    rng = np.random.default_rng(2)
    network = {
        "w1": np.array([2.0, -0.5, 1.0]),
        "b1": np.array([0.3, 0.1, -0.2]),
        "w2": np.array([1.0, 0.8, -0.6]),
    }
    sign, order = rng.choice([-1.0, 1.0], size=(200, 3)), np.argsort(rng.uniform(size=(200, 3)), axis=1)
    draws = {k: v[order] * sign for k, v in network.items()}
    draws |= {"b2": rng.normal(0, 0.1, 200), "s": rng.uniform(0.2, 0.21, 200)}
    release = prepare_release(tanh_network, draws, ["x", "y"])
    theta = jnp.asarray(release.theta)
    as_drawn = release.weighted_model.unravel(theta.mean(axis=0))["w2"]
    assert np.max(np.abs(np.asarray(as_drawn))) < 0.25
    one = jax.vmap(release.weighted_model.unravel)(one_copy(release.weighted_model, release.layout, theta))
    for name in network:
        np.testing.assert_allclose(one[name], np.broadcast_to(one[name][0], one[name].shape), atol=1e-12)
    regression = prepare_release(exchangeable_prior, {"beta": rng.normal(size=(50, 2))}, ["x", "y"])
    drawn = jnp.asarray(regression.theta)  # no symmetry: the draws as drawn
    assert one_copy(regression.weighted_model, regression.layout, drawn) is drawn
    pairs = sorted(zip(np.abs(one["w1"][0]), np.abs(one["w2"][0]), strict=True))
    expected = sorted(zip(np.abs(network["w1"]), np.abs(network["w2"]), strict=True))
    np.testing.assert_allclose(np.array(pairs), np.array(expected), atol=1e-12)


def release_of(draws: dict[str, np.ndarray]) -> AttackSetup:
    release = prepare_release(two_components, draws, ["y"])
    return attack_setup(release.weighted_model, jnp.asarray(release.theta))


def swapped(draws: dict[str, np.ndarray], rows: slice) -> dict[str, np.ndarray]:
    """The draws with their two components exchanged in ``rows``."""
    out = {k: np.array(v) for k, v in draws.items()}
    out["mu"][rows], out["sigma"][rows] = draws["mu"][rows, ::-1], draws["sigma"][rows, ::-1]
    out["theta"][rows] = 1 - draws["theta"][rows]
    return out


@pytest.fixture(scope="module")
def two_releases():
    """Two components well apart, 120 points. One release's chain switches labels halfway (its second half
    the same draws with the components swapped), as a chain crossing between the copies of a mode does;
    the other never switches, and holds only the copy that ordering by mu does not give."""
    rng = np.random.default_rng(4)
    y = np.where(rng.uniform(size=120) < 0.4, -2.0, 2.0) + rng.normal(size=120)
    draws = nuts(two_components, y=y)
    increasing = draws["mu"][:, 0] < draws["mu"][:, 1]
    assert increasing.all() or not increasing.any()  # the chain kept one labelling
    half = len(draws["theta"]) // 2
    stuck = swapped(draws, slice(None)) if increasing.all() else draws
    return release_of(swapped(draws, slice(half, None))), release_of(stuck), jnp.asarray(y)


def test_a_release_that_switches_labels_is_reproduced_by_its_data_and_not_by_half_of_it(two_releases):
    switching, stuck, y = two_releases
    truth = round_trip(switching, {"y": y}, np.ones(120))
    assert truth.reproduces, truth.reasons
    assert "compared in the order of mu" in truth.summary()
    as_labelled = round_trip(switching, {"y": y}, np.ones(120), SelfCheckConfig(relabel=False))
    assert not as_labelled.reproduces  # the check's chain keeps one labelling, the release has both
    assert not round_trip(switching, {"y": y}, np.full(120, 0.5)).reproduces
    # ordered, the stuck release lies outside its own range: the region holds both
    assert round_trip(stuck, {"y": y}, np.ones(120)).reproduces
