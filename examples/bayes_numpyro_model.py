"""Your own NumPyro model: sample a posterior with NUTS, then reconstruct the data from the draws alone.

    .venv/bin/python examples/bayes_numpyro_model.py

A linear regression y ~ Normal(a + b x, sigma) on N = 100 synthetic points; one chain of 1000
NUTS draws (a few seconds), then ``bayes_recon.reconstruct`` with 20 weighted pseudo-points. A
Gaussian linear model's posterior depends on the data only through N, Σx, Σx², Σy, Σxy, Σy²,
so those (and hence N, the means and the variances) are what the attack can recover.
"""

from __future__ import annotations

import jax
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.infer import MCMC, NUTS

import bayes_recon as br


def model(x, y=None):
    a = numpyro.sample("a", dist.Normal(0.0, 10.0))
    b = numpyro.sample("b", dist.Normal(0.0, 10.0))
    sigma = numpyro.sample("sigma", dist.HalfNormal(5.0))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Normal(a + b * x, sigma), obs=y)


def main() -> None:
    br.enable_float64()  # the draws NUTS makes below are float64 too, as the attack needs
    rng = np.random.default_rng(0)
    n = 100
    x = rng.normal(2.0, 1.5, size=n)
    y = 1.0 + 0.5 * x + rng.normal(0.0, 0.8, size=n)

    mcmc = MCMC(NUTS(model), num_warmup=500, num_samples=1000, num_chains=1, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), x=x, y=y)
    print(f"posterior: {len(mcmc.get_samples()['a'])} NUTS draws of a, b, sigma")

    # The MCMC object is read directly (a dict of arrays or ArviZ data work too).
    recon = br.reconstruct(model, mcmc, free=["x", "y"], n_points=20, seed=0)
    measure = recon.measure
    truth = br.WeightedMeasure.empirical({"x": x, "y": y})
    print(f"{len(measure)} weighted points in {recon.seconds:.0f} s, objective {recon.objective:.4g}")
    print(f"{'':10}{'recovered':>12}{'true':>12}")
    print(f"{'N':10}{measure.total_mass():12.2f}{truth.total_mass():12.0f}")
    for name in ("x", "y"):
        print(f"{'mean ' + name:10}{float(measure.mean(name)):12.4f}{float(truth.mean(name)):12.4f}")
        print(f"{'var ' + name:10}{float(measure.var(name)):12.4f}{float(truth.var(name)):12.4f}")


if __name__ == "__main__":
    main()
