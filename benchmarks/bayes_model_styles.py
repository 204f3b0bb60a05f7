"""Models as users write them, through the public contract only.

The synthetic suite (``bayes_general.py``) writes every family one way. A user's model differs in how it
is written more than in its family: a design matrix named in a list and counted with ``X.shape[-1]``
(with its column of ones among the free columns, or not),
Stan's ``N`` passed as data, no plate (a batch of rows, or the rows as one event, ``.to_event(1)``), a
``numpyro.factor`` per row (and a prior as a factor), one factor
of the rows' sum (Stan's vectorised ``target +=``), trials
given per row (the same on every row, or varying), a Student-t whose degrees of freedom are sampled, a
mixture without covariates, several classes, two responses per row (apart, or correlated in one
multivariate normal), a mixture whose weights are a simplex, a regression of the noise's scale, an
intercept per group indexed by the row's group (the index free, on its whole numbers), a deterministic
site in the plate, a beta regression of a proportion, Weibull survival times, an overdispersed count of
correct answers (beta-binomial, whose derivatives go through the log-beta function), a hurdle Poisson
written as Stan writes it, one ``numpyro.factor`` per row (its count seen by no observed site), a network
of three tanh units (whose order and signs the self-check sets, :mod:`bayes_recon.relabel`), shares of
a whole (a Dirichlet response on the simplex), a regression on a composition's log-ratios (a covariate on
the simplex, declared by ``support=``). Five
cases take their data from posteriordb data sets that have no reference draws there (wells, GLM_Poisson,
GLM_Binomial, low_dim_gauss_mix_collapse; ``POSTERIOR_DB_PATH``, else ../shared's copy); the others
simulate their data at known parameters (fixed seeds). Every case samples its posterior with NUTS (500
warm-up steps, 1,000 draws; data and draws cached as ``.npz`` under ``results/bayes_styles_cache/``,
delete a file to sample it again) and calls only ``br.reconstruct(model, draws, free=..., fixed=...,
support=..., n_points=M, seed=s)``, then reads ``.measure.points`` and ``.measure.weights``. It reports:

* the recovered N (Σ w) against the true N, with its standard error (``r.standard_errors``); where
  trials or an exposure differ by row, N counts their units and the truth is scored as those units
  (``modelcheck.rows_as_units``), as the attack weighs them;
* the truth bar: J_attack ≤ J_truth + 3 Monte Carlo se of the paired per-draw difference, J_truth the
  objective of the true data with all weights 1 on the same draws (as in ``bayes_general.py``);
* the response's weighted mean and sd against the data's (a vector response's first entry), and how
  far the mean is off, in the recovered sd, against twice its standard error: off by more, the standard
  errors said the release determines what it does not;
* the self-check's verdict, the unseen mass, whether the attack converged, and the wall time
  (``Reconstruction.seconds``, compilation included), all in one process.

A case whose attack raises is a row with its error. Run (from the repository root):
    .venv/bin/python benchmarks/bayes_model_styles.py --json results/bayes_model_styles.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
import traceback
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.distributions import constraints
from numpyro.infer import MCMC, NUTS

import bayes_recon as br
from bayes_recon.modelcheck import rows_as_units

br.enable_float64()

CACHE = Path(__file__).resolve().parents[1] / "results" / "bayes_styles_cache"
POSTERIORDB = Path(__file__).resolve().parents[2] / "shared" / "posteriordb" / "posterior_database"
WARMUP, SAMPLES = 500, 1000
TRUTH_SE = 3.0


def lognormal(x, y=None):
    a = numpyro.sample("a", dist.Normal(0, 10))
    b = numpyro.sample("b", dist.Normal(0, 10))
    s = numpyro.sample("s", dist.HalfNormal(2))
    with numpyro.plate("rows", x.shape[0]):
        numpyro.sample("y", dist.LogNormal(a + b * x, s), obs=y)


def ordered_logistic(x, y=None):
    b = numpyro.sample("b", dist.Normal(0, 5))
    c = numpyro.sample(
        "c", dist.TransformedDistribution(dist.Normal(0, 5).expand([3]), dist.transforms.OrderedTransform())
    )
    with numpyro.plate("rows", x.shape[0]):
        numpyro.sample("y", dist.OrderedLogistic(b * x, c), obs=y)


def zero_inflated_poisson(x, y=None):
    a = numpyro.sample("a", dist.Normal(0, 5))
    b = numpyro.sample("b", dist.Normal(0, 5))
    g = numpyro.sample("g", dist.Beta(1, 1))
    with numpyro.plate("rows", x.shape[0]):
        numpyro.sample("y", dist.ZeroInflatedPoisson(g, jnp.exp(a + b * x)), obs=y)


def logistic_scaled(X, y=None):
    a = numpyro.sample("a", dist.Normal(0, 5))
    b = numpyro.sample("b", dist.Normal(0, 5).expand([2]).to_event(1))
    with numpyro.plate("rows", X.shape[0]):
        numpyro.sample("y", dist.Bernoulli(logits=a + X @ b), obs=y)


def mixture_no_covariates(y=None):  # posteriordb's low_dim_gauss_mix, as NumPyro writes it
    mu = numpyro.sample(
        "mu", dist.TransformedDistribution(dist.Normal(0, 2).expand([2]), dist.transforms.OrderedTransform())
    )
    sigma = numpyro.sample("sigma", dist.HalfNormal(2).expand([2]).to_event(1))
    theta = numpyro.sample("theta", dist.Beta(5, 5))
    components = dist.Categorical(probs=jnp.stack([theta, 1 - theta]))
    with numpyro.plate("rows", y.shape[0]):
        numpyro.sample("y", dist.MixtureSameFamily(components, dist.Normal(mu, sigma)), obs=y)


def log_mix(theta, mu, sigma, y):  # Stan's log_mix of two normals, one term per row
    first = jnp.log(theta) + dist.Normal(mu[0], sigma[0]).log_prob(y)
    return jnp.logaddexp(first, jnp.log1p(-theta) + dist.Normal(mu[1], sigma[1]).log_prob(y))


def mixture_factor(y=None):  # the same, as Stan writes it: log_mix in a factor per row
    mu = numpyro.sample(
        "mu", dist.TransformedDistribution(dist.Normal(0, 2).expand([2]), dist.transforms.OrderedTransform())
    )
    sigma = numpyro.sample("sigma", dist.HalfNormal(2).expand([2]).to_event(1))
    theta = numpyro.sample("theta", dist.Beta(5, 5))
    with numpyro.plate("rows", y.shape[0]):
        numpyro.factor("loglik", log_mix(theta, mu, sigma, y))


def mixture_prior_factor(y=None):  # Stan's `ordered[2] mu; mu ~ normal(0, 2);`: the prior as a factor
    mu = numpyro.sample("mu", dist.ImproperUniform(constraints.ordered_vector, (), (2,)))
    numpyro.factor("mu_prior", dist.Normal(0, 2).log_prob(mu).sum())
    sigma = numpyro.sample("sigma", dist.HalfNormal(2).expand([2]).to_event(1))
    theta = numpyro.sample("theta", dist.Beta(5, 5))
    with numpyro.plate("rows", y.shape[0]):
        numpyro.factor("loglik", log_mix(theta, mu, sigma, y))


def regression_counted(X, y=None):  # coefficients sized by X.shape[-1], X named in a list
    beta = numpyro.sample("beta", dist.Normal(0, 10).expand([X.shape[-1]]).to_event(1))
    sigma = numpyro.sample("sigma", dist.HalfNormal(10))
    with numpyro.plate("rows", X.shape[0]):
        numpyro.sample("y", dist.Normal(X @ beta, sigma), obs=y)


def stan_data_block(N, K, X, y=None):  # Stan's data block: N and K passed as data, plate("rows", N)
    alpha = numpyro.sample("alpha", dist.Normal(0, 10))
    beta = numpyro.sample("beta", dist.Normal(0, 10).expand([K]).to_event(1))
    with numpyro.plate("rows", N):
        numpyro.sample("y", dist.Poisson(jnp.exp(alpha + X @ beta)), obs=y)


def stan_vectorised(N, K, X, y=None):  # Stan's target += normal_lpdf(y | alpha + X * beta, sigma): one factor
    alpha = numpyro.sample("alpha", dist.Normal(0, 10))
    beta = numpyro.sample("beta", dist.Normal(0, 10).expand([K]).to_event(1))
    sigma = numpyro.sample("sigma", dist.HalfNormal(5))
    numpyro.factor("target", dist.Normal(alpha + X @ beta, sigma).log_prob(y).sum())


def no_plate(x, y=None):  # a batch of rows without a plate
    a = numpyro.sample("a", dist.Normal(0, 10))
    b = numpyro.sample("b", dist.Normal(0, 10))
    s = numpyro.sample("s", dist.HalfNormal(5))
    numpyro.sample("y", dist.Normal(a + b * x, s), obs=y)


def binomial_trials(x, n, y=None):  # trials given per row
    a = numpyro.sample("a", dist.Normal(0, 5))
    b = numpyro.sample("b", dist.Normal(0, 5))
    with numpyro.plate("rows", x.shape[0]):
        numpyro.sample("y", dist.Binomial(n, logits=a + b * x), obs=y)


def beta_binomial_scores(x, n, y=None):  # correct answers out of n questions, overdispersed
    a = numpyro.sample("a", dist.Normal(0, 3))
    b = numpyro.sample("b", dist.Normal(0, 3))
    kappa = numpyro.sample("kappa", dist.LogNormal(2.0, 1.0))
    with numpyro.plate("rows", x.shape[0]):
        p = jax.nn.sigmoid(a + b * (x - 100.0) / 15.0)
        numpyro.sample("y", dist.BetaBinomial(p * kappa, (1 - p) * kappa, n), obs=y)


def poisson_plain(x, y=None):  # the plainest count GLM: its release leaves N open, pins Σ y and Σ x·y
    a = numpyro.sample("a", dist.Normal(0, 5))
    b = numpyro.sample("b", dist.Normal(0, 5))
    with numpyro.plate("rows", x.shape[0]):
        numpyro.sample("y", dist.Poisson(jnp.exp(a + b * x)), obs=y)


def poisson_exposure(x, t, y=None):  # an exposure per row, reconstructed with the rest
    a = numpyro.sample("a", dist.Normal(0, 5))
    b = numpyro.sample("b", dist.Normal(0, 5))
    with numpyro.plate("rows", x.shape[0]):
        numpyro.sample("y", dist.Poisson(t * jnp.exp(a + b * x)), obs=y)


def student_df(x, y=None):  # robust regression with its degrees of freedom sampled
    a = numpyro.sample("a", dist.Normal(0, 10))
    b = numpyro.sample("b", dist.Normal(0, 10))
    s = numpyro.sample("s", dist.HalfNormal(5))
    nu = numpyro.sample("nu", dist.Gamma(2, 0.1))
    with numpyro.plate("rows", x.shape[0]):
        numpyro.sample("y", dist.StudentT(nu, a + b * x, s), obs=y)


def group_intercepts(g, x, y=None):  # hierarchical: an intercept per group, indexed by the row's group
    mu = numpyro.sample("mu", dist.Normal(0, 10))
    tau = numpyro.sample("tau", dist.HalfNormal(5))
    alpha = numpyro.sample("alpha", dist.Normal(0, 1).expand([8]))
    b = numpyro.sample("b", dist.Normal(0, 5))
    s = numpyro.sample("s", dist.HalfNormal(5))
    with numpyro.plate("rows", x.shape[0]):
        numpyro.sample("y", dist.Normal(mu + tau * alpha[g] + b * x, s), obs=y)


def laplace_deterministic(x, y=None):  # a deterministic site inside the plate, a covariate at 1,000
    a = numpyro.sample("a", dist.Normal(0, 10))
    b = numpyro.sample("b", dist.Normal(0, 10))
    s = numpyro.sample("s", dist.HalfNormal(5))
    with numpyro.plate("rows", x.shape[0]):
        mu = numpyro.deterministic("mu", a + b * x)
        numpyro.sample("y", dist.Laplace(mu, s), obs=y)


def laplace_one_event(x, y=None):  # the rows as one event of the observed site, no plate
    a = numpyro.sample("a", dist.Normal(0, 10))
    b = numpyro.sample("b", dist.Normal(0, 10))
    s = numpyro.sample("s", dist.HalfNormal(5))
    numpyro.sample("y", dist.Laplace(a + b * x, s).to_event(1), obs=y)


def tanh_network(x, y=None):  # a one-hidden-layer network: its units' order and signs are exchangeable
    w1 = numpyro.sample("w1", dist.Normal(0, 1).expand([3]).to_event(1))
    b1 = numpyro.sample("b1", dist.Normal(0, 1).expand([3]).to_event(1))
    w2 = numpyro.sample("w2", dist.Normal(0, 1).expand([3]).to_event(1))
    b2 = numpyro.sample("b2", dist.Normal(0, 1))
    s = numpyro.sample("s", dist.HalfNormal(1))
    with numpyro.plate("rows", x.shape[0]):
        numpyro.sample("y", dist.Normal(jnp.tanh(x[:, None] * w1 + b1) @ w2 + b2, s), obs=y)


def beta_mean_precision(x, y=None):  # a proportion's regression: mean by a logit, a precision
    a = numpyro.sample("a", dist.Normal(0, 3))
    b = numpyro.sample("b", dist.Normal(0, 3))
    phi = numpyro.sample("phi", dist.Gamma(2, 0.1))
    with numpyro.plate("rows", x.shape[0]):
        m = jax.nn.sigmoid(a + b * x)
        numpyro.sample("y", dist.Beta(m * phi, (1 - m) * phi), obs=y)


def weibull_times(x, y=None):  # survival times, uncensored: a distribution the attack names nowhere
    a = numpyro.sample("a", dist.Normal(0, 5))
    b = numpyro.sample("b", dist.Normal(0, 5))
    k = numpyro.sample("k", dist.Gamma(2, 1))
    with numpyro.plate("rows", x.shape[0]):
        numpyro.sample("y", dist.Weibull(jnp.exp(a + b * x), k), obs=y)


def hurdle_poisson_factor(x, y=None):  # as Stan writes a hurdle: a target += per row; y a count in code
    g0 = numpyro.sample("g0", dist.Normal(0, 2))
    g1 = numpyro.sample("g1", dist.Normal(0, 2))
    a = numpyro.sample("a", dist.Normal(0, 2))
    b = numpyro.sample("b", dist.Normal(0, 2))
    with numpyro.plate("rows", x.shape[0]):
        zero = jax.nn.sigmoid(g0 + g1 * x)
        rate = jnp.exp(a + b * x)
        positive = jnp.log1p(-zero) + dist.Poisson(rate).log_prob(y) - jnp.log1p(-jnp.exp(-rate))
        numpyro.factor("y_term", jnp.where(y == 0, jnp.log(zero), positive))


def softmax_classes(X, y=None):  # three classes, the first the reference
    W = numpyro.sample("W", dist.Normal(0, 5).expand([2, 2]).to_event(2))
    c = numpyro.sample("c", dist.Normal(0, 5).expand([2]).to_event(1))
    with numpyro.plate("rows", X.shape[0]):
        logits = jnp.concatenate([jnp.zeros((X.shape[0], 1)), X @ W + c], axis=-1)
        numpyro.sample("y", dist.Categorical(logits=logits), obs=y)


def wells_distance(dist_m, y=None):  # posteriordb's wells_dist: the distance in metres, not rescaled
    beta = numpyro.sample("beta", dist.Normal(0, 10).expand([2]).to_event(1))
    with numpyro.plate("N", dist_m.shape[0]):
        numpyro.sample("y", dist.Bernoulli(logits=beta[0] + beta[1] * dist_m), obs=y)


def logistic_design(x, y=None):  # posteriordb's wells_interaction_c: bernoulli_logit_glm(x, alpha, beta)
    alpha = numpyro.sample("alpha", dist.Normal(0, 10))
    beta = numpyro.sample("beta", dist.Normal(0, 10).expand([x.shape[-1]]).to_event(1))
    with numpyro.plate("N", x.shape[0]):
        numpyro.sample("y", dist.Bernoulli(logits=alpha + x @ beta), obs=y)


def poisson_cubic(year, y=None):  # posteriordb's GLM_Poisson: flat priors on intervals, powers inside
    alpha = numpyro.sample("alpha", dist.Uniform(-20, 20))
    beta = numpyro.sample("beta", dist.Uniform(-10, 10).expand([3]).to_event(1))
    with numpyro.plate("n", year.shape[0]):
        eta = alpha + beta[0] * year + beta[1] * year**2 + beta[2] * year**3
        numpyro.sample("y", dist.Poisson(jnp.exp(eta)), obs=y)


def binomial_quadratic(year, N, y=None):  # posteriordb's GLM_Binomial: trials differ by year
    alpha = numpyro.sample("alpha", dist.Normal(0, 100))
    beta1 = numpyro.sample("beta1", dist.Normal(0, 100))
    beta2 = numpyro.sample("beta2", dist.Normal(0, 100))
    with numpyro.plate("years", year.shape[0]):
        numpyro.sample("y", dist.Binomial(N, logits=alpha + beta1 * year + beta2 * year**2), obs=y)


def mixture_unordered(y=None):  # posteriordb's low_dim_gauss_mix_collapse: labels switch in the draws
    mu = numpyro.sample("mu", dist.Normal(0, 2).expand([2]).to_event(1))
    sigma = numpyro.sample("sigma", dist.HalfNormal(2).expand([2]).to_event(1))
    theta = numpyro.sample("theta", dist.Beta(5, 5))
    with numpyro.plate("N", y.shape[0]):
        numpyro.factor("loglik", log_mix(theta, mu, sigma, y))


def two_responses(x, z=None, y=None):  # a measurement and a binary outcome per row
    a, b, c = (numpyro.sample(k, dist.Normal(0, 5)) for k in ("a", "b", "c"))
    s = numpyro.sample("s", dist.HalfNormal(3))
    with numpyro.plate("rows", x.shape[0]):
        numpyro.sample("z", dist.Normal(a + b * x, s), obs=z)
        numpyro.sample("y", dist.Bernoulli(logits=c * (x - 2)), obs=y)


def heteroscedastic(x, y=None):  # the noise's scale a regression too
    a, b = numpyro.sample("a", dist.Normal(0, 10)), numpyro.sample("b", dist.Normal(0, 10))
    c, d = numpyro.sample("c", dist.Normal(0, 3)), numpyro.sample("d", dist.Normal(0, 3))
    with numpyro.plate("rows", x.shape[0]):
        numpyro.sample("y", dist.Normal(a + b * x, jnp.exp(c + d * x)), obs=y)


def no_intercept(X, y=None):  # posteriordb's sblr style: five covariates, no intercept
    beta = numpyro.sample("beta", dist.Normal(0, 10).expand([5]).to_event(1))
    sigma = numpyro.sample("sigma", dist.HalfNormal(10))
    with numpyro.plate("N", X.shape[0]):
        numpyro.sample("y", dist.Normal(X @ beta, sigma), obs=y)


def correlated_pair(x, y=None):  # two responses per row, correlated: an LKJ correlation's Cholesky factor
    a = numpyro.sample("a", dist.Normal(0, 10).expand([2]).to_event(1))
    b = numpyro.sample("b", dist.Normal(0, 10).expand([2]).to_event(1))
    corr = numpyro.sample("corr", dist.LKJCholesky(2, 2.0))
    s = numpyro.sample("s", dist.HalfNormal(5).expand([2]).to_event(1))
    with numpyro.plate("rows", x.shape[0]):
        numpyro.sample("y", dist.MultivariateNormal(a + b * x[:, None], scale_tril=s[:, None] * corr), obs=y)


def three_components(y=None):  # a mixture's weights on the simplex (Dirichlet), ordered means
    theta = numpyro.sample("theta", dist.Dirichlet(jnp.ones(3)))
    ordered = dist.TransformedDistribution(dist.Normal(0, 5).expand([3]), dist.transforms.OrderedTransform())
    mu = numpyro.sample("mu", ordered)
    s = numpyro.sample("s", dist.HalfNormal(2).expand([3]).to_event(1))
    with numpyro.plate("rows", y.shape[0]):
        numpyro.sample("y", dist.MixtureSameFamily(dist.Categorical(theta), dist.Normal(mu, s)), obs=y)


def dirichlet_shares(
    x, y=None
):  # compositions: shares of three parts, each's concentration a log-linear regression
    a = numpyro.sample("a", dist.Normal(0, 2).expand([3]).to_event(1))
    b = numpyro.sample("b", dist.Normal(0, 2).expand([3]).to_event(1))
    with numpyro.plate("rows", x.shape[0]):
        numpyro.sample("y", dist.Dirichlet(jnp.exp(a + b * x[:, None])), obs=y)


def composition_covariate(
    c, y=None
):  # a regression on a composition's log-ratios: c on the simplex by support=
    a = numpyro.sample("a", dist.Normal(0, 10))
    b = numpyro.sample("b", dist.Normal(0, 5).expand([2]).to_event(1))
    s = numpyro.sample("s", dist.HalfNormal(5))
    with numpyro.plate("rows", c.shape[0]):
        numpyro.sample("y", dist.Normal(a + (jnp.log(c[:, :2]) - jnp.log(c[:, 2:])) @ b, s), obs=y)


def tempered(x, y=None):  # a power posterior: every row's likelihood raised to 1/2 by handlers.scale
    a = numpyro.sample("a", dist.Normal(0, 10))
    b = numpyro.sample("b", dist.Normal(0, 5))
    s = numpyro.sample("s", dist.HalfNormal(5))
    with numpyro.plate("rows", x.shape[0]), numpyro.handlers.scale(scale=0.5):
        numpyro.sample("y", dist.Normal(a + b * x, s), obs=y)


def survey_weights(x, w, y=None):  # a known weight per row scaling its likelihood (handlers.scale)
    a = numpyro.sample("a", dist.Normal(0, 10))
    b = numpyro.sample("b", dist.Normal(0, 5))
    s = numpyro.sample("s", dist.HalfNormal(5))
    with numpyro.plate("rows", x.shape[0]), numpyro.handlers.scale(scale=w):
        numpyro.sample("y", dist.Normal(a + b * x, s), obs=y)


@dataclass(frozen=True)
class Case:
    """A model as a user writes it, its data simulated at known parameters, and the call's arguments."""

    name: str
    model: Callable
    simulate: Callable[[np.random.Generator], dict[str, np.ndarray]]  # every model argument
    free: list[str] | dict[str, tuple[int, ...]]
    fixed: tuple[str, ...] = ()
    support: Mapping[str, Any] = field(default_factory=dict)


def _logistic(eta: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return (rng.uniform(size=eta.shape) < 1 / (1 + np.exp(-eta))).astype(np.int32)


def _lognormal(rng: np.random.Generator) -> dict[str, np.ndarray]:
    x = rng.normal(5, 2, 200)
    return {"x": x, "y": np.exp(0.5 + 0.2 * x + 0.3 * rng.normal(size=200))}


def _ordered(rng: np.random.Generator) -> dict[str, np.ndarray]:
    x = rng.normal(size=300)
    return {"x": x, "y": np.digitize(1.2 * x + rng.logistic(size=300), [-1.0, 0.5, 2.0]).astype(np.int32)}


def _zip(rng: np.random.Generator) -> dict[str, np.ndarray]:
    x = rng.normal(size=300)
    return {"x": x, "y": np.where(rng.uniform(size=300) < 0.3, 0, rng.poisson(np.exp(0.5 + 0.6 * x)))}


def _scaled(rng: np.random.Generator) -> dict[str, np.ndarray]:
    X = np.column_stack([rng.normal(1e3, 300, 400), rng.normal(0, 0.01, 400)])
    return {"X": X, "y": _logistic(-0.5 + 0.002 * (X[:, 0] - 1e3) + 60 * X[:, 1], rng)}


def _mixture(rng: np.random.Generator) -> dict[str, np.ndarray]:
    first = rng.uniform(size=1000) < 0.4
    return {"y": np.where(first, rng.normal(-0.75, 1, 1000), rng.normal(0.75, 0.5, 1000))}


def _counted(rng: np.random.Generator) -> dict[str, np.ndarray]:
    X = rng.normal(size=(150, 3)) * np.array([1, 10, 0.1])
    return {"X": X, "y": X @ np.array([1, 0.1, 10]) + rng.normal(size=150)}


def _ones_column(rng: np.random.Generator) -> dict[str, np.ndarray]:
    X = np.column_stack([np.ones(150), rng.normal(10, 3, 150), rng.uniform(0, 1, 150)])
    return {"X": X, "y": X @ np.array([2, 0.3, -1]) + rng.normal(0, 0.5, 150)}


def _stan(rng: np.random.Generator) -> dict[str, np.ndarray]:
    X = rng.normal(size=(300, 2))
    return {"N": 300, "K": 2, "X": X, "y": rng.poisson(np.exp(0.3 + X @ np.array([0.5, -0.3])))}


def _stan_normal(rng: np.random.Generator) -> dict[str, np.ndarray]:
    X = rng.normal(size=(300, 2)) * np.array([10.0, 0.1]) + np.array([50.0, 0.0])
    return {"N": 300, "K": 2, "X": X, "y": 1.0 + X @ np.array([0.2, 8.0]) + rng.normal(size=300)}


def _no_plate(rng: np.random.Generator) -> dict[str, np.ndarray]:
    x = rng.normal(50, 10, 200)
    return {"x": x, "y": 3 + 0.2 * x + rng.normal(size=200)}


def _binomial(rng: np.random.Generator) -> dict[str, np.ndarray]:
    x = rng.normal(size=200)
    return {"x": x, "n": np.full(200, 8), "y": rng.binomial(8, 1 / (1 + np.exp(-(0.2 + 0.8 * x))))}


def _test_scores(rng: np.random.Generator) -> dict[str, np.ndarray]:
    x = rng.normal(100.0, 15.0, 300)  # an IQ score
    p = 1 / (1 + np.exp(-(0.5 + (x - 100.0) / 15.0)))
    return {"x": x, "n": np.full(300, 10), "y": rng.binomial(10, rng.beta(8.0 * p, 8.0 * (1 - p)))}


def _binomial_varying(rng: np.random.Generator) -> dict[str, np.ndarray]:
    x, n = rng.normal(size=200), rng.integers(1, 16, 200)
    return {"x": x, "n": n, "y": rng.binomial(n, 1 / (1 + np.exp(-(0.2 + 0.8 * x))))}


def _exposure(rng: np.random.Generator) -> dict[str, np.ndarray]:
    x, t = rng.normal(size=300), rng.uniform(0.5, 2, 300)
    return {"x": x, "t": t, "y": rng.poisson(t * np.exp(0.3 + 0.5 * x))}


def _student(rng: np.random.Generator) -> dict[str, np.ndarray]:
    x = rng.normal(size=300)
    return {"x": x, "y": 1 + x + rng.standard_t(4, 300)}


def _groups(rng: np.random.Generator) -> dict[str, np.ndarray]:
    g, x = np.repeat(np.arange(8), 20), rng.normal(3, 2, 160)
    return {"g": g, "x": x, "y": 1 + rng.normal(0, 1.5, 8)[g] + 0.8 * x + rng.normal(0, 1, 160)}


def _laplace(rng: np.random.Generator) -> dict[str, np.ndarray]:
    x = rng.normal(0, 1000, 150)
    return {"x": x, "y": 4 + 0.002 * x + rng.laplace(0, 1.0, 150)}


def _curve(rng: np.random.Generator) -> dict[str, np.ndarray]:
    x = rng.normal(size=300)
    return {"x": x, "y": np.tanh(2 * x) + 0.3 * x + rng.normal(0, 0.2, 300)}


def _proportions(rng: np.random.Generator) -> dict[str, np.ndarray]:
    x = rng.normal(size=200)
    m = 1 / (1 + np.exp(0.5 - 0.8 * x))
    return {"x": x, "y": rng.beta(m * 15, (1 - m) * 15)}


def _counts(rng: np.random.Generator) -> dict[str, np.ndarray]:
    x = rng.normal(size=300)
    return {"x": x, "y": rng.poisson(np.exp(0.5 + 0.8 * x)).astype(np.int32)}


def _times(rng: np.random.Generator) -> dict[str, np.ndarray]:
    x = rng.normal(size=200)
    return {"x": x, "y": np.exp(1 + 0.5 * x) * rng.weibull(1.7, 200)}


def _hurdle(rng: np.random.Generator) -> dict[str, np.ndarray]:
    x = rng.normal(size=300)
    rate = np.exp(1.0 - 0.3 * x)
    tries = rng.poisson(rate[:, None], (300, 200))  # the first positive of 200 tries: zero-truncated
    first = tries[np.arange(300), np.argmax(tries > 0, axis=1)]
    zero = rng.uniform(size=300) < 1 / (1 + np.exp(-(-0.4 + 0.8 * x)))
    return {"x": x, "y": np.where(zero, 0.0, first)}


def _classes(rng: np.random.Generator) -> dict[str, np.ndarray]:
    X = rng.normal(size=(300, 2))
    logits = np.column_stack([np.zeros(300), X @ np.array([[1, -1], [0.5, 1]]) + np.array([0.2, -0.3])])
    p = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    return {"X": X, "y": (p.cumsum(axis=1) < rng.uniform(size=(300, 1))).sum(axis=1).astype(np.int32)}


def posteriordb_data(name: str) -> dict[str, np.ndarray]:
    """A data set of posteriordb (``POSTERIOR_DB_PATH``, else ../shared's), by its data name."""
    root = Path(os.environ.get("POSTERIOR_DB_PATH", POSTERIORDB))
    with zipfile.ZipFile(root / "data" / "data" / f"{name}.json.zip") as archive:
        return {k: np.asarray(v) for k, v in json.loads(archive.read(f"{name}.json")).items()}


def _wells_distance(rng: np.random.Generator) -> dict[str, np.ndarray]:
    wells = posteriordb_data("wells_data")
    return {"dist_m": wells["dist"].astype(float), "y": wells["switched"].astype(np.int32)}


def _wells_interaction(rng: np.random.Generator) -> dict[str, np.ndarray]:
    wells = posteriordb_data("wells_data")
    distance, arsenic = (
        (wells["dist"] - wells["dist"].mean()) / 100,
        wells["arsenic"] - wells["arsenic"].mean(),
    )
    return {
        "x": np.column_stack([distance, arsenic, distance * arsenic]),
        "y": wells["switched"].astype(np.int32),
    }


def _poisson_cubic(rng: np.random.Generator) -> dict[str, np.ndarray]:
    counts = posteriordb_data("GLM_Poisson_Data")
    return {"year": counts["year"].astype(float), "y": counts["C"]}


def _binomial_quadratic(rng: np.random.Generator) -> dict[str, np.ndarray]:
    counts = posteriordb_data("GLM_Binomial_data")
    return {"year": counts["year"].astype(float), "N": counts["N"], "y": counts["C"]}


def _mixture_unordered(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {"y": posteriordb_data("low_dim_gauss_mix_collapse")["y"].astype(float)}


def _two_responses(rng: np.random.Generator) -> dict[str, np.ndarray]:
    x = rng.normal(2, 1, 250)
    return {"x": x, "z": 1 + 0.5 * x + rng.normal(size=250), "y": _logistic(0.8 * (x - 2), rng)}


def _heteroscedastic(rng: np.random.Generator) -> dict[str, np.ndarray]:
    x = rng.uniform(0, 10, 300)
    return {"x": x, "y": 2 + 0.7 * x + np.exp(-1 + 0.2 * x) * rng.normal(size=300)}


def _no_intercept(rng: np.random.Generator) -> dict[str, np.ndarray]:
    X = rng.normal(size=(100, 5)) * np.array([1, 2, 0.5, 10, 0.1])
    return {"X": X, "y": X @ np.array([1, -1, 2, 0.1, 5]) + rng.normal(size=100)}


def _correlated_pair(rng: np.random.Generator) -> dict[str, np.ndarray]:
    x = rng.normal(size=200)
    noise = rng.multivariate_normal([0, 0], [[1, 0.6], [0.6, 1]], 200)
    return {"x": x, "y": np.c_[1 + 2 * x, -1 + 0.5 * x] + noise}


def _three_components(rng: np.random.Generator) -> dict[str, np.ndarray]:
    component = rng.choice(3, 600, p=[0.5, 0.3, 0.2])
    return {"y": np.array([-3.0, 0.0, 3.0])[component] + rng.normal(size=600)}


def _shares(rng: np.random.Generator) -> dict[str, np.ndarray]:
    x = rng.normal(size=300)
    y = np.stack(
        [rng.dirichlet(a) for a in np.exp(np.array([1.0, 0.5, 1.5]) + np.outer(x, [0.8, -0.5, 0.0]))]
    )
    return {"x": x, "y": y}


def _composition(rng: np.random.Generator) -> dict[str, np.ndarray]:
    c = rng.dirichlet([4.0, 2.0, 3.0], size=200)
    return {"c": c, "y": 1.0 + np.log(c[:, :2] / c[:, 2:]) @ np.array([2.0, -1.0]) + rng.normal(0, 0.5, 200)}


def _tempered(rng: np.random.Generator) -> dict[str, np.ndarray]:
    x = rng.normal(3.0, 2.0, 300)
    return {"x": x, "y": 1.0 + 0.5 * x + rng.normal(size=300)}


def _survey(rng: np.random.Generator) -> dict[str, np.ndarray]:
    x = rng.normal(3.0, 2.0, 200)
    return {"x": x, "w": rng.choice([0.5, 1.0, 2.0], 200), "y": 1.0 + 0.5 * x + rng.normal(size=200)}


CASES = (
    Case("lognormal", lognormal, _lognormal, ["x", "y"]),
    Case("ordered-logistic", ordered_logistic, _ordered, ["x", "y"]),
    Case("zero-inflated-poisson", zero_inflated_poisson, _zip, ["x", "y"]),
    Case("logistic-two-scales", logistic_scaled, _scaled, {"X": (2,), "y": ()}),
    Case("mixture-no-covariates", mixture_no_covariates, _mixture, ["y"]),
    Case("mixture-as-factor", mixture_factor, _mixture, ["y"]),
    Case("mixture-prior-as-factor", mixture_prior_factor, _mixture, ["y"]),
    Case("design-matrix-counted", regression_counted, _counted, ["X", "y"]),
    Case("design-with-ones", regression_counted, _ones_column, {"X": (3,), "y": ()}),
    Case("stan-style-N-K", stan_data_block, _stan, ["X", "y"], fixed=("N", "K")),
    Case("stan-vectorised-target", stan_vectorised, _stan_normal, ["X", "y"], fixed=("N", "K")),
    Case("no-plate", no_plate, _no_plate, ["x", "y"]),
    Case("binomial-trials-per-row", binomial_trials, _binomial, ["x", "y"], fixed=("n",)),
    Case("binomial-trials-vary", binomial_trials, _binomial_varying, ["x", "y"], fixed=("n",)),
    Case("beta-binomial-scores", beta_binomial_scores, _test_scores, ["x", "y"], fixed=("n",)),
    Case(
        "poisson-exposure-free",
        poisson_exposure,
        _exposure,
        ["x", "t", "y"],
        support={"t": constraints.positive},
    ),
    Case("poisson-exposure-fixed", poisson_exposure, _exposure, ["x", "y"], fixed=("t",)),
    Case("poisson-one-covariate", poisson_plain, _counts, ["x", "y"]),
    Case("student-t-df-sampled", student_df, _student, ["x", "y"]),
    Case("softmax-three-classes", softmax_classes, _classes, {"X": (2,), "y": ()}),
    Case("two-responses", two_responses, _two_responses, ["x", "z", "y"]),
    Case("heteroscedastic", heteroscedastic, _heteroscedastic, ["x", "y"]),
    Case("no-intercept-five", no_intercept, _no_intercept, {"X": (5,), "y": ()}),
    Case("wells-distance-metres", wells_distance, _wells_distance, ["dist_m", "y"]),
    Case("wells-interaction", logistic_design, _wells_interaction, {"x": (3,), "y": ()}),
    Case("glm-poisson-cubic", poisson_cubic, _poisson_cubic, ["year", "y"]),
    Case("glm-binomial-trials-vary", binomial_quadratic, _binomial_quadratic, ["year", "y"], fixed=("N",)),
    Case("mixture-labels-switch", mixture_unordered, _mixture_unordered, ["y"]),
    Case("correlated-pair", correlated_pair, _correlated_pair, {"x": (), "y": (2,)}),
    Case("three-components", three_components, _three_components, ["y"]),
    Case("dirichlet-shares", dirichlet_shares, _shares, {"x": (), "y": (3,)}),
    Case(
        "composition-covariate",
        composition_covariate,
        _composition,
        {"c": (3,), "y": ()},
        support={"c": "simplex"},
    ),
    Case(
        "group-intercepts",
        group_intercepts,
        _groups,
        ["g", "x", "y"],
        support={"g": constraints.integer_interval(0, 7)},
    ),
    Case("laplace-deterministic", laplace_deterministic, _laplace, ["x", "y"]),
    Case("laplace-one-event", laplace_one_event, _laplace, ["x", "y"]),
    Case("beta-mean-precision", beta_mean_precision, _proportions, ["x", "y"]),
    Case("tanh-network", tanh_network, _curve, ["x", "y"]),
    Case("weibull-times", weibull_times, _times, ["x", "y"]),
    Case("tempered-likelihood", tempered, _tempered, ["x", "y"]),
    Case("survey-weights", survey_weights, _survey, ["x", "y"], fixed=("w",)),
    Case(
        "hurdle-poisson-factor",
        hurdle_poisson_factor,
        _hurdle,
        ["x", "y"],
        support={"y": constraints.nonnegative_integer},
    ),
)
BY_CASE = {c.name: c for c in CASES}


def sampled(case: Case, cache: Path) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The case's data and NUTS draws, from the cache or sampled (and cached)."""
    path = cache / f"{case.name}.npz"
    if not path.exists():
        data = case.simulate(np.random.default_rng(sum(map(ord, case.name))))
        mcmc = MCMC(NUTS(case.model), num_warmup=WARMUP, num_samples=SAMPLES, progress_bar=False)
        mcmc.run(jax.random.PRNGKey(0), **data)
        path.parent.mkdir(parents=True, exist_ok=True)
        draws = {k: np.asarray(v) for k, v in mcmc.get_samples().items()}
        np.savez(
            path, **{f"data/{k}": v for k, v in data.items()}, **{f"draw/{k}": v for k, v in draws.items()}
        )
    with np.load(path) as f:
        return tuple(  # type: ignore[return-value]
            {key.removeprefix(prefix): f[key] for key in f.files if key.startswith(prefix)}
            for prefix in ("data/", "draw/")
        )


def run_case(case: Case, points: int, seed: int, cache: Path) -> dict[str, Any]:
    data, draws = sampled(case, cache)
    fixed = {k: data[k].item() if data[k].ndim == 0 else data[k] for k in case.fixed}
    row: dict[str, Any] = {"case": case.name, "M": points, "seed": seed, "N": len(data["y"])}
    try:
        result = br.reconstruct(
            case.model,
            draws,
            free=case.free,
            fixed=fixed,
            support=dict(case.support),
            n_points=points,
            seed=seed,
        )
    except Exception as err:  # a row, not the end of the suite
        return row | {"error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()}
    w, p = result.measure.weights, result.measure.points
    truth, truth_weights = {k: data[k] for k in case.free}, np.ones(row["N"])
    if units := result.measure.meta["units"]:  # the weights count trials or exposure: so do the truth's
        truth, truth_weights = rows_as_units(truth, data[units["column"]], units)
        row["N"] = float(truth_weights.sum())
    attack_terms = result.objective_terms(p, w)
    truth_terms = result.objective_terms(truth, truth_weights)
    tolerance = TRUTH_SE * np.std(attack_terms - truth_terms, ddof=1) / np.sqrt(len(truth_terms))
    # a vector response (correlated-pair): its first entry
    y, y_true = (np.asarray(v["y"], float).reshape(len(v["y"]), -1)[:, 0] for v in (p, truth))
    mean, mean_true = w @ y / w.sum(), truth_weights @ y_true / truth_weights.sum()
    sd_true = np.sqrt(truth_weights @ (y_true - mean_true) ** 2 / truth_weights.sum())
    started = time.perf_counter()
    errors = result.standard_errors
    widths = [int(np.prod(np.shape(v)[1:], dtype=int)) for v in p.values()]
    y_mean_se = errors[f"mean[{sum(widths[: list(p).index('y')])}]"]  # in the recovered sd
    y_sd = float(np.sqrt(w @ (y - mean) ** 2 / w.sum()))
    return row | {
        "seconds": result.seconds,
        "standard_errors_seconds": time.perf_counter() - started,
        "mass": float(w.sum()),
        "mass_se": float(errors["total_mass"]),
        "objective": result.objective,
        "objective_truth": float(truth_terms.mean()),
        "tolerance": float(tolerance),
        "truth_bar": bool(result.objective <= truth_terms.mean() + tolerance),
        "y_mean": float(mean),
        "y_mean_true": float(mean_true),
        "y_sd": y_sd,
        "y_sd_true": float(sd_true),
        "y_mean_off": float(abs(mean - mean_true) / y_sd),
        "y_mean_se": float(y_mean_se),
        "self_check": bool(result.self_check.reproduces),
        "self_check_summary": result.self_check.summary(),
        # the objective above the Gaussian floor in Monte Carlo errors (None where no floor was checked)
        "floor_errors": None if (floor := result.self_check.floor) is None else float(np.divide(*floor)),
        "unseen_mass": float(result.unseen_mass),
        "converged": result.converged(),
    }


COLUMNS = ("case", "N", "M", "mass (se %)", "ΔJ/tol", "truth bar", "y mean (true)", "y sd (true)")
COLUMNS += ("y mean off, sd (2 se)",)
COLUMNS += ("self-check", "above the floor (errors)", "unseen", "s")


def styles_table(rows: list[dict[str, Any]]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|---" * len(COLUMNS) + "|"]
    for r in rows:
        if "error" in r:
            error = r["error"][:120].replace("|", "/").replace("\n", " ")
            empty = " |" * (len(COLUMNS) - 4)
            lines.append(f"| {r['case']} | {r['N']} | {r['M']} | **error**: {error} |{empty}")
            continue
        delta = (r["objective"] - r["objective_truth"]) / r["tolerance"]
        verdict = "reproduces" if r["self_check"] else "**does not**"
        cells = (
            r["case"],
            f"{r['N']:,.6g}",
            r["M"],
            f"{r['mass']:,.1f} ({100 * r['mass_se']:.1f})",
            f"{delta:+.2f}",
            "met" if r["truth_bar"] else "**not met**",
            f"{r['y_mean']:.3g} ({r['y_mean_true']:.3g})",
            f"{r['y_sd']:.3g} ({r['y_sd_true']:.3g})",
            f"{r['y_mean_off']:.2f} ({2 * r['y_mean_se']:.2f})",
            verdict,
            "—" if r.get("floor_errors") is None else f"{r['floor_errors']:+.1f}",
            f"{r['unseen_mass']:.2f}",
            f"{r['seconds']:.1f}",
        )
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cases", default=",".join(BY_CASE), help="comma-separated (default: all)")
    parser.add_argument("--points", type=int, default=20, help="M per stratum (20)")
    parser.add_argument("--seeds", default="0", help="attack seeds (0)")
    parser.add_argument("--cache", type=Path, default=CACHE)
    parser.add_argument("--json", type=Path, default=Path("results/bayes_model_styles.json"))
    args = parser.parse_args()
    unknown = sorted(set(args.cases.split(",")) - set(BY_CASE))
    if unknown:
        parser.error(f"unknown cases {unknown}; choose from {sorted(BY_CASE)}")
    rows = []
    for name in args.cases.split(","):
        for seed in (int(s) for s in args.seeds.split(",")):
            rows.append(run_case(BY_CASE[name], args.points, seed, args.cache))
            print(styles_table(rows[-1:]).splitlines()[-1], flush=True)
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(
                json.dumps(
                    {
                        "settings": vars(args) | {"cache": str(args.cache), "json": str(args.json)},
                        "rows": rows,
                    },
                    indent=1,
                )
            )
    print(styles_table(rows))
    met = [r for r in rows if "error" not in r and r["truth_bar"] and r["self_check"]]
    print(f"{len(met)} of {len(rows)} rows meet the truth bar and reproduce their release")


if __name__ == "__main__":
    main()
