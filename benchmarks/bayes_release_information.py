"""What the released draws say about the data's information matrix, before any attack (Bernstein–von Mises).

Where the posterior is close to Gaussian, its precision is the prior's curvature plus the data's
observed information at the posterior mean θ̄:

    Cov(θ | D)⁻¹ ≈ H_prior(θ̄) + I_D(θ̄),   I_D(θ) = −Σ_i ∇²_θ log p(x_i | θ),   H_prior = −∇²_θ log p(θ),

in NumPyro's unconstrained coordinates (the prior's term carries the transforms' Jacobians). So the
draws alone give Î = Cov(θ)⁻¹ − H_prior(θ̄), with no optimisation. For a Gaussian linear model the
coefficients' block of I_D is XᵀX / σ²: the design's second moments, its correlations and near-
collinear columns included; for a GLM, Σ_i v(η_i) x_i x_iᵀ. This is the premise of a start for the
attack that would take the covariates' whole covariance from the release (issue 17: diamonds' grid,
diagonal, collapses near-collinear covariates; ``benchmarks/bayes_information_start.py`` runs the
attack's stages from such a start).

Per posterior (the registry's, each present in posteriordb; and the synthetic suite of
``benchmarks/bayes_general.py``, its cached NUTS draws, sampled and cached where missing): d, N and
the number of draws S, then

* ``rel F``: ‖Î − I_D‖_F / ‖I_D‖_F, I_D from the true data at θ̄;
* ``whitened``: the largest |eigenvalue| of P^{-1/2} (Î − I_D) P^{-1/2}, P = Cov(θ)⁻¹: the error in the
  release's own units (1: as large as the posterior's whole precision);
* ``halves``: the same whitened norm between the estimates from the draws' two halves (posteriordb's
  first and last chains; the synthetic chain's first and second half), over 2: the Monte Carlo level of
  ``whitened``. It misses what both halves share: the d/S bias of inverting a sample covariance, and a
  posterior's departure from a Gaussian;
* for a Gaussian linear model whose coefficients are coordinates of θ (the registry's linear entries,
  the synthetic normal family), the design itself: with Cov(β)⁻¹ = XᵀX / E[σ²], ``XtX F`` is
  ‖E[σ²] Î_ββ − XᵀX‖_F / ‖XᵀX‖_F (E[σ²] the draws' mean), ``norm err`` the largest relative error of a
  column's root sum of squares (√diag) and, with an intercept column, ``N est`` its entry (N);
* ``kinked``: the likelihood has a kink (Laplace): its observed information is 0 off the kinks, so
  I_D is not what the release's precision holds (that is the expected information, 1 / b² per row for
  a Laplace location of scale b), and the row's errors mean nothing.

Where a posterior is far from Gaussian (a mixture whose labels switch), Î is not the data's information.

Run (from the repository root):
    .venv/bin/python benchmarks/bayes_release_information.py --json results/bayes_release_information.json
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from bayes_general import BY_NAME, CACHE, FAMILIES, NORMAL_REGRESSION, load_or_sample
from bayes_posteriordb import SHARED
from numpyro.infer.util import constrain_fn

import bayes_recon as br
from bayes_recon import information
from bayes_recon.modelcheck import prepare_release
from bayes_recon.models import REGISTRY, LinearGaussian
from bayes_recon.posteriordb import load_posterior

br.enable_float64()


def whitened_norm(difference: np.ndarray, precision: np.ndarray) -> float:
    values, vectors = np.linalg.eigh(precision)
    root = vectors / np.sqrt(values)  # P^{-1/2} (up to a rotation, which leaves the norm as it is)
    return float(np.max(np.abs(np.linalg.eigvalsh(root.T @ difference @ root))))


def released_information(release: Any) -> tuple[np.ndarray, np.ndarray, jax.Array]:
    """Î = Cov(θ)⁻¹ − H_prior(θ̄) from the draws alone, the draws' precision Cov(θ)⁻¹, and θ̄: the attack's
    own estimate (:func:`bayes_recon.information.released_information`, whitened by R, R Rᵀ = Cov(θ)),
    taken back to NumPyro's unconstrained coordinates."""
    target, root, mean = information.released_information(
        release.weighted_model, release.layout, jnp.asarray(release.theta)
    )
    inverse = np.linalg.inv(np.asarray(root))
    return inverse.T @ np.asarray(target) @ inverse, inverse.T @ inverse, mean


def design_moments(
    release: Any, spec: LinearGaussian, columns: dict[str, jax.Array], information: np.ndarray
) -> np.ndarray | None:
    """The estimate of the design's XᵀX from Î: E[σ²] (over the draws) times the coefficients' block
    (Cov(β | σ) = σ² (XᵀX)⁻¹, β's mean free of σ, so Cov(β)⁻¹ = XᵀX / E[σ²]); None where the
    coefficients are not coordinates of θ."""
    model, theta = release.weighted_model, jnp.asarray(release.theta)

    def params(t: jax.Array) -> dict[str, jax.Array]:
        return constrain_fn(model.model, (), {**model.fixed, **columns}, model.unravel(t))

    selection = np.asarray(jax.jacfwd(lambda t: jnp.asarray(spec.coefficients(params(t))))(theta[0]))
    if not (np.isin(selection, (0.0, 1.0)).all() and (selection.sum(axis=1) == 1).all()):
        return None
    index = selection.argmax(axis=1)
    sigma_squared = float(np.mean(np.asarray(jax.vmap(lambda t: params(t)[spec.sigma])(theta)) ** 2))
    return sigma_squared * information[np.ix_(index, index)]


def information_row(
    name: str, release: Any, data: dict[str, np.ndarray], spec: LinearGaussian | None = None
) -> dict[str, Any]:
    started = time.perf_counter()
    model, theta = release.weighted_model, np.asarray(release.theta)
    columns = {k: jnp.asarray(v) for k, v in data.items()}
    released, precision, mean = released_information(release)
    data_information = -np.asarray(jax.hessian(lambda t: jnp.sum(model.loglik_per_point(t, columns)))(mean))
    prior = precision - released  # the prior's curvature at θ̄, as released_information took it
    half = len(theta) // 2
    first, second = (np.linalg.inv(np.atleast_2d(np.cov(t.T))) - prior for t in (theta[:half], theta[half:]))
    error = released - data_information
    return {
        "posterior": name,
        "d": int(theta.shape[1]),
        "N": len(next(iter(data.values()))),
        "S": len(theta),
        "relative_frobenius": float(np.linalg.norm(error) / np.linalg.norm(data_information)),
        "whitened": whitened_norm(error, precision),
        "halves": whitened_norm(first - second, precision) / 2,
        # a Laplace likelihood's observed information is 0 off its kinks: Î has nothing to match there
        "kinked": bool(model.kink_residuals(mean, columns)),
        **({} if spec is None else design_columns(release, spec, columns, released)),
        "seconds": time.perf_counter() - started,
    }


def design_columns(
    release: Any, spec: LinearGaussian, columns: dict[str, jax.Array], released: np.ndarray
) -> dict[str, Any]:
    """:func:`design_moments` against the design's XᵀX (nothing where there is no estimate)."""
    estimate = design_moments(release, spec, columns, released)
    if estimate is None:
        return {}
    x, _ = spec.design({k: np.asarray(v) for k, v in columns.items()})
    xtx = x.T @ x
    norm_error = np.sqrt(np.clip(np.diag(estimate), 0.0, None) / np.diag(xtx)) - 1
    return {
        "design_relative_frobenius": float(np.linalg.norm(estimate - xtx) / np.linalg.norm(xtx)),
        "design_norm_error": float(np.max(np.abs(norm_error))),
        "N_estimate": float(estimate[0, 0]) if np.all(x[:, 0] == 1) else None,
    }


def registry_rows(database: Path) -> list[dict[str, Any]]:
    rows = []
    for name, entry in REGISTRY.items():
        if not (database / "posteriors" / f"{name}.json").exists():
            continue
        posterior = load_posterior(name, database)
        data = entry.model_data(posterior.data)
        free = {k: data[k].shape[1:] for k in entry.free}
        fixed = {k: data[k] for k in entry.fixed}
        release = prepare_release(entry.model, posterior.draws, free, fixed=fixed, support=entry.support)
        spec = entry.linear_given(fixed)
        rows.append(information_row(name, release, {k: data[k] for k in entry.free}, spec))
        print(format_row(rows[-1]), flush=True)
    return rows


def synthetic_rows(families: list[str], sizes: list[int], covariates: list[int]) -> list[dict[str, Any]]:
    rows = []
    for family in families:
        for n in sizes:
            for k in covariates:
                dataset = load_or_sample(BY_NAME[family], n, k, CACHE)
                release = prepare_release(dataset.model, dataset.draws, dataset.free)
                spec = NORMAL_REGRESSION if family == "normal" else None
                columns = {"X": dataset.X, "y": dataset.y}
                row = information_row(f"{family} N={n} k={k}", release, columns, spec)
                rows.append(row)
                print(format_row(row), flush=True)
    return rows


HEADER = (
    f"{'posterior':44s} {'d':>3s} {'N':>6s} {'S':>6s} {'rel F':>8s} {'whitened':>9s} {'halves':>8s}"
    f" {'XtX F':>7s} {'norm err':>8s} {'N est':>8s}"
)


def format_row(row: dict[str, Any]) -> str:
    return (
        f"{row['posterior']:44s} {row['d']:3d} {row['N']:6d} {row['S']:6d} {row['relative_frobenius']:8.3f} "
        f"{row['whitened']:9.3f} {row['halves']:8.3f}"
        + (
            f" {row['design_relative_frobenius']:7.3f} {row['design_norm_error']:8.3f}"
            f" {row['N_estimate'] or float('nan'):8.1f}"
            if "design_relative_frobenius" in row
            else ""
        )
        + ("  kinked" if row["kinked"] else "")
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", type=Path, default=SHARED)
    parser.add_argument("--families", default=",".join(f.name for f in FAMILIES))
    parser.add_argument("--n", default="100", help="synthetic data sizes, comma-separated (cached NUTS)")
    parser.add_argument("--covariates", default="1,3")
    parser.add_argument("--no-registry", action="store_true")
    parser.add_argument("--json", type=Path, default=Path("results/bayes_release_information.json"))
    args = parser.parse_args()
    print(HEADER)
    rows = [] if args.no_registry else registry_rows(args.database)
    numbers = [int(v) for v in re.split(r",\s*", args.n)]
    ks = [int(v) for v in re.split(r",\s*", args.covariates)]
    rows += synthetic_rows([f for f in args.families.split(",") if f], numbers, ks)
    print("\n" + HEADER + "\n" + "\n".join(format_row(r) for r in rows))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"rows": rows}, indent=2))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
