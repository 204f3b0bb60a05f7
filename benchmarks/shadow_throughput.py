"""Shadow-farm throughput on CPU: batched (``train_models``) vs one model at a time.

Same models both ways: the Balle et al. MNIST setting (D⁻ of 1,000 MNIST training images, a
784-10-10 ELU MLP, 100 epochs of full-batch GD with momentum, same initialisation). One at a
time is the ordinary torch.optim.SGD loop (``train_one_model``); batched is ``train_models`` on
a chunk (the input layer in its dual form, one Gram-matrix product an epoch for all models).
For each thread count the two alternate ``--repeats`` times after a warm-up; the table gives
each rate's median and best, and the bar compares each way at its best thread count, medians
and bests separately, so that load on a shared machine favours neither.

The ceiling column times the farm's Gram-matrix products alone (the same ``addmm`` of each block,
once per epoch, as ``train_models`` runs them): the rate the batched farm would reach if everything
else it does were free. It bounds the speed-up this machine allows for these models.

``--farm K`` then times one whole farm of K models (``build_farm``, chunks of 1,000, not saved) at
the last thread count: the measured K = 10,000 wall time rather than a projection.

    .venv/bin/python benchmarks/shadow_throughput.py [--batched 1000] [--single 10] [--farm 10000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from nn_recon.data import load_mnist
from nn_recon.shadows import (
    FarmConfig,
    build_farm,
    initial_parameters,
    models_per_block,
    train_models,
    train_one_model,
)

D_MINUS = 1000  # the first MNIST training images form the shared D⁻; the targets come after them


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batched", type=int, default=1000, help="models in the batched chunk")
    parser.add_argument("--single", type=int, default=10, help="models trained one at a time")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--farm", type=int, default=0, help="also time one whole farm of this many models")
    parser.add_argument("--json", default="results/shadow_throughput.json")
    args = parser.parse_args()
    if min(args.batched, args.single, args.repeats, *args.threads) < 1 or args.farm < 0:
        parser.error("--batched, --single, --repeats and --threads must be >= 1, --farm >= 0")
    images, labels = load_mnist("train")
    x, y = torch.from_numpy(images), torch.from_numpy(labels)
    if D_MINUS + max(args.batched, args.farm) > len(x):
        parser.error(
            f"MNIST has {len(x):,} training images: {D_MINUS:,} form D⁻, so --batched and --farm can be "
            f"at most {len(x) - D_MINUS:,}"
        )
    x_minus, y_minus, pool_x, pool_y = x[:D_MINUS], y[:D_MINUS], x[D_MINUS:], y[D_MINUS:]
    targets_x, targets_y = pool_x[: args.batched], pool_y[: args.batched]
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

    m, hidden = len(x_minus), config.widths[1]
    block = models_per_block(config, m)
    inputs = torch.nn.functional.pad(x_minus.flatten(1), (0, 1), value=1.0)
    gram = inputs @ inputs.T
    coefficients, start = torch.randn(2, block * hidden, m)

    def gram_products_only(count: int) -> float:
        started = time.perf_counter()
        for first in range(0, count, block):
            rows = hidden * min(block, count - first)
            for _ in range(config.epochs):
                torch.addmm(start[:rows], coefficients[:rows], gram)
        return count / (time.perf_counter() - started)

    rows = []
    for threads in args.threads:
        torch.set_num_threads(threads)
        one_at_a_time(1), batched(min(args.batched, 10)), gram_products_only(block)  # warm-up
        rates: dict[str, list[float]] = {"one_at_a_time": [], "batched": [], "ceiling": []}
        for _ in range(args.repeats):
            rates["one_at_a_time"].append(one_at_a_time(args.single))
            rates["batched"].append(batched(args.batched))
            rates["ceiling"].append(gram_products_only(args.batched))
        row: dict = {"threads": threads}
        for kind, values in rates.items():
            row |= {f"{kind}_models_per_s": values, f"{kind}_median": statistics.median(values),
                    f"{kind}_best": max(values)}  # fmt: skip
        row["projected_k10000_s"] = 10_000 / row["batched_median"]
        rows.append(row)
    print(f"{'threads':>7} {'one-at-a-time/s (median, best)':>31} {'batched/s (median, best)':>25} "
          f"{'speedup (medians)':>17} {'K=10,000 proj. s':>17} "
          f"{'ceiling/s':>10} {'ceiling speedup':>15}")  # fmt: skip
    for r in rows:
        print(
            f"{r['threads']:7d} {r['one_at_a_time_median']:20.2f} {r['one_at_a_time_best']:10.2f} "
            f"{r['batched_median']:14.2f} {r['batched_best']:10.2f} "
            f"{r['batched_median'] / r['one_at_a_time_median']:17.1f} {r['projected_k10000_s']:17.0f} "
            f"{r['ceiling_median']:10.1f} {r['ceiling_median'] / r['one_at_a_time_median']:15.1f}"
        )

    def best_over_threads(kind: str, statistic: str) -> float:
        return max(r[f"{kind}_{statistic}"] for r in rows)

    speedups, ceilings = {}, {}
    for statistic in ("median", "best"):
        single = best_over_threads("one_at_a_time", statistic)
        speedups[statistic] = best_over_threads("batched", statistic) / single
        ceilings[statistic] = best_over_threads("ceiling", statistic) / single
        verdict = "met" if speedups[statistic] >= 10 else "NOT met"
        print(
            f"batched / one-at-a-time, each at its best thread count, {statistic}s: "
            f"{speedups[statistic]:.1f}x (bar >= 10x: {verdict}); "
            f"Gram products alone: {ceilings[statistic]:.1f}x"
        )
    if args.farm:
        started = time.perf_counter()
        build_farm(config, x_minus, y_minus, pool_x[: args.farm], pool_y[: args.farm])
        farm_seconds = time.perf_counter() - started
        print(f"whole farm of {args.farm:,} models ({args.threads[-1]} threads): {farm_seconds:.0f} s, "
              f"{args.farm / farm_seconds:.1f} models/s")  # fmt: skip
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    results = {
        "farm": {"models": args.farm, "seconds": farm_seconds} if args.farm else None,
        "config": config.to_dict(), "repeats": args.repeats, "models_per_block": block, "rows": rows,
        "speedups": speedups, "ceiling_speedups": ceilings,
    }  # fmt: skip
    path.write_text(json.dumps(results, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
