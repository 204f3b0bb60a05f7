import dataclasses
import re

import numpy as np
import pytest
import torch

from nn_recon.data import make_task
from nn_recon.models import Architecture, build_network, margins
from nn_recon.train import TrainConfig, accuracy, load_model, save_model, train_target
from recon_core.errors import ReconError

TINY = TrainConfig(
    dataset="digits",
    per_class=10,
    architecture="mlp:32,16",
    lr=0.05,
    max_steps=400,
    first_layer_scale=0.1,
    target_loss=0.0,
    checkpoint_every=100,
    device="cpu",
)


def test_training_reaches_a_low_loss_and_classifies_its_training_set():
    model = train_target(TINY)
    assert model.train_loss < 0.05 and model.steps == TINY.max_steps
    assert accuracy(model, model.train_images, model.train_labels) == 1.0


def _interrupted_at(step: int, checkpoint):
    """Train TINY with ``checkpoint``, stopped at ``step``: the checkpoint holds the steps before it."""

    class Interrupt(Exception):
        pass

    def stop(at, loss):
        if at == step:
            raise Interrupt

    with pytest.raises(Interrupt):
        train_target(TINY, checkpoint=checkpoint, on_step=stop)
    return checkpoint


def test_resumed_training_equals_an_uninterrupted_run(tmp_path):
    straight = train_target(TINY)
    resumed = train_target(TINY, checkpoint=_interrupted_at(300, tmp_path / "model.ckpt"))
    for a, b in zip(straight.network.parameters(), resumed.network.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert [h[0] for h in resumed.history] == list(range(0, 401, 100))


def test_saved_model_round_trips_with_weights_only(tmp_path):
    model = train_target(TINY)
    path = save_model(model, tmp_path / "model.pt")
    assert torch.load(path, weights_only=True)["format"] == "nn-recon-model/1"
    loaded = load_model(path)
    x = torch.as_tensor(model.train_images - model.mean)
    torch.testing.assert_close(loaded.network(x), model.network(x))
    assert loaded.classes == ("odd", "even") and loaded.architecture == model.architecture
    np.testing.assert_array_equal(loaded.train_labels, model.train_labels)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"max_steps": -1}, "--max-steps must be at least 1, got -1"),
        ({"per_class": 0}, "--per-class must be at least 1, got 0"),
        ({"lr": 0.0}, "--lr must be above 0, got 0.0"),
        ({"weight_decay": -0.1}, "--weight-decay must be at least 0, got -0.1"),
        ({"first_layer_scale": float("inf")}, "--first-layer-scale must be a finite number, got inf"),
        ({"dataset": "svhn"}, "unknown dataset 'svhn'; choose one of digits, mnist"),
        ({"task": "parity"}, "unknown task 'parity'; choose one of odd-even"),
        ({"dtype": "float16"}, r"dtype must be one of \['float32', 'float64'\], got 'float16'"),
        ({"device": "gpu"}, "--device must be one of auto, cpu, cuda, got 'gpu'"),
    ],
)
def test_config_refuses_bad_values_when_made(change, message):
    with pytest.raises(ReconError, match=message):
        dataclasses.replace(TINY, **change)


def test_a_checkpoint_with_nan_weights_is_refused(tmp_path):
    checkpoint = _interrupted_at(100, tmp_path / "model.ckpt")
    state = torch.load(checkpoint, weights_only=True)
    state["state_dict"]["hidden.0.weight"][0, 0] = float("nan")
    torch.save(state, checkpoint)
    message = re.escape("model.ckpt holds NaN or infinite weights (hidden.0.weight)")
    with pytest.raises(ReconError, match=message):
        train_target(TINY, checkpoint=checkpoint)


def test_foreign_or_broken_model_files_are_clear_errors(tmp_path):
    torch.save({"weights": torch.zeros(3)}, tmp_path / "other.pt")
    with pytest.raises(ReconError, match="not a model file"):
        load_model(tmp_path / "other.pt")
    (tmp_path / "junk.pt").write_bytes(b"junk")
    with pytest.raises(ReconError, match="not a model file"):
        load_model(tmp_path / "junk.pt")
    with pytest.raises(ReconError, match="does not exist"):
        load_model(tmp_path / "missing.pt")
    with pytest.raises(ReconError, match="unknown architecture"):
        Architecture.parse("transformer:3", (1, 8, 8), 1)


def test_cnn_and_multiclass_margins():
    task = make_task("digits", "multiclass", per_class=3)
    network = build_network(Architecture.parse("cnn:4,8", (1, 8, 8), 10), seed=0)
    outputs = network(torch.as_tensor(task.images))
    assert outputs.shape == (30, 10)
    labels = torch.as_tensor(task.labels)
    expected = [o[y] - torch.cat([o[:y], o[y + 1 :]]).max() for o, y in zip(outputs, labels, strict=True)]
    torch.testing.assert_close(margins(outputs, labels), torch.stack(expected))
    assert build_network(network.architecture, seed=0).state_dict().keys() == network.state_dict().keys()
