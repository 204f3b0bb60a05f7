"""Conformance suite for the general posterior attack: synthetic GLMs and a mixture, and the registry.

Synthetic part (the default). For each family, N and number of covariates k this simulates a data
set from the family's NumPyro model at known parameters, samples its posterior with NUTS (one chain
started at the true parameters, 500 warm-up steps, 1,000 draws, fixed seeds; a chain that does not
move is an error; data and draws cached as ``.npz`` under
``results/bayes_general_cache/``, delete a file to sample it again), then runs ``br.reconstruct`` on
the draws for every M (points per stratum) and seed and reports:

* time: ``Reconstruction.seconds`` (wall, compilation included). Peak memory: every attack runs in a
  fresh process (``spawn``; a few seconds to import JAX, against tens of seconds for an attack, which
  compiles anew in any case), and the peak resident set size of that process after the attack
  (``resource.getrusage(...).ru_maxrss``) is reported, with the same before the attack (imports and
  data: the baseline) beside it in the JSON;
* the *truth bar*: J_attack = ``r.objective`` against J_truth, the mean of
  ``r.objective_terms(true data, all weights 1)`` (the same draws and slices); met iff J_attack ≤
  J_truth + 3 × the Monte Carlo standard error of the paired per-draw difference;
* for the normal family, the oracle of ``bayes_recon.oracle`` (the exact minimiser of the same
  objective over the statistics N, XᵀX, Xᵀy, yᵀy): every statistic's distance to it (bar: within 1 %,
  as for the registry's linear models) and the oracle's own error in Σ y, Σ y·x_j against the truth
  (what the draws allow, beside the 5 % bar below);
* the recovered N (Σ w) against the true N; for the canonical-link GLMs (normal, Bernoulli-logit,
  binomial, Poisson), whose likelihood sees the responses through Σ y and Σ y·x_j, those sums'
  relative errors, bar: all within 5 %, with their Monte Carlo standard errors (over the truth's
  value: how tightly the draws pin them down); for every family the covariates' weighted mean (its
  shift in true sd) and sd (its ratio to the true sd), reported without a bar;
* the standard errors (``r.standard_errors``, ``r.statistic_covariance``: the sandwich at the
  attack's optimum, from the draws alone) of N, the covariates' means and the sums Σ y, Σ y·x_j, with
  what the optimiser left to go to that optimum (``r.shortfall``, ``r.statistic_shortfall``) in
  quadrature (``r.result_errors``; the table's "se % N"), and each error against the truth in those
  units (z); the table counts the |z| ≤ 2 (an error its error covers; about 95 % of them if the errors
  are right); the unseen mass
  (``r.unseen_mass``: the share of the mass on pseudo-points the release barely sees; from 0.2 the CLI
  says N is not determined);
* every restart's measure information (``history["information"]``) and how many restarts were passed
  over for carrying more than a release can (``r.passed_over()``, JSON only);
* the self-check's verdict (``r.self_check``: NUTS on the recovered pseudo-data against the draws), and
  whether the last stage converged before its step cap (``r.converged()``; ``--steps`` raises the cap),
  or stopped on its own short of the optimum (``r.short_of_optimum()``: the objective still falls along
  the sandwich's confirmed step by ``r.remaining_gain`` Monte Carlo se, beyond the stopping rule's).

Families: η = a + X·b; normal (identity link, σ ~ HalfNormal(10)), Student-t (df 5, σ ~
HalfNormal(10)), Bernoulli-logit, Bernoulli-probit (``Bernoulli(probs=ndtr(η))``), binomial (logit,
5 trials: 6 strata of M points), Poisson (log), negative binomial (``NegativeBinomial2``, log link,
concentration ~ HalfNormal(10)), gamma (log link, ``Gamma(shape, shape / mean)``, shape ~
HalfNormal(10)) and a two-component normal mixture of regressions (component means a and a + gap,
gap ~ HalfNormal(10), both scales ~ HalfNormal(10), first weight ~ Beta(2, 2)). Covariates are not
standardised: column j is scale_j × (1 + z), z ~ Normal(0, 1), scale_j the entry (family's position
+ log10 N + j) mod 3 of (1e-2, 1, 1e3): k = 3 takes all three, k = 1 one that varies with the family
and N. The priors are a ~ Normal(0, 10) and b_j ~ Normal(0, 10 / scale_j): weak in the covariates'
own units whatever their scale. True b_j = 1 / (√k scale_j), so η has sd 1, and a puts η's mean at 1 (normal,
Student-t, Poisson, negative binomial, gamma), 0 (Bernoulli, binomial) or −2 (the mixture's first
component; the second sits 4 higher, scales 1 and 0.5, weights 0.4 / 0.6). k = 1 is a scalar free
column ``X``, k ≥ 2 one free column ``X`` of shape (k,); the responses' supports come from the
model (no ``support=`` is passed).

Registry part (``--registry``): every registry posterior present in posteriordb, run through
``benchmarks/bayes_posteriordb.py``'s own loop and oracle columns, with the truth bar, the
self-check's verdict, the unseen mass, the number of parameters d, the peak memory and N's standard
error and z added (printed under each row, and in the JSON rows); each posterior in a fresh process,
so the peak is its own. The standard errors as the CLI computes them (``r.standard_errors``).

Prints a line per run (with J_attack − J_truth and the tolerance), then a table per family × N × k
× M (seeds aggregated: mean and [min, max]; "ΔJ / tol" is (J_attack − J_truth) / tolerance, the bar
met at ≤ 1) and the bars as "met / NOT met" lines; the JSON holds every per-seed number. An attack
that raises is a row with its error and traceback, counted as not meeting the bars.

Run (from the repository root):
    .venv/bin/python benchmarks/bayes_general.py --json results/bayes_general.json
    .venv/bin/python benchmarks/bayes_general.py --registry --json results/bayes_general_registry.json
A single small row:
    .venv/bin/python benchmarks/bayes_general.py --families poisson --n 100 --covariates 1 --points 10 \\
        --seeds 0 --restarts 1 --json results/bayes_general_smoke.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bayes_posteriordb
import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from jax.scipy.special import ndtr
from numpyro.infer import MCMC, NUTS, Predictive, init_to_value

import bayes_recon as br
from bayes_recon.models import REGISTRY, LinearGaussian
from bayes_recon.oracle import oracle_for
from bayes_recon.posteriordb import load_posterior
from recon_core.jsonio import jsonable

# float64 before anything here makes a JAX array: importing bayes_recon no longer switches it on.
br.enable_float64()

CACHE = Path(__file__).resolve().parents[1] / "results" / "bayes_general_cache"
SCALES = (1e-2, 1.0, 1e3)
WARMUP, SAMPLES = 500, 1000
TRIALS = 5  # the binomial's total count: 6 strata (levels 0..5), each with M pseudo-points
SUFFICIENT_BAR = 0.05
ORACLE_BAR = 0.01  # Gaussian linear models
TRUTH_SE = 3.0  # the truth bar's tolerance, in Monte Carlo standard errors
TRUTH_BAR = "truth bar (J_attack ≤ J_truth + 3 se)"

Params = Mapping[str, jax.Array]


@dataclass(frozen=True)
class Family:
    """A response distribution given the linear predictor η = a + X·b and its own parameters."""

    name: str
    centre: float  # the true η's mean
    likelihood: Callable[[jax.Array, Params], dist.Distribution]
    priors: Mapping[str, dist.Distribution]  # its parameters beyond a and b
    truth: Mapping[str, Any]  # their true values
    canonical: bool = False  # canonical link: the likelihood sees y through Σ y and Σ y·x_j


def _mixture(eta: jax.Array, p: Params) -> dist.Distribution:
    loc = eta[:, None] + jnp.stack([jnp.zeros_like(p["gap"]), p["gap"]])
    weights = jnp.stack([p["weight"], 1 - p["weight"]])
    return dist.MixtureSameFamily(dist.Categorical(probs=weights), dist.Normal(loc, p["sigma"]))


FAMILIES = (
    Family(
        "normal",
        1.0,
        lambda eta, p: dist.Normal(eta, p["sigma"]),
        {"sigma": dist.HalfNormal(10.0)},
        {"sigma": 1.0},
        canonical=True,
    ),
    Family(
        "student-t",
        1.0,
        lambda eta, p: dist.StudentT(5.0, eta, p["sigma"]),
        {"sigma": dist.HalfNormal(10.0)},
        {"sigma": 1.0},
    ),
    Family("bernoulli-logit", 0.0, lambda eta, p: dist.Bernoulli(logits=eta), {}, {}, canonical=True),
    Family("bernoulli-probit", 0.0, lambda eta, p: dist.Bernoulli(probs=ndtr(eta)), {}, {}),
    Family("binomial", 0.0, lambda eta, p: dist.Binomial(TRIALS, logits=eta), {}, {}, canonical=True),
    Family("poisson", 1.0, lambda eta, p: dist.Poisson(jnp.exp(eta)), {}, {}, canonical=True),
    Family(
        "negbin2",
        1.0,
        lambda eta, p: dist.NegativeBinomial2(jnp.exp(eta), p["concentration"]),
        {"concentration": dist.HalfNormal(10.0)},
        {"concentration": 5.0},
    ),
    Family(
        "gamma",
        1.0,
        lambda eta, p: dist.Gamma(p["shape"], p["shape"] / jnp.exp(eta)),
        {"shape": dist.HalfNormal(10.0)},
        {"shape": 3.0},
    ),
    Family(
        "mixture",
        -2.0,
        _mixture,
        {
            "gap": dist.HalfNormal(10.0),
            "sigma": dist.HalfNormal(10.0).expand([2]).to_event(1),
            "weight": dist.Beta(2.0, 2.0),
        },
        {"gap": 4.0, "sigma": [1.0, 0.5], "weight": 0.4},
    ),
    # beyond the list: a kinked likelihood (Laplace) and one on the unit interval (Beta)
    Family(
        "laplace",
        1.0,
        lambda eta, p: dist.Laplace(eta, p["sigma"]),
        {"sigma": dist.HalfNormal(10.0)},
        {"sigma": 1.0},
    ),
    Family(
        "beta",
        0.0,
        lambda eta, p: dist.Beta(jax.nn.sigmoid(eta) * p["phi"], (1 - jax.nn.sigmoid(eta)) * p["phi"]),
        {"phi": dist.HalfNormal(20.0)},
        {"phi": 10.0},
    ),
)
BY_NAME = {f.name: f for f in FAMILIES}


def build_model(family: Family, scales: np.ndarray) -> Callable:
    """The family's NumPyro model, its prior on b in the covariates' units (sd 10 / scale_j)."""
    b_scale = 10.0 / jnp.asarray(scales)

    def model(X, y=None):
        a = numpyro.sample("a", dist.Normal(0.0, 10.0))
        b = numpyro.sample("b", dist.Normal(0.0, b_scale).to_event(1))
        params = {name: numpyro.sample(name, prior) for name, prior in family.priors.items()}
        eta = a + jnp.reshape(X, (X.shape[0], -1)) @ b
        with numpyro.plate("data", X.shape[0]):
            numpyro.sample("y", family.likelihood(eta, params), obs=y)

    return model


@dataclass(frozen=True)
class Dataset:
    family: Family
    X: np.ndarray  # (N,) for k = 1, else (N, k)
    y: np.ndarray
    scales: np.ndarray
    truth: dict[str, np.ndarray]
    draws: dict[str, np.ndarray]
    divergent: int  # NUTS's divergent transitions
    nuts_seconds: float

    @property
    def model(self) -> Callable:
        return build_model(self.family, self.scales)

    @property
    def free(self) -> dict[str, tuple[int, ...]]:
        return {"X": self.X.shape[1:], "y": ()}

    def describe(self) -> dict[str, Any]:
        return {
            "family": self.family.name,
            "N": len(self.y),
            "k": len(self.scales),
            "scales": self.scales,
            "truth": self.truth,
            "nuts_divergent": self.divergent,
            "nuts_seconds": self.nuts_seconds,
        }


def cache_path(cache: Path, family: str, n: int, k: int, samples: int = SAMPLES) -> Path:
    return cache / f"{family}_n{n}_k{k}{'' if samples == SAMPLES else f'_s{samples}'}.npz"


def simulate(family: Family, n: int, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
    """Covariates at their scales, true parameters with sd(η) = 1, responses from the model itself."""
    index = FAMILIES.index(family)
    rng = np.random.default_rng([index, n, k])
    start = (index + round(np.log10(n))) % len(SCALES)
    scales = np.array([SCALES[(start + j) % len(SCALES)] for j in range(k)])
    x = scales * (1.0 + rng.standard_normal((n, k)))
    x = x[:, 0] if k == 1 else x
    truth = {
        "a": np.asarray(family.centre - np.sqrt(k)),
        "b": 1.0 / (np.sqrt(k) * scales),
        **{name: np.asarray(value, float) for name, value in family.truth.items()},
    }
    model = build_model(family, scales)
    predictive = Predictive(
        model, {name: jnp.asarray(v)[None] for name, v in truth.items()}, return_sites=["y"]
    )
    key = jax.random.PRNGKey(int(rng.integers(2**31)))
    y = np.asarray(predictive(key, X=jnp.asarray(x))["y"][0], dtype=float)
    return x, y, scales, truth


def load_or_sample(family: Family, n: int, k: int, cache: Path, samples: int = SAMPLES) -> Dataset:
    path = cache_path(cache, family.name, n, k, samples)
    if not path.exists():
        x, y, scales, truth = simulate(family, n, k)
        started = time.perf_counter()
        # Started at the true parameters: from NumPyro's default start (uniform in (-2, 2)
        # unconstrained) a Poisson chain with its covariate at 1e3 stuck at b = 0.05 (truth 0.001),
        # a with sd 1e-8: draws of no posterior, which no attack can match.
        nuts = NUTS(build_model(family, scales), init_strategy=init_to_value(values=truth))
        mcmc = MCMC(nuts, num_warmup=WARMUP, num_samples=samples, progress_bar=False)
        mcmc.run(jax.random.PRNGKey(0), X=jnp.asarray(x), y=jnp.asarray(y), extra_fields=("diverging",))
        seconds = time.perf_counter() - started
        stuck = [name for name, v in mcmc.get_samples().items() if np.any(np.std(np.asarray(v), axis=0) == 0)]
        if stuck:
            raise RuntimeError(f"NUTS did not move in {', '.join(stuck)}: no posterior draws for {path.name}")
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(
            path,
            X=x,
            y=y,
            scales=scales,
            divergent=int(np.sum(mcmc.get_extra_fields()["diverging"])),
            nuts_seconds=seconds,
            **{f"truth/{k}": v for k, v in truth.items()},
            **{f"draw/{k}": np.asarray(v) for k, v in mcmc.get_samples().items()},
        )
    with np.load(path) as f:

        def group(prefix: str) -> dict[str, np.ndarray]:
            return {key.removeprefix(prefix): f[key] for key in f.files if key.startswith(prefix)}

        return Dataset(
            family,
            f["X"],
            f["y"],
            f["scales"],
            group("truth/"),
            group("draw/"),
            int(f["divergent"]),
            float(f["nuts_seconds"]),
        )


def truth_bar(result: br.Reconstruction, truth: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """The attack's objective against the true data's, on the same draws, with 3 paired Monte Carlo se."""
    n = len(next(iter(truth.values())))
    attack_terms = result.objective_terms(result.measure.points, result.measure.weights)
    truth_terms = result.objective_terms(truth, np.ones(n))
    tolerance = TRUTH_SE * np.std(attack_terms - truth_terms, ddof=1) / np.sqrt(len(truth_terms))
    j_truth = float(truth_terms.mean())
    return {
        "objective": result.objective,
        "objective_recomputed": float(attack_terms.mean()),  # the contract: equals objective
        "objective_truth": j_truth,
        "tolerance": float(tolerance),
        "truth_bar": bool(result.objective <= j_truth + tolerance),
    }


def recovered_statistics(data: Dataset, measure: br.WeightedMeasure) -> dict[str, Any]:
    """N, the covariates' mean and sd against the truth's; Σ y and Σ y·x_j for canonical links."""
    w = measure.weights
    x_hat = np.asarray(measure.points["X"], float).reshape(len(w), -1)
    x = data.X.reshape(len(data.y), -1)
    mean_hat = w @ x_hat / w.sum()
    sd_hat = np.sqrt(w @ (x_hat - mean_hat) ** 2 / w.sum())
    mean, sd = x.mean(axis=0), x.std(axis=0)
    out: dict[str, Any] = {
        "mass": float(w.sum()),
        "N": len(data.y),
        "points": len(w),
        "x_mean": mean_hat,
        "x_mean_true": mean,
        "x_sd": sd_hat,
        "x_sd_true": sd,
        "x_mean_shift": (mean_hat - mean) / sd,  # in true sd
        "x_sd_ratio": sd_hat / sd,
    }
    if data.family.canonical:
        estimate = np.asarray(sufficient_sums(measure.points, w))
        truth = np.asarray(sufficient_sums({"X": data.X, "y": data.y}, np.ones(len(data.y))))
        errors = np.abs(estimate / truth - 1)
        out |= {
            "sufficient": estimate,  # Σ y, Σ y·x_1, ..., Σ y·x_k
            "sufficient_true": truth,
            "sufficient_error": errors,
            "sufficient_bar": bool(errors.max() <= SUFFICIENT_BAR),
        }
    return out


def sufficient_sums(points: Mapping[str, Any], weights: Any) -> jax.Array:
    """Σ w y and Σ w y·x_j: what a canonical link's likelihood sees of the responses (JAX, so that
    ``Reconstruction.statistic_covariance`` can differentiate it too)."""
    weights = jnp.asarray(weights, float)
    y = jnp.asarray(points["y"]).astype(weights.dtype)
    x = jnp.reshape(jnp.asarray(points["X"]), (len(weights), -1)).astype(weights.dtype)
    return jnp.concatenate([(weights @ y)[None], x.T @ (weights * y)])


def error_record(result: br.Reconstruction) -> dict[str, Any]:
    """What every row records of the result's errors: the Monte Carlo standard errors, what the optimiser
    left to go (``shortfall``, ``remaining_gain``, ``short_of_optimum()``), both together
    (``result_errors``), and the closing steps' gains where they ran (``history["closing_gains"]``)."""
    closing = result.history.get("closing_gains")
    return {
        "closing_gains": None if closing is None else closing.tolist(),
        "standard_errors": result.standard_errors,
        "shortfall": result.shortfall,
        "remaining_gain": result.remaining_gain,
        "short_of_optimum": result.short_of_optimum(),
        "result_errors": result.result_errors,
    }


def standard_errors(result: br.Reconstruction, recovered: dict[str, Any]) -> dict[str, Any]:
    """The recovered statistics' errors: the Monte Carlo standard errors (``Reconstruction.standard_errors``,
    ``statistic_covariance`` for Σ y and Σ y·x_j), what the optimiser left to go (``shortfall``,
    ``statistic_shortfall``), both together (``result_errors``), and each error in the units of the last
    (z): a z within ±2 is an error the reported errors cover."""
    errors = result.result_errors
    n_x = len(recovered["x_mean"])
    mass_se = errors["total_mass"] * recovered["mass"]
    mean_se = np.array([errors[f"mean[{i}]"] for i in range(n_x)]) * recovered["x_sd"]  # X comes first
    z = {
        "N": (recovered["mass"] - recovered["N"]) / mass_se,
        **{
            f"x_mean[{i}]": (recovered["x_mean"][i] - recovered["x_mean_true"][i]) / mean_se[i]
            for i in range(n_x)
        },
    }
    out: dict[str, Any] = error_record(result) | {"mass_se": mass_se, "x_mean_se": mean_se}
    if "sufficient_true" in recovered:
        _, covariance = result.statistic_covariance(sufficient_sums)
        monte_carlo = np.sqrt(np.maximum(np.diag(covariance), 0.0))
        se = np.hypot(monte_carlo, result.statistic_shortfall(sufficient_sums))
        truth = recovered["sufficient_true"]
        out["sufficient_se"] = se / np.abs(truth)  # relative to the truth, as the errors
        for j, (estimate, true, error) in enumerate(zip(recovered["sufficient"], truth, se, strict=True)):
            z["Σy" if j == 0 else f"Σy·x{j}"] = (estimate - true) / error
    return out | {"z": {k: float(v) for k, v in z.items()}}


def _regression_design(columns: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(columns["X"], float).reshape(len(columns["y"]), -1)
    return np.column_stack([np.ones(len(x)), x]), np.asarray(columns["y"], float)


NORMAL_REGRESSION = LinearGaussian(
    _regression_design, coefficients=lambda params: jnp.concatenate([params["a"][None], params["b"]])
)


def oracle_statistics(result: br.Reconstruction, data: Dataset) -> dict[str, Any]:
    """The normal family's oracle, the exact minimiser of the same objective over the statistics (N,
    XᵀX, Xᵀy, yᵀy; ``bayes_recon.oracle``): its error against the truth is what the draws allow, the
    attack's distance to it the optimiser's share. Errors as ``linear_model_errors`` (scale-free)."""
    oracle = {k: np.asarray(v, float) for k, v in oracle_for(result, NORMAL_REGRESSION).statistics.items()}
    measure = result.measure
    estimate = measure.linear_model_statistics(*_regression_design(measure.points))
    true_data = br.WeightedMeasure({"X": data.X, "y": data.y}, np.ones(len(data.y)))
    truth = true_data.linear_model_statistics(*_regression_design(true_data.points))
    return {
        "oracle_sufficient_error": np.abs(oracle["Xty"] / truth["Xty"] - 1),  # Σ y, Σ y·x_j
        "vs_oracle": br.linear_model_errors(estimate, oracle),
        "oracle_vs_truth": br.linear_model_errors(oracle, truth),
        "vs_truth": br.linear_model_errors(estimate, truth),
    }


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: kilobytes


def run_attack(
    family: str, n: int, k: int, m: int, seed: int, settings: dict, cache: Path, samples: int
) -> dict:
    """One attack and its checks, in a fresh process (see :func:`in_fresh_process`)."""
    data = load_or_sample(BY_NAME[family], n, k, cache, samples)
    before = peak_rss_mb()
    config = br.ReconConfig(**settings)  # --restarts, --steps where given
    result = br.reconstruct(data.model, data.draws, free=data.free, n_points=m, seed=seed, config=config)
    peak = peak_rss_mb()
    recovered = recovered_statistics(data, result.measure)
    started = time.perf_counter()
    recovered |= standard_errors(result, recovered) | {
        "standard_errors_seconds": time.perf_counter() - started,
        "peak_rss_after_errors_mb": peak_rss_mb(),
    }
    if family == "normal":
        recovered |= oracle_statistics(result, data)
    started = time.perf_counter()
    check = result.self_check
    return {
        "seconds": result.seconds,
        "compile_seconds": result.compile_seconds,
        "peak_rss_mb": peak,
        "rss_before_mb": before,
        **truth_bar(result, {"X": data.X, "y": data.y}),
        **recovered,
        "converged": result.converged(),
        "bootstrap_mass": result.bootstrap["weights"].sum(axis=1) if "weights" in result.bootstrap else [],
        "bootstrap_spread": result.bootstrap_spread(),
        "unseen_mass": result.unseen_mass,
        "restart_information": result.history["information"],
        "restart_objectives": result.restart_objectives,
        "best_restart": result.best_restart,
        "information_fit": result.history["information_fit"],
        "restarts_passed_over": result.passed_over(),
        "self_check": check.to_json(),
        "self_check_summary": check.summary(),
        "self_check_seconds": time.perf_counter() - started,
    }


def in_fresh_process(function: Callable[..., Any], *args: Any) -> Any:
    """``function(*args)`` in a new process, so that its peak memory is its own; an error is a row."""
    try:
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            return pool.submit(function, *args).result()
    except Exception as err:  # a failed attack (or a killed process) is a result of the suite
        return {
            "error": f"{type(err).__name__}: {err}",
            "traceback": "".join(traceback.format_exception(err)),
        }


def run_line(run: dict) -> str:
    """One run, as it finishes."""
    head = f"{run['family']:<17}{run['N']:>6}{run['k']:>3}{run['M']:>4}{run['seed']:>5}  "
    if "error" in run:
        return head + "ERROR " + run["error"].splitlines()[0]
    sufficient = (
        f"Σy,Σyx max {100 * max(run['sufficient_error']):6.2f} % (se "
        f"{100 * max(run['sufficient_se']):.2f} %)  "
        if "sufficient_error" in run
        else ""
    )
    if "vs_oracle" in run:
        sufficient += (
            f"(the oracle's {100 * max(run['oracle_sufficient_error']):.2f} %; every statistic within "
            f"{100 * max(run['vs_oracle'].values()):.2f} % of the oracle)  "
        )
    return head + (
        f"mass {run['mass']:9.1f}  ΔJ {run['objective'] - run['objective_truth']:+.2e} "
        f"tol {run['tolerance']:.1e} {'met' if run['truth_bar'] else 'NOT met'}  {sufficient}"
        f"x mean shift {np.max(np.abs(run['x_mean_shift'])):.3f} sd, sd ratio "
        f"{np.min(run['x_sd_ratio']):.3f}-{np.max(run['x_sd_ratio']):.3f}  self-check "
        f"{'reproduces' if run['self_check']['reproduces'] else 'does NOT reproduce'}  "
        f"{floor_words(run['self_check'])}"
        f"N se {100 * run['standard_errors']['total_mass']:.1f} % (with the shortfall "
        f"{100 * run['result_errors']['total_mass']:.1f} %), z {z_words(run)}  "
        f"unseen mass {run['unseen_mass']:.2f}  "
        f"{bootstrap_words(run)}{run['seconds']:.1f} s  {run['peak_rss_mb']:.0f} MB"
        f"{'  last stage stopped at its step cap' if run.get('converged') is False else ''}"
        f"{stopped_short_words(run)}"
    )


def stopped_short_words(run: dict) -> str:
    """The closing steps where they ran, and where the attack stopped on its own short of the optimum
    (``Reconstruction.remaining_gain``)."""
    closing = run.get("closing_gains")
    closed = "" if closing is None else f"  {len(closing)} closing steps gained {sum(closing):.2f} se"
    if run.get("converged") is False or not run.get("short_of_optimum"):
        return closed
    return f"{closed}  short of the optimum: the objective still falls by {run['remaining_gain']:.2f} se"


def z_words(run: dict) -> str:
    return ", ".join(f"{k} {v:+.1f}" for k, v in run["z"].items())


def bootstrap_words(run: dict) -> str:
    """The bootstrap replicates' masses and the largest spread of any statistic (see
    ``Reconstruction.bootstrap_spread``), or nothing where none ran."""
    if not run.get("bootstrap_spread"):
        return ""
    masses = ", ".join(f"{m:.1f}" for m in run["bootstrap_mass"])
    largest = max(run["bootstrap_spread"].values())
    return f"bootstrap mass {masses}, largest spread {largest:.2f}  "


def spread(values: list[float], scale: float = 1.0, digits: int = 1) -> str:
    """Mean [min, max] over seeds."""
    v = scale * np.asarray(values, float)
    return f"{v.mean():.{digits}f} [{v.min():.{digits}f}, {v.max():.{digits}f}]"


TABLE_HEADER = (
    f"{'family':<17}{'N':>6}{'k':>3}{'M':>4}{'pts':>5}  {'mass':<24}{'ΔJ / tol':>10}{'truth':>7}"
    f"  {'Σy,Σyx max err %':<22}{'|x mean shift| sd':<21}{'x sd ratio (worst)':<21}{'self':>5}"
    f"  {'se % N; |z|≤2':<16}{'time s':<22}{'peak MB':>8}"
)


def table_row(runs: list[dict]) -> str:
    first = runs[0]
    head = f"{first['family']:<17}{first['N']:>6}{first['k']:>3}{first['M']:>4}"
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return head + f"  all {len(runs)} seeds failed: {runs[0]['error'].splitlines()[0]}"
    ratio = [r["x_sd_ratio"][np.argmax(np.abs(np.log(r["x_sd_ratio"])))] for r in ok]
    sufficient = (
        spread([max(r["sufficient_error"]) for r in ok], 100, 2) if "sufficient_error" in ok[0] else "—"
    )
    errors = f"  ({len(runs) - len(ok)} failed)" if len(ok) < len(runs) else ""
    covered = [abs(v) <= 2 for r in ok for v in r["z"].values()]
    mass_se = np.mean([r["result_errors"]["total_mass"] for r in ok])
    se = f"{100 * mass_se:.1f}; {sum(covered)}/{len(covered)}"
    return (
        f"{head}{ok[0]['points']:>5}  {spread([r['mass'] for r in ok]):<24}"
        f"{np.mean([(r['objective'] - r['objective_truth']) / r['tolerance'] for r in ok]):>10.2f}"
        f"{sum(r['truth_bar'] for r in ok):>5}/{len(runs)}  {sufficient:<22}"
        f"{spread([np.max(np.abs(r['x_mean_shift'])) for r in ok], digits=3):<21}"
        f"{spread(ratio, digits=3):<21}{sum(r['self_check']['reproduces'] for r in ok):>3}/{len(runs)}"
        f"  {se:<16}{spread([r['seconds'] for r in ok]):<22}"
        f"{max(r['peak_rss_mb'] for r in ok):>8.0f}{errors}"
    )


def verdict(met: int, total: int, what: str) -> str:
    return f"{'met' if met == total else 'NOT met':<8} {what}  ({met}/{total} seeds)"


def reproduced(runs: list[dict], label: str) -> str:
    """The self-check's count: reported beside the bars, not a bar."""
    count = sum(r["self_check"]["reproduces"] for r in runs if "error" not in r)
    return f"{'':<9}self-check reproduces the release: {label}  ({count}/{len(runs)} seeds)"


def bar_lines(runs: list[dict]) -> list[str]:
    first = runs[0]
    label = f"{first['family']} N={first['N']} k={first['k']} M={first['M']}"
    ok = [r for r in runs if "error" not in r]
    lines = [verdict(sum(r["truth_bar"] for r in ok), len(runs), f"{TRUTH_BAR}: {label}")]
    if BY_NAME[first["family"]].canonical:
        what = f"Σ y and Σ y·x_j within {SUFFICIENT_BAR:.0%} of the truth: {label}"
        lines.append(verdict(sum(r["sufficient_bar"] for r in ok), len(runs), what))
    if "vs_oracle" in first:
        what = f"every statistic within {ORACLE_BAR:.0%} of the oracle: {label}"
        lines.append(verdict(sum(max(r["vs_oracle"].values()) <= ORACLE_BAR for r in ok), len(runs), what))
    return [*lines, reproduced(runs, label)]


def synthetic(args: argparse.Namespace, write: Callable[[dict], None]) -> None:
    datasets: list[dict] = []
    runs: list[dict] = []
    groups: list[list[dict]] = []
    print(f"{'family':<17}{'N':>6}{'k':>3}{'M':>4}{'seed':>5}  (one line per run)", flush=True)
    for family in args.families:
        for n in args.n:
            for k in args.covariates:
                data = load_or_sample(BY_NAME[family], n, k, args.cache, args.samples)
                datasets.append(data.describe())
                for m in args.points:
                    groups.append([])
                    for seed in args.seeds:
                        run = {"family": family, "N": n, "k": k, "M": m, "seed": seed}
                        settings = {k: getattr(args, k) for k in ("restarts", "steps") if getattr(args, k)}
                        run |= {"settings": settings}
                        run |= in_fresh_process(
                            run_attack, family, n, k, m, seed, settings, args.cache, args.samples
                        )
                        runs.append(run)
                        groups[-1].append(run)
                        print(run_line(run), flush=True)
                        write({"datasets": datasets, "runs": runs})
    print(f"\n{TABLE_HEADER}")
    for group in groups:
        print(table_row(group))
    print()
    for group in groups:
        print("\n".join(bar_lines(group)))


def floor_words(check: Mapping[str, Any]) -> str:
    """The self-check's floor (its JSON): the objective above the Gaussian's, in Monte Carlo errors."""
    floor = check.get("floor")
    return "" if not floor or None in floor else f"above the floor {floor[0] / floor[1]:+.1f} errors; "


def checked_rows(name: str, args: argparse.Namespace) -> list[dict]:
    """bayes_posteriordb's rows of one posterior (its loop and oracle columns), each with the truth bar, the
    self-check's verdict, the unseen mass, the parameters d and the peak memory after its attack (its
    ``on_result`` hook, after the row is timed; before the checks). Run in a fresh process
    (:func:`in_fresh_process`), so that the peak is this posterior's attacks' (at several M or seeds, the
    largest so far)."""
    entry = bayes_posteriordb.REGISTRY[name]

    def add_checks(row: dict, result: br.Reconstruction) -> None:
        row["peak_rss_mb"] = peak_rss_mb()
        row["d"] = int(result.setup.draws.shape[1])
        data = entry.model_data(load_posterior(name, args.posteriordb).data)
        row |= truth_bar(result, {k: data[k] for k in entry.free})
        row["self_check"] = result.self_check.to_json()
        row["unseen_mass"] = result.unseen_mass
        row["restart_information"] = result.history["information"].tolist()
        row["restart_objectives"] = result.restart_objectives.tolist()
        row["best_restart"] = result.best_restart
        row["information_fit"] = result.history["information_fit"].tolist()
        row["restarts_passed_over"] = result.passed_over()
        started = time.perf_counter()
        errors = result.result_errors
        mass, n_true = result.measure.total_mass(), len(np.asarray(data[entry.free[0]]))
        row["z_N"] = (mass - n_true) / (errors["total_mass"] * mass)
        said = f"N se {100 * errors['total_mass']:.2f} % (shortfall included), z_N {row['z_N']:+.2f}, " + (
            f"largest se {max(errors.values()):.3f}, largest shortfall {max(result.shortfall.values()):.2g}"
        )
        row |= error_record(result)
        row["standard_errors_seconds"] = time.perf_counter() - started
        print(
            f"{'':<32}truth bar {'met' if row['truth_bar'] else 'NOT met'}: J_attack − J_truth = "
            f"{row['objective'] - row['objective_truth']:+.3e} (tol {row['tolerance']:.3e}); unseen mass "
            f"{row['unseen_mass']:.2f}; {said}; d = {row['d']}; peak {row['peak_rss_mb']:.0f} MB; "
            f"{floor_words(row['self_check'])}self-check: {result.self_check.summary()}",
            flush=True,
        )

    points = [str(m) for m in args.points]
    return bayes_posteriordb.run_posterior(
        name, args.posteriordb, points, args.seeds, args.bootstrap, lambda rows: None, add_checks
    )


def registry(args: argparse.Namespace, write: Callable[[dict], None]) -> None:
    """Every posterior's :func:`checked_rows`, each in a fresh process; a posterior that fails is a row with
    its error at every M."""
    rows: list[dict] = []
    print(
        f"{len(args.posteriors)} posteriors from {args.posteriordb}\n{bayes_posteriordb.HEADER}", flush=True
    )
    for name in args.posteriors:
        found = in_fresh_process(checked_rows, name, args)
        if isinstance(found, dict):  # the error
            print(f"{name:<32}ERROR {found['error'].splitlines()[0]}", flush=True)
            found = [{"posterior": name, "M": m, "truth_bar": False, **found} for m in args.points]
        rows += found
        write({"rows": rows})
    print()
    for name in args.posteriors:
        for m in args.points:
            group = [r for r in rows if r["posterior"] == name and r["M"] == m]
            checked = [r for r in group if "error" not in r]
            for key, what in (
                ("bar_oracle", "within 1 % of the oracle"),
                ("bar_truth", "no further from the truth than the (β, log σ) oracle + 1 %"),
                ("truth_bar", TRUTH_BAR),
            ):
                if checked and all(r[key] is not None for r in checked):  # no oracle bars without an oracle
                    print(verdict(sum(r[key] for r in checked), len(group), f"{what}: {name} M={m}"))
            print(reproduced(group, f"{name} M={m}"))


def whole_numbers(least: int) -> Callable[[str], list[int]]:
    """Comma-separated whole numbers ≥ least (a list option's type)."""

    def parse(text: str) -> list[int]:
        try:
            values = [int(v) for v in text.split(",")]
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected comma-separated whole numbers, got {text!r}"
            ) from None
        if min(values) < least:
            raise argparse.ArgumentTypeError(f"every value must be at least {least}, got {text!r}")
        return values

    return parse


def names(known: list[str], what: str) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        unknown = [n for n in text.split(",") if n not in known]
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown {what} {unknown}; known: {', '.join(known)}")
        return text.split(",")

    return parse


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--families", type=names(list(BY_NAME), "families"), help="comma-separated (default: all)"
    )
    parser.add_argument("--n", type=whole_numbers(1), help="comma-separated data sizes (default 100,1000)")
    parser.add_argument(
        "--covariates", type=whole_numbers(1), help="comma-separated numbers of covariates (default 1,3)"
    )
    parser.add_argument("--points", type=whole_numbers(1), default=[10, 50], help="M per stratum (10,50)")
    parser.add_argument("--seeds", type=whole_numbers(0), default=[0, 1, 2], help="attack seeds (0,1,2)")
    parser.add_argument("--restarts", type=int, help="the attack's restarts (default: ReconConfig's)")
    parser.add_argument(
        "--steps",
        type=int,
        help="ReconConfig.steps: the last stage's steps before its gain rule (default: ReconConfig's)",
    )
    parser.add_argument("--cache", type=Path, default=CACHE, help="simulated data and NUTS draws")
    parser.add_argument(
        "--samples", type=int, default=SAMPLES, help=f"NUTS draws after warm-up, synthetic part ({SAMPLES})"
    )
    parser.add_argument("--registry", action="store_true", help="run the registry posteriors instead")
    parser.add_argument(
        "--posteriors",
        type=names(sorted(REGISTRY), "posteriors"),
        help="with --registry (default: all present)",
    )
    parser.add_argument("--posteriordb", type=Path, default=bayes_posteriordb.SHARED)
    parser.add_argument(
        "--bootstrap", type=int, help="with --registry: bootstrap resamples of the oracle (100)"
    )
    parser.add_argument(
        "--json",
        type=Path,
        help="every per-seed number (default results/bayes_general.json, or bayes_general_registry.json)",
    )
    args = parser.parse_args()

    synthetic_options = ("families", "n", "covariates", "restarts", "steps")
    synthetic_only = [f"--{k}" for k in synthetic_options if getattr(args, k)]
    registry_only = [f"--{k}" for k in ("posteriors", "bootstrap") if getattr(args, k) is not None]
    if args.registry and synthetic_only:
        parser.error(f"{', '.join(synthetic_only)}: for the synthetic suite only, not with --registry")
    if not args.registry and registry_only:
        parser.error(f"{', '.join(registry_only)}: with --registry only")
    for option in ("restarts", "steps"):
        if getattr(args, option) is not None and getattr(args, option) < 1:
            parser.error(f"--{option} must be at least 1, got {getattr(args, option)}")
    if args.bootstrap is not None and args.bootstrap < 0:
        parser.error(f"--bootstrap must be at least 0, got {args.bootstrap}")
    if args.registry:
        available = {p.stem for p in (args.posteriordb / "posteriors").glob("*.json")}
        missing = [n for n in args.posteriors or [] if n not in available]
        if missing:
            parser.error(f"{missing} not in the posteriordb at {args.posteriordb}")
        args.posteriors = args.posteriors or sorted(n for n in REGISTRY if n in available)
        args.bootstrap = 100 if args.bootstrap is None else args.bootstrap
    else:
        args.families = args.families or list(BY_NAME)
        args.n = args.n or [100, 1000]
        args.covariates = args.covariates or [1, 3]
    default = "bayes_general_registry.json" if args.registry else "bayes_general.json"
    path = args.json or Path("results") / default
    settings = {"command": sys.argv, "nuts": {"warmup": WARMUP, "samples": args.samples, "chains": 1}}

    def write(payload: dict) -> None:
        """Rewrite the JSON after every run, so an interrupted suite keeps what it measured."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(jsonable({"settings": settings, **payload}), indent=1))

    (registry if args.registry else synthetic)(args, write)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
