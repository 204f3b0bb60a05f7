"""Shadow-farm throughput on CPU: batched (one vmap over a chunk) vs one model at a time.

Same models both ways: the Balle et al. MNIST setting (D⁻ of 1,000 MNIST training images, a
784-10-10 ELU MLP, 100 epochs of full-batch GD with momentum, same initialisation). One at a
time is the ordinary torch.optim.SGD loop (``train_one_model``); batched is ``train_models`` on
a chunk. Both are timed with 1 and 2 torch threads; the bar compares each at its best thread
count. The machine is shared, so timings are noisy.

    PYTHONPATH=. python benchmarks/shadow_throughput.py [--batched 1000] [--single 10] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
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
    parser.add_argument("--json", default="results/shadow_throughput.json")
    args = parser.parse_args()
    images, labels = load_mnist("train")
    x, y = torch.from_numpy(images), torch.from_numpy(labels)
    x_minus, y_minus = x[:1000], y[:1000]
    targets_x, targets_y = x[1000 : 1000 + args.batched], y[1000 : 1000 + args.batched]
    config = FarmConfig()
    rows = []
    for threads in args.threads:
        torch.set_num_threads(threads)
        start_params = initial_parameters(config, range(args.single))
        start = time.perf_counter()
        for i in range(args.single):
            train_one_model(
                config,
                torch.cat([x_minus, targets_x[i : i + 1]]),
                torch.cat([y_minus, targets_y[i : i + 1]]),
                {name: p[i] for name, p in start_params.items()},
            )
        single_rate = args.single / (time.perf_counter() - start)
        start_params = initial_parameters(config, range(args.batched))
        start = time.perf_counter()
        train_models(config, x_minus, y_minus, targets_x, targets_y, start_params)
        batched_s = time.perf_counter() - start
        batched_rate = args.batched / batched_s
        rows.append({
            "threads": threads, "one_at_a_time_models_per_s": single_rate,
            "batched_models_per_s": batched_rate, "speedup": batched_rate / single_rate,
            "batched_models": args.batched, "batched_s": batched_s,
            "projected_k10000_s": 10_000 / batched_rate,
        })  # fmt: skip
    print(f"{'threads':>7} {'one-at-a-time/s':>16} {'batched/s':>10} {'speedup':>8} {'K=10,000 proj. s':>17}")
    for r in rows:
        print(
            f"{r['threads']:7d} {r['one_at_a_time_models_per_s']:16.2f} {r['batched_models_per_s']:10.2f} "
            f"{r['speedup']:8.1f} {r['projected_k10000_s']:17.0f}"
        )
    # the bar compares each way at its own best thread count, so contention cannot inflate it
    best_single = max(r["one_at_a_time_models_per_s"] for r in rows)
    best_batched = max(r["batched_models_per_s"] for r in rows)
    best = best_batched / best_single
    print(
        f"best batched / best one-at-a-time: {best:.1f}x (bar >= 10x: {'met' if best >= 10 else 'NOT met'})"
    )
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"config": config.to_dict(), "rows": rows, "best_speedup": best}, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
