"""Stationarity attack on MNIST: train a target, reconstruct its training set, count SSIM successes.

    python benchmarks/stationarity_mnist.py --config cpu                     # odd/even, n = 100
    python benchmarks/stationarity_mnist.py --config cpu --task multiclass   # 10 classes x 10 images
    python benchmarks/stationarity_mnist.py --config paper                   # n = 500, 784-1000-1000-1
    python benchmarks/stationarity_mnist.py --speed                          # time per attack step

Training and the attack checkpoint under ``--work`` and resume when rerun. On a CPU the paper
config trains and attacks for a few steps, projects the full time and stops unless ``--full``.
Every mode prints a table and writes JSON (``--json``, default ``results/<name>.json``). Beside the
SSIM counts: how many training images the reconstruction matches better than an adversary without
the model does (``public_baseline``: per image, the best SSIM of its class's mean public image and
of the 5 public images nearest to it, out of 2,000 test images the target never saw).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch

from nn_recon.attacks.stationarity import (
    StationarityConfig,
    StationarityLoss,
    candidate_labels,
    stationary_points,
)
from nn_recon.data import balanced_subset, make_task
from nn_recon.metrics import BaselineComparison, MatchConfig, match, public_baseline
from nn_recon.models import Architecture, SurrogateReLU, build_network, margins
from nn_recon.pipeline import attack_stationarity
from nn_recon.report import save_match_grid
from nn_recon.train import TrainConfig, TrainedModel, accuracy, load_model, save_model, train_target
from recon_core import progress


@dataclass(frozen=True)
class Benchmark:
    train: TrainConfig
    attack: StationarityConfig


CONFIGS = {
    # Two hidden layers of 500, trained at lr 0.1 (lr 0.01 is too slow for a CPU budget). Their
    # second layer keeps most of its random initialisation, which no KKT sum can explain, so the
    # objective plateaus near 0.86 of its starting value; the first layer still gives the images away.
    "cpu": Benchmark(
        TrainConfig(
            per_class=50,
            architecture="mlp:500,500",
            lr=0.1,
            max_steps=20_000,
            target_loss=5e-5,
            first_layer_scale=1e-2,
        ),
        StationarityConfig(points=200, runs=8, steps=2000, runs_per_batch=4),
    ),
    # Haim et al. 2022: n = 500, 784-1000-1000-1, full-batch GD at lr 0.01 from a small first
    # layer, trained long; m = 2n candidates.
    "paper": Benchmark(
        TrainConfig(
            per_class=250,
            architecture="mlp:1000,1000",
            lr=0.01,
            max_steps=1_000_000,
            target_loss=1e-4,
            first_layer_scale=1e-4,
        ),
        StationarityConfig(points=1000, runs=32, steps=20_000, runs_per_batch=4),
    ),
}


def run_benchmark(name: str, bench: Benchmark, work: Path, full: bool) -> dict:
    started = time.perf_counter()
    on_cpu = not torch.cuda.is_available()
    if name == "paper" and on_cpu and not full:
        return project_paper_time(bench)
    model_path = work / "model.pt"
    if model_path.exists():
        model = load_model(model_path)
    else:
        model = train_target(bench.train, checkpoint=work / "model.ckpt")
        save_model(model, model_path)
        (work / "model.ckpt").unlink(missing_ok=True)
    test = make_task(bench.train.dataset, bench.train.task, split="test")
    trained = time.perf_counter()
    seed = bench.attack.seed
    result = attack_stationarity(model, bench.attack, work / ("recon" if seed == 0 else f"recon-seed{seed}"))
    attacked = time.perf_counter()
    recon = result.measure.points["image"]
    labels = {"recon_labels": result.measure.points["label"], "train_labels": model.train_labels}
    matched = match(recon, model.train_images, **labels)
    stretched = match(recon, model.train_images, **labels, config=MatchConfig(stretch=True))
    grid = save_match_grid(
        matched, recon, model.train_images, work / ("match.png" if seed == 0 else f"match-seed{seed}.png")
    )
    classes = np.unique(model.train_labels)
    class_means = np.stack([model.train_images[model.train_labels == c].mean(0) for c in classes])
    baseline = match(class_means, model.train_images, recon_labels=classes, train_labels=model.train_labels)
    public = balanced_subset(test.labels, PUBLIC_SIZE // len(test.classes))  # equally many per class
    public_ssim = public_baseline(
        model.train_images, model.train_labels, test.images[public], test.labels[public]
    )
    public_comparison = BaselineComparison(matched.ssim, public_ssim)
    return {
        "n": len(model.train_labels),
        "architecture": model.architecture.spec,
        "train_steps": model.steps,
        "train_loss": model.train_loss,
        "test_accuracy": accuracy(model, test.images, test.labels),
        "successes": {str(k): v for k, v in matched.successes().items()},
        "successes_contrast_stretched": {str(k): v for k, v in stretched.successes().items()},
        "distinct_reconstructions": {str(k): v for k, v in matched.distinct().items()},
        "class_mean_baseline_successes": {str(k): v for k, v in baseline.successes().items()},
        "public_baseline": {"public_images": PUBLIC_SIZE, **public_comparison.to_json()},
        "reconstructions_kept": len(result.measure),
        "diverged_runs": result.diverged,
        "train_seconds_this_call": trained - started,
        "attack_seconds_this_call": attacked - trained,
        "total_seconds_this_call": time.perf_counter() - started,
        "recorded_train_seconds": model.seconds,
        "run_losses": [run.meta["loss"] for run in result.runs],
        "grid": str(grid),
    }


PUBLIC_SIZE = 2000  # as in stationarity_user_network.py


def project_paper_time(bench: Benchmark, short: int = 2, long: int = 6) -> dict:
    """Time the paper's setting for ``short`` and ``long`` training and attack steps and project the
    full run from the difference, which leaves out loading, setup and the attack's final selection."""

    def seconds(run) -> float:
        t0 = time.perf_counter()
        run()
        return time.perf_counter() - t0

    data = make_task(bench.train.dataset, bench.train.task, bench.train.per_class, seed=bench.train.seed)
    train_times, attack_times = [], []
    for steps in (short, long):
        config = replace(bench.train, max_steps=steps, target_loss=0.0)
        train_times.append(seconds(lambda config=config: train_target(config, data=data)))
    model = train_target(replace(bench.train, max_steps=short, target_loss=0.0), data=data)
    for steps in (short, long):
        attack = replace(bench.attack, runs=bench.attack.runs_per_batch, steps=steps)
        attack_times.append(seconds(lambda attack=attack: stationary_points(model, attack)))
    train_step = (train_times[1] - train_times[0]) / (long - short)
    attack_step = (attack_times[1] - attack_times[0]) / ((long - short) * bench.attack.runs_per_batch)
    return {
        "started": True,
        "completed": False,
        "train_seconds_per_step": train_step,
        "attack_seconds_per_run_step": attack_step,
        "projected_train_hours": train_step * bench.train.max_steps / 3600,
        "projected_attack_hours": attack_step * bench.attack.runs * bench.attack.steps / 3600,
        "note": "CPU only: timed a few steps and stopped; pass --full (or run on a GPU) for the real run",
    }


def plain_stationarity_step(model: TrainedModel, x, lam, labels, beta: float):
    """The deliberately plain implementation: one run, autograd through the summed network output."""
    x = x.detach().requires_grad_()
    lam = lam.detach().requires_grad_()
    params = [p.detach().requires_grad_() for p in model.network.parameters()]
    names = [name for name, _ in model.network.named_parameters()]
    with SurrogateReLU(beta):
        outputs = torch.func.functional_call(model.network, dict(zip(names, params, strict=True)), (x,))
    grads = torch.autograd.grad((lam * margins(outputs, labels)).sum(), params, create_graph=True)
    grad_norm = sum(g.square().sum() for g in grads)
    scale = sum((p * g).sum() for p, g in zip(params, grads, strict=True)) / grad_norm
    residual = sum((p - scale * g).square().sum() for p, g in zip(params, grads, strict=True))
    reflection = 2 * scale.clamp(max=0).square() * grad_norm  # the attack's loss for a negative scale
    loss = (residual + reflection) / sum(p.square().sum() for p in params)
    return loss, *torch.autograd.grad(loss, [x, lam])


def speed(points: int, runs_per_batch: int, repeats: int) -> dict:
    """Time per optimisation step (one run) for the paper's model, attack vs plain, fp32 and fp64.

    The two alternate within each repeat and the fastest repeat counts, so that load from other
    processes on a shared machine slows neither side alone.
    """
    architecture = Architecture("mlp", (1000, 1000), (1, 28, 28), 1)
    rows = {}
    for dtype in (torch.float32, torch.float64):
        network = build_network(architecture, seed=0, first_layer_scale=1e-4).to(dtype)
        model = TrainedModel(network, torch.zeros(1, 28, 28).numpy(), ("odd", "even"), 0.0, 0)
        labels = torch.as_tensor(candidate_labels(points, 2))
        loss = StationarityLoss(model, labels, "kkt", None)
        generator = torch.Generator().manual_seed(0)
        x = 1e-3 * torch.randn(runs_per_batch, points, 1, 28, 28, generator=generator, dtype=dtype)
        lam = torch.rand(runs_per_batch, points, generator=generator, dtype=dtype)
        beta = torch.full((runs_per_batch,), 50.0, dtype=dtype)

        def attack(x=x, lam=lam, beta=beta, loss=loss):
            return loss.value_and_grad(x, lam, beta)

        def plain(x=x, lam=lam, model=model, labels=labels):
            return plain_stationarity_step(model, x[0], lam[0], labels, 50.0)

        (grad_x, grad_lam), values = attack()
        plain_loss, plain_grad_x, plain_grad_lam = plain()
        torch.testing.assert_close(values[0], plain_loss, rtol=1e-3, atol=1e-6)
        for ours, theirs in ((grad_x[0], plain_grad_x), (grad_lam[0], plain_grad_lam)):
            torch.testing.assert_close(ours, theirs, rtol=1e-2, atol=1e-3 * theirs.abs().max())
        timings: dict[str, list[float]] = {"attack": [], "plain": []}
        for _ in range(repeats):
            for label, fn, per in (("attack", attack, runs_per_batch), ("plain", plain, 1)):
                t0 = time.perf_counter()
                fn()
                timings[label].append((time.perf_counter() - t0) / per)
        best = {label: min(times) for label, times in timings.items()}
        rows[str(dtype).removeprefix("torch.")] = {**best, "speedup": best["plain"] / best["attack"]}
    return {
        "points": points,
        "runs_per_batch": runs_per_batch,
        "threads": torch.get_num_threads(),
        "repeats": repeats,
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", choices=sorted(CONFIGS), default="cpu")
    parser.add_argument("--task", choices=("odd-even", "multiclass"), default="odd-even")
    parser.add_argument(
        "--speed", action="store_true", help="time attack steps instead (paper model, m = 1000)"
    )
    parser.add_argument("--speed-runs-per-batch", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads (1 was fastest on the shared box)"
    )
    parser.add_argument("--full", action="store_true", help="run the paper config even without a GPU")
    parser.add_argument(
        "--attack-seed", type=int, default=0, help="the attack's seed (its runs' settings and starts)"
    )
    parser.add_argument("--work", help="folder for the model, checkpoints and runs (default results/<name>)")
    parser.add_argument("--json", help="where to write the results (default results/<name>.json)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    progress.enable(sys.stderr.isatty())
    machine = {
        "cpu_count": torch.get_num_threads(),
        "platform": platform.platform(),
        "cuda": torch.cuda.is_available(),
    }
    if args.speed:
        name = "stationarity_speed"
        results = speed(1000, args.speed_runs_per_batch, args.repeats)
        print(f"time per optimisation step, one run, 784-1000-1000-1, m = 1000, {args.threads} thread(s)")
        print(f"{'dtype':>8} | {'attack (s)':>10} | {'plain (s)':>9} | {'plain/attack':>12}")
        for dtype, row in results["rows"].items():
            print(f"{dtype:>8} | {row['attack']:>10.3f} | {row['plain']:>9.3f} | {row['speedup']:>12.2f}")
    else:
        bench = CONFIGS[args.config]
        if args.task == "multiclass":
            bench = Benchmark(
                replace(bench.train, task="multiclass", per_class=bench.train.per_class // 5), bench.attack
            )
        name = f"stationarity_{args.config}_{args.task}"
        work = Path(args.work or Path("results") / name)  # one trained model for every attack seed
        if args.attack_seed:
            bench = Benchmark(bench.train, replace(bench.attack, seed=args.attack_seed))
            name += f"_seed{args.attack_seed}"
        work.mkdir(parents=True, exist_ok=True)
        results = {
            "config": {"train": asdict(bench.train), "attack": asdict(bench.attack)},
            **run_benchmark(args.config, bench, work, args.full),
        }
        print(f"{name}:")
        for key, value in results.items():
            if key != "config":
                print(f"  {key:>28}: {value}")
    results["machine"] = machine
    out = Path(args.json or Path("results") / f"{name}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, default=str))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
