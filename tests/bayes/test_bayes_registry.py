"""The NumPyro translations in the registry against posteriordb's reference draws.

The check is the Stein identity: for draws θ_s from the true posterior p, E_p[∇log p(θ)] = 0.
If a translation has the posterior right (priors, likelihood, the data mapping, the
unconstrained parametrisation with its Jacobian), the score of our unconstrained log density,
averaged over the reference draws, is zero within Monte-Carlo error; a wrong translation moves
the mean far from zero.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro import handlers

from bayes_recon.draws import check_draws, from_stan_names
from bayes_recon.models import OUT_OF_SCOPE, REGISTRY, lookup
from bayes_recon.models import regression as m
from bayes_recon.supports import column_supports, observed_columns
from bayes_recon.weighting import WeightedModel
from recon_core.errors import ReconError

BATCHES = 20
BOUND = 5.0  # Monte-Carlo standard errors


def _case(load_shared, name: str):
    entry = REGISTRY[name]
    post = load_shared(name)
    data = entry.model_data(post.data)
    draws = from_stan_names(post.draws)
    return entry, data, draws


def _weighted_model(entry, model, data, draws) -> tuple[WeightedModel, dict, np.ndarray]:
    free = {k: jnp.asarray(data[k]) for k in entry.free}
    fixed = {k: jnp.asarray(data[k]) for k in entry.fixed}
    example = {k: jnp.asarray(v[0]) for k, v in draws.items()}
    return WeightedModel(model, entry.free, fixed, example), free, np.ones(len(data[entry.free[0]]))


def stein_z(entry, model, data, draws) -> np.ndarray:
    """Mean of the unconstrained score over the draws, in batch-means standard errors, per coordinate.

    The reference draws are chains concatenated; consecutive batches of S/20 draws absorb the
    autocorrelation crudely (each batch lies within one chain for posteriordb's 10 x 1000 draws).
    """
    wm, free, weights = _weighted_model(entry, model, data, draws)
    theta = jnp.asarray(wm.to_unconstrained(draws, free))
    score = jax.jit(jax.vmap(jax.grad(wm.log_density), (0, None, None)))
    g = np.asarray(score(theta, free, jnp.asarray(weights)))
    assert np.all(np.isfinite(g)), f"{entry.posterior}: non-finite score at some reference draws"
    per_batch = len(g) // BATCHES
    batch_means = g[: BATCHES * per_batch].reshape(BATCHES, per_batch, -1).mean(axis=1)
    se = batch_means.std(axis=0, ddof=1) / np.sqrt(BATCHES)
    return g[: BATCHES * per_batch].mean(axis=0) / se


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_translation_satisfies_stein_identity(load_shared, name):
    entry, data, draws = _case(load_shared, name)
    assert len(next(iter(draws.values()))) >= 20 * BATCHES
    z = stein_z(entry, entry.model, data, draws)
    assert np.all(np.abs(z) <= BOUND), (
        f"{name}: the score of the translated posterior has mean {np.round(z, 2)} standard errors "
        f"from zero under the reference draws (bound {BOUND}); the NumPyro model is not Stan's posterior"
    )


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_translation_latent_sites_match_stan_parameters(load_shared, name):
    """The model's latent sites are exactly Stan's parameters, with the same shapes."""
    entry, data, draws = _case(load_shared, name)
    first = {k: jnp.asarray(v[0]) for k, v in draws.items()}
    kwargs = {k: jnp.asarray(v) for k, v in data.items()}
    trace = handlers.trace(handlers.substitute(entry.model, first)).get_trace(**kwargs)
    latent = {k: s["value"].shape for k, s in trace.items() if s["type"] == "sample" and not s["is_observed"]}
    assert set(latent) == set(draws)
    checked = check_draws(draws, latent)
    assert set(checked) == set(latent)


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_data_lie_in_declared_support(load_shared, name):
    """Each free column lies in its support: the declared one, else (a response) its distribution's."""
    entry, data, _ = _case(load_shared, name)
    shapes = {k: data[k].shape[1:] for k in entry.free}
    fixed = {k: jnp.asarray(data[k]) for k in entry.fixed}
    supports = column_supports(entry.model, shapes, fixed, entry.support)
    undeclared = set(entry.free) - set(entry.support)
    assert undeclared <= set(observed_columns(entry.model, shapes, fixed)), "a covariate without support"
    for column in entry.free:
        assert bool(np.all(supports[column](jnp.asarray(data[column])))), (
            f"{name}: the data column {column!r} leaves its support {supports[column]}"
        )


LINEAR = sorted(name for name, entry in REGISTRY.items() if entry.linear is not None)


@pytest.mark.parametrize("name", LINEAR)
def test_linear_design_is_the_models_likelihood(load_shared, name):
    """The ``LinearGaussian`` description (used by the oracle) gives the model's own log-likelihood."""
    entry, data, draws = _case(load_shared, name)
    wm, free, _ = _weighted_model(entry, entry.model, data, draws)
    spec = entry.linear_given(data)  # a design centred at the data's means reads them from the fixed columns
    x, y = spec.design({k: data[k] for k in entry.free})
    rows = np.arange(0, len(next(iter(draws.values()))), 997)[:8]
    subset = {k: v[rows] for k, v in draws.items()}
    theta = wm.to_unconstrained(subset, free)
    for i, row in enumerate(rows):
        params = {k: v[row] for k, v in draws.items()}
        beta = np.asarray(spec.coefficients(params))
        sigma = float(params[spec.sigma])
        expected = -0.5 * np.log(2 * np.pi) - np.log(sigma) - 0.5 * ((y - x @ beta) / sigma) ** 2
        got = np.asarray(wm.loglik_per_point(jnp.asarray(theta[i]), free))
        np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-8)


# ---- power: deliberately wrong translations must break the bound ---------------------------------


@pytest.mark.parametrize("name", ["kidiq-kidscore_momiq", "sblrc-blr", "nes2000-nes"])
def test_stein_check_detects_a_shifted_response(load_shared, name):
    entry, data, draws = _case(load_shared, name)
    response = entry.free[-1]
    wrong = dict(data)
    wrong[response] = data[response] + data[response].std()
    z = stein_z(entry, entry.model, wrong, draws)
    assert np.max(np.abs(z)) > 4 * BOUND, f"shifting {response} by one sd went unnoticed: {np.round(z, 1)}"


CENTRED = (
    "diamonds-diamonds",
    "earnings-logearn_interaction_z",
    "kidiq_with_mom_work-kidscore_interaction_c",
)


@pytest.mark.parametrize("name", CENTRED)
def test_stein_check_detects_a_missing_centring(load_shared, name):
    """Stan centres (or standardises) by the data's own means: the fixed constants must be those means."""
    entry, data, draws = _case(load_shared, name)
    wrong = dict(data)
    for constant in entry.fixed:
        wrong[constant] = np.full_like(data[constant], 1.0 if constant.endswith("_sd") else 0.0)
    z = stein_z(entry, entry.model, wrong, draws)
    assert np.max(np.abs(z)) > 4 * BOUND, f"dropping {entry.fixed} went unnoticed: {np.round(z, 1)}"


def test_stein_check_detects_reversed_lags(load_shared):
    """AR(K) windows with the lags in the wrong order (beta[1] on y[t-K]) are caught."""
    entry, data, draws = _case(load_shared, "arK-arK")
    window = data["window"]
    wrong = {"window": np.concatenate([window[:, -2::-1], window[:, -1:]], axis=1)}
    z = stein_z(entry, entry.model, wrong, draws)
    assert np.max(np.abs(z)) > 4 * BOUND


def test_stein_check_detects_swapped_covariates(load_shared):
    """A column-order slip (educ1 and gender swapped in the NES design) is caught."""
    entry, data, draws = _case(load_shared, "nes2000-nes")
    wrong = dict(data)
    wrong["educ1"], wrong["gender"] = data["gender"], data["educ1"]
    z = stein_z(entry, entry.model, wrong, draws)
    assert np.max(np.abs(z)) > 4 * BOUND


def test_stein_check_detects_a_wrong_noise_model(load_shared):
    """A Student-t likelihood in place of Stan's normal (same location and scale) is caught."""
    entry, data, draws = _case(load_shared, "kidiq-kidscore_momiq")

    def student(mom_iq, kid_score=None):
        beta = numpyro.sample("beta", m._flat(2))
        sigma = numpyro.sample("sigma", dist.HalfCauchy(2.5))
        with numpyro.plate("data", mom_iq.shape[0]):
            numpyro.sample("kid_score", dist.StudentT(4.0, beta[0] + beta[1] * mom_iq, sigma), obs=kid_score)

    z = stein_z(entry, student, data, draws)
    assert np.max(np.abs(z)) > 4 * BOUND


# ---- lookup ---------------------------------------------------------------------------------------


def test_lookup_returns_registered_entries():
    for name, entry in REGISTRY.items():
        assert lookup(name) is entry


def test_eight_schools_is_out_of_scope():
    with pytest.raises(ReconError) as info:
        lookup("eight_schools-eight_schools_noncentered")
    message = str(info.value)
    assert "out of scope" in message
    assert "latent" in message and "each data point has its own parameter" in message


def test_every_posterior_of_the_database_is_registered_or_out_of_scope_with_a_reason(shared_db):
    names = {p.stem for p in (shared_db / "posteriors").glob("*.json")}
    drawn = {
        p.name.removesuffix(".json.zip") for p in (shared_db / "reference_posteriors/draws/draws").iterdir()
    }
    assert not set(REGISTRY) & set(OUT_OF_SCOPE)
    assert names - set(REGISTRY) - set(OUT_OF_SCOPE) == set(), (
        "posteriors neither registered nor out of scope"
    )
    assert set(REGISTRY) | set(OUT_OF_SCOPE) <= names, "entries naming no posterior of the database"
    assert set(REGISTRY) <= drawn
    for name, reason in OUT_OF_SCOPE.items():
        assert reason.strip(), name
        assert reason.startswith("no reference draws") == (name not in drawn), (name, reason)


def test_lookup_unknown_name_suggests_close_names():
    with pytest.raises(ReconError, match=r"Did you mean .*kidiq-kidscore_momiq"):
        lookup("kidiq-kidscore_momiqq")


def test_model_data_names_missing_columns():
    with pytest.raises(ReconError, match="lacks"):
        REGISTRY["kidiq-kidscore_momiq"].model_data({"mom_iq": np.ones(3)})
