"""The stationarity objective vanishes at a constructed KKT point; the attack keeps its images in the box."""

import math

import numpy as np
import pytest
import torch

from nn_recon.attacks.stationarity import (
    StationarityConfig,
    StationarityLoss,
    candidate_labels,
    stationary_points,
)
from nn_recon.models import Architecture, Network, relu_with_surrogate_gradient
from nn_recon.train import TrainedModel
from recon_core.errors import ReconError


def kkt_network(num_outputs: int, seed: int = 0, kappa: np.ndarray | None = None):
    """A 2-layer net that is exactly a KKT point of its training set.

    The points form a scaled simplex, so x_j·x_i < −1 for i ≠ j. Hidden unit j has weights κ_j x_j
    and bias κ_j: it is active on x_j only. Then θ = Σ λ_j ∇ margin_j(θ) holds exactly with
    λ_j = 1/sqrt(c (‖x_j‖² + 1)), c = 1 for one output (v_j = y_j κ_j sqrt(‖x_j‖²+1)) and c = 2
    for two outputs (V[y_j, j] = −V[other, j] = λ_j κ_j (‖x_j‖² + 1)).
    """
    rng = np.random.default_rng(seed)
    n, d = 4, 16
    simplex = np.eye(n) - 1.0 / n
    basis, _ = np.linalg.qr(rng.normal(size=(d, n)))
    x = 3.0 * simplex @ basis.T  # pairwise inner products −9/4 · ... < −1
    assert (x @ x.T)[~np.eye(n, dtype=bool)].max() < -1
    labels = np.array([0, 1, 0, 1])
    kappa = rng.uniform(0.5, 2.0, n) if kappa is None else kappa
    sq = (x**2).sum(1) + 1
    network = Network(Architecture("mlp", (n,), (1, 4, 4), num_outputs)).double()
    with torch.no_grad():
        network.hidden[0].weight.copy_(torch.as_tensor(kappa[:, None] * x))
        network.hidden[0].bias.copy_(torch.as_tensor(kappa))
        if num_outputs == 1:
            lam = 1 / np.sqrt(sq)
            network.readout.weight.copy_(torch.as_tensor(((2 * labels - 1) * kappa * np.sqrt(sq))[None]))
        else:
            lam = 1 / np.sqrt(2 * sq)
            readout = np.zeros((2, n))
            readout[labels, np.arange(n)] = lam * kappa * sq
            readout[1 - labels, np.arange(n)] = -lam * kappa * sq
            network.readout.weight.copy_(torch.as_tensor(readout))
    mean = np.zeros((1, 4, 4))
    model = TrainedModel(network, mean, ("a", "b"), train_loss=0.0, steps=0)
    images = torch.as_tensor(x.reshape(n, 1, 4, 4))
    return model, images, torch.as_tensor(labels), torch.as_tensor(lam)


@pytest.mark.parametrize("num_outputs", [1, 2])
def test_kkt_loss_vanishes_at_the_constructed_kkt_point(num_outputs):
    model, images, labels, lam = kkt_network(num_outputs)
    loss = StationarityLoss(model, labels, "kkt", None)
    beta = torch.tensor(200.0, dtype=torch.float64)
    at_truth = loss(images, lam, beta)
    assert at_truth < 1e-12
    # The free scale makes λ's overall size irrelevant, but not its shape or the images.
    assert loss(images, 3 * lam, beta) < 1e-12
    assert loss(images, lam * torch.tensor([1.0, 2.0, 1.0, 1.0], dtype=torch.float64), beta) > 1e-3
    assert loss(images + 0.1 * torch.randn_like(images), lam, beta) > 1e-4
    (grad_x, grad_lam), values = loss.value_and_grad(images[None], lam[None], beta[None])
    assert values[0] < 1e-12 and grad_x.abs().max() < 1e-5 and grad_lam.abs().max() < 1e-5


@pytest.mark.parametrize(
    ("num_outputs", "objective", "flip"),
    [(1, "kkt", False), (2, "kkt", False), (1, "kkt", True), (2, "kkt", True), (1, "posterior", False),
     (2, "posterior", False)],
)  # fmt: skip
def test_batched_gradient_is_the_gradient_of_the_loss_through_the_scale(num_outputs, objective, flip):
    """value_and_grad holds the scale a fixed (envelope theorem); autograd through a must agree.
    Flipped labels make a negative, where the kkt loss is reflected to 1 + cos² > 1."""
    # Small unit scales κ keep the margins moderate, so cross-entropy is not saturated.
    model, images, labels, lam = kkt_network(num_outputs, kappa=np.full(4, 0.3))
    loss = StationarityLoss(model, 1 - labels if flip else labels, objective, 0.01)
    generator = torch.Generator().manual_seed(1)
    x = images[None] + 0.05 * torch.randn(2, *images.shape, generator=generator, dtype=torch.float64)
    weights = lam[None] * torch.rand(2, len(lam), generator=generator, dtype=torch.float64) + 0.1
    beta = torch.tensor([10.0, 50.0], dtype=torch.float64)
    (grad_x, grad_lam), values = loss.value_and_grad(x, weights, beta)
    assert objective == "posterior" or torch.all((values > 1) == flip)  # the posterior's is not ≤ 1
    for run in range(2):
        expected_x, expected_lam = torch.func.grad(loss, argnums=(0, 1))(x[run], weights[run], beta[run])
        torch.testing.assert_close(values[run], loss(x[run], weights[run], beta[run]))
        for got, expected in ((grad_x[run], expected_x), (grad_lam[run], expected_lam)):
            assert expected.abs().max() > 1e-2  # away from the stationary point, so the check has teeth
            torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-9 * expected.abs().max())


def test_surrogate_keeps_relu_values_and_its_gradient_tends_to_relus():
    z = torch.linspace(-1, 1, 2001, dtype=torch.float64, requires_grad=True)
    away_from_kink = z.detach().abs() > 0.05
    errors = []
    for beta in (10.0, 100.0, 1000.0):
        out = relu_with_surrogate_gradient(z, beta)
        assert torch.equal(out.detach(), torch.relu(z.detach()))
        (slope,) = torch.autograd.grad(out.sum(), z)
        errors.append((slope - (z > 0).double()).abs()[away_from_kink].max().item())
    assert errors[0] > errors[1] > errors[2] and errors[2] < 1e-10


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"steps": -5}, "--steps must be at least 1, got -5"),
        ({"runs": -1}, "--runs must be at least 1, got -1"),
        ({"lr": (0.0, 1e-3)}, "--lr must be above 0, got 0.0"),
        ({"beta": (30.0, float("nan"))}, "--beta must be a finite number, got nan"),
        ({"weight_decay": -1.0}, "--weight-decay must be above 0, got -1.0"),
        ({"prune_fraction": -0.1}, "--prune-fraction must be at least 0, got -0.1"),
        ({"objective": "kl"}, r"objective must be one of \('kkt', 'posterior'\), got 'kl'"),
        ({"dtype": "float16"}, r"dtype must be one of \['float32', 'float64'\], got 'float16'"),
        ({"device": "gpu"}, "--device must be one of auto, cpu, cuda, got 'gpu'"),
    ],
)
def test_config_refuses_bad_values_when_made(change, message):
    with pytest.raises(ReconError, match=message):
        StationarityConfig(**change)


def test_points_fewer_than_classes_is_a_clear_error():
    with pytest.raises(ReconError, match="smaller than the 10 classes"):
        candidate_labels(5, 10)
    assert np.bincount(candidate_labels(10, 2)).tolist() == [5, 5]


def test_attack_output_is_a_measure_of_images_in_the_box(tiny_attack):
    model, config = tiny_attack
    result = stationary_points(model, config)
    images = result.measure.points["image"]
    assert images.shape[1:] == (1, 4, 4) and images.min() >= 0 and images.max() <= 1
    assert len(result.measure) <= config.runs * config.points and np.all(result.measure.weights >= 0)
    assert all(math.isfinite(run.meta["loss"]) for run in result.runs) and not result.diverged


def test_diverging_runs_are_reported_and_the_rest_kept(tiny_attack):
    model, config = tiny_attack
    with torch.no_grad():
        model.network.readout.weight[0, 0] = math.nan
    with pytest.raises(ReconError, match="diverged"):
        stationary_points(model, config)


@pytest.mark.parametrize("num_outputs", [1, 2])
def test_posterior_objective_vanishes_at_an_exact_weight_decay_stationary_point(num_outputs):
    """wd·θ = (1/n) Σ σ(−m_j) ∇m_j is the KKT form with λ_j = σ(−m_j) / (n·wd): pick each unit's
    scale κ_j so that its point's margin m_j makes the two agree, then the training set with unit
    weights (1/n each) is stationary for logistic / cross-entropy loss plus (wd/2)‖θ‖²."""
    weight_decay, n = 0.01, 4
    _, _, _, lam = kkt_network(num_outputs)
    c = 1 if num_outputs == 1 else 2
    sq = 1 / (c * lam.numpy() ** 2)
    p = n * weight_decay * lam.numpy()
    margin = np.log((1 - p) / p)
    kappa = np.sqrt(margin / (np.sqrt(c) * sq**1.5))
    model, images, labels, _ = kkt_network(num_outputs, kappa=kappa)
    loss = StationarityLoss(model, labels, "posterior", weight_decay)
    beta = torch.tensor(200.0, dtype=torch.float64)
    ones = torch.ones(n, dtype=torch.float64)
    assert loss(images, ones, beta) < 1e-12
    assert loss(images, 2 * ones, beta) > 1e-3  # absolute weights: the mass counts
    assert loss(images.flip(0), ones, beta) > 1e-3


def test_selection_prunes_small_weights_and_keeps_the_heaviest_of_duplicates():
    from nn_recon.attacks.stationarity import select
    from nn_recon.data import load_digits
    from recon_core.measure import WeightedMeasure

    images, _ = load_digits()
    labels = np.array([0, 1, 0])
    first = WeightedMeasure({"image": images[:3], "label": labels}, np.array([1.0, 0.5, 1e-4]), {"index": 0})
    second = WeightedMeasure(
        {"image": images[:3] * 0.9, "label": labels}, np.array([0.2, 2.0, 0.3]), {"index": 1}
    )
    chosen = select([first, second], StationarityConfig(prune_fraction=0.01, duplicate_ncc=0.98))
    # images[0]: weights 1.0 (run 0) and 0.2 (run 1) -> keep run 0's; images[1]: 2.0 (run 1) wins;
    # images[2]: run 0's weight is pruned, run 1's 0.3 stays.
    assert sorted(chosen.weights.tolist()) == [0.3, 1.0, 2.0]
    assert chosen.meta["run_of_point"].tolist() == [1, 0, 1]
