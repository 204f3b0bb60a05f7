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


def _flat_lm(name: str, columns: tuple[jnp.ndarray, ...], y: jnp.ndarray | None) -> None:
    """y ~ Normal(beta · [1, columns...], sigma); Stan states no prior for ``beta`` nor ``sigma``."""
    beta = numpyro.sample("beta", _flat(len(columns) + 1))
    sigma = numpyro.sample("sigma", _flat_positive())
    _regression(name, jnp.stack([jnp.ones_like(columns[0]), *columns], -1), beta, sigma, y)


def _log(x: jnp.ndarray | None) -> jnp.ndarray | None:
    return None if x is None else jnp.log(x)


def logearn_height(height, earn=None):
    _flat_lm("log_earn", (height,), _log(earn))


def log10earn_height(height, earn=None):
    _flat_lm("log10_earn", (height,), None if earn is None else jnp.log10(earn))


def logearn_interaction(height, male, earn=None):
    _flat_lm("log_earn", (height, male, height * male), _log(earn))


def logearn_interaction_z(height, male, earn=None, *, height_mean, height_sd):
    """Stan standardises height by the data's own mean and sd; here they are known constants (fixed)."""
    z_height = (height - height_mean) / height_sd
    _flat_lm("log_earn", (z_height, male, z_height * male), _log(earn))


def logearn_logheight_male(height, male, earn=None):
    _flat_lm("log_earn", (jnp.log(height), male), _log(earn))


def kidscore_interaction_c(mom_hs, mom_iq, kid_score=None, *, mom_hs_mean, mom_iq_mean):
    """Stan centres the predictors at the data's own means; here they are known constants (fixed)."""
    c_mom_hs, c_mom_iq = mom_hs - mom_hs_mean, mom_iq - mom_iq_mean
    _flat_lm("kid_score", (c_mom_hs, c_mom_iq, c_mom_hs * c_mom_iq), kid_score)


def kidscore_interaction_c2(mom_hs, mom_iq, kid_score=None):
    c2_mom_hs, c2_mom_iq = mom_hs - 0.5, mom_iq - 100.0
    _flat_lm("kid_score", (c2_mom_hs, c2_mom_iq, c2_mom_hs * c2_mom_iq), kid_score)


def kidscore_mom_work(work2, work3, work4, kid_score=None):
    _flat_lm("kid_score", (work2, work3, work4), kid_score)


def logmesquite(diam1, diam2, canopy_height, total_height, density, group, weight=None):
    columns = (diam1, diam2, canopy_height, total_height, density)
    _flat_lm("log_weight", (*(jnp.log(c) for c in columns), group), _log(weight))


def logmesquite_logva(diam1, diam2, canopy_height, group, weight=None):
    log_canopy_area = jnp.log(diam1 * diam2)
    log_canopy_volume = jnp.log(diam1 * diam2 * canopy_height)
    _flat_lm("log_weight", (log_canopy_volume, log_canopy_area, group), _log(weight))


def logmesquite_logvas(diam1, diam2, canopy_height, total_height, density, group, weight=None):
    log_canopy_volume = jnp.log(diam1 * diam2 * canopy_height)
    log_canopy_area = jnp.log(diam1 * diam2)
    log_canopy_shape = jnp.log(diam1 / diam2)
    columns = (log_canopy_volume, log_canopy_area, log_canopy_shape, jnp.log(total_height), jnp.log(density))
    _flat_lm("log_weight", (*columns, group), _log(weight))


def mesquite(diam1, diam2, canopy_height, total_height, density, group, weight=None):
    _flat_lm("weight", (diam1, diam2, canopy_height, total_height, density, group), weight)


def diamonds(X, Y=None, *, means_X):
    """brms: ``X`` without its intercept column, centred at the data's column means ``means_X`` (fixed)."""
    b = numpyro.sample("b", dist.Normal(0.0, 1.0).expand([X.shape[-1]]).to_event(1))
    intercept = numpyro.sample("Intercept", dist.StudentT(3.0, 8.0, 10.0))
    sigma = numpyro.sample("sigma", dist.TruncatedDistribution(dist.StudentT(3.0, 0.0, 10.0), low=0.0))
    with numpyro.plate("data", X.shape[0]):
        numpyro.sample("Y", dist.Normal(intercept + (X - means_X) @ b, sigma), obs=Y)


def ark_windows(window):
    """AR(K) over the series' (K+1)-windows (y[t-K], ..., y[t]): Stan's likelihood has one term per window."""
    k = window.shape[-1] - 1
    alpha = numpyro.sample("alpha", dist.Normal(0.0, 10.0))
    beta = numpyro.sample("beta", dist.Normal(0.0, 10.0).expand([k]).to_event(1))
    sigma = numpyro.sample("sigma", dist.HalfCauchy(2.5))
    lags = window[..., k - 1 :: -1]  # y[t-1], ..., y[t-K], as beta[1], ..., beta[K] take them
    with numpyro.plate("data", window.shape[0]):
        numpyro.sample("y", dist.Normal(alpha + lags @ beta, sigma), obs=window[..., k])
