"""DP-GD as the mitigation: attack quality and model accuracy across ε, MNIST informed adversary.

Released and shadow models are trained with full-batch DP-GD (per-example clipping at C, Gaussian
noise with σ from dp-accounting's RDP accountant for (ε, δ=1e-5) over the 100 steps), in the
Balle et al. MNIST setting otherwise; ε = ∞ is plain GD. For each ε: the noise multiplier, the
RecoNN's mean MSE and success rate against the nearest-neighbour oracle, and the released
models' mean test accuracy. CPU time is scarce, so the defaults are smaller than the main
benchmark (K shadows and targets are flags).

    .venv/bin/python benchmarks/dp_sweep.py --shadows 2000 --targets 300 [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import asdict
from pathlib import Path

import torch

from nn_recon.attacks.reconn_attack import InformedAttackConfig
from nn_recon.dp import DPConfig, noise_multiplier
from nn_recon.pipeline import attack_informed
from nn_recon.reconn import ReconnConfig
from nn_recon.shadows import FarmConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epsilons", type=float, nargs="+", default=[1, 10, 100, 1000, math.inf])
    parser.add_argument("--shadows", type=int, default=2000)
    parser.add_argument("--targets", type=int, default=300)
    parser.add_argument("--clip-norm", type=float, default=1.0)
    parser.add_argument("--reconn-epochs", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default="results/dp_sweep")
    parser.add_argument("--json", default="results/dp_sweep/summary.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = []
    for epsilon in args.epsilons:
        dp = DPConfig(epsilon=epsilon, clip_norm=args.clip_norm)
        farm = FarmConfig(dp=dp)
        config = InformedAttackConfig(
            shadows=args.shadows,
            targets=args.targets,
            farm=farm,
            reconn=ReconnConfig(epochs=args.reconn_epochs),
        )
        start = time.perf_counter()
        result = attack_informed(config, Path(args.out) / f"epsilon_{epsilon:g}")
        summary = result.summary()
        rows.append({
            "epsilon": epsilon, "noise_multiplier": noise_multiplier(dp, farm.epochs),
            **summary, "wall_s": time.perf_counter() - start, "config": asdict(config),
        })  # fmt: skip
        print(f"ε={epsilon:g}: {summary} ({rows[-1]['wall_s']:.0f} s)", flush=True)
    print(f"K = {args.shadows} shadows, {args.targets} targets, clip norm {args.clip_norm}, δ = 1e-5")
    print(f"{'epsilon':>8} {'sigma':>8} {'mean MSE':>9} {'oracle':>8} {'success':>8} {'test acc':>9}")
    for r in rows:
        attack = f"{r['mean_mse']:9.4f} {r['mean_oracle_mse']:8.4f} {r['success_rate']:8.3f}"
        print(f"{r['epsilon']:8g} {r['noise_multiplier']:8.3f} {attack} {r['released_test_accuracy']:9.3f}")
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rows, indent=2, default=str))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
