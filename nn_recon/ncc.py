"""Normalised cross-correlation of images: the stationarity attack drops near-duplicates by it and
:func:`nn_recon.metrics.match` pairs reconstructions with training images by it."""

from __future__ import annotations

import numpy as np


def _downsample(images: np.ndarray, factor: int) -> np.ndarray:
    if factor <= 1:
        return images
    n, c, h, w = images.shape
    h, w = h - h % factor, w - w % factor
    blocks = images[:, :, :h, :w].reshape(n, c, h // factor, factor, w // factor, factor)
    return blocks.mean(axis=(3, 5))


def pairwise_ncc(a: np.ndarray, b: np.ndarray, downsample: int = 1) -> np.ndarray:
    """Normalised cross-correlation of every image in ``a`` with every image in ``b``: (len(a), len(b))."""

    def standardised(images: np.ndarray) -> np.ndarray:
        flat = _downsample(np.asarray(images, dtype=np.float64), downsample).reshape(len(images), -1)
        flat = flat - flat.mean(axis=1, keepdims=True)
        return flat / np.maximum(np.linalg.norm(flat, axis=1, keepdims=True), 1e-12)

    return standardised(a) @ standardised(b).T
