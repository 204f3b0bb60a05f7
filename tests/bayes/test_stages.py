"""The attack's start and stages: the responses it draws from the model's predictive before optimising."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

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
