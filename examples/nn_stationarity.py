"""The stationarity attack from Python: train a small target, reconstruct its training set, score it.

    PYTHONPATH=. python examples/nn_stationarity.py [--dataset mnist] [--out out/example]

The default uses scikit-learn's 8x8 digits (no files needed) and takes a minute or two on a CPU;
``--dataset mnist`` runs a smaller version of the benchmark's CPU setting.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from nn_recon.attacks.stationarity import StationarityConfig
from nn_recon.data import make_task
from nn_recon.metrics import match
from nn_recon.pipeline import attack_stationarity
from nn_recon.report import save_match_grid, success_table
from nn_recon.train import TrainConfig, accuracy, save_model, train_target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", choices=("digits", "mnist"), default="digits")
    parser.add_argument("--out", default="out/example")
    args = parser.parse_args()
    torch.set_num_threads(1)  # small products ran faster on one thread on the shared 2-core machine
    out = Path(args.out)

    train_config = TrainConfig(
        dataset=args.dataset,
        task="odd-even",
        per_class=20,
        architecture="mlp:500",
        lr=0.1,
        max_steps=5000,
        target_loss=1e-5,
        first_layer_scale=0.1,
    )
    model = train_target(train_config)
    save_model(model, out / "model.pt")
    test = make_task(args.dataset, "odd-even", split="test")
    print(
        f"target: loss {model.train_loss:.2g} after {model.steps} steps, "
        f"test accuracy {accuracy(model, test.images, test.labels):.3f}"
    )

    attack = StationarityConfig(points=80, runs=4, steps=1000, lr=(1e-3, 1e-2))
    result = attack_stationarity(model, attack, out / "recon")
    images = result.measure.points["image"]
    matched = match(
        images,
        model.train_images,
        recon_labels=result.measure.points["label"],
        train_labels=model.train_labels,
    )
    print(success_table(matched))
    print(f"grid: {save_match_grid(matched, images, model.train_images, out / 'match.png')}")


if __name__ == "__main__":
    main()
