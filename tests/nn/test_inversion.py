"""GAN-based model inversion: the identity losses' values and gradients, KEDMI's reparameterised latent,
the metrics, GAN resumption, and the two commands end to end on a tiny setting."""

import json

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from nn_recon.attacks.inversion import identity_loss, reparameterised
from nn_recon.cli import main
from nn_recon.gan import GanConfig, train_gan
from nn_recon.inversion_setting import MODEL_NAMES, SettingConfig, fit_classifier
from nn_recon.metrics import knn_distance, top_k_accuracy
from nn_recon.models import Architecture, build_network, penultimate
from nn_recon.train import TrainedModel


def _model(spec: str, seed: int) -> TrainedModel:
    network = build_network(Architecture.parse(spec, (1, 8, 8), 3), seed).double()
    return TrainedModel(network, np.full((1, 8, 8), 0.25), ("a", "b", "c"), 0.0, 0)


def _lom_by_hand(models, images, labels, p_reg, weight):
    """−logit_y averaged over the models, plus weight · mean((p − p_reg)²) of the first model's features."""
    x = images - 0.25
    logits = torch.stack([m.network(x)[torch.arange(len(labels)), labels] for m in models]).mean(0)
    features = penultimate(models[0].network, x)
    assert torch.allclose(models[0].network.readout(features), models[0].network(x))
    return -logits + weight * ((features - p_reg) ** 2).sum(1) / features.shape[1]


@pytest.mark.parametrize("loss", ["lom", "lomma"])
def test_logit_loss_value_and_gradient_match_the_formula(loss):
    target, augmented = _model("cnn:4,6", 0), [_model("cnn:3", 1), _model("mlp:7", 2)]
    models = [target, *augmented] if loss == "lomma" else [target]
    images = torch.rand(5, 1, 8, 8, dtype=torch.float64, requires_grad=True)
    labels = torch.tensor([0, 1, 2, 1, 0])
    p_reg = torch.rand(6 * 2 * 2, dtype=torch.float64)
    ours = identity_loss(loss, target, augmented, images, labels, p_reg, 0.7)
    assert torch.allclose(ours, _lom_by_hand(models, images, labels, p_reg, 0.7))
    (gradient,) = torch.autograd.grad(ours.sum(), images)
    step = torch.randn_like(images) * 1e-6
    with torch.no_grad():
        up, down = (_lom_by_hand(models, images + s, labels, p_reg, 0.7).sum() for s in (step, -step))
    change = up - down
    assert torch.isclose((gradient * step).sum() * 2, change, rtol=1e-4)


@pytest.mark.parametrize(("loss", "count"), [("ce", 1), ("ma", 3)])
def test_cross_entropy_losses_average_over_the_models(loss, count):
    target, augmented = _model("cnn:4,6", 0), [_model("cnn:3", 1), _model("mlp:7", 2)]
    images, labels = torch.rand(4, 1, 8, 8, dtype=torch.float64), torch.tensor([2, 0, 1, 1])
    models = [target, *augmented][:count]
    expected = sum(F.cross_entropy(m.network(images - 0.25), labels, reduction="none") for m in models)
    ours = identity_loss(loss, target, augmented, images, labels, torch.zeros(24, dtype=torch.float64), 5.0)
    assert torch.allclose(ours, expected / count)


def test_kedmi_latent_is_mu_plus_sigma_noise_with_reparameterised_gradients():
    mu = torch.tensor([0.1, -0.3, 0.9], requires_grad=True)
    log_var = torch.tensor([1.0, 0.25, 4.0]).log().requires_grad_()
    noise = torch.tensor([0.5, 2.0, 0.5])
    z = reparameterised(mu, log_var, noise, clip=1.0)
    assert torch.allclose(z, torch.tensor([0.6, 0.7, 1.0]))  # the last one 0.9 + 2 · 0.5 is clipped
    z.sum().backward()
    assert torch.allclose(mu.grad, torch.tensor([1.0, 1.0, 0.0]))
    assert torch.allclose(log_var.grad, torch.tensor([0.5 * 1 * 0.5, 0.5 * 0.5 * 2.0, 0.0]))
    mu, log_var = torch.full((200_000,), 0.2), torch.full((200_000,), 0.09).log()
    draws = reparameterised(mu, log_var, torch.randn(200_000), clip=10.0)
    assert abs(draws.mean() - 0.2) < 0.003 and abs(draws.std() - 0.3) < 0.003


def test_top_k_accuracy_and_knn_distance_by_brute_force():
    rng = np.random.default_rng(0)
    logits, labels = rng.normal(size=(50, 6)), rng.integers(0, 6, 50)
    rank = (logits > logits[np.arange(50), labels][:, None]).sum(1)
    assert top_k_accuracy(logits, labels, 1) == np.mean(rank == 0)
    assert top_k_accuracy(logits, labels, 3) == np.mean(rank < 3)
    features, feature_labels = rng.normal(size=(20, 4)), rng.integers(0, 3, 20)
    reference, reference_labels = rng.normal(size=(30, 4)), rng.integers(0, 3, 30)
    expected = [
        np.min(np.sum((reference[reference_labels == label] - f) ** 2, axis=1))
        for f, label in zip(features, feature_labels, strict=True)
    ]
    assert np.allclose(knn_distance(features, feature_labels, reference, reference_labels), expected)


def test_evaluator_scores_the_attacked_models_as_by_hand():
    from nn_recon.data import TaskData
    from nn_recon.inversion_setting import Setting
    from nn_recon.metrics import Evaluator
    from recon_core.measure import WeightedMeasure

    target, other = _model("cnn:4,6", 0), _model("mlp:7", 1)
    ten_classes = build_network(Architecture.parse("mlp:5", (1, 8, 8), 10), 2).double()
    all_digits = TrainedModel(ten_classes, target.mean, tuple("0123456789"), 0.0, 0)
    rng = np.random.default_rng(3)
    private = TaskData(rng.random((12, 1, 8, 8)), rng.integers(0, 3, 12), ("0", "1", "2"))
    setting = Setting(target, [target, other], private.images, private.classes, other, all_digits, private)
    images = rng.random((30, 1, 8, 8))
    with torch.no_grad():
        calls = {name: m.network(torch.as_tensor(images - 0.25)).argmax(1).numpy() for name, m in
                 (("target", target), ("other", other))}  # fmt: skip
    labels = calls["target"]  # every image labelled as the target calls it: its top-1 is 1
    measures = {c: WeightedMeasure.empirical({"image": images[labels == c]}) for c in np.unique(labels)}
    metrics = Evaluator(setting)(measures)
    assert metrics["top1_target"] == 1.0
    assert np.isclose(metrics["top1_augmented"], (1 + np.mean(calls["other"] == labels)) / 2)
    assert metrics["top1_augmented"] < 1  # the two models disagree somewhere, or the check says nothing


@pytest.mark.parametrize("kind", ["gmi", "kedmi"])
def test_interrupted_gan_training_resumes_to_the_same_weights(tmp_path, monkeypatch, kind):
    images = np.random.default_rng(0).random((40, 1, 8, 8), dtype=np.float32)
    labels = np.full((40, 3), 1 / 3, np.float32) if kind == "kedmi" else None
    config = GanConfig(kind=kind, latent_dim=4, width=4, steps=6, batch_size=8, checkpoint_every=3)
    whole = train_gan(config, images, labels)
    from nn_recon import gan as gan_module

    save = gan_module.save_atomically

    def save_then_stop(path, state):
        save(path, state)
        raise KeyboardInterrupt

    monkeypatch.setattr(gan_module, "save_atomically", save_then_stop)
    with pytest.raises(KeyboardInterrupt):
        train_gan(config, images, labels, checkpoint=tmp_path / "gan.ckpt")
    saved_steps = []
    monkeypatch.setattr(gan_module, "save_atomically", lambda path, state: saved_steps.append(state["step"]))
    resumed = train_gan(config, images, labels, checkpoint=tmp_path / "gan.ckpt")
    assert saved_steps == [6]  # it went on from step 3 rather than starting over
    for network in ("generator", "discriminator"):
        first, second = getattr(whole, network).state_dict(), getattr(resumed, network).state_dict()
        assert all(torch.equal(first[name], second[name]) for name in first)


def test_interrupted_classifier_training_resumes_to_the_same_weights(tmp_path, monkeypatch):
    rng = np.random.default_rng(1)
    images, labels = rng.random((64, 1, 8, 8), dtype=np.float32), rng.integers(0, 3, 64)
    architecture = Architecture.parse("cnn:4,6", (1, 8, 8), 3)
    config = SettingConfig(batch_size=16)
    arguments = (architecture, images, labels, images.mean(0), ("a", "b", "c"), config, 0)
    whole = fit_classifier(*arguments, tmp_path / "whole.ckpt")
    from nn_recon import inversion_setting as inversion_module

    save = inversion_module.save_atomically

    def save_then_stop(path, state):
        save(path, state)
        raise KeyboardInterrupt

    monkeypatch.setattr(inversion_module, "save_atomically", save_then_stop)
    with pytest.raises(KeyboardInterrupt):
        fit_classifier(*arguments, tmp_path / "resumed.ckpt")
    saved_epochs = []
    monkeypatch.setattr(
        inversion_module, "save_atomically", lambda path, state: saved_epochs.append(state["epoch"])
    )
    resumed = fit_classifier(*arguments, tmp_path / "resumed.ckpt")
    assert saved_epochs == [2]  # it went on from epoch 1 rather than starting over
    first, second = whole.network.state_dict(), resumed.network.state_dict()
    assert all(torch.equal(first[name], second[name]) for name in first)


TINY = "--workdir {w} --epochs 1 --per-class 40 --public-size 400"


def test_gan_and_invert_end_to_end_with_bad_input_exiting_2(tmp_path, capsys):
    setting = TINY.format(w=tmp_path / "work").split()
    assert main(["--quiet", "invert", "--out", str(tmp_path / "x"), *setting]) == 2
    assert "train it with nn-recon gan" in capsys.readouterr().err
    for kind in ("gmi", "kedmi"):
        assert main(["--quiet", "gan", "--kind", kind, "--steps", "20", "--width", "8", *setting]) == 0
    printed = capsys.readouterr().out
    assert all(f"{name}: test accuracy" in printed for name in MODEL_NAMES)
    out = tmp_path / "attack"
    invert = "--quiet invert --method kedmi --loss lomma --restarts 3 --steps 5 --seeds 2"
    assert main([*invert.split(), "--out", str(out), *setting]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert len(summary["metrics"]) == 2 and 0 <= summary["summary"]["top1"] <= summary["summary"]["top5"] <= 1
    assert summary["summary"]["knn"] > 0 and (out / "grid.png").exists()
    measure = np.load(out / "seed-1" / "class-4.npz")
    assert measure["points/image"].shape == (3, 1, 28, 28) and np.all(measure["weights"] == 1)
    wrong = [
        ("--method gmi --gan " + str(tmp_path / "work" / "gan-kedmi.pt"), "needs a gmi GAN"),
        ("--method gmi --target " + str(tmp_path / "three.pt"), "the target has 3 classes"),
        ("--method gmi --gan " + str(tmp_path / "big.pt"), "the GAN makes (1, 32, 32) images"),
    ]
    _three_class_target(tmp_path / "three.pt")
    _big_gan(tmp_path / "big.pt")
    for argv, message in wrong:
        assert main(["--quiet", "invert", *argv.split(), "--out", str(out), *setting]) == 2
        assert message in capsys.readouterr().err


def test_a_classifier_from_before_per_class_capped_the_all_digits_model_is_refused(tmp_path):
    """An older workdir's classifiers record the setting alone (its all-digits model took every image
    whatever --per-class): reused beside new ones, they would mix two settings, so they are refused."""
    from dataclasses import asdict

    from nn_recon.pipeline import classifier_path, prepare_setting
    from nn_recon.train import save_model
    from recon_core.errors import ReconError

    config = SettingConfig(epochs=1, per_class=4, public_size=10)
    network = build_network(Architecture.parse("cnn:4", (1, 28, 28), 5), 0)
    old = TrainedModel(network, np.zeros((1, 28, 28), np.float32), tuple("01234"), 0.0, 1, asdict(config))
    save_model(old, classifier_path(tmp_path, "target"))
    with pytest.raises(ReconError, match="was trained for another setting"):
        prepare_setting(config, tmp_path, train=False)


def _three_class_target(path):
    from nn_recon.train import save_model

    network = build_network(Architecture.parse("cnn:4", (1, 28, 28), 3), 0)
    save_model(TrainedModel(network, np.zeros((1, 28, 28), np.float32), ("0", "1", "2"), 0.0, 0), path)


def _big_gan(path):
    from nn_recon.gan import save_gan

    config = GanConfig(latent_dim=4, width=4, steps=1, batch_size=2)
    save_gan(train_gan(config, np.random.default_rng(0).random((4, 1, 32, 32), dtype=np.float32)), path)


@pytest.mark.slow
def test_lomma_recovers_the_private_classes_of_a_small_real_setting(tmp_path, one_thread):
    from nn_recon.attacks.inversion import InversionConfig, invert
    from nn_recon.metrics import Evaluator
    from nn_recon.pipeline import prepare_gan, prepare_setting

    setting = prepare_setting(SettingConfig(epochs=2, per_class=500, public_size=5000), tmp_path)
    evaluator = Evaluator(setting)
    for method in ("gmi", "kedmi"):
        gan = prepare_gan(GanConfig(kind=method, steps=800), setting, tmp_path)
        measures = invert(InversionConfig(method, "lomma", restarts=4, steps=300), gan, setting)
        assert evaluator(measures)["top1"] >= 0.6  # chance is 0.2
