"""The attack's objective: the information penalty leaves real data alone and charges an impossible point."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from bayes_recon.divergence import Coordinates
from bayes_recon.draws import as_draws
from bayes_recon.models import lookup
from bayes_recon.objective import INFORMATION_BOUND, information_penalty, point_information
from bayes_recon.posteriordb import load_posterior
from bayes_recon.weighting import WeightedModel

KIDIQ = "kidiq-kidscore_momiq"


def test_information_penalty_is_zero_for_the_true_data_and_charges_a_point_far_out():
    """kidiq's children each carry well under INFORMATION_BOUND × d; one mother's IQ × 1000 does not."""
    entry, posterior = lookup(KIDIQ), load_posterior(KIDIQ)
    data = {k: jnp.asarray(v) for k, v in entry.model_data(posterior.data).items() if k in entry.free}
    draws = {k: jnp.asarray(v)[:300] for k, v in as_draws(posterior.draws).items()}
    model = WeightedModel(entry.model, entry.free, {}, {k: v[0] for k, v in draws.items()})
    theta = jnp.asarray(model.to_unconstrained(draws, data))
    coordinates = Coordinates.standardised(theta)
    z = coordinates.to_attack(theta)
    dim = z.shape[1]

    information = np.asarray(point_information(model, coordinates, z, data))
    assert information.shape == (len(data["mom_iq"]),)
    assert information.max() < INFORMATION_BOUND * dim
    assert float(information_penalty(model, coordinates, z, data)) == 0.0

    far = {**data, "mom_iq": data["mom_iq"].at[0].multiply(1000.0)}
    assert float(point_information(model, coordinates, z, far)[0]) > INFORMATION_BOUND * dim
    assert float(information_penalty(model, coordinates, z, far)) > 0.0
