"""The attack's start and stages: the responses it draws from the model's predictive before optimising."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

from bayes_recon import pseudo
from bayes_recon.models import lookup
from bayes_recon.stages import response_predictor

KIDIQ = "kidiq-kidscore_momiq"


def test_response_predictor_finds_the_observed_column_and_predicts_the_regression_line():
    entry = lookup(KIDIQ)
    layout = pseudo.Layout({"mom_iq": (), "kid_score": ()}, entry.support)
    params = {"beta": jnp.array([26.0, 0.6]), "sigma": jnp.asarray(18.0)}
    responses, predict = response_predictor(entry.model, layout, {}, params)
    assert responses == {"kid_score"}
    mom_iq = jnp.array([80.0, 100.0, 120.0])
    mean = predict({"mom_iq": mom_iq}, jnp.zeros((3, 1)))["kid_score"]
    np.testing.assert_allclose(mean, 26.0 + 0.6 * mom_iq, rtol=1e-9)
    high = predict({"mom_iq": mom_iq}, jnp.ones((3, 1)))["kid_score"]
    np.testing.assert_allclose(high - mean, 18.0, rtol=1e-6)  # noise maps through the quantile function


def test_a_count_response_is_predicted_from_the_model():
    """A count's responses follow the covariates from the start (before, counts had no quantile and
    stayed in the cloud, independent of the covariates: a negative binomial regression's cloud then
    collapsed its covariate to one value)."""

    def model(x, y=None):
        b = numpyro.sample("b", dist.Normal(0.0, 1.0))
        with numpyro.plate("data", x.shape[0]):
            numpyro.sample("y", dist.NegativeBinomial2(jnp.exp(b * x), 5.0), obs=y)

    layout = pseudo.Layout({"x": (), "y": ()}, {"y": numpyro.distributions.constraints.positive})
    responses, predict = response_predictor(model, layout, {}, {"b": jnp.asarray(0.5)})
    assert responses == {"y"}
    x = jnp.array([-2.0, 0.0, 2.0])
    median = predict({"x": x}, jnp.zeros((3, 1)))["y"]
    assert np.all(np.diff(median) > 0)  # rises with the covariate, like the count's mean exp(b x)


def test_the_grid_refines_a_scale_between_its_points():
    """A sharp valley at log-scale 6.6, between the coarse grid's 6 and 8: refined by ±1 only, the grid
    stopped at 7; halving the refinement to ±¼ lands within ⅛ of it."""

    def objective(cloud: pseudo.Cloud) -> jnp.ndarray:
        gain = 1.0 + jnp.exp(-(((cloud.log_diag[0, 0] - 6.6) / 0.3) ** 2))
        mass = jnp.exp(cloud.log_mass[0])
        return mass**2 - 2.0 * mass * gain  # quadratic in the mass, as the score-matching objective is

    layout = pseudo.Layout({"x": ()}, {})
    found = pseudo.search_scales(objective, pseudo.initial(5, layout).cloud, (0,))
    assert abs(float(found.log_diag[0, 0]) - 6.6) <= 0.125
