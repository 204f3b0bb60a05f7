"""How often the self-check passes the true data, and how often it catches a measure that is wrong.

For three releases, kidiq-kidscore_momiq (posteriordb's thinned reference draws, nearly independent),
the model-styles suite's group-intercepts (an eight-group hierarchy; 1,000 NUTS draws in chain order,
effective size about 200) and its mixture-labels-switch (a two-component normal mixture whose 1,000 NUTS
draws switch labels six times; ``--no-relabel`` compares them as labelled), this runs
``selfcheck.round_trip`` at NUTS seeds 0..S-1 on the true data
(all weights one) and on wrong measures: every weight ×0.7, ×0.8 or ×1.5, and the response moved by
0.05 of its sd. It prints, per release and measure, how many seeds the check passes, the largest MMD²
over its critical value, the worst mean shift and |log sd ratio| (over the seeds where NUTS sampled),
the kinds of reason it gave (mean, sd, MMD², outside, divergent, floor; a seed can give several), the
measure's objective above the Gaussian floor in Monte Carlo errors (``reconstruct.floor_check``: the
same at every seed, failing the check beyond ``max_floor_errors``), and the
mean wall time of a check (its NUTS chain compiled each time: no persistent cache here). The true data
should pass every seed; the wrong measures should fail. ``--target-accept`` sets NUTS's target
acceptance rate (default the check's own).

Run (from the repository root):
    .venv/bin/python benchmarks/bayes_selfcheck_calibration.py --seeds 20 \
        --json results/bayes_selfcheck_calibration.json
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from bayes_model_styles import BY_CASE, CACHE, sampled

import bayes_recon as br
from bayes_recon.models import lookup
from bayes_recon.posteriordb import load_posterior
from bayes_recon.reconstruct import AttackSetup, floor_check
from bayes_recon.selfcheck import SelfCheckConfig, round_trip
from recon_core.measure import WeightedMeasure

br.enable_float64()

ONE_STEP = br.ReconConfig(coarse_steps=0, steps=1, restarts=1, rescue_restarts=0, refine_rounds=0)
Measure = tuple[Mapping[str, np.ndarray], np.ndarray]


def kidiq() -> tuple[AttackSetup, dict[str, Measure]]:
    entry, posterior = lookup("kidiq-kidscore_momiq"), load_posterior("kidiq-kidscore_momiq")
    data = entry.model_data(posterior.data)
    result = br.reconstruct(entry.model, posterior.draws, free=list(entry.free), n_points=5, config=ONE_STEP)
    return result.setup, _measures({k: np.asarray(data[k]) for k in entry.free}, "kid_score")


def _measures(truth: dict[str, np.ndarray], response: str) -> dict[str, Measure]:
    """The true data, and wrong measures: every weight scaled, or the response moved."""
    n, y = len(truth[response]), truth[response]
    return {
        "truth": (truth, np.ones(n)),
        "weights x0.7": (truth, np.full(n, 0.7)),
        "weights x0.8": (truth, np.full(n, 0.8)),
        "weights x1.5": (truth, np.full(n, 1.5)),
        "response +0.05 sd": ({**truth, response: y + 0.05 * np.std(y)}, np.ones(n)),
    }


def model_style(name: str) -> Callable[[], tuple[AttackSetup, dict[str, Measure]]]:
    """A release of the model-styles suite (its cached NUTS draws, in chain order) and its measures."""

    def release() -> tuple[AttackSetup, dict[str, Measure]]:
        case = BY_CASE[name]
        data, draws = sampled(case, CACHE)
        result = br.reconstruct(
            case.model, draws, free=case.free, support=dict(case.support), n_points=20, config=ONE_STEP
        )
        truth = {k: np.asarray(data[k]) for k in case.free}
        return result.setup, _measures(truth, "y")

    return release


RELEASES = {
    "kidiq-kidscore_momiq": kidiq,
    "group-intercepts": model_style("group-intercepts"),
    "mixture-labels-switch": model_style("mixture-labels-switch"),
}


def run(release: str, seeds: int, target_accept: float, relabel: bool) -> list[dict[str, Any]]:
    setup, measures = RELEASES[release]()
    floor_of = floor_check(setup, ONE_STEP.n_slices)
    rows = []
    for name, (points, weights) in measures.items():
        checks, seconds = [], []
        floor = floor_of(WeightedMeasure(dict(points), weights))
        for seed in range(seeds):
            start = time.perf_counter()
            config = SelfCheckConfig(seed=seed, target_accept=target_accept, relabel=relabel)
            checks.append(round_trip(setup, points, weights, config, floor))
            seconds.append(time.perf_counter() - start)
        reasons = Counter(_kind(reason) for check in checks for reason in check.reasons)
        rows.append(
            {
                "release": release,
                "measure": name,
                "target_accept": target_accept,
                "relabel": relabel,
                "relabelled": checks[0].relabelled,
                "seeds": seeds,
                "passes": sum(check.reproduces for check in checks),
                "max_statistic_over_critical": _worst([check.statistic / check.critical for check in checks]),
                "max_mean_shift": _worst([np.max(np.abs(check.mean_shift)) for check in checks]),
                "max_log_sd_ratio": _worst([np.max(np.abs(np.log(check.sd_ratio))) for check in checks]),
                "reasons": dict(reasons),
                "floor_errors": floor[0] / floor[1],
                "mean_seconds": float(np.mean(seconds)),
            }
        )
        print(_line(rows[-1]), flush=True)
    return rows


def _worst(values: list[float]) -> float:
    """The largest value over the seeds where NUTS sampled (NaN where it never did). An infinite value
    stays: a chain stuck at its start has an sd ratio of 0, the worst there is."""
    sampled = [float(v) for v in values if not np.isnan(v)]
    return max(sampled) if sampled else float("nan")


REASON_KINDS = {
    "beyond the released draws": "outside",  # before "sd": its text says "posterior sd beyond"
    "the posterior mean of": "mean",
    "the posterior sd of": "sd",
    "joint distribution": "MMD²",
    "diverged": "divergent",
    "not finite": "not finite",
    "non-finite": "not finite",
    "above that of a Gaussian": "floor",
}


def _kind(reason: str) -> str:
    """The kind of a failed comparison (its numbers vary from seed to seed)."""
    return next((kind for key, kind in REASON_KINDS.items() if key in reason), reason)


def _line(row: Mapping[str, Any]) -> str:
    reasons = "; ".join(f"{count}× {reason}" for reason, count in row["reasons"].items()) or "—"
    return (
        f"| {row['release']} | {row['measure']} | {row['passes']} of {row['seeds']} | "
        f"{row['max_statistic_over_critical']:.2f} | {row['max_mean_shift']:.2f} | "
        f"{row['max_log_sd_ratio']:.2f} | {row['floor_errors']:+.1f} | {row['mean_seconds']:.2f} | "
        f"{reasons} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--releases", default=",".join(RELEASES), help="comma-separated (default: all)")
    parser.add_argument("--seeds", type=int, default=20, help="NUTS seeds per measure (20)")
    parser.add_argument(
        "--target-accept", type=float, default=SelfCheckConfig().target_accept, help="NUTS's (0.9)"
    )
    parser.add_argument(
        "--no-relabel", action="store_true", help="compare a mixture's components as labelled in each draw"
    )
    parser.add_argument("--json", type=Path, default=Path("results/bayes_selfcheck_calibration.json"))
    args = parser.parse_args()
    unknown = sorted(set(args.releases.split(",")) - set(RELEASES))
    if unknown:
        parser.error(f"unknown releases {unknown}; choose from {sorted(RELEASES)}")
    print(f"NUTS target acceptance {args.target_accept:g}; components relabelled: {not args.no_relabel}")
    print(
        "| release | measure | passes | max MMD²/critical | max mean shift (sd) | max \\|log sd ratio\\| "
        "| above the floor (errors) | s | reasons |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    rows = [
        row
        for release in args.releases.split(",")
        for row in run(release, args.seeds, args.target_accept, not args.no_relabel)
    ]
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
