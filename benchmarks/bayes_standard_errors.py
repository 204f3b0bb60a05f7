"""Are the posterior attack's standard errors the right size? Independent chains against them.

For each family of ``bayes_general.py``'s synthetic suite (its cached data set at N, k): R
independent NUTS chains of the same posterior (started at the true parameters, 500 warm-up steps,
1,000 draws, seeds 1000 + r), one attack on each (``br.reconstruct``, seed 0, M points), and one
attack on the R chains pooled. For N, each covariate's mean and sd and, for a canonical link, Σ y and
Σ y·x_j (``Reconstruction.statistic_covariance``), it prints the truth, the mean and sd over the R
chains, the median [min, max] standard error the attacks reported, and sd / se: about 1 when the
standard errors are the right size (R = 5 pins an sd to about ±35 %), the pooled attack's value
with its standard error and z = (value − truth) / standard error, and the check of the standard
errors one error out (``Reconstruction.statistic_tilt_moves``): the largest move, over both tilts and
the R chains, of a statistic whose objective was tilted to move it by one standard error (about 1
where the errors hold, beyond 1 where they understate; printed capped at 1,000, nan where no tilt
told anything).

Run (from the repository root):
    .venv/bin/python benchmarks/bayes_standard_errors.py --families gamma,bernoulli-logit,poisson \\
        --json results/bayes_standard_errors.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import bayes_general as bg
import jax
import jax.numpy as jnp
import numpy as np
from numpyro.infer import MCMC, NUTS, init_to_value

import bayes_recon as br
from bayes_recon.standard_errors import largest_moves
from recon_core.jsonio import jsonable

br.enable_float64()


def statistics_of(k: int, canonical: bool):
    """N, each covariate's mean and sd, and (canonical links) Σ y and Σ y·x_j of a measure, with names."""
    names = ["N", *(f"x{j + 1} mean" for j in range(k)), *(f"x{j + 1} sd" for j in range(k))]
    if canonical:
        names += ["Σy", *(f"Σy·x{j + 1}" for j in range(k))]

    def statistic(points, weights):
        x = jnp.reshape(points["X"], (weights.shape[0], -1)).astype(weights.dtype)
        mass = weights.sum()
        mean = weights @ x / mass
        sd = jnp.sqrt(weights @ (x - mean) ** 2 / mass)
        parts = [mass[None], mean, sd]
        if canonical:
            parts.append(bg.sufficient_sums(points, weights))
        return jnp.concatenate(parts)

    return names, statistic


def chain(data: bg.Dataset, seed: int) -> dict[str, np.ndarray]:
    mcmc = MCMC(
        NUTS(data.model, init_strategy=init_to_value(values=data.truth)),
        num_warmup=bg.WARMUP,
        num_samples=bg.SAMPLES,
        num_chains=1,
        progress_bar=False,
    )
    mcmc.run(jax.random.PRNGKey(seed), X=jnp.asarray(data.X), y=jnp.asarray(data.y))
    return {k: np.asarray(v) for k, v in mcmc.get_samples().items()}


def family_rows(family: str, n: int, k: int, m: int, chains: int) -> dict:
    data = bg.load_or_sample(bg.BY_NAME[family], n, k, bg.CACHE)
    names, statistic = statistics_of(k, data.family.canonical)
    x = data.X.reshape(n, -1).astype(float)
    y = np.asarray(data.y, float)
    truth = np.concatenate([[n], x.mean(axis=0), x.std(axis=0)])
    if data.family.canonical:
        truth = np.concatenate([truth, bg.sufficient_sums({"X": data.X, "y": y}, np.ones(n))])
    values, errors, tilts, draws = [], [], [], []
    for r in range(chains):
        draws.append(chain(data, 1000 + r))
        result = br.reconstruct(data.model, draws[-1], free=data.free, n_points=m, seed=0)
        value, covariance = result.statistic_covariance(statistic)
        values.append(value)
        errors.append(np.sqrt(np.maximum(np.diag(covariance), 0.0)))
        tilts.append(result.statistic_tilt_moves(statistic))
        moves = largest_moves(tilts[-1])
        said = ", ".join(
            f"{a} {v:.4g} ± {e:.3g} (tilt {t:.3g})"
            for a, v, e, t in zip(names, value, errors[-1], moves, strict=True)
        )
        print(f"{family} chain {r}: {said}", flush=True)
    pooled = {key: np.concatenate([d[key] for d in draws]) for key in draws[0]}
    result = br.reconstruct(data.model, pooled, free=data.free, n_points=m, seed=0)
    pooled_value, covariance = result.statistic_covariance(statistic)
    pooled_error = np.sqrt(np.maximum(np.diag(covariance), 0.0))
    values, errors = np.array(values), np.array(errors)
    return {
        "family": family, "N": n, "k": k, "M": m, "chains": chains, "statistics": names, "truth": truth,
        "values": values, "standard_errors": errors, "tilts": np.array(tilts), "pooled_value": pooled_value,
        "pooled_standard_error": pooled_error, "pooled_draws": len(next(iter(pooled.values()))),
    }  # fmt: skip


def table(rows: list[dict]) -> str:
    lines = [
        f"{'family':<17}{'statistic':<11}{'truth':>11}{'mean':>11}{'sd':>10}  {'se median [min, max]':<30}"
        f"{'sd/se':>6}  {'pooled ± se (z)':<30}{'tilt':>6}"
    ]
    for row in rows:
        for j, name in enumerate(row["statistics"]):
            v, e, t = row["values"][:, j], row["standard_errors"][:, j], row["truth"][j]
            p, pe = row["pooled_value"][j], row["pooled_standard_error"][j]
            se = f"{np.median(e):.3g} [{e.min():.3g}, {e.max():.3g}]"
            pooled = f"{p:.4g} ± {pe:.3g} ({(p - t) / pe:+.2f})"
            moved = min(float(largest_moves(row["tilts"][:, :, j].reshape(-1, 1))[0]), 1e3)
            lines.append(
                f"{row['family']:<17}{name:<11}{t:>11.4g}{v.mean():>11.4g}{v.std(ddof=1):>10.3g}  {se:<30}"
                f"{v.std(ddof=1) / np.median(e):>6.2f}  {pooled:<30}{moved:>6.3g}"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default="gamma,bernoulli-logit,poisson")
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--covariates", type=int, default=1)
    parser.add_argument("--points", type=int, default=10)
    parser.add_argument("--chains", type=int, default=5)
    parser.add_argument("--json", type=Path, required=True)
    args = parser.parse_args()
    families = args.families.split(",")
    unknown = [f for f in families if f not in bg.BY_NAME]
    if unknown:
        parser.error(f"unknown families {unknown}; choose from {sorted(bg.BY_NAME)}")
    if args.chains < 2:
        parser.error(f"--chains must be at least 2 (a spread needs two), got {args.chains}")
    rows = [family_rows(f, args.n, args.covariates, args.points, args.chains) for f in families]
    print(table(rows))
    settings = vars(args) | {"json": str(args.json)}
    args.json.write_text(json.dumps({"settings": settings, "rows": jsonable(rows)}, indent=1))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
