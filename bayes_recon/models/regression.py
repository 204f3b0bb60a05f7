"""NumPyro translations of the posteriordb Gaussian linear regressions.

Each model takes its data columns as keyword arguments (the data-point axis first) and keeps
Stan's priors: an unstated prior is flat (``ImproperUniform``), ``real<lower=0>`` with a
``normal``/``cauchy`` statement is the half-distribution. Stan's ``transformed data`` (logs,
interactions, dummies) happens inside the model, so the free columns are the raw data.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from numpyro.distributions import constraints


def _flat(size: int | None = None) -> dist.Distribution:
    if size is None:
        return dist.ImproperUniform(constraints.real, (), ())
    return dist.ImproperUniform(constraints.real_vector, (), (size,))


def _flat_positive() -> dist.Distribution:
    return dist.ImproperUniform(constraints.positive, (), ())


def _regression(name: str, design: jnp.ndarray, beta: jnp.ndarray, sigma: jnp.ndarray, y: jnp.ndarray | None):
    with numpyro.plate("data", design.shape[0]):
        numpyro.sample(name, dist.Normal(design @ beta, sigma), obs=y)


def kidscore_momiq(mom_iq, kid_score=None):
    beta = numpyro.sample("beta", _flat(2))
    sigma = numpyro.sample("sigma", dist.HalfCauchy(2.5))
    _regression("kid_score", jnp.stack([jnp.ones_like(mom_iq), mom_iq], -1), beta, sigma, kid_score)


def kidscore_momhs(mom_hs, kid_score=None):
    beta = numpyro.sample("beta", _flat(2))
    sigma = numpyro.sample("sigma", dist.HalfCauchy(2.5))
    _regression("kid_score", jnp.stack([jnp.ones_like(mom_hs), mom_hs], -1), beta, sigma, kid_score)


def kidscore_momhsiq(mom_hs, mom_iq, kid_score=None):
    beta = numpyro.sample("beta", _flat(3))
    sigma = numpyro.sample("sigma", dist.HalfCauchy(2.5))
    design = jnp.stack([jnp.ones_like(mom_hs), mom_hs, mom_iq], -1)
    _regression("kid_score", design, beta, sigma, kid_score)


def kidscore_interaction(mom_hs, mom_iq, kid_score=None):
    beta = numpyro.sample("beta", _flat(4))
    sigma = numpyro.sample("sigma", dist.HalfCauchy(2.5))
    design = jnp.stack([jnp.ones_like(mom_hs), mom_hs, mom_iq, mom_hs * mom_iq], -1)
    _regression("kid_score", design, beta, sigma, kid_score)


def earn_height(height, earn=None):
    beta = numpyro.sample("beta", _flat(2))
    sigma = numpyro.sample("sigma", _flat_positive())
    _regression("earn", jnp.stack([jnp.ones_like(height), height], -1), beta, sigma, earn)


def kilpisjarvi(x, y=None, *, pmualpha, psalpha, pmubeta, psbeta):
    alpha = numpyro.sample("alpha", dist.Normal(pmualpha, psalpha))
    beta = numpyro.sample("beta", dist.Normal(pmubeta, psbeta))
    sigma = numpyro.sample("sigma", _flat_positive())
    _regression("y", jnp.stack([jnp.ones_like(x), x], -1), jnp.stack([alpha, beta]), sigma, y)


def logmesquite_logvolume(diam1, diam2, canopy_height, weight=None):
    beta = numpyro.sample("beta", _flat(2))
    sigma = numpyro.sample("sigma", _flat_positive())
    log_volume = jnp.log(diam1 * diam2 * canopy_height)
    log_weight = None if weight is None else jnp.log(weight)
    _regression("log_weight", jnp.stack([jnp.ones_like(log_volume), log_volume], -1), beta, sigma, log_weight)


def blr(X, y=None):
    beta = numpyro.sample("beta", dist.Normal(0.0, 10.0).expand([X.shape[-1]]).to_event(1))
    sigma = numpyro.sample("sigma", dist.HalfNormal(10.0))
    _regression("y", X, beta, sigma, y)


NES_COVARIATES = ("real_ideo", "race_adj", "age30_44", "age45_64", "age65up", "educ1", "gender", "income")


def nes(real_ideo, race_adj, age30_44, age45_64, age65up, educ1, gender, income, partyid7=None):
    beta = numpyro.sample("beta", _flat(9))
    sigma = numpyro.sample("sigma", _flat_positive())
    columns = (real_ideo, race_adj, age30_44, age45_64, age65up, educ1, gender, income)
    design = jnp.stack([jnp.ones_like(real_ideo), *columns], -1)
    _regression("partyid7", design, beta, sigma, partyid7)
