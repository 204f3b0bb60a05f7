"""RecoNN and the informed metrics: checkpoints resume, the metrics are what they say."""

import numpy as np
import pytest
import torch

from nn_recon.checkpoint import CheckpointFile
from nn_recon.metrics import InformedScores, kl_divergence, nearest_neighbours
from nn_recon.reconn import ReconnConfig, decode_features, train_reconstructor
from recon_core.errors import ReconError

pytestmark = pytest.mark.usefixtures("one_thread")


def test_nearest_neighbours_and_success_rate():
    pool = np.stack([np.zeros((1, 2, 2)), np.ones((1, 2, 2))])
    targets = np.full((2, 1, 2, 2), 0.2)
    targets[1] = 0.9
    distances, index = nearest_neighbours(targets, pool, block=1)
    np.testing.assert_allclose(distances, [0.04, 0.01])
    assert index.tolist() == [0, 1]
    scores = InformedScores(np.array([0.01, 0.02]), distances, index, np.zeros(2), np.zeros(2), np.zeros(2))
    assert scores.success_rate == 0.5


def test_kl_is_zero_for_identical_inputs_and_positive_otherwise():
    classifier = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 3))
    a, b = np.random.default_rng(0).uniform(size=(2, 5, 1, 2, 2))
    np.testing.assert_allclose(kl_divergence(classifier, a, a), np.zeros(5), atol=1e-7)
    assert np.all(kl_divergence(classifier, a, b) > 0)


def test_reconstructor_resumes_from_its_checkpoint(tmp_path, monkeypatch):
    torch.manual_seed(0)
    features, images = torch.randn(40, 6), torch.rand(40, 1, 3, 3)
    config = ReconnConfig(hidden=(8,), epochs=4, batch_size=16, checkpoint_every=2)
    straight = train_reconstructor(config, features, images)
    epochs_run = []

    def recording(stop_at):
        def progress(items, total=None, desc=""):
            for epoch in items:
                if epoch == stop_at:
                    raise KeyboardInterrupt
                epochs_run.append(epoch)
                yield epoch

        return progress

    store = CheckpointFile(tmp_path / "r.pt", "a RecoNN checkpoint")
    monkeypatch.setattr("nn_recon.reconn.progress", recording(stop_at=3))
    with pytest.raises(KeyboardInterrupt):
        train_reconstructor(config, features, images, store)
    assert torch.load(tmp_path / "r.pt", weights_only=True)["epoch"] == 2
    monkeypatch.setattr("nn_recon.reconn.progress", recording(stop_at=None))
    resumed = train_reconstructor(config, features, images, store)
    assert epochs_run == [0, 1, 2, 2, 3]  # epoch 2 was lost to the interruption and is redone
    torch.testing.assert_close(decode_features(resumed, features), decode_features(straight, features))
    other = ReconnConfig(**{**config.__dict__, "lr": 0.01})
    with pytest.raises(ReconError, match="another RecoNN run"):
        train_reconstructor(other, features, images, store)
