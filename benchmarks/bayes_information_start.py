"""The attack's stages from a start that the release's information gives, against the grid's start.

The lead of ``benchmarks/bayes_release_information.py``: the released draws alone give the data's
information, Î = Cov(θ)⁻¹ − H_prior(θ̄) (Bernstein–von Mises). For a Gaussian linear model
y ~ Normal(Xβ, σ) the coefficients' block of the true data's information is XᵀX / σ², so E[σ²] Î_ββ
estimates XᵀX: N (the intercept's entry), the covariates' mean and their whole covariance,
near-collinear columns included. This script builds the start cloud from that (covariates Gaussian
with that mean and covariance, mass N̂, responses from the model's predictive at the posterior mean,
as every start of the attack) and runs one restart's stages from it: the Newton stage on the cloud on
every draw, then every point and weight (``bayes_recon.stages.run_stages`` with ``warm``: the path of
the bootstrap replicates, which skips the grid and the stages on the subset of draws). With ``--grid``,
beside it the same restart from the grid: the attack's own path for its restart 0, its other restart,
rescues, repairs, self-check and standard errors left out.

For the registry's Gaussian linear posteriors whose coefficients are coordinates of θ and whose design
is (1, covariates − a constant), every free column real (diamonds). Per posterior
and seed (the attack's restart 0 of that seed: its base points, key, subset and slices): the objective
on every draw at the start and at the end, J_truth (the true data, all weights 1, on the same draws and
slices), the mass, the relative error of the final measure's XᵀX (Frobenius) against the truth's, the
steps of the Newton stage and of the last one, and the wall time of the stages, without the program's
compilation (one program per seed serves both starts, compiled with the attack's CPU options; its
seconds are in the JSON).
J_end ≤ J_truth meets the truth bar whatever its Monte Carlo tolerance.

The attack itself now fits its start to the information for any model (``bayes_recon.information``,
one restart of each attack: ``ReconConfig.information_start``); this script keeps the closed form for
Gaussian linear designs, from which that fit was learnt, and its grid start without the fit.

Run (from the repository root):
    .venv/bin/python benchmarks/bayes_information_start.py --grid --json results/bayes_information_start.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from bayes_posteriordb import SHARED
from bayes_release_information import design_moments, released_information
from numpyro.distributions import constraints

import bayes_recon as br
from bayes_recon import pseudo
from bayes_recon.divergence import Coordinates
from bayes_recon.modelcheck import prepare_release
from bayes_recon.models import REGISTRY
from bayes_recon.objective import (
    Objectives,
    ScoreMatching,
    build_hessian,
    build_mass_quadratic,
    build_objective,
    build_objective_error,
)
from bayes_recon.posteriordb import load_posterior
from bayes_recon.precision import attack_numerics
from bayes_recon.reconstruct import CPU_COMPILER_OPTIONS
from bayes_recon.stages import make_start, run_stages

br.enable_float64()


def information_cloud(
    moments: np.ndarray, layout: pseudo.Layout, covariates: list[int], centre: np.ndarray, n_points: int
) -> pseudo.Cloud:
    """Covariates (``covariates``, coordinates of the layout) with the moments' mean (the design's
    columns are the covariates less ``centre``) and covariance, the response's own scale 0 (the
    predictive's noise), mass N̂ = the intercept's entry."""
    n_hat = moments[0, 0]
    mu = moments[0, 1:] / n_hat
    covariance = moments[1:, 1:] / n_hat - np.outer(mu, mu)
    d = layout.dim
    if np.linalg.eigvalsh(covariance)[0] <= 0:
        raise SystemExit(
            "the information's covariates' covariance is not positive definite: no cloud from it"
        )
    scale = np.eye(d)
    scale[np.ix_(covariates, covariates)] = np.linalg.cholesky(covariance)
    shift = np.zeros(d)
    shift[covariates] = centre + mu
    rows, cols = np.tril_indices(d, -1)
    return pseudo.Cloud(
        jnp.asarray(shift)[None],
        jnp.log(jnp.asarray(np.diag(scale)))[None],
        jnp.asarray(scale[rows, cols])[None],
        jnp.asarray([np.log(n_hat / n_points)]),
    )


def design_layout(
    spec: Any, layout: pseudo.Layout, columns: dict[str, np.ndarray]
) -> tuple[list[int], np.ndarray]:
    """The layout's coordinates that the design's columns after the intercept are, less a constant (the
    centre, returned too); anything else (a log, an interaction, a response that is transformed) is
    refused: the cloud below is Gaussian in the covariates themselves."""
    if any(layout.support(k) is not constraints.real for k in layout.shapes):
        raise SystemExit("a free column is not real: the Gaussian cloud below is not in its own units")
    x, y = spec.design(columns)
    z = np.asarray(layout.unconstrain(columns))  # the columns themselves: every one is real
    response = [i for i in range(z.shape[1]) if np.allclose(z[:, i], y)]
    covariates = [i for i in range(z.shape[1]) if i not in response]
    centre = z[0, covariates] - x[0, 1:]
    if not (
        len(response) == 1
        and np.all(x[:, 0] == 1)
        and x.shape[1] == len(covariates) + 1
        and np.allclose(z[:, covariates] - centre, x[:, 1:])
    ):
        raise SystemExit("the design is not (1, covariates − a constant) with the response as is: not here")
    return covariates, centre


@attack_numerics
def run_posterior(name: str, database: Path, seeds: list[int], n_points: int, grid: bool) -> list[dict]:
    entry, posterior = REGISTRY[name], load_posterior(name, database)
    data = entry.model_data(posterior.data)
    fixed = {k: data[k] for k in entry.fixed}
    spec = entry.linear_given(fixed)
    release = prepare_release(
        entry.model, posterior.draws, {k: data[k].shape[1:] for k in entry.free}, fixed, entry.support
    )
    weighted, layout = release.weighted_model, release.layout
    free = {k: np.asarray(data[k]) for k in entry.free}
    columns = {k: jnp.asarray(v) for k, v in free.items()}
    moments = design_moments(release, spec, columns, released_information(release)[0])
    if moments is None:
        raise SystemExit(f"{name}: the coefficients are not coordinates of θ: no start from the information")
    theta = jnp.asarray(release.theta)
    config = br.ReconConfig()
    coordinates = Coordinates.standardised(theta)
    z = coordinates.to_attack(theta)
    estimator = config.resolved_estimator(theta.shape[1])
    problem = ScoreMatching(weighted, layout, coordinates, estimator, config.n_slices)
    begin = make_start(weighted, layout, theta, n_points, estimator, config)
    steps = config.stage_steps(bool(begin.located), False)
    x_true, _ = spec.design(free)
    xtx_true = x_true.T @ x_true
    truth_z = layout.unconstrain(columns)
    n, d = truth_z.shape
    truth = pseudo.Pseudo(
        pseudo.Cloud(jnp.zeros((1, d)), jnp.zeros((1, d)), jnp.zeros((1, d * (d - 1) // 2)), jnp.zeros(1)),
        pseudo.Points(jnp.zeros((1, n, d)), jnp.zeros((1, n))),
    )
    covariates, centre = design_layout(spec, layout, free)
    start = information_cloud(moments, layout, covariates, centre, n_points)
    rows, cpu = [], jax.default_backend() == "cpu"
    for seed in seeds:
        subset = jax.random.permutation(jax.random.PRNGKey(seed + 2), z.shape[0])[: config.coarse_draws]
        key = jax.random.split(jax.random.PRNGKey(seed), config.restarts)[0]
        base = pseudo.base_points(key, n_points, layout.dim)

        def objectives(draws: jax.Array, coarse: jax.Array, seed: int = seed) -> Objectives:
            return Objectives(
                coarse=build_objective(problem, coarse, seed + 3),
                full=build_objective(problem, draws, seed + 1),
                full_error=build_objective_error(problem, draws, seed + 1),
                minibatch=None,
                coarse_in_mass=build_mass_quadratic(problem, coarse, seed + 3),
                coarse_hessian=build_hessian(problem, coarse, seed + 3),
            )

        def stages(
            draws: jax.Array,
            coarse: jax.Array,
            warm: jax.Array,
            cloud: pseudo.Cloud,
            base: jax.Array,
            key: jax.Array,
        ) -> tuple:
            fns = objectives(draws, coarse)
            begun = fns.full(begin.with_responses(cloud, base), base, key)
            params, _, _, final, taken, _, _ = run_stages(
                fns,
                layout,
                begin,
                base,
                key,
                config,
                steps,
                warm,
                cloud,
                jnp.asarray(False),
                jnp.asarray(False),
            )
            return begun, params, final, taken

        j_truth = float(jax.jit(build_objective(problem, z, seed + 1))(truth, truth_z, key))
        arguments = (z, z[subset], jnp.asarray(True), start, base, key)
        started = time.perf_counter()
        # one program for both starts (``warm`` is traced), with the attack's own compiler options
        compiled = jax.jit(stages).lower(*arguments).compile(CPU_COMPILER_OPTIONS if cpu else None)
        compile_seconds = time.perf_counter() - started
        for label, warm in (("information", True), *((("grid", False),) if grid else ())):
            started = time.perf_counter()
            ended = compiled(z, z[subset], jnp.asarray(warm), start, base, key)
            begun, params, final, taken = jax.block_until_ready(ended)
            seconds = time.perf_counter() - started
            points, weights = pseudo.measure(layout, params, base)
            x, _ = spec.design({k: np.asarray(v) for k, v in points.items()})
            xtx = x.T @ (np.asarray(weights)[:, None] * x)
            row = {
                "posterior": name,
                "seed": seed,
                "start": label,
                "N": n,
                "N_information": float(moments[0, 0]),
                "J_start": float(begun) if warm else None,
                "J_end": float(final),
                "J_truth": j_truth,
                "mass": float(np.sum(weights)),
                "XtX_relative_frobenius": float(np.linalg.norm(xtx - xtx_true) / np.linalg.norm(xtx_true)),
                "steps_taken": [int(t) for t in np.asarray(taken)],
                "seconds": seconds,
                "compile_seconds": compile_seconds,
            }
            rows.append(row)
            print(format_row(row), flush=True)
    return rows


HEADER = (
    f"{'posterior':20s} {'seed':>4s} {'start':12s} {'J start':>9s} {'J end':>9s} {'J truth':>9s} "
    f"{'bar':>4s} {'mass':>8s} {'N':>6s} {'XtX F':>7s} {'Newton':>6s} {'last':>5s} {'s':>6s}"
)


def format_row(row: dict[str, Any]) -> str:
    met = "met" if row["J_end"] <= row["J_truth"] else "no"
    begun = "" if row["J_start"] is None else f"{row['J_start']:.3f}"
    return (
        f"{row['posterior']:20s} {row['seed']:4d} {row['start']:12s} {begun:>9s} {row['J_end']:9.4f} "
        f"{row['J_truth']:9.4f} {met:>4s} {row['mass']:8.1f} {row['N']:6d} "
        f"{row['XtX_relative_frobenius']:7.4f} "
        f"{row['steps_taken'][2]:6d} {row['steps_taken'][3]:5d} {row['seconds']:6.0f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", type=Path, default=SHARED)
    parser.add_argument("--posteriors", default="diamonds-diamonds")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--points", type=int, default=50)
    parser.add_argument(
        "--grid", action="store_true", help="also one restart from the grid (the attack's path)"
    )
    parser.add_argument("--json", type=Path, default=Path("results/bayes_information_start.json"))
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    unknown = [name for name in args.posteriors.split(",") if name not in REGISTRY]
    if unknown:
        parser.error(f"not in the registry: {', '.join(unknown)} (bayes-recon list names them)")
    print(HEADER)
    rows = []
    for name in args.posteriors.split(","):
        rows += run_posterior(name, args.database, seeds, args.points, args.grid)
    print("\n" + HEADER + "\n" + "\n".join(format_row(r) for r in rows))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"rows": rows}, indent=2))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
