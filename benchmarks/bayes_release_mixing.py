"""How well the releases the attack is tried on mix, and what an unconverged release does to the attack.

The attack and its self-check assume the released draws come from the posterior. The self-check's
summary says when a release looks otherwise (:func:`bayes_recon.selfcheck.mixing_note`: rank-normalised
split-R̂ over four blocks of the draws in their order above 1.1, or a bulk effective size under 100
and under a quarter of the draws).
This benchmark measures that on every release of the public suite, and attacks one model twice:

* **mixing**: max R̂ and min effective size over the unconstrained coordinates (label switching undone
  as the self-check undoes it) of every registry posterior's reference draws, every model-styles case's
  cached NUTS draws (``benchmarks/bayes_model_styles.py``), and two releases of a Dirichlet regression
  whose covariate is at 1,000 ± 50 (a slope's prior sd 0.05): NUTS from NumPyro's default start with
  500 warm-up steps (``short``), and from the prior's median with 1,000 (``converged``);
* **attack**: both Dirichlet releases at M = 20, seed 0: the mass against the true 250, the truth bar
  (J_attack ≤ J_truth + 3 Monte Carlo se, as in ``benchmarks/bayes_general.py``), the self-check's
  verdict and whether its summary names the release's mixing.

    .venv/bin/python benchmarks/bayes_release_mixing.py --json results/bayes_release_mixing.json
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import bayes_model_styles
import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from bayes_general import truth_bar
from bayes_posteriordb import SHARED
from numpyro.infer import MCMC, NUTS, init_to_median, init_to_uniform

import bayes_recon as br
from bayes_recon.modelcheck import prepare_release
from bayes_recon.models import REGISTRY
from bayes_recon.pipeline import load_problem
from bayes_recon.relabel import find_relabelling, relabel
from bayes_recon.selfcheck import mixing_note, release_mixing
from recon_core.jsonio import jsonable

CACHE = Path(__file__).resolve().parents[1] / "results" / "bayes_release_mixing_cache"
SHIFT, SCALE, ROWS = 1000.0, 50.0, 250


def dirichlet_regression(x, y=None):  # four shares; the slope's prior sized to the covariate's units
    a = numpyro.sample("a", dist.Normal(0, 3).expand([4]).to_event(1))
    b = numpyro.sample("b", dist.Normal(0, 2.5 / SCALE).expand([4]).to_event(1))
    with numpyro.plate("rows", x.shape[0]):
        numpyro.sample("y", dist.Dirichlet(jnp.exp(a + b * (x[:, None] - SHIFT))), obs=y)


def dirichlet_data() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    u = rng.normal(size=ROWS)
    concentration = np.exp(np.array([1.0, 0.2, 1.5, 0.7]) + np.outer(u, [0.5, -0.5, 0.0, 0.25]))
    y = np.stack([rng.dirichlet(c) for c in concentration])
    y = np.clip(y, 1e-9, None)
    return {"x": SHIFT + SCALE * u, "y": y / y.sum(axis=1, keepdims=True)}


# how each Dirichlet release is sampled: (start, warm-up steps)
DIRICHLET_RELEASES: dict[str, tuple[Callable, int]] = {
    "short": (init_to_uniform, 500),
    "converged": (init_to_median, 1000),
}


def dirichlet_release(which: str, data: Mapping[str, np.ndarray], cache: Path) -> dict[str, np.ndarray]:
    path = cache / f"dirichlet-{which}.npz"
    if not path.exists():
        start, warmup = DIRICHLET_RELEASES[which]
        nuts = NUTS(dirichlet_regression, init_strategy=start)
        mcmc = MCMC(nuts, num_warmup=warmup, num_samples=1000, progress_bar=False)
        mcmc.run(jax.random.PRNGKey(0), **data)
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(path, **{k: np.asarray(v) for k, v in mcmc.get_samples().items()})
    with np.load(path) as f:
        return {k: f[k] for k in f.files}


def mixing_row(
    group: str, name: str, model: Callable, draws: Any, free: Any, fixed: Mapping, support: Any, data: Mapping
) -> dict[str, Any]:
    """Max R̂ and min effective size of the release in the attack's unconstrained coordinates, label
    switching undone on the true data as the self-check undoes it on the pseudo-data."""
    release = prepare_release(model, draws, free, fixed, support)
    theta = np.asarray(release.theta)
    points = {k: jnp.asarray(v) for k, v in data.items()}
    found = find_relabelling(release.weighted_model, points, theta)
    if found is not None:
        theta = relabel(release.weighted_model, points, found, theta)
    rhat, effective = release_mixing(theta)
    names = release.weighted_model.coordinate_names
    worst, fewest = int(np.argmax(rhat)), int(np.argmin(effective))
    return {
        "group": group,
        "release": name,
        "draws": len(theta),
        "rhat": float(rhat[worst]),
        "rhat_at": names[worst],
        "effective": float(effective[fewest]),
        "effective_at": names[fewest],
        "noted": bool(mixing_note(theta, names)),
    }


def mixing_rows(database: Path, cache: Path) -> list[dict[str, Any]]:
    rows = []
    for name in REGISTRY:
        problem = load_problem(name, database)
        truth = {k: np.asarray(problem.truth.points[k]) for k in problem.free} if problem.truth else {}
        entry = problem.entry
        free, fixed = problem.free, problem.fixed
        rows.append(
            mixing_row("registry", name, entry.model, problem.draws, free, fixed, entry.support, truth)
        )
        print(format_mixing(rows[-1]), flush=True)
    for case in bayes_model_styles.CASES:
        data, draws = bayes_model_styles.sampled(case, bayes_model_styles.CACHE)
        fixed, truth = {k: data[k] for k in case.fixed}, {k: data[k] for k in case.free}
        rows.append(mixing_row("styles", case.name, case.model, draws, case.free, fixed, case.support, truth))
        print(format_mixing(rows[-1]), flush=True)
    data = dirichlet_data()
    for which in DIRICHLET_RELEASES:
        draws = dirichlet_release(which, data, cache)
        free = {"x": (), "y": (4,)}
        rows.append(mixing_row("dirichlet", which, dirichlet_regression, draws, free, {}, None, data))
        print(format_mixing(rows[-1]), flush=True)
    return rows


def attack_row(which: str, cache: Path, n_points: int) -> dict[str, Any]:
    data = dirichlet_data()
    draws = dirichlet_release(which, data, cache)
    result = br.reconstruct(dirichlet_regression, draws, free={"x": (), "y": (4,)}, n_points=n_points, seed=0)
    check = result.self_check
    return {
        "release": which,
        "M": n_points,
        "mass": float(np.sum(result.measure.weights)),
        "seconds": result.seconds,
        **truth_bar(result, data),
        "reproduces": bool(check.reproduces),
        "mixing_named": bool(check.mixing),
        "summary": check.summary(),
    }


def format_mixing(row: Mapping[str, Any]) -> str:
    return (
        f"{row['group']:<10}{row['release']:<44}{row['draws']:>6}{row['rhat']:>8.3f} {row['rhat_at']:<14}"
        f"{row['effective']:>7.0f} {row['effective_at']:<14}{'noted' if row['noted'] else ''}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--posteriordb", type=Path, default=SHARED, help="posteriordb posterior_database folder"
    )
    parser.add_argument("--cache", type=Path, default=CACHE)
    parser.add_argument("--points", type=int, default=20, help="M for the Dirichlet attacks (20)")
    parser.add_argument("--json", type=Path, default=Path("results/bayes_release_mixing.json"))
    args = parser.parse_args()
    br.enable_float64()
    print(f"{'group':<10}{'release':<44}{'draws':>6}{'max R̂':>8} {'at':<14}{'min ESS':>7} {'at':<14}")
    mixing = mixing_rows(args.posteriordb, args.cache)
    attacks = [attack_row(which, args.cache, args.points) for which in DIRICHLET_RELEASES]
    print(f"\n{'release':<11}{'M':>4}{'mass/250':>10}{'ΔJ/tol':>8}{'truth bar':>10}{'reproduces':>11}  named")
    for row in attacks:
        gap = (row["objective"] - row["objective_truth"]) / row["tolerance"]
        print(
            f"{row['release']:<11}{row['M']:>4}{row['mass']:>10.1f}{gap:>8.1f}{row['truth_bar']!s:>10}"
            f"{row['reproduces']!s:>11}  {row['mixing_named']}"
        )
    for row in attacks:
        print(f"\n{row['release']}: {row['summary']}")
    for group in ("registry", "styles", "dirichlet"):
        rows = [r for r in mixing if r["group"] == group]
        rhat, effective = [r["rhat"] for r in rows], [r["effective"] for r in rows]
        noted = sum(r["noted"] for r in rows)
        print(
            f"{group}: R̂ {min(rhat):.3f}–{max(rhat):.3f}, min ESS {min(effective):.0f}, "
            f"noted {noted} of {len(rows)}"
        )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    record = {"settings": {k: str(v) for k, v in vars(args).items()}, "mixing": mixing, "attacks": attacks}
    args.json.write_text(json.dumps(jsonable(record), indent=1))


if __name__ == "__main__":
    main()
