"""Shadow-farm throughput on CPU: batched (``train_models``) vs one model at a time.

Same models both ways: the Balle et al. MNIST setting (D⁻ of 1,000 MNIST training images, a
784-10-10 ELU MLP, 100 epochs of full-batch GD with momentum, same initialisation). One at a
time is the ordinary torch.optim.SGD loop (``train_one_model``); batched is ``train_models`` on
a chunk (the input layer in its dual form, one Gram-matrix product an epoch for all models).
For each thread count the two alternate ``--repeats`` times after a warm-up; the table gives
each rate's median and best, and the bar compares each way at its best thread count, medians
and bests separately, so that load on a shared machine favours neither.

    .venv/bin/python benchmarks/shadow_throughput.py [--batched 1000] [--single 10] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from nn_recon.data import load_mnist
from nn_recon.shadows import FarmConfig, initial_parameters, train_models, train_one_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batched", type=int, default=1000, help="models in the batched chunk")
    parser.add_argument("--single", type=int, default=10, help="models trained one at a time")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default="results/shadow_throughput.json")
    args = parser.parse_args()
    images, labels = load_mnist("train")
    x, y = torch.from_numpy(images), torch.from_numpy(labels)
    x_minus, y_minus = x[:1000], y[:1000]
    targets_x, targets_y = x[1000 : 1000 + args.batched], y[1000 : 1000 + args.batched]
    config = FarmConfig()
    single_params = initial_parameters(config, range(args.single))
    batched_params = initial_parameters(config, range(args.batched))

    def one_at_a_time(count: int) -> float:
        start = time.perf_counter()
        for i in range(count):
            train_one_model(
                config,
                torch.cat([x_minus, targets_x[i : i + 1]]),
                torch.cat([y_minus, targets_y[i : i + 1]]),
                {name: p[i] for name, p in single_params.items()},
            )
        return count / (time.perf_counter() - start)

    def batched(count: int) -> float:
        start = time.perf_counter()
        params = {name: p[:count] for name, p in batched_params.items()}
        train_models(config, x_minus, y_minus, targets_x[:count], targets_y[:count], params)
        return count / (time.perf_counter() - start)

    rows = []
    for threads in args.threads:
        torch.set_num_threads(threads)
        one_at_a_time(1), batched(min(args.batched, 10))  # warm-up
        single_rates, batched_rates = [], []
        for _ in range(args.repeats):
            single_rates.append(one_at_a_time(args.single))
            batched_rates.append(batched(args.batched))
        rows.append({
            "threads": threads,
            "one_at_a_time_models_per_s": single_rates, "batched_models_per_s": batched_rates,
            "one_at_a_time_median": statistics.median(single_rates), "one_at_a_time_best": max(single_rates),
            "batched_median": statistics.median(batched_rates), "batched_best": max(batched_rates),
            "projected_k10000_s": 10_000 / statistics.median(batched_rates),
        })  # fmt: skip
    print(f"{'threads':>7} {'one-at-a-time/s (median, best)':>31} {'batched/s (median, best)':>25} "
          f"{'speedup (medians)':>17} {'K=10,000 proj. s':>17}")  # fmt: skip
    for r in rows:
        print(
            f"{r['threads']:7d} {r['one_at_a_time_median']:20.2f} {r['one_at_a_time_best']:10.2f} "
            f"{r['batched_median']:14.2f} {r['batched_best']:10.2f} "
            f"{r['batched_median'] / r['one_at_a_time_median']:17.1f} {r['projected_k10000_s']:17.0f}"
        )
    speedups = {
        kind: max(r[f"batched_{kind}"] for r in rows) / max(r[f"one_at_a_time_{kind}"] for r in rows)
        for kind in ("median", "best")
    }
    for kind, value in speedups.items():
        verdict = "met" if value >= 10 else "NOT met"
        print(
            f"batched / one-at-a-time, each at its best thread count, {kind}s: {value:.1f}x "
            f"(bar >= 10x: {verdict})"
        )
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    results = {"config": config.to_dict(), "repeats": args.repeats, "rows": rows, "speedups": speedups}
    path.write_text(json.dumps(results, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
