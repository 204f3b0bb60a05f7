"""The batched farm trains exactly the models one-at-a-time training gives, and resumes from disk."""

import math

import pytest
import torch

from nn_recon.attacks.reconn_attack import InformedAttackConfig
from nn_recon.dp import DPConfig, noise_multiplier
from nn_recon.pipeline import train_farms
from nn_recon.shadows import (
    FarmConfig,
    build_farm,
    flatten,
    initial_parameters,
    logits_on_probes,
    train_models,
    train_one_model,
    unflatten,
)
from recon_core.errors import ReconError

CONFIG = FarmConfig(widths=(12, 5, 3), epochs=15, lr=0.2, momentum=0.9)


def _data(n=30, k=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n + k, 12, generator=g)
    y = torch.randint(0, 3, (n + k,), generator=g)
    return x[:n], y[:n], x[n:], y[n:]


@pytest.fixture(autouse=True)
def float64():
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


@pytest.mark.parametrize(
    ("same_init", "widths", "activation"),
    [(True, (12, 5, 3), "elu"), (False, (12, 5, 3), "elu"), (True, (12, 5, 4, 3), "tanh"),
     (False, (12, 6, 4, 3), "relu")],
)  # fmt: skip
def test_batched_training_equals_one_model_at_a_time(same_init, widths, activation):
    """The dual-form input layer and the hand-written tail train what torch.optim.SGD trains."""
    config = FarmConfig(**{**CONFIG.to_dict(), "same_init": same_init, "widths": widths,
                           "activation": activation})  # fmt: skip
    x_minus, y_minus, targets_x, targets_y = _data()
    start = initial_parameters(config, range(len(targets_x)))
    batched = train_models(config, x_minus, y_minus, targets_x, targets_y, start)
    for i in range(len(targets_x)):
        single = train_one_model(
            config,
            torch.cat([x_minus, targets_x[i : i + 1]]),
            torch.cat([y_minus, targets_y[i : i + 1]]),
            {name: p[i] for name, p in start.items()},
        )
        for name in single:
            torch.testing.assert_close(batched[name][i], single[name], rtol=1e-10, atol=1e-12)
    assert not torch.allclose(batched["first.weight"][0], start["first.weight"][0])
    distinct_starts = not torch.equal(start["first.weight"][0], start["first.weight"][1])
    assert distinct_starts == (not same_init)


def test_models_trained_in_blocks_equal_models_trained_together(monkeypatch):
    x_minus, y_minus, targets_x, targets_y = _data(k=5)
    start = initial_parameters(CONFIG, range(5))
    together = train_models(CONFIG, x_minus, y_minus, targets_x, targets_y, start)
    monkeypatch.setattr("nn_recon.shadows.BLOCK_NUMBERS", 2 * 5 * 31)  # blocks of two models
    in_blocks = train_models(CONFIG, x_minus, y_minus, targets_x, targets_y, start)
    for name in together:
        torch.testing.assert_close(in_blocks[name], together[name], rtol=1e-12, atol=1e-14)


def test_minibatch_training_uses_the_target_only_in_its_batches():
    config = FarmConfig(**{**CONFIG.to_dict(), "batch_size": 7})
    x_minus, y_minus, targets_x, targets_y = _data()
    start = initial_parameters(config, range(2))
    trained = train_models(config, x_minus, y_minus, targets_x[:2], targets_y[:2], start)
    moved = flatten(trained) - flatten(start)
    assert torch.all(moved.abs().sum(1) > 0)
    assert not torch.allclose(moved[0], moved[1])  # different targets, different models


def test_dp_with_infinite_epsilon_is_plain_gradient_descent(monkeypatch):
    x_minus, y_minus, targets_x, targets_y = _data()
    start = initial_parameters(CONFIG, range(2))
    plain = train_models(CONFIG, x_minus, y_minus, targets_x[:2], targets_y[:2], start)
    infinite = FarmConfig(**{**CONFIG.to_dict(), "dp": DPConfig(epsilon=math.inf)})
    same = train_models(infinite, x_minus, y_minus, targets_x[:2], targets_y[:2], start)
    private = FarmConfig(**{**CONFIG.to_dict(), "dp": DPConfig(epsilon=1.0, clip_norm=1e6)})
    noisy = train_models(private, x_minus, y_minus, targets_x[:2], targets_y[:2], start)
    # the per-example (clip, sum, add noise) path itself, with the noise switched off and nothing clipped
    monkeypatch.setattr("nn_recon.shadows.noise_multiplier", lambda config, steps: 0.0)
    unclipped = train_models(private, x_minus, y_minus, targets_x[:2], targets_y[:2], start)
    for name in plain:
        torch.testing.assert_close(same[name], plain[name], rtol=0, atol=0)
        torch.testing.assert_close(unclipped[name], plain[name], rtol=1e-9, atol=1e-11)
        assert not torch.allclose(noisy[name], plain[name], atol=1e-3)


def test_dp_noise_shrinks_with_epsilon():
    small, large = (noise_multiplier(DPConfig(epsilon=e), steps=100) for e in (1.0, 100.0))
    assert small > large > 0 and noise_multiplier(DPConfig(), steps=100) == 0.0


def test_dp_step_clips_each_example_like_explicit_per_example_gradients(monkeypatch):
    """One DP-GD step (noise off) against clip-and-sum of autograd gradients taken one example at a time."""
    config = FarmConfig(**{**CONFIG.to_dict(), "epochs": 1, "momentum": 0.0, "lr": 1.0,
                           "dp": DPConfig(epsilon=1.0, clip_norm=0.3)})  # fmt: skip
    monkeypatch.setattr("nn_recon.shadows.noise_multiplier", lambda config, steps: 0.0)
    x_minus, y_minus, targets_x, targets_y = _data()
    start = initial_parameters(config, range(2))
    stepped = train_models(config, x_minus, y_minus, targets_x[:2], targets_y[:2], start)
    network = config.network()
    for i in range(2):
        xs, ys = torch.cat([x_minus, targets_x[i : i + 1]]), torch.cat([y_minus, targets_y[i : i + 1]])
        clipped = {name: torch.zeros_like(p[i]) for name, p in start.items()}
        norms = []
        for x, y in zip(xs, ys, strict=True):
            p = {name: q[i].clone().requires_grad_() for name, q in start.items()}
            loss = torch.nn.functional.cross_entropy(
                torch.func.functional_call(network, p, (x[None],)), y[None]
            )
            grads = torch.autograd.grad(loss, list(p.values()))
            norm = torch.sqrt(sum(g.square().sum() for g in grads))
            norms.append(norm)
            for name, g in zip(p, grads, strict=True):
                clipped[name] += g * min(1.0, 0.3 / float(norm))
        assert max(norms) > 0.3  # the clip is active for some examples
        for name in clipped:
            expected = start[name][i] - clipped[name] / len(xs)
            torch.testing.assert_close(stepped[name][i], expected, rtol=1e-10, atol=1e-12)


def test_farm_saves_chunks_and_resumes(tmp_path):
    config = FarmConfig(**{**CONFIG.to_dict(), "chunk_size": 2, "epochs": 3})
    x_minus, y_minus, targets_x, targets_y = _data(k=5)
    first = build_farm(config, x_minus, y_minus, targets_x, targets_y, tmp_path)
    assert sorted(p.name for p in tmp_path.glob("chunk_*.pt")) == [f"chunk_0000{i}.pt" for i in range(3)]
    (tmp_path / "chunk_00001.pt").unlink()
    second = build_farm(config, x_minus, y_minus, targets_x, targets_y, tmp_path)
    torch.testing.assert_close(first.params, second.params)
    assert first.params.shape == (5, 12 * 5 + 5 + 5 * 3 + 3)
    other = FarmConfig(**{**config.to_dict(), "lr": 0.01})
    with pytest.raises(ReconError, match="another configuration"):
        build_farm(other, x_minus, y_minus, targets_x, targets_y, tmp_path)


def test_dp_noise_is_seeded_per_farm_and_the_released_farm_draws_its_own(tmp_path, monkeypatch):
    config = FarmConfig(**{**CONFIG.to_dict(), "chunk_size": 2, "dp": DPConfig(epsilon=1.0)})
    x_minus, y_minus, targets_x, targets_y = _data()

    def farm(seed, folder=None):
        return build_farm(config, x_minus, y_minus, targets_x, targets_y, folder, noise_seed=seed).params

    torch.testing.assert_close(farm(0), farm(0), rtol=0, atol=0)
    assert not torch.allclose(farm(0), farm(1), atol=1e-3)
    farm(0, tmp_path / "farm")
    with pytest.raises(ReconError, match="another configuration"):  # chunks of another noise seed
        farm(1, tmp_path / "farm")

    seeds = []

    def record(*args, noise_seed):
        seeds.append(noise_seed)
        return args[-1]

    monkeypatch.setattr("nn_recon.shadows.train_models", record)
    private = FarmConfig(widths=(64, 5, 10), chunk_size=2, dp=DPConfig(epsilon=1.0))
    train_farms(InformedAttackConfig(dataset="digits", fixed_set_size=20, shadows=4, targets=4, farm=private),
                tmp_path / "attack")  # fmt: skip
    assert len(seeds) == 4 and len(set(seeds)) == 4  # equal chunk sizes, yet no model shares its noise


def test_flatten_round_trip_and_black_box_view():
    start = initial_parameters(CONFIG, range(3))
    flat = flatten(start)
    for name, p in unflatten(flat, CONFIG).items():
        torch.testing.assert_close(p, start[name])
    assert logits_on_probes(flat, CONFIG, torch.rand(4, 12)).shape == (3, 4 * 3)


def test_bad_configuration_is_a_clear_error():
    with pytest.raises(ReconError, match="activation"):
        FarmConfig(activation="gelu")
    with pytest.raises(ReconError, match="full-batch"):
        FarmConfig(batch_size=10, dp=DPConfig(epsilon=1.0))
    with pytest.raises(ReconError, match="backend must be one of"):
        FarmConfig(backend="dask")
    with pytest.raises(ReconError, match="goes with backend 'ray'"):
        FarmConfig(address="auto")
