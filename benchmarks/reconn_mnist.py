"""RecoNN on MNIST in Balle, Cherubin & Hayes (2022)'s default setting.

D⁻ = 1,000 MNIST training images; released and shadow models are 784-10-10 ELU MLPs trained
for 100 epochs of full-batch GD with momentum from the same initialisation; K shadow targets from
the rest of the training set; 1,000 released targets from the test set. Reports mean MSE, the
nearest-neighbour oracle's mean MSE, the success rate (reconstruction closer than the oracle),
mean LPIPS (AlexNet v0.1; 28 px images resized to 32) and mean KL under a separately trained
classifier. The paper reports mean MSE 0.0089 against an oracle of 0.0232.

Farms are saved under --out and reused, so K=10,000 after K=1,000 retrains only the shadows:

    PYTHONPATH=. python benchmarks/reconn_mnist.py --shadows 1000 [--threads 1] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path

import torch

from nn_recon.attacks.reconn_attack import InformedAttackConfig
from nn_recon.pipeline import attack_informed, save_informed
from nn_recon.reconn import ReconnConfig
from nn_recon.report import metric_table

PAPER = {"mean_mse": 0.0089, "mean_oracle_mse": 0.0232}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shadows", type=int, default=1000)
    parser.add_argument("--targets", type=int, default=1000)
    parser.add_argument("--representation", choices=["weights", "logits"], default="weights")
    parser.add_argument("--reconn-epochs", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default="results/reconn_mnist")
    parser.add_argument("--json", default=None, help="default: <out>/summary_<representation>_<K>.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = InformedAttackConfig(
        shadows=args.shadows,
        targets=args.targets,
        representation=args.representation,
        reconn=ReconnConfig(epochs=args.reconn_epochs),
    )
    start = time.perf_counter()
    result = attack_informed(config, args.out)
    wall = time.perf_counter() - start
    summary = result.summary()
    print(f"K = {args.shadows} shadow models, {args.targets} released targets, {args.representation}")
    print(metric_table(summary, PAPER))
    for name, seconds in result.timings.items():
        print(f"{name:24} {seconds:10.1f}")
    below = summary["mean_mse"] < summary["mean_oracle_mse"]
    print(
        f"mean MSE below the oracle's: {'yes' if below else 'NO'}; wall {wall:.0f} s (threads {args.threads})"
    )
    files = save_informed(result, args.out, config)
    path = Path(args.json or files["summary"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "config": asdict(config),
                "summary": summary,
                "paper": PAPER,
                "timings_s": result.timings,
                "wall_s": wall,
                "threads": args.threads,
                "files": {k: str(v) for k, v in files.items()},
            },
            indent=2,
        )
    )
    print(f"wrote {path} and {files['grid']}")


if __name__ == "__main__":
    main()
