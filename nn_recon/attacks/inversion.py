"""GAN-based model inversion (GMI, KEDMI) with the logit-maximisation loss and model augmentation (LOMMA).

The setting (:mod:`nn_recon.inversion_setting`) is the model-inversion literature's MNIST protocol.
The attack searches the generator's latent space for each private
class y:  min E_z [ identity_weight · L_id(G(z); y) + L_prior(z) ],  z clipped to the prior's range,
``restarts`` latents per class. GMI optimises the latents themselves (SGD with momentum 0.9, as in
its code), KEDMI a per-class Gaussian q = N(μ, σ²) through the reparameterisation z = μ + σ ε (Adam).

Identity losses: ``ce`` cross-entropy of the target (the baselines); ``lom`` −logit_y + λ‖p − p_reg‖²
with p the target's penultimate features (the input of its last linear layer) and p_reg their mean
over public images; ``ma`` the cross-entropy averaged over the target and the augmented models;
``lomma`` both. The target is any classifier taking images in [0, 1] (its mean image subtracted);
a binary one's single logit z counts as the two logits (−z/2, z/2).
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass

import torch
from torch.nn import functional as F

from nn_recon.attacks.stationarity import AttackTarget
from nn_recon.gan import Gan
from nn_recon.inversion_setting import Setting, in_batches, model_device
from nn_recon.models import class_logits, outputs_and_features, penultimate
from recon_core.errors import ReconError
from recon_core.measure import WeightedMeasure
from recon_core.progress import progress

METHODS = ("gmi", "kedmi")
LOSSES = ("ce", "lom", "ma", "lomma")


@dataclass(frozen=True)
class InversionConfig:
    """One attack. Defaults as in GMI's and KEDMI's code: 1,500 steps of 0.02, identity weight 100."""

    method: str = "gmi"
    loss: str = "ce"
    restarts: int = 8
    steps: int = 1500
    lr: float = 0.02
    identity_weight: float = 100.0
    feature_weight: float = 1.0
    clip: float = 1.0
    public_for_p_reg: int = 2000
    seed: int = 0

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ReconError(f"method must be one of {METHODS}, got {self.method!r}")
        if self.loss not in LOSSES:
            raise ReconError(f"loss must be one of {LOSSES}, got {self.loss!r}")
        if min(self.restarts, self.steps, self.public_for_p_reg) < 1 or self.clip <= 0:
            raise ReconError("restarts, steps and public_for_p_reg must be >= 1 and clip > 0")


def identity_loss(
    loss: str,
    target: AttackTarget,
    augmented: list[AttackTarget],
    images: torch.Tensor,
    labels: torch.Tensor,
    p_reg: torch.Tensor | None,
    feature_weight: float,
) -> torch.Tensor:
    """Per image: CE or −logit_y, over the target alone or averaged with the augmented models (MA),
    plus λ‖p − p_reg‖² (mean over the feature axis) of the target's features p for LOM and LOMMA. The
    augmented models, distilled from the target, take its centred images."""
    x = images - torch.as_tensor(target.mean, device=images.device)
    logit = loss in ("lom", "lomma")
    outputs, features = outputs_and_features(target.network, x) if logit else (target.network(x), None)
    logits = [class_logits(outputs)]
    if loss in ("ma", "lomma"):
        logits += [class_logits(model.network(x)) for model in augmented]
    if not logit:
        return torch.stack([F.cross_entropy(z, labels, reduction="none") for z in logits]).mean(0)
    own = torch.stack([z.gather(1, labels[:, None])[:, 0] for z in logits]).mean(0)
    return -own + feature_weight * (features - p_reg).square().mean(1)


def check_compatible(gan: Gan, setting: Setting, method: str) -> None:
    """A GAN of the target's image size and, for KEDMI, its classes; models with one class count."""
    k, shape = setting.target.num_classes, tuple(setting.target.input_shape)
    others = [m for m in (setting.evaluation, *setting.augmented) if m is not None]
    counts = {m.num_classes for m in others}
    if counts - {k}:
        raise ReconError(f"the target has {k} classes but the evaluation/augmented models have {counts}")
    if gan.image_shape != shape:
        raise ReconError(
            f"the GAN makes {gan.image_shape} images but the target takes {shape}; "
            "train a GAN on images of the target's size"
        )
    if gan.config.kind != method:
        raise ReconError(f"--method {method} needs a {method} GAN, got a {gan.config.kind} one")
    if method == "kedmi" and gan.num_classes != k:
        raise ReconError(f"the KEDMI GAN was trained for {gan.num_classes} classes but the target has {k}")


def reparameterised(
    mu: torch.Tensor, log_var: torch.Tensor, noise: torch.Tensor, clip: float
) -> torch.Tensor:
    """KEDMI's latent z = μ + σ ε, σ = exp(log σ² / 2), clipped to [-clip, clip]; differentiable in μ, σ."""
    return (mu + (0.5 * log_var).exp() * noise).clamp(-clip, clip)


def _frozen(*modules: torch.nn.Module) -> None:
    for module in modules:
        with contextlib.suppress(NotImplementedError):  # a torch.export module's mode is fixed
            module.eval()
        module.requires_grad_(False)


def invert(config: InversionConfig, gan: Gan, setting: Setting) -> dict[int, WeightedMeasure]:
    """Inverted images of every private class: one :class:`WeightedMeasure` per class (equal weights)."""
    check_compatible(gan, setting, config.method)
    _frozen(gan.generator, gan.discriminator, setting.target.network, *(m.network for m in setting.augmented))
    k, r, d = setting.target.num_classes, config.restarts, gan.config.latent_dim
    device = model_device(setting.target)
    rng = torch.Generator().manual_seed(config.seed)  # on the CPU: the same latents on any device
    p_reg = None
    if config.loss in ("lom", "lomma"):
        public = setting.public[: config.public_for_p_reg]
        p_reg = in_batches(penultimate, setting.target, public).mean(0).to(device)
    labels = torch.arange(k, device=device).repeat_interleave(r)
    mu = torch.randn(k * r, d, generator=rng).clamp(-config.clip, config.clip).to(device).requires_grad_()
    log_var = torch.zeros(k * r, d, device=device, requires_grad=config.method == "kedmi")
    if config.method == "gmi":
        optimiser = torch.optim.SGD([mu], config.lr, momentum=0.9)
    else:
        optimiser = torch.optim.Adam([mu, log_var], config.lr)

    def latents() -> torch.Tensor:
        if config.method == "gmi":
            return mu
        return reparameterised(mu, log_var, torch.randn(k * r, d, generator=rng).to(device), config.clip)

    for _ in progress(range(config.steps), config.steps, f"{config.method}+{config.loss}"):
        images = gan.generator(latents())
        identity = identity_loss(
            config.loss, setting.target, setting.augmented, images, labels, p_reg, config.feature_weight
        )
        loss = (config.identity_weight * identity + gan.prior_loss(images)).mean()
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        with torch.no_grad():
            mu.clamp_(-config.clip, config.clip)
    with torch.no_grad():
        z = latents().detach()
        images = gan.generator(z).cpu().numpy()
    meta = {**asdict(config), "classes": list(setting.classes)}
    z, names, labels = z.cpu().numpy(), setting.classes, labels.cpu().numpy()
    return {
        c: WeightedMeasure.empirical(
            {"image": images[labels == c], "latent": z[labels == c]}, **meta, label=c, name=names[c]
        )
        for c in range(k)
    }
