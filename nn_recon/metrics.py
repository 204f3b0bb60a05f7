"""How close reconstructions are to training images: NCC matching, SSIM, PSNR, MSE, LPIPS, success counts.

Every attack is scored here: the stationarity attack by matching (:func:`match`, the public baseline),
the informed adversary by :func:`score_informed` (the RecoNN) and :func:`max_relative_error` (the GLM),
model inversion by :class:`Evaluator`.

Images are numpy arrays (n, C, H, W) in [0, 1]. SSIM and PSNR are scikit-image's (data range 1);
LPIPS comes from ``nn_recon.lpips`` (the real v0.1 weights), imported only when asked for.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from nn_recon.inversion_setting import Setting, in_batches, logits, soft_labels
from nn_recon.models import penultimate
from nn_recon.ncc import pairwise_ncc
from recon_core.errors import ReconError, require_at_least
from recon_core.measure import WeightedMeasure

THRESHOLDS = (0.4, 0.5, 0.6)


def _image_pairs(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``a`` and ``b`` as float64, refused unless they are two (n, C, H, W) arrays of one shape."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 4:
        raise ReconError(f"need two (n, C, H, W) image arrays of one shape, got {a.shape} and {b.shape}")
    return a, b


def ssim(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """SSIM of each pair a[k], b[k] (scikit-image, data range 1, channels averaged): shape (n,)."""
    from skimage.metrics import structural_similarity

    a, b = _image_pairs(a, b)
    side = min(a.shape[2:])
    window = min(7, side if side % 2 else side - 1)  # scikit-image needs an odd window inside the image
    scores = [
        structural_similarity(x, y, data_range=1.0, channel_axis=0, win_size=window)
        for x, y in zip(a, b, strict=True)
    ]
    return np.array(scores)


def psnr(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """PSNR in dB of each pair a[k], b[k] (scikit-image, data range 1, so 10·log10(1 / MSE)): shape (n,).

    Identical images score infinity.
    """
    from skimage.metrics import peak_signal_noise_ratio

    a, b = _image_pairs(a, b)
    with np.errstate(divide="ignore"):  # MSE 0: identical images, infinitely many dB
        return np.array([peak_signal_noise_ratio(x, y, data_range=1.0) for x, y in zip(a, b, strict=True)])


def mse(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Mean squared pixel error of each pair: shape (n,)."""
    return np.square(np.asarray(a, np.float64) - np.asarray(b, np.float64)).reshape(len(a), -1).mean(axis=1)


def lpips(a: np.ndarray, b: np.ndarray, device: Any = "cpu") -> np.ndarray:
    """LPIPS (v0.1 weights, via ``nn_recon.lpips``) of each pair, computed on ``device``: shape (n,)."""
    from nn_recon.lpips import lpips_distance

    a_tensor, b_tensor = (torch.as_tensor(np.asarray(x, np.float32), device=device) for x in (a, b))
    return lpips_distance(a_tensor, b_tensor).detach().cpu().numpy().reshape(len(a))


def stretch_contrast(images: np.ndarray) -> np.ndarray:
    """Each image min-max rescaled to [0, 1] (constant images become 0)."""
    flat = np.asarray(images, np.float64).reshape(len(images), -1)
    low, high = flat.min(axis=1, keepdims=True), flat.max(axis=1, keepdims=True)
    return ((flat - low) / np.maximum(high - low, 1e-12)).reshape(images.shape)


@dataclass(frozen=True)
class MatchResult:
    """For every training image, its nearest reconstruction (by NCC) and their SSIM and PSNR (dB)."""

    train_index: np.ndarray
    recon_index: np.ndarray
    ncc: np.ndarray
    ssim: np.ndarray
    psnr: np.ndarray

    def successes(self, thresholds: Sequence[float] = THRESHOLDS) -> dict[float, int]:
        """How many training images have a reconstruction with SSIM at or above each threshold."""
        return {t: int(np.sum(self.ssim >= t)) for t in thresholds}

    def distinct(self, thresholds: Sequence[float] = THRESHOLDS) -> dict[float, int]:
        """How many different reconstructions those successes use: one blurry prototype matched to
        several training images counts once here (the papers' count above credits it every time)."""
        return {t: len(np.unique(self.recon_index[self.ssim >= t])) for t in thresholds}

    def mean_psnr(self, thresholds: Sequence[float] = THRESHOLDS) -> dict[float, float | None]:
        """The mean PSNR (dB) of those successes; None where there are none."""
        successes = {t: self.psnr[self.ssim >= t] for t in thresholds}
        return {t: float(scores.mean()) if len(scores) else None for t, scores in successes.items()}

    def to_json(self, thresholds: Sequence[float] = THRESHOLDS) -> dict[str, Any]:
        """The counts and mean PSNR by threshold (as strings, JSON's keys), every training image's SSIM
        and PSNR."""
        return {
            "successes": {str(t): n for t, n in self.successes(thresholds).items()},
            "distinct": {str(t): n for t, n in self.distinct(thresholds).items()},
            "mean_psnr": {str(t): value for t, value in self.mean_psnr(thresholds).items()},
            "ssim": self.ssim.tolist(),
            "psnr": self.psnr.tolist(),
        }

    def ranked(self) -> np.ndarray:
        """Positions into this result, best SSIM first."""
        return np.argsort(-self.ssim, kind="stable")


@dataclass(frozen=True)
class MatchConfig:
    """How :func:`match` pairs reconstructions with training images.

    NCC on the images downsampled by ``downsample`` shortlists the ``candidates`` nearest
    reconstructions, and the best SSIM among them is kept. With ``stretch`` each reconstruction is
    min-max rescaled to [0, 1] before SSIM (the papers' figures do this: the attack recovers shape
    better than contrast); the default scores them as they are.
    """

    downsample: int = 1
    candidates: int = 5
    stretch: bool = False

    def __post_init__(self) -> None:
        require_at_least(1, downsample=self.downsample, candidates=self.candidates)


def match(
    reconstructions: np.ndarray,
    train_images: np.ndarray,
    recon_labels: np.ndarray | None = None,
    train_labels: np.ndarray | None = None,
    config: MatchConfig = MatchConfig(),
) -> MatchResult:
    """Match every training image to a reconstruction and score the pair with SSIM and PSNR.

    The reconstructions NCC shortlists (only those of the same class when labels are given) are
    scored and the best SSIM is kept, so that NCC only has to shortlist (see :class:`MatchConfig`).
    """
    if len(reconstructions) == 0:
        raise ReconError("there are no reconstructions to match")
    if reconstructions.shape[1:] != train_images.shape[1:]:
        raise ReconError(
            f"reconstructions {reconstructions.shape[1:]} and training images {train_images.shape[1:]} "
            "differ in shape; match a reconstruction against the model it was made from"
        )
    if config.stretch:
        reconstructions = stretch_contrast(reconstructions)
    similarity = pairwise_ncc(train_images, reconstructions, config.downsample)
    if recon_labels is not None and train_labels is not None:
        similarity = np.where(train_labels[:, None] == recon_labels[None, :], similarity, -np.inf)
    k = min(config.candidates, similarity.shape[1])
    shortlist = np.argsort(-similarity, axis=1, kind="stable")[:, :k]
    train_rows = np.repeat(np.arange(len(train_images)), k)
    scores = ssim(train_images[train_rows], reconstructions[shortlist.reshape(-1)]).reshape(-1, k)
    scores = np.where(np.isfinite(np.take_along_axis(similarity, shortlist, 1)), scores, -np.inf)
    best = scores.argmax(axis=1)
    recon_index = shortlist[np.arange(len(train_images)), best]
    return MatchResult(
        train_index=np.arange(len(train_images)),
        recon_index=recon_index,
        ncc=similarity[np.arange(len(train_images)), recon_index],
        ssim=scores[np.arange(len(train_images)), best],
        psnr=psnr(train_images, reconstructions[recon_index]),
    )


def public_baseline(
    train_images: np.ndarray,
    train_labels: np.ndarray,
    public_images: np.ndarray,
    public_labels: np.ndarray,
    candidates: int = 5,
) -> np.ndarray:
    """For every training image, the best SSIM an adversary reaches without the model: (n,).

    The adversary holds a public set from the same distribution that the target never saw. Its
    guesses for a training image of class y are the mean public image of class y and the
    ``candidates`` public images nearest by L2 (of any class); the baseline is the best SSIM of them.
    """
    require_at_least(1, candidates=candidates)
    train_images, public_images = np.asarray(train_images, np.float64), np.asarray(public_images, np.float64)
    if len(public_images) == 0 or public_images.shape[1:] != train_images.shape[1:]:
        raise ReconError(
            f"public images {public_images.shape} do not match the training images {train_images.shape[1:]}; "
            "pass public images of the training images' size and data set"
        )
    missing = sorted(set(np.unique(train_labels).tolist()) - set(np.unique(public_labels).tolist()))
    if missing:
        raise ReconError(f"the public set has no image of class {missing}; pass one with every class")
    class_means = {c: public_images[public_labels == c].mean(axis=0) for c in np.unique(train_labels)}
    means = np.stack([class_means[c] for c in train_labels])
    best = ssim(train_images, means)
    nearest = _nearest_by_l2(train_images, public_images, min(candidates, len(public_images)))
    for column in nearest.T:
        best = np.maximum(best, ssim(train_images, public_images[column]))
    return best


def _squared_l2(targets: np.ndarray, pool: np.ndarray, block: int) -> Iterator[np.ndarray]:
    """Squared L2 distances in float64 of ``block`` targets at a time to every image in ``pool``:
    (≤ block, len(pool)) arrays in the targets' order; rounding can take one a little below 0."""
    pool_flat = np.asarray(pool, np.float64).reshape(len(pool), -1)
    pool_sq = np.square(pool_flat).sum(1)
    flat = np.asarray(targets, np.float64).reshape(len(targets), -1)
    for start in range(0, len(flat), block):
        part = flat[start : start + block]
        yield np.square(part).sum(1, keepdims=True) + pool_sq - 2 * part @ pool_flat.T


def _nearest_by_l2(targets: np.ndarray, pool: np.ndarray, k: int, block: int = 256) -> np.ndarray:
    """The indices of the ``k`` images in ``pool`` nearest to each target by L2: (n, k)."""
    squared = _squared_l2(targets, pool, block)
    return np.concatenate([np.argsort(part, axis=1, kind="stable")[:, :k] for part in squared])


@dataclass(frozen=True)
class BaselineComparison:
    """Each training image's reconstruction SSIM against the public baseline's: beaten where higher."""

    ssim: np.ndarray
    baseline: np.ndarray

    @property
    def margin(self) -> np.ndarray:
        return self.ssim - self.baseline

    @property
    def beats(self) -> int:
        return int(np.sum(self.margin > 0))

    def mean_margin(self) -> float | None:
        """How much higher the beating reconstructions' SSIM is, on average; None if none beats it."""
        winning = self.margin[self.margin > 0]
        return float(winning.mean()) if len(winning) else None

    def to_json(self) -> dict[str, Any]:
        return {
            "beats": self.beats,
            "of": len(self.ssim),
            "mean_margin": self.mean_margin(),
            "baseline_ssim": self.baseline.tolist(),
        }


# The GLM closed form's error against the true target.


def max_relative_error(candidates: np.ndarray, true_features: Any) -> float:
    """The GLM closed form's error: the closest of the (m, d) ``candidates``' largest feature error
    over the true target's largest feature, max_j |x̂_j − x_j| / max_j |x_j| (scale-free, and finite
    where some true features are 0)."""
    true = np.asarray(true_features, dtype=float).reshape(-1)
    if true.shape != candidates.shape[1:]:
        raise ReconError(
            f"the true target has {true.size} features but the reconstruction {candidates.shape[1]}"
        )
    error = np.abs(candidates - true).max(axis=1).min()
    return float(error / max(np.abs(true).max(), np.finfo(float).tiny))


# Informed-adversary metrics: the nearest-neighbour oracle, its success rate, and KL under a classifier.


def nearest_neighbours(
    targets: np.ndarray, pool: np.ndarray, block: int = 256
) -> tuple[np.ndarray, np.ndarray]:
    """For each target, the MSE to and the index of its closest image in ``pool``: two (n,) arrays.

    With ``pool`` everything the informed adversary already holds (D⁻ and the shadow targets),
    this is the nearest-neighbour oracle a reconstruction must beat.
    """
    pixels = math.prod(np.shape(pool)[1:])
    distances, indices = [], []
    for part in _squared_l2(targets, pool, block):
        squared = np.maximum(part, 0)
        indices.append(squared.argmin(1))
        distances.append(squared[np.arange(len(part)), indices[-1]] / pixels)
    return np.concatenate(distances), np.concatenate(indices)


def kl_divergence(classifier, targets: np.ndarray, reconstructions: np.ndarray) -> np.ndarray:
    """KL(p(·|target) ‖ p(·|reconstruction)) of each pair under a torch ``classifier``, on its
    device: shape (n,)."""
    device = next(classifier.parameters()).device
    with torch.no_grad():
        log_p, log_q = (
            torch.log_softmax(classifier(torch.as_tensor(x, dtype=torch.float32, device=device)), -1)
            for x in (targets, reconstructions)
        )
    return (log_p.exp() * (log_p - log_q)).sum(-1).cpu().numpy()


@dataclass(frozen=True)
class InformedScores:
    """Per-target scores of an informed-adversary attack, all (n,) arrays; PSNR in dB."""

    mse: np.ndarray
    oracle_mse: np.ndarray
    oracle_index: np.ndarray
    lpips: np.ndarray
    kl: np.ndarray
    psnr: np.ndarray

    @property
    def success_rate(self) -> float:
        """Fraction of targets reconstructed closer (MSE) than their nearest-neighbour oracle."""
        return float(np.mean(self.mse < self.oracle_mse))

    def summary(self) -> dict[str, float]:
        return {
            "mean_mse": float(self.mse.mean()),
            "mean_oracle_mse": float(self.oracle_mse.mean()),
            "success_rate": self.success_rate,
            "mean_psnr": float(self.psnr.mean()),
            "mean_lpips": float(self.lpips.mean()),
            "mean_kl": float(self.kl.mean()),
        }


def score_informed(
    targets: np.ndarray, reconstructions: np.ndarray, oracle_pool: np.ndarray, classifier, block: int = 256
) -> InformedScores:
    """MSE, nearest-neighbour oracle, LPIPS, KL and PSNR of each reconstruction against its target;
    LPIPS and KL on the classifier's device."""
    oracle_mse, oracle_index = nearest_neighbours(targets, oracle_pool, block)
    blocks = range(0, len(targets), block)
    device = next(classifier.parameters()).device
    return InformedScores(
        mse=mse(targets, reconstructions),
        oracle_mse=oracle_mse,
        oracle_index=oracle_index,
        lpips=np.concatenate(
            [lpips(targets[i : i + block], reconstructions[i : i + block], device) for i in blocks]
        ),
        kl=kl_divergence(classifier, targets, reconstructions),
        psnr=psnr(targets, reconstructions),
    )


# Model-inversion metrics: the evaluation model's accuracy on inverted images and the KNN distance.


def top_k_accuracy(logits: np.ndarray, labels: np.ndarray, k: int = 1) -> float:
    """Fraction of rows whose label is among the ``k`` largest logits."""
    top = np.argsort(-np.asarray(logits), axis=1, kind="stable")[:, :k]
    return float(np.mean(np.any(top == np.asarray(labels)[:, None], axis=1)))


def knn_distance(
    features: np.ndarray, labels: np.ndarray, reference: np.ndarray, reference_labels: np.ndarray
) -> np.ndarray:
    """For each feature row, the smallest squared L2 distance to a reference row of the same label: (n,)."""
    features, reference = np.asarray(features, np.float64), np.asarray(reference, np.float64)
    distances = np.empty(len(features))
    for label in np.unique(labels):
        rows, pool = labels == label, reference[reference_labels == label]
        if not len(pool):
            raise ReconError(f"no reference features of label {label}")
        (squared,) = _squared_l2(features[rows], pool, block=int(rows.sum()))  # one block: all the rows
        distances[rows] = np.maximum(squared.min(1), 0)
    return distances


class Evaluator:
    """What the inverted images show, by the models the setting has: attack accuracy under the
    evaluation model, and the KNN distance in its features to the private images; top-1 accuracy
    under the all-digits evaluation model (class c counts as correct only as its own digit); the
    private features computed once. A setting without an evaluation model or private data skips
    what needs them.

    Always the top-1 of the attacked models themselves: the target's, and the augmented models' mean.
    What the evaluation model misses of what the target accepts is the attack's overfitting to the
    target, the gap MA is meant to close; an augmented top-1 already at 1 leaves MA nothing to add."""

    def __init__(self, setting: Setting) -> None:
        self.model, self.private = setting.evaluation, setting.private
        self.all_digits, self.origin = setting.all_digits_evaluation, setting.evaluation_origin
        self.target, self.augmented, self.classes = setting.target, setting.augmented, setting.classes
        self.private_features = None
        if self.model is not None and self.private is not None:
            self.private_features = in_batches(penultimate, self.model, self.private.images).numpy()

    def __call__(self, measures: dict[int, WeightedMeasure]) -> dict[str, float]:
        images = np.concatenate([m.points["image"] for m in measures.values()])
        labels = np.concatenate([np.full(len(m), c) for c, m in measures.items()])
        metrics = {}
        if self.model is not None:
            scores = logits(self.model, images).numpy()
            metrics |= {"top1": top_k_accuracy(scores, labels, 1), "top5": top_k_accuracy(scores, labels, 5)}
        if self.private_features is not None:
            features = in_batches(penultimate, self.model, images).numpy()
            metrics["knn"] = float(
                knn_distance(features, labels, self.private_features, self.private.labels).mean()
            )
        if self.all_digits is not None:
            scores = logits(self.all_digits, images).numpy()
            digits = np.array([int(c) for c in self.classes])[labels]  # the all-digits model's classes
            metrics |= {
                "top1_all_digits": top_k_accuracy(scores, digits, 1),
                "top5_all_digits": top_k_accuracy(scores, digits, 5),
            }
        attacked = [soft_labels(model, images) for model in self.augmented]
        return metrics | {
            "top1_target": top_k_accuracy(soft_labels(self.target, images), labels, 1),
            "top1_augmented": float(np.mean([top_k_accuracy(p, labels, 1) for p in attacked])),
        }
