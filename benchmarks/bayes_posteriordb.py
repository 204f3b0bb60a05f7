"""Sliced/exact Fisher-divergence reconstruction of the registry posteriors with an oracle (LinearGaussian).

For a Gaussian linear regression the attack can at best recover T = (N, XᵀX, Xᵀy, yᵀy), and the
divergence estimated from the draws is a quadratic in T whose exact minimiser is the oracle
(``bayes_recon.oracle``). For each posterior, number of pseudo-points M (per combination of the
binary columns' values, so kidiq's mom_hs models have 2M points and nes2000 4M; M = N means N points
in all, N/2 or N/4 per combination) and seed this prints one row: the sum of weights against N;
for each statistic its error against the oracle (in the attack's coordinates) and against the
truth (scale-free, see ``linear_model_errors``); the (β, log σ)-coordinates oracle's error against
the truth; the bootstrap spread of the oracle over the draws; wall seconds (JIT included) and the
time per optimisation step. Bars (issue 2):

* every statistic within 1 % of the oracle;
* no further from the truth than the (β, log σ) oracle is, plus 1 %;
* one M = 50 kidiq run ≤ 30 s wall, JIT included.

``--slices`` adds the sliced estimators' distance to the exact-divergence oracle as a function
of slices per draw and steps (kidiq-kidscore_momiq, M = 50).

Run (from the repository root):
    .venv/bin/python benchmarks/bayes_posteriordb.py --json results/bayes_posteriordb.json --slices
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import bayes_recon as br
from bayes_recon.divergence import Coordinates
from bayes_recon.models import REGISTRY, Entry, LinearGaussian
from bayes_recon.oracle import oracle_for
from bayes_recon.posteriordb import load_posterior
from bayes_recon.pseudo import Layout

# float64 before anything here makes a JAX array: importing bayes_recon no longer switches it on.
br.enable_float64()

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "posteriordb" / "posterior_database"
STATS = ("N", "XtX", "Xty", "yty")


def linear_statistics(
    spec: LinearGaussian, points: dict[str, np.ndarray], weights: np.ndarray
) -> dict[str, np.ndarray]:
    x, y = spec.design(points)
    return br.WeightedMeasure(points, weights).linear_model_statistics(x, y)


def attack(name: str, entry: Entry, posterior: Any, n_points: int, seed: int, config: br.ReconConfig) -> Any:
    data = entry.model_data(posterior.data)
    return br.reconstruct(
        entry.model,
        posterior.draws,
        free={k: data[k].shape[1:] for k in entry.free},
        fixed={k: data[k] for k in entry.fixed},
        support=entry.support,
        n_points=n_points,
        seed=seed,
        config=config,
    )


ORACLE_COLUMNS = (
    "vs_oracle", "vs_truth", "oracle_vs_truth", "raw_oracle_vs_truth", "oracle_spread",
    "bar_oracle", "bar_truth",
)  # fmt: skip


def oracle_columns(spec: LinearGaussian, measure: br.WeightedMeasure, oracles: dict, truth: dict) -> dict:
    """The row's errors against the linear oracle and the truth, and its two bars."""
    estimate = linear_statistics(spec, dict(measure.points), measure.weights)
    vs_oracle = br.linear_model_errors(estimate, oracles["attack"].statistics)
    vs_truth = br.linear_model_errors(estimate, truth)
    raw_vs_truth = br.linear_model_errors(oracles["raw"].statistics, truth)
    values = (
        vs_oracle,
        vs_truth,
        br.linear_model_errors(oracles["attack"].statistics, truth),
        raw_vs_truth,
        oracles["attack"].spread(),
        max(vs_oracle.values()) <= 0.01,
        all(vs_truth[k] <= raw_vs_truth[k] + 0.01 for k in STATS),
    )
    return dict(zip(ORACLE_COLUMNS, values, strict=True))


def run_posterior(
    name: str,
    database: Path,
    points: list[str],
    seeds: list[int],
    bootstrap: int,
    save: Callable[[list[dict]], None],
    on_result: Callable[[dict, br.Reconstruction], None] | None = None,
) -> list[dict]:
    """Attack ``name`` at every M and seed; ``on_result(row, reconstruction)`` may add to each row."""
    entry = REGISTRY[name]
    posterior = load_posterior(name, database)
    data = entry.model_data(posterior.data)
    n_true = len(next(iter(data.values())))
    spec = entry.linear_given(data)  # None: no oracle, the row has mass, time and steps only
    columns = {k: data[k] for k in entry.free}
    truth = None if spec is None else linear_statistics(spec, columns, np.ones(n_true))
    rows, oracles = [], None
    strata = len(Layout({k: data[k].shape[1:] for k in entry.free}, entry.support).strata)
    for m in points:
        n_points = -(-n_true // strata) if m == "N" else int(m)  # M = N: as many points as data in all
        for seed in seeds:
            started = time.perf_counter()
            result = attack(name, entry, posterior, n_points, seed, br.ReconConfig())
            wall = time.perf_counter() - started
            # the coordinates depend on the draws only: one oracle per posterior
            if oracles is None and spec is not None:
                dim = result.setup.draws.shape[1]
                oracles = {
                    "attack": oracle_for(result, spec, n_bootstrap=bootstrap),
                    "raw": oracle_for(result, spec, Coordinates.identity(dim)),
                }
            measure = result.measure
            bars = dict.fromkeys(ORACLE_COLUMNS)
            if spec is not None:
                bars = oracle_columns(spec, measure, oracles, truth)
            steps = int(result.history["steps_taken"].sum(axis=1).max())
            rows.append(
                {
                    "posterior": name,
                    "M": n_points,
                    "points": len(measure),  # M per combination of binary values
                    "seed": seed,
                    "N": n_true,
                    "mass": measure.total_mass(),
                    **bars,
                    "wall_s": wall,
                    "compile_s": result.compile_seconds,
                    "steps": steps,
                    "stage_steps_taken": result.history["steps_taken"][result.best_restart].tolist(),
                    "s_per_step": (result.seconds - result.compile_seconds) / max(steps, 1),
                }
            )
            print(format_row(rows[-1]), flush=True)
            if on_result is not None:
                on_result(rows[-1], result)
            save(rows)
    return rows


def slices_study(database: Path, bootstrap: int) -> list[dict]:
    """Distance of the sliced estimators' reconstruction to the exact-divergence oracle."""
    name = "kidiq-kidscore_momiq"
    entry, posterior = REGISTRY[name], load_posterior(name, database)
    spec = entry.linear_given(entry.model_data(posterior.data))
    exact = attack(name, entry, posterior, 50, 0, br.ReconConfig(estimator="exact"))
    oracle = oracle_for(exact, spec, n_bootstrap=bootstrap)
    rows = []
    for estimator in ("sliced", "sliced_vr"):
        for n_slices in (1, 4, 16):
            for steps in (50, 150):
                config = br.ReconConfig(estimator=estimator, n_slices=n_slices, steps=steps)
                started = time.perf_counter()
                result = attack(name, entry, posterior, 50, 0, config)
                estimate = linear_statistics(spec, dict(result.measure.points), result.measure.weights)
                errors = br.linear_model_errors(estimate, oracle.statistics)
                row = {"estimator": estimator, "slices": n_slices, "steps": steps,
                       "vs_exact_oracle": errors, "wall_s": time.perf_counter() - started}  # fmt: skip
                rows.append(row)
                print(
                    f"{estimator:>9} slices={n_slices:>2} steps={steps:>3}  max error vs exact oracle "
                    f"{100 * max(errors.values()):6.2f} %  ({row['wall_s']:.1f} s)",
                    flush=True,
                )
    return rows


HEADER = (
    f"{'posterior':<32}{'M':>5}{'seed':>5}{'mass':>9}{'N':>6}  "
    f"{'vs oracle % (N XtX Xty yty)':<29}{'vs truth %':<25}{'(β,logσ) oracle %':<25}"
    f"{'spread %':>9}{'wall s':>8}{'ms/step':>8}  bars"
)


def format_row(row: dict) -> str:
    def four(errors: dict[str, float] | None) -> str:
        return "no oracle" if errors is None else " ".join(f"{100 * errors[k]:5.2f}" for k in STATS)

    if row["bar_oracle"] is None:
        bars, spread = "—", float("nan")
    else:
        bars = ("ok" if row["bar_oracle"] else "ORACLE") + "/" + ("ok" if row["bar_truth"] else "TRUTH")
        spread = max(row["oracle_spread"].values(), default=float("nan"))
    return (
        f"{row['posterior']:<32}{row['M']:>5}{row['seed']:>5}{row['mass']:>9.1f}{row['N']:>6}  "
        f"{four(row['vs_oracle']):<29}{four(row['vs_truth']):<25}{four(row['raw_oracle_vs_truth']):<25}"
        f"{100 * spread:>9.2f}{row['wall_s']:>8.1f}{1000 * row['s_per_step']:>8.1f}  {bars}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--posteriordb", type=Path, default=SHARED, help="posteriordb posterior_database folder"
    )
    parser.add_argument(
        "--posteriors", help="comma-separated names (default: every registry posterior present)"
    )
    parser.add_argument("--points", default="10,50,N", help="comma-separated M values; N = the true N")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--bootstrap", type=int, default=100, help="bootstrap resamples of the oracle")
    parser.add_argument("--slices", action="store_true", help="also run the sliced-estimator study")
    parser.add_argument("--only-slices", action="store_true", help="run the sliced-estimator study alone")
    parser.add_argument("--json", type=Path, help="write every row here")
    args = parser.parse_args()

    available = {p.stem for p in (args.posteriordb / "posteriors").glob("*.json")}
    # diamonds only when named: the default M = N would be 5,000 points of 25 coordinates (its M = 50
    # alone took 912 s and 13.9 GB at stop 52)
    linear = sorted(
        n for n, e in REGISTRY.items() if e.linear is not None and n in available and n != "diamonds-diamonds"
    )
    names = args.posteriors.split(",") if args.posteriors else linear
    print(f"{len(names)} posteriors from {args.posteriordb}\n{HEADER}", flush=True)
    rows: list[dict] = []
    study: list[dict] = []

    def save(latest: list[dict]) -> None:
        """Rewrite the JSON after every row, so an interrupted run keeps what it measured."""
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(
                json.dumps({"rows": rows + latest, "slices": study}, indent=1, default=float)
            )

    seeds = [int(s) for s in args.seeds.split(",")]
    for name in [] if args.only_slices else names:
        rows += run_posterior(name, args.posteriordb, args.points.split(","), seeds, args.bootstrap, save)
    known = [r for r in rows if r["bar_oracle"] is not None]  # rows with an oracle
    print(f"\nbar 'within 1 % of the oracle': {sum(r['bar_oracle'] for r in known)}/{len(known)} rows; "
          f"bar 'no further from the truth than the (β, log σ) oracle + 1 %': "
          f"{sum(r['bar_truth'] for r in known)}/{len(known)} rows")  # fmt: skip
    kidiq = [r for r in rows if r["posterior"] == "kidiq-kidscore_momiq" and r["M"] == 50]
    if kidiq:
        walls = ", ".join(f"{r['wall_s']:.1f}" for r in kidiq)
        print(
            f"kidiq-kidscore_momiq, M = 50: wall {walls} s "
            f"(JIT included; bar ≤ 30 s), {1000 * np.mean([r['s_per_step'] for r in kidiq]):.1f} ms per step"
        )
    if args.slices or args.only_slices:
        study += slices_study(args.posteriordb, args.bootstrap)
    save([])
    if args.json:
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
