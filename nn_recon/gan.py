"""The generative priors of GAN-based model inversion: GMI's DCGAN and KEDMI's inversion-specific GAN.

Both are small DCGANs on public images (H and W divisible by 4), trained with the non-saturating
loss. GMI's discriminator has one real/fake logit. KEDMI's has one logit per private class of
the target: it learns to give public images the target's soft labels, and its real/fake logit is
their log-sum-exp (the semi-supervised GAN of Salimans et al.), so the prior knows the target's
classes. Training checkpoints every ``checkpoint_every`` steps and resumes; the trained GAN is one
file that every attack reuses.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from nn_recon.checkpoint import load_torch_file, load_weights, save_atomically
from recon_core.errors import ReconError, require_at_least, require_positive
from recon_core.progress import progress

GAN_KINDS = ("gmi", "kedmi")
GAN_FORMAT = "nn-recon-gan/1"


@dataclass(frozen=True)
class GanConfig:
    """A GAN prior. Defaults: a DCGAN with 64-d N(0, I) latents, 3,000 Adam steps of batch 64."""

    kind: str = "gmi"
    latent_dim: int = 64
    width: int = 32
    steps: int = 3000
    batch_size: int = 64
    lr: float = 2e-4
    seed: int = 0
    checkpoint_every: int = 250

    def __post_init__(self) -> None:
        if self.kind not in GAN_KINDS:
            raise ReconError(f"GAN kind must be one of {GAN_KINDS}, got {self.kind!r}")
        require_at_least(
            1,
            latent_dim=self.latent_dim,
            width=self.width,
            steps=self.steps,
            batch_size=self.batch_size,
            checkpoint_every=self.checkpoint_every,
        )
        require_positive(lr=self.lr)


class Generator(nn.Module):
    """z (n, latent_dim) → images (n, C, H, W) in [0, 1]: a linear layer and two stride-2 deconvolutions."""

    def __init__(self, latent_dim: int, width: int, image_shape: tuple[int, int, int]) -> None:
        super().__init__()
        channels, height, wide = image_shape
        if height % 4 or wide % 4:
            raise ReconError(f"GAN images need sides divisible by 4, got {height}x{wide}")
        self.image_shape, self.base = tuple(image_shape), (2 * width, height // 4, wide // 4)
        units = int(np.prod(self.base))
        self.project = nn.Sequential(nn.Linear(latent_dim, units), nn.BatchNorm1d(units), nn.ReLU())
        self.up = nn.Sequential(
            nn.ConvTranspose2d(2 * width, width, 4, 2, 1), nn.BatchNorm2d(width), nn.ReLU(),
            nn.ConvTranspose2d(width, channels, 4, 2, 1), nn.Sigmoid(),
        )  # fmt: skip

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.up(self.project(z).view(-1, *self.base))


class Discriminator(nn.Module):
    """Images → ``outputs`` logits: two stride-2 convolutions with leaky ReLU and a linear layer."""

    def __init__(self, width: int, image_shape: tuple[int, int, int], outputs: int) -> None:
        super().__init__()
        channels, height, wide = image_shape
        self.body = nn.Sequential(
            nn.Conv2d(channels, width, 4, 2, 1), nn.LeakyReLU(0.2),
            nn.Conv2d(width, 2 * width, 4, 2, 1), nn.LeakyReLU(0.2), nn.Flatten(),
        )  # fmt: skip
        self.head = nn.Linear(2 * width * (height // 4) * (wide // 4), outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))

    def realness(self, x: torch.Tensor) -> torch.Tensor:
        """The real/fake logit: the single output (GMI) or the log-sum-exp of the class logits (KEDMI)."""
        logits = self(x)
        return logits[:, 0] if logits.shape[1] == 1 else logits.logsumexp(1)


@dataclass
class Gan:
    """A trained prior: generator, discriminator, and what they were trained for."""

    generator: Generator
    discriminator: Discriminator
    config: GanConfig
    num_classes: int | None
    steps: int
    seconds: float = 0.0

    @property
    def image_shape(self) -> tuple[int, int, int]:
        return self.generator.image_shape

    def prior_loss(self, images: torch.Tensor) -> torch.Tensor:
        """Per image: GMI's −D(G(z)), KEDMI's −log D(G(z)) with D the probability of being real."""
        realness = self.discriminator.realness(images)
        return -realness if self.config.kind == "gmi" else F.softplus(-realness)


def _networks(
    config: GanConfig, image_shape: tuple, num_classes: int | None
) -> tuple[Generator, Discriminator]:
    outputs = 1 if config.kind == "gmi" else num_classes
    with torch.random.fork_rng():
        torch.manual_seed(config.seed)
        generator = Generator(config.latent_dim, config.width, image_shape)
        return generator, Discriminator(config.width, image_shape, outputs)


def train_gan(
    config: GanConfig,
    public_images: np.ndarray,
    soft_labels: np.ndarray | None = None,
    checkpoint: str | Path | None = None,
    device: torch.device | str = "cpu",
) -> Gan:
    """Train on public images; KEDMI also needs the target's soft labels of them (n, K).

    With ``checkpoint`` the state is saved every ``checkpoint_every`` steps and a run with the same
    config resumes from it. The networks train on ``device``; the random numbers are drawn on the
    CPU, so a run draws the same batches and latents on any device.
    """
    if (config.kind == "kedmi") != (soft_labels is not None):
        raise ReconError("KEDMI's GAN needs the target's soft labels of the public images; GMI's none")
    num_classes = None if soft_labels is None else soft_labels.shape[1]
    generator, discriminator = _networks(config, public_images.shape[1:], num_classes)
    generator, discriminator = generator.to(device), discriminator.to(device)
    g_opt = torch.optim.Adam(generator.parameters(), config.lr, betas=(0.5, 0.999))
    d_opt = torch.optim.Adam(discriminator.parameters(), config.lr, betas=(0.5, 0.999))
    modules = {"generator": generator, "discriminator": discriminator, "g_opt": g_opt, "d_opt": d_opt}
    start, seconds, rng = 0, 0.0, torch.Generator().manual_seed(config.seed + 1)
    checkpoint = Path(checkpoint) if checkpoint else None
    if checkpoint and checkpoint.exists():
        state = load_torch_file(checkpoint, "a GAN training checkpoint", "delete it to start over", device)
        if state["config"] != asdict(config):
            raise ReconError(f"checkpoint {checkpoint} was written for another GAN config; delete it")
        for name, module in modules.items():
            module.load_state_dict(state[name])
        start, seconds = state["step"], state["seconds"]
        rng.set_state(state["rng"].cpu())
    images = torch.as_tensor(public_images, device=device)
    labels = None if soft_labels is None else torch.as_tensor(soft_labels, device=device)
    started = time.perf_counter() - seconds
    for step in progress(range(start, config.steps), config.steps - start, f"{config.kind} GAN"):
        batch = torch.randint(len(images), (config.batch_size,), generator=rng).to(device)
        real = images[batch]
        fake = generator(torch.randn(config.batch_size, config.latent_dim, generator=rng).to(device))
        d_loss = (
            F.softplus(-discriminator.realness(real)).mean()
            + F.softplus(discriminator.realness(fake.detach())).mean()
        )
        if labels is not None:
            d_loss = d_loss + F.cross_entropy(discriminator(real), labels[batch])
        d_opt.zero_grad(set_to_none=True)
        d_loss.backward()
        d_opt.step()
        g_loss = F.softplus(-discriminator.realness(fake)).mean()
        g_opt.zero_grad(set_to_none=True)
        g_loss.backward()
        g_opt.step()
        if checkpoint and (step + 1) % config.checkpoint_every == 0:
            save_atomically(checkpoint, {
                **{name: module.state_dict() for name, module in modules.items()},
                "config": asdict(config), "step": step + 1, "seconds": time.perf_counter() - started,
                "rng": rng.get_state(),
            })  # fmt: skip
    generator.eval()
    discriminator.eval()
    return Gan(generator, discriminator, config, num_classes, config.steps, time.perf_counter() - started)


def save_gan(gan: Gan, path: str | Path) -> Path:
    path = Path(path)
    save_atomically(path, {
        "format": GAN_FORMAT, "config": asdict(gan.config), "image_shape": list(gan.image_shape),
        "num_classes": gan.num_classes, "steps": gan.steps, "seconds": gan.seconds,
        "generator": gan.generator.state_dict(), "discriminator": gan.discriminator.state_dict(),
    })  # fmt: skip
    return path


def load_gan(path: str | Path, device: torch.device | str = "cpu") -> Gan:
    """Read a GAN written by :func:`save_gan` onto ``device``; a missing or foreign file is a clear error."""
    path = Path(path)
    if not path.is_file():
        raise ReconError(f"GAN file {path} does not exist; train it with nn-recon gan")
    state = load_torch_file(path, "a GAN written by nn-recon gan", "delete it and rerun nn-recon gan")
    if not isinstance(state, dict) or state.get("format") != GAN_FORMAT:
        raise ReconError(f"{path} is not a GAN written by nn-recon gan (no {GAN_FORMAT!r} tag)")
    config = GanConfig(**state["config"])
    generator, discriminator = _networks(config, tuple(state["image_shape"]), state["num_classes"])
    load_weights(generator, state["generator"], path)
    load_weights(discriminator, state["discriminator"], path)
    generator.to(device).eval()
    discriminator.to(device).eval()
    return Gan(generator, discriminator, config, state["num_classes"], state["steps"], state["seconds"])


def sample_images(gan: Gan, n: int, seed: int = 0) -> np.ndarray:
    """``n`` images from the prior, for looking at it."""
    generator = torch.Generator().manual_seed(seed)
    device = next(gan.generator.parameters()).device
    with torch.no_grad():
        z = torch.randn(n, gan.config.latent_dim, generator=generator).to(device)
        return gan.generator(z).cpu().numpy()
