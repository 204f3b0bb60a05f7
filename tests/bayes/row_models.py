"""Row-factorising models, a NUTS sampler and the attack's setup on draws, which the tests share (imported
by name: pytest puts this folder on ``sys.path``)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.infer import MCMC, NUTS

from bayes_recon import pseudo
from bayes_recon.divergence import Coordinates
from bayes_recon.reconstruct import AttackSetup
from bayes_recon.weighting import WeightedModel


def poisson_regression(x, y=None):
    a = numpyro.sample("a", dist.Normal(0, 5))
    b = numpyro.sample("b", dist.Normal(0, 5))
    with numpyro.plate("rows", x.shape[0]):
        numpyro.sample("y", dist.Poisson(jnp.exp(a + b * x)), obs=y)


def logistic_regression(x, y=None):
    a = numpyro.sample("a", dist.Normal(0, 5))
    b = numpyro.sample("b", dist.Normal(0, 5))
    with numpyro.plate("rows", x.shape[0]):
        numpyro.sample("y", dist.Bernoulli(logits=a + b * x), obs=y)


def nuts(model, samples: int = 600, **data) -> dict[str, np.ndarray]:
    mcmc = MCMC(NUTS(model), num_warmup=300, num_samples=samples, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), **{k: jnp.asarray(v) for k, v in data.items()})
    return {k: np.asarray(v) for k, v in mcmc.get_samples().items()}


def attack_setup(
    weighted: WeightedModel, theta: jax.Array, layout: pseudo.Layout | None = None
) -> AttackSetup:
    """The attack's setup on unconstrained draws ``theta``, standardised as the attack does."""
    coordinates = Coordinates.standardised(theta)
    return AttackSetup(weighted, layout, coordinates, coordinates.to_attack(theta))
