"""Shadow-farm throughput, local vs Ray on this machine, and whether the Ray farm is bitwise the local one.

The Balle et al. MNIST farm (``FarmConfig()``: a 784-10-10 ELU MLP, 100 epochs of full-batch GD with
momentum, D⁻ the first 1,000 MNIST training images), ``--models`` targets after D⁻ in chunks of
``--chunk-size``, built three times with one torch thread per process (the CLI's default): locally
(chunk after chunk in this process), then on a local Ray instance of ``--cpus`` CPUs twice — a first
run whose workers start and import torch, and a second on the warm workers. Ray's own start
(``ray.init``) is timed apart. The load average is recorded: on a shared machine it inflates timings.

    PYTHONPATH=. .venv/bin/python benchmarks/shadow_farm_ray.py [--models 2000] [--chunk-size 250]
        [--cpus N] [--json results/shadow_farm_ray.json]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import replace
from pathlib import Path

import ray
import torch

from nn_recon.data import load_mnist
from nn_recon.shadows import FarmConfig, build_farm

D_MINUS = 1000  # the first MNIST training images form the shared D⁻; the targets come after them


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", type=int, default=2000, help="models in the farm")
    parser.add_argument("--chunk-size", type=int, default=250, help="models per chunk (one Ray task each)")
    parser.add_argument("--cpus", type=int, default=os.cpu_count(), help="CPUs of the local Ray instance")
    parser.add_argument("--json", default="results/shadow_farm_ray.json")
    args = parser.parse_args()
    if min(args.models, args.chunk_size, args.cpus) < 1:
        parser.error("--models, --chunk-size and --cpus must be >= 1")
    torch.set_num_threads(1)
    images, labels = (torch.from_numpy(a) for a in load_mnist("train"))
    if D_MINUS + args.models > len(images):
        parser.error(f"--models can be at most {len(images) - D_MINUS:,}")
    targets = slice(D_MINUS, D_MINUS + args.models)
    data = images[:D_MINUS], labels[:D_MINUS], images[targets], labels[targets]
    config = FarmConfig(chunk_size=args.chunk_size)
    load_before = os.getloadavg()

    def timed(name: str, farm_config: FarmConfig) -> tuple[dict, torch.Tensor]:
        start = time.perf_counter()
        params = build_farm(farm_config, *data).params
        seconds = time.perf_counter() - start
        return {"backend": name, "models": args.models, "seconds": seconds,
                "models_per_s": args.models / seconds}, params  # fmt: skip

    local, local_params = timed("local", config)
    rows = [{**local, "bitwise_equal": True}]
    start = time.perf_counter()
    ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
    ray_start = time.perf_counter() - start
    for name in (f"ray, {args.cpus} CPUs, first run", f"ray, {args.cpus} CPUs, warm workers"):
        row, params = timed(name, replace(config, backend="ray"))
        rows.append({**row, "bitwise_equal": torch.equal(params, local_params)})
    ray.shutdown()
    load_after = os.getloadavg()

    print(f"{args.models:,} models of {config.widths}, chunks of {args.chunk_size}, one torch thread per "
          f"process; ray.init {ray_start:.1f} s; load average {load_before[0]:.2f} before, "
          f"{load_after[0]:.2f} after on {os.cpu_count()} cores")  # fmt: skip
    print("| backend | models | seconds | models per second | ms per model | bitwise equal |")
    print("|---|---:|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r['backend']} | {r['models']:,} | {r['seconds']:.1f} | {r['models_per_s']:.1f} | "
              f"{1000 / r['models_per_s']:.1f} | {'yes' if r['bitwise_equal'] else 'NO'} |")  # fmt: skip
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    results = {
        "config": config.to_dict(), "d_minus": D_MINUS, "ray_cpus": args.cpus, "ray_init_s": ray_start,
        "cores": os.cpu_count(), "load_average_before": load_before, "load_average_after": load_after,
        "torch": torch.__version__, "ray": ray.__version__, "rows": rows,
    }  # fmt: skip
    path.write_text(json.dumps(results, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
