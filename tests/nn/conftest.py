"""Fixtures of the network tests: one torch thread, and a tiny stationarity attack."""

import numpy as np
import pytest
import torch

from nn_recon.attacks.stationarity import StationarityConfig
from nn_recon.models import Architecture, Network
from nn_recon.train import TrainedModel


@pytest.fixture
def one_thread():
    """Small products on a shared CPU run faster on one thread than on two."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def tiny_attack() -> tuple[TrainedModel, StationarityConfig]:
    """A 16-12-1 MLP and an attack of 3 runs of 40 steps on it, checkpointed every 10 steps."""
    torch.manual_seed(0)
    network = Network(Architecture("mlp", (12,), (1, 4, 4), 1))
    model = TrainedModel(network, np.full((1, 4, 4), 0.3, np.float32), ("odd", "even"), 0.0, 0)
    config = StationarityConfig(
        points=6, runs=3, steps=40, runs_per_batch=2, checkpoint_every=10, device="cpu"
    )
    return model, config
